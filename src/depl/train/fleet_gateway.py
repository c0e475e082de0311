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

`check_connection` is the other side: what `depl run --superlink` accepts
to submit through (TLS, a loopback address: the operator's).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging

FLEET_PREFIX = "/v1/fleet/"
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


def make_app(superlink: str, ca_file: str | None):
    """The ASGI app: POST /v1/fleet/* to https://SUPERLINK (verified with `ca_file`), 403 for the rest."""
    import httpx
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response
    from starlette.routing import Route

    import ssl

    tls = ssl.create_default_context(cafile=ca_file)  # the SuperLink's certificate, checked against the CA
    client = httpx.AsyncClient(base_url=f"https://{superlink}", verify=tls, timeout=None)

    async def forward(request: Request) -> Response:
        path = request.url.path
        if request.method != "POST" or not path.startswith(FLEET_PREFIX) or ".." in path:
            log.warning("refused %s %s from %s", request.method, path, request.client.host if request.client else "?")
            return PlainTextResponse("only the Flower Fleet API is served here\n", status_code=403)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP}
        try:
            r = await client.post(path, content=await request.body(), headers=headers)
        except httpx.TransportError as e:  # SuperLink down or restarting: SuperNodes retry on 502
            log.warning("SuperLink %s unreachable: %s", superlink, e)
            return PlainTextResponse("the SuperLink is unreachable\n", status_code=502)
        out = {k: v for k, v in r.headers.items() if k.lower() not in _DROP | {"content-encoding"}}
        return Response(r.content, status_code=r.status_code, headers=out)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await client.aclose()

    methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
    return Starlette(routes=[Route("/{path:path}", forward, methods=methods)], lifespan=lifespan)


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


def serve(listen: str, superlink: str, certfile: str, keyfile: str, ca_file: str | None) -> None:
    """Run the gateway until stopped (TLS on `listen` with the SuperLink's certificate)."""
    import uvicorn

    host, port = split_address(listen)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    uvicorn.run(make_app(superlink, ca_file), host=host, port=port, ssl_certfile=certfile, ssl_keyfile=keyfile,
                log_level="warning", access_log=False)
