"""The network face of a Flower deployment: the Fleet API only, in front of a SuperLink on 127.0.0.1.

Flower 1.41 serves its three APIs on one HTTPS port: the Fleet API
(SuperNodes: register, pull and push messages), the Control API (``flwr``:
start a run, register SuperNode keys, read logs) and the runtime API (the
ServerApp).  Its open-source build has no authentication for the Control API
(account authentication is OIDC, in the enterprise build): whoever reaches
that port can register a SuperNode key of their own and run their own
ServerApp on the SuperLink machine.  So the SuperLink listens on 127.0.0.1
only (the operator reaches it there, or through an SSH tunnel) and this
gateway, on the network address, passes on ``POST /v1/fleet/*`` — what a
SuperNode sends — and nothing else.

The gateway terminates TLS with the SuperLink's certificate and forwards
each request unchanged (body and headers: the SuperNode's signed identity
headers still reach Flower's node authentication, which refuses a key the
operator did not register) over TLS to the SuperLink, checked against the
CA.  Anything else — a Control or runtime API path, another method — gets
403 and is never forwarded.

It faces strangers before Flower has checked who they are, so what one client
may cost it is bounded (`Limits`): a body over `max_body` — sized from the
deployment's plan, else 64 MiB — gets 413 (by its Content-Length, unread, or as
its bytes pass the limit: never held whole); headers, and then a body, that do
not arrive in time get the connection closed (408 for a body); connections
over `max_connections` get 503 and are closed; a path that is not a plain
Fleet path (``%00``, control characters, over-long) gets 400.

`check_connection` is the other side: what `depl run --superlink` accepts
to submit through (TLS, a loopback address: the operator's).
"""

from __future__ import annotations

import ipaddress
import logging
import math
import re
from dataclasses import dataclass
from ...plan import Plan
from ..engine.federation import job_from_plan
from ..task.prune import build_version

FLEET_PREFIX = "/v1/fleet/"
# what Flower's SuperNodes send: /v1/fleet/push-messages, /v1/fleet/pull-object, ...
_FLEET_PATH = re.compile(r"/v1/fleet/[A-Za-z0-9_-]+(?:/[A-Za-z0-9_-]+)*")
MAX_PATH = 256
MiB = 1 << 20
DEFAULT_MAX_BODY = 64 * MiB  # without a plan to size it from
# a plan's limit: its largest model's weights, twice (Flower's message framing, and room to spare),
# and 4 MiB for the rest of a message (the job's text, metrics)
PLAN_MARGIN, PLAN_SLACK = 2, 4 * MiB
LINGER = 1.0  # seconds a refused client has to read the refusal before its connection is cut
# hop-by-hop headers (RFC 9110 7.6.1) and those httpx recomputes
_DROP = {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
         "proxy-authorization", "proxy-authenticate"}

log = logging.getLogger("depl.fleet_gateway")


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost: an address only this machine can reach."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def split_address(address: str) -> tuple[str, int]:
    """HOST:PORT (IPv6 in brackets) → (host, port); ValueError when it is not one."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class Limits:
    """What one client may cost the gateway (docs/flower-deployment.md, "What one client may cost the gateway")."""

    max_body: int = DEFAULT_MAX_BODY  # bytes of one request's body (413 over it)
    header_timeout: float = 10.0      # seconds for the TLS handshake, then for a request's line and headers
    body_timeout: float = 30.0        # seconds for a request's body, plus one per `body_min_rate` bytes received
    body_min_rate: int = 64 * 1024    # bytes per second (408 when the body is not in by then)
    keep_alive: int = 5               # seconds a connection may idle between requests
    max_connections: int = 100        # open connections at once (503 and closed over it)
    max_header_bytes: int = 16 * 1024  # the request line and headers (400 or 431 over it)

    def __post_init__(self):
        for name in ("max_body", "header_timeout", "body_timeout", "body_min_rate", "keep_alive", "max_connections",
                     "max_header_bytes"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} = {v!r}: expected a number > 0")


_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}


def parse_size(text: str) -> int:
    """A byte count: 1048576, 64MiB, 100MB, 1.5GiB (ValueError unless it is one, > 0)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", text)
    unit = m and _UNITS.get(m.group(2).lower())
    if not unit or not 0 < float(m.group(1)) * unit < 2**63:
        raise ValueError(f"{text!r} is not a size in bytes (e.g. 64MiB, 100MB, 1048576)")
    return math.ceil(float(m.group(1)) * unit)


def plan_body_limit(plan_path) -> tuple[int, int]:
    """(the body limit for a deployment of this plan, its largest model's weights in bytes).

    The weights are what an ``ArrayRecord`` of the model's state dict carries (every tensor's
    elements × their size: 4 bytes a float32); the limit is PLAN_MARGIN times that plus PLAN_SLACK.
    Raises the plan's or the job's own errors (PlanError, JobError, DataError: a message for the user).
    """
    job = job_from_plan(Plan.load(plan_path))
    weights = max(sum(t.numel() * t.element_size() for t in build_version(v).state_dict().values())
                  for v in job.versions.values())
    return weights * PLAN_MARGIN + PLAN_SLACK, weights


class GatewayError(RuntimeError):
    """The gateway could not serve (its address could not be bound): the message says where."""


class DeploymentError(ValueError):
    """A SuperLink connection depl refuses to submit to; the message is meant for the user."""


def check_connection(name: str, insecure: bool = False) -> str:
    """The address of `flwr`'s SuperLink connection `name`, if it is safe to submit a plan through it.

    Refused unless `insecure`: a connection without TLS (``insecure = true``: the
    plan, the weights and the store path cross the network in clear), and one to
    a non-loopback address — the Control API, which starts runs and registers
    SuperNode keys, has no authentication in Flower's open-source build, so the
    SuperLink listens on 127.0.0.1 and only its operator reaches it: on that
    machine or through an SSH tunnel (docs/flower-deployment.md).
    """
    from flwr.cli.flower_config import read_superlink_connection

    try:
        conn = read_superlink_connection(name)
    except Exception as e:
        # Flower's CLI refuses a config with its CLI's errors (click's ClickException: they carry format_message)
        if not isinstance(e, (OSError, ValueError)) and not callable(getattr(e, "format_message", None)):
            raise
        text = e.format_message() if callable(getattr(e, "format_message", None)) else str(e)
        raise DeploymentError(f"--superlink {name!r}: {' '.join(text.split())}") from None
    if not conn.address:
        raise DeploymentError(f"--superlink {name!r}: a simulation connection (no address); "
                              "run --backend flower without --superlink for Flower's simulation engine")
    where = f"--superlink {name!r} (address {conn.address})"
    if conn.insecure and not insecure:
        raise DeploymentError(f"{where}: the connection has insecure = true, so the plan, the weights and the "
                              "store path would cross the network unencrypted; give it root-certificates (TLS, "
                              "docs/flower-deployment.md) or pass --insecure to accept that")
    try:
        host, _ = split_address(conn.address)
    except ValueError as e:
        raise DeploymentError(f"{where}: {e}") from None
    if not is_loopback(host) and not insecure:
        raise DeploymentError(f"{where}: the SuperLink's Control API is reached over the network, where anyone "
                              "who reaches it can start runs and register SuperNodes; bind the SuperLink to "
                              "127.0.0.1, reach it through an SSH tunnel (ssh -N -L PORT:127.0.0.1:PORT HOST) with "
                              "address = \"127.0.0.1:PORT\", or pass --insecure to accept that")
    return conn.address


def make_app(superlink: str, ca_file: str | None, limits: Limits = Limits()):
    """The ASGI app: POST /v1/fleet/* to https://SUPERLINK (verified with `ca_file`), 403 for the rest.

    A request is refused before anything reaches the SuperLink when its path is not a plain Fleet
    path (400), its body is larger than `limits.max_body` (413: by its Content-Length before a byte
    of it is read, or as soon as the bytes received pass the limit) or arrives too slowly (408).
    Every refusal closes the connection, so an unread body is never read on.
    """
    import asyncio

    import httpx
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response

    import ssl

    tls = ssl.create_default_context(cafile=ca_file)  # the SuperLink's certificate, checked against the CA
    client = httpx.AsyncClient(base_url=f"https://{superlink}", verify=tls, timeout=None)

    def refuse(status: int, text: str) -> Response:
        return PlainTextResponse(text + "\n", status_code=status, headers={"connection": "close"})

    async def read_body(request: Request, path: str) -> bytes | Response:
        """The body, or the refusal: over `max_body` (413), or not in by its deadline (408).

        The deadline is `body_timeout` seconds, one more for every `body_min_rate` bytes received
        (Apache's mod_reqtimeout): a real message on a slow link goes through, a trickle does not.
        """
        loop = asyncio.get_running_loop()
        start, chunks, size = loop.time(), [], 0
        while True:
            left = start + limits.body_timeout + size / limits.body_min_rate - loop.time()
            try:
                if left <= 0:
                    raise TimeoutError
                message = await asyncio.wait_for(request.receive(), left)
            except TimeoutError:
                log.warning("refused %s from %s: body not in after %.1fs (%d bytes)", printable(path),
                            peer(request), loop.time() - start, size)
                return refuse(408, "the request body came too slowly")
            if message["type"] == "http.disconnect":
                return refuse(400, "the client went away")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limits.max_body:
                log.warning("refused %s from %s: body over %d bytes", printable(path), peer(request),
                            limits.max_body)
                return refuse(413, f"the request body is larger than {limits.max_body} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def forward(request: Request) -> Response:
        path = request.scope["path"]  # not request.url.path: urlsplit drops tabs and newlines
        if request.method != "POST" or not path.startswith(FLEET_PREFIX) or ".." in path:
            log.warning("refused %s %s from %s", request.method, printable(path), peer(request))
            return refuse(403, "only the Flower Fleet API is served here")
        if len(path) > MAX_PATH or not _FLEET_PATH.fullmatch(path):  # %00, control characters, ...
            log.warning("refused %s %s from %s: not a Fleet API path", request.method, printable(path), peer(request))
            return refuse(400, "not a Fleet API path")
        # h11 bounds the headers it has to wait for; a larger block that came in one read is refused here
        if sum(len(k) + len(v) + 4 for k, v in request.scope["headers"]) > limits.max_header_bytes:
            log.warning("refused %s from %s: headers over %d bytes", path, peer(request), limits.max_header_bytes)
            return refuse(431, f"the request headers are larger than {limits.max_header_bytes} bytes")
        length = request.headers.get("content-length", "")  # digits (h11 checks); a chunked body has none
        if length.isdigit() and (len(length) > 18 or int(length) > limits.max_body):
            log.warning("refused %s from %s: Content-Length %s over %d bytes", path, peer(request),
                        printable(length, 24), limits.max_body)
            return refuse(413, f"the request body is larger than {limits.max_body} bytes")
        body = await read_body(request, path)
        if isinstance(body, Response):
            return body
        # the headers as they came (bytes: a value with non-ASCII bytes passes unchanged, not re-encoded)
        headers = [(k, v) for k, v in request.scope["headers"] if k.decode("latin-1").lower() not in _DROP]
        try:
            r = await client.post(path, content=body, headers=headers)
        except httpx.TransportError as e:  # SuperLink down or restarting: SuperNodes retry on 502
            log.warning("SuperLink %s unreachable: %s", superlink, e)
            return PlainTextResponse("the SuperLink is unreachable\n", status_code=502)
        out = {k: v for k, v in r.headers.items() if k.lower() not in _DROP | {"content-encoding"}}
        return Response(r.content, status_code=r.status_code, headers=out)

    async def app(scope, receive, send) -> None:
        """Every request goes to `forward` (no router: its 404s and 405s would bypass the checks)."""
        if scope["type"] == "http":
            response = await forward(Request(scope, receive))
            await response(scope, receive, send)
        elif scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":  # startup
                await send({"type": "lifespan.startup.complete"})
            await client.aclose()
            await send({"type": "lifespan.shutdown.complete"})

    return app


def printable(text: str, most: int = 120) -> str:
    """`text` for a log line: control and non-ASCII characters escaped (no forged lines), cut at `most`."""
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return text if len(text) <= most else text[:most] + "..."


def peer(request) -> str:
    return request.client.host if request.client else "?"


def check_tls(certfile: str, keyfile: str, ca_file: str | None) -> None:
    """ValueError (the reason) unless the certificate and key form a pair and the CA file loads."""
    import ssl

    if ca_file:
        try:
            ssl.create_default_context(cafile=ca_file)
        except (ssl.SSLError, OSError) as e:
            raise ValueError(f"--ssl-ca-certfile {ca_file}: not a CA certificate ({getattr(e, 'reason', None) or e})") \
                from None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(certfile, keyfile)
    except (ssl.SSLError, OSError) as e:
        raise ValueError(f"--ssl-certfile {certfile} / --ssl-keyfile {keyfile}: not a certificate and its key "
                         f"({getattr(e, 'reason', None) or e})") from None


def _protocol(limits: Limits):
    """uvicorn's h11 protocol, plus two guards uvicorn has no setting for.

    - A header timeout.  uvicorn arms its keep-alive timer only after a response and cancels it on
      the first byte received, and has no timer at all on a fresh connection: a connection that
      sends nothing, or its headers a byte at a time, would stay open for ever (slowloris).  Here a
      timer runs from the connection's start (after the TLS handshake), and again from the end of
      each response, until a request's headers are complete: `header_timeout` seconds, then closed.
    - A cap on connections.  uvicorn's `limit_concurrency` answers 503 to a request over the cap,
      but the connection itself, idle, is kept: here one over `max_connections` is answered 503 and
      closed at once.
    And a refused request's unread body is not read on: closing a TLS connection waits (asyncio:
    up to 30 s) for the client's close_notify, decrypting and dropping what it still sends, so a
    connection closed before its request was read to the end (a refusal, a 400 from h11) is cut
    (TCP reset) LINGER seconds later, time enough for the refusal to reach the client.
    h11 (not httptools, uvicorn's default when installed) because only h11 bounds the request line
    and headers (`h11_max_incomplete_event_size`: larger is a 400).
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    busy = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"content-length: 34\r\nconnection: close\r\n\r\nthe gateway has too many clients\r\n")

    class FleetProtocol(H11Protocol):
        _header_timer = None
        _cut = False

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                log.warning("refused a connection from %s: %d open (--max-connections)",
                            self.client[0] if self.client else "?", len(self.connections) - 1)
                transport.write(busy)
                transport.close()
                self.loop.call_later(LINGER, transport.abort)
                return
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # a request's headers are in (or the connection failed)
                self._disarm()
            self._cut_unread()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                self._disarm()
            else:  # waiting for the next request on this connection
                self._arm()
            self._cut_unread()

        def _cut_unread(self) -> None:
            if (self.transport.is_closing() and not self._cut
                    and self.conn.their_state in (h11.SEND_BODY, h11.ERROR)):
                self._cut = True
                self.loop.call_later(LINGER, self.transport.abort)

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(limits.header_timeout, self._headers_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                log.warning("closed a connection from %s: no complete request headers within %gs",
                            self.client[0] if self.client else "?", limits.header_timeout)
                self.transport.abort()  # nothing to say to it: no TLS close_notify to wait for

    return FleetProtocol


def serve(listen: str, superlink: str, certfile: str, keyfile: str, ca_file: str | None,
          limits: Limits = Limits()) -> None:
    """Run the gateway until stopped (TLS on `listen` with the SuperLink's certificate), within `limits`;
    GatewayError where `listen` cannot be bound."""
    import asyncio
    import functools

    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server with a bound on the TLS handshake: uvicorn has no setting for it, and a
        connection that never completes it is not an HTTP connection yet (no header timer, not
        counted by the cap) — asyncio would keep it 60 s.  Its listening socket is made with
        `ssl_handshake_timeout = header_timeout`."""

        async def startup(self, sockets=None) -> None:
            loop = asyncio.get_running_loop()
            loop.create_server = functools.partial(loop.create_server, ssl_handshake_timeout=limits.header_timeout)
            try:
                await super().startup(sockets=sockets)
            finally:
                del loop.create_server

    host, port = split_address(listen)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    log.info("limits: body %d bytes, headers %gs, body %gs + 1s per %d bytes, keep-alive %ds, %d connections",
             limits.max_body, limits.header_timeout, limits.body_timeout, limits.body_min_rate, limits.keep_alive,
             limits.max_connections)
    config = uvicorn.Config(
        make_app(superlink, ca_file, limits), host=host, port=port, ssl_certfile=certfile, ssl_keyfile=keyfile,
        log_level="warning", access_log=False, http=_protocol(limits), ws="none",
        h11_max_incomplete_event_size=limits.max_header_bytes, timeout_keep_alive=limits.keep_alive,
        # uvicorn counts the connection asking among the open ones: N + 1 lets N connections be served
        limit_concurrency=limits.max_connections + 1)
    server = Server(config)
    server.run()
    if not server.started:  # uvicorn has logged why (the port taken, an address not of this machine)
        raise GatewayError(f"--listen {listen}: the gateway could not listen there (the reason is logged above)")
