"""`depl fleet-gateway` under abuse, on loopback: the real gateway (a process, TLS with a throw-away
certificate) in front of a stand-in SuperLink (a TLS server in this process that records what reaches it).

Every abuse is bounded in time and refused before it reaches the upstream: an oversized body (by its
Content-Length, or streamed chunked) gets 413 and the gateway's memory does not grow with it; headers
or a body sent a byte at a time get the connection closed by the configured timeouts; connections over
the cap get 503 and are closed; a bad path gets 400 without a traceback.  A good request still passes.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import select
import shutil
import socket
import ssl
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from test_flower_deployment import Processes, free_port, listening, make_certificates, wait_for

from depl.train.apps.fleet_gateway import LINGER

MAX_BODY = 1 << 20  # the limits the gateway runs with here: small, so each abuse is refused quickly
HEADER_TIMEOUT = BODY_TIMEOUT = 2.0
MAX_CONNECTIONS = 20
SLACK = 1.5  # seconds a refusal may take beyond its timeout on a loaded two-core machine
RSS_BOUND = 24 << 20  # the gateway's peak memory may grow by this much over all the abuse below


class Upstream(http.server.BaseHTTPRequestHandler):
    """The stand-in SuperLink: answers every POST 200 with the size and digest of the body it got."""

    protocol_version = "HTTP/1.1"
    seen: list = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        digest = hashlib.sha256(body).hexdigest()
        self.seen.append((self.path, len(body), digest, self.headers.get("x-node")))
        reply = f"{len(body)} {digest}".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


def memory(pid: int) -> dict[str, int]:
    """The process's resident memory now (VmRSS) and at its peak (VmHWM), in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


class Gateway:
    def __init__(self, d: Path, port: int, proc, upstream: Upstream, ca: ssl.SSLContext):
        self.d, self.port, self.proc, self.upstream, self.ca = d, port, proc, upstream, ca

    def log(self) -> str:
        return (self.d / "gateway.log").read_text()

    def connect(self, timeout: float = 10.0) -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        return self.ca.wrap_socket(raw, server_hostname="127.0.0.1")

    def post(self, path: str, body: bytes, headers: str = "") -> tuple[int, bytes]:
        """One request on a fresh connection: (status, response body)."""
        with self.connect() as s:
            s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
                      f"{headers}\r\n".encode()
                      + body)
            return parse(read_until_closed(s, 10.0)[1])


def read_until_closed(s, timeout: float) -> tuple[float, bytes]:
    """(seconds until the peer closed the connection, what it sent first); AssertionError after `timeout`."""
    t0, got = time.monotonic(), b""
    s.settimeout(timeout)
    try:
        while chunk := s.recv(65536):
            got += chunk
    except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
        pass
    except socket.timeout:
        raise AssertionError(f"still open after {timeout}s; got {got[:200]!r}") from None
    return time.monotonic() - t0, got


def parse(reply: bytes) -> tuple[int, bytes]:
    head, _, body = reply.partition(b"\r\n\r\n")
    return (int(head.split(b" ")[1]) if head.startswith(b"HTTP/1.1 ") else 0), body


def trickle(s, data: bytes, every: float, timeout: float) -> tuple[float, bytes]:
    """Send `data` a byte every `every` seconds until the peer answers or closes: (seconds until it closed,
    what it sent); AssertionError after `timeout`."""
    t0 = time.monotonic()
    for i in range(len(data)):
        try:
            s.sendall(data[i:i + 1])
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            return time.monotonic() - t0, b""
        if s.pending() or select.select([s], [], [], every)[0]:
            break
        assert time.monotonic() - t0 < timeout, f"still open after {timeout}s of a byte every {every}s"
    got = read_until_closed(s, timeout)[1]
    return time.monotonic() - t0, got


@pytest.fixture(scope="module")
def gateway():
    d = Path(tempfile.mkdtemp(prefix="depl-gw-", dir="/tmp"))
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0"}
    procs = Processes(d, env)
    Upstream.seen = []
    try:
        make_certificates(d, env)
        up_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        up_tls.load_cert_chain(d / "server.pem", d / "server.key")
        upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
        upstream.socket = up_tls.wrap_socket(upstream.socket, server_side=True)
        threading.Thread(target=upstream.serve_forever, daemon=True).start()
        port = free_port()
        proc = procs.start("gateway", sys.executable, "-m", "depl.cli", "fleet-gateway",
                           "--listen", f"127.0.0.1:{port}", "--superlink", f"127.0.0.1:{upstream.server_address[1]}",
                           "--ssl-certfile", "server.pem", "--ssl-keyfile", "server.key", "--ssl-ca-certfile", "ca.crt",
                           "--max-body", str(MAX_BODY), "--header-timeout", str(HEADER_TIMEOUT),
                           "--body-timeout", str(BODY_TIMEOUT), "--max-connections", str(MAX_CONNECTIONS))
        wait_for(lambda: listening(port) or proc.poll() is not None, 60, "the gateway")
        assert proc.poll() is None, (d / "gateway.log").read_text()
        gw = Gateway(d, port, proc, Upstream, ssl.create_default_context(cafile=str(d / "ca.crt")))
        yield gw
        upstream.shutdown()
        assert "Traceback" not in gw.log(), gw.log()
    finally:
        procs.stop()
        shutil.rmtree(d, ignore_errors=True)


def flood(gw: Gateway, head: bytes, chunk: bytes, most: float = 10.0) -> tuple[float, int, int]:
    """Send `head`, then `chunk` over and over as fast as this client can until the gateway cuts the
    connection: (seconds until then, body bytes sent, the status of the refusal it sent meanwhile)."""
    with gw.connect() as s:
        t0, sent = time.monotonic(), 0
        s.sendall(head)
        try:
            while time.monotonic() - t0 < most:
                s.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass
        took = time.monotonic() - t0
        try:
            reply = s.recv(4096)
        except (ConnectionResetError, ssl.SSLError):
            reply = b""
    return took, sent, parse(reply)[0]


def test_an_oversized_body_is_refused_and_never_held(gateway):
    before = memory(gateway.proc.pid)
    # a 300 MB Content-Length: 413 at once, before a byte of the body is read
    with gateway.connect() as s:
        t0 = time.monotonic()
        s.sendall(b"POST /v1/fleet/push-messages HTTP/1.1\r\nHost: x\r\nContent-Length: 300000000\r\n\r\n")
        status, _ = parse(read_until_closed(s, 5.0)[1])
        declared = time.monotonic() - t0
    assert status == 413 and declared < 1.0, (status, declared)
    # ... and sent anyway, as fast as the client can: refused the same, the connection cut LINGER s later
    # (what arrives meanwhile is dropped, not kept)
    took, sent, status = flood(gateway, b"POST /v1/fleet/push-messages HTTP/1.1\r\nHost: x\r\n"
                               b"Content-Length: 300000000\r\n\r\n", b"\0" * 65536)
    assert status == 413 and took < LINGER + SLACK, (status, took, sent)
    # a chunked body (no Content-Length): refused once the bytes received pass the limit, then cut
    took_chunked, sent_chunked, status = flood(
        gateway, b"POST /v1/fleet/push-messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"10000\r\n" + b"\1" * 65536 + b"\r\n")
    assert status == 413 and took_chunked < LINGER + SLACK, (status, took_chunked, sent_chunked)
    after = memory(gateway.proc.pid)
    print(f"\nRSS before {before['VmRSS'] / 2**20:.0f} MiB (peak {before['VmHWM'] / 2**20:.0f}), after "
          f"{after['VmRSS'] / 2**20:.0f} MiB (peak {after['VmHWM'] / 2**20:.0f}); 413 for a 300 MB Content-Length in "
          f"{declared * 1000:.0f} ms; cut after {took:.2f} s ({sent / 1e6:.0f} MB sent anyway); a chunked body cut after "
          f"{took_chunked:.2f} s ({sent_chunked / 1e6:.0f} MB sent)")
    assert after["VmHWM"] - before["VmHWM"] < RSS_BOUND and after["VmRSS"] - before["VmRSS"] < RSS_BOUND
    log = gateway.log()
    assert "Content-Length 300000000 over 1048576" in log and "body over 1048576 bytes" in log
    assert not gateway.upstream.seen  # nothing of it reached the SuperLink


def test_slow_headers_and_a_slow_body_are_cut_off(gateway):
    with gateway.connect() as s:  # the request line and headers a byte every 0.25 s (they would take ~20 s)
        took, _ = trickle(s, b"POST /v1/fleet/push-messages HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
                          0.25, HEADER_TIMEOUT + SLACK + 5)
    assert HEADER_TIMEOUT - 0.5 < took < HEADER_TIMEOUT + SLACK, took
    with gateway.connect() as s:  # headers at once, then the body a byte every 0.25 s
        s.sendall(b"POST /v1/fleet/push-messages HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        took_body, reply = trickle(s, b"x" * 1000, 0.25, BODY_TIMEOUT + SLACK + 5)
    assert parse(reply)[0] == 408 and BODY_TIMEOUT - 0.5 < took_body < BODY_TIMEOUT + SLACK, (reply, took_body)
    with gateway.connect() as s:  # a TLS connection that sends nothing
        took_idle, _ = read_until_closed(s, HEADER_TIMEOUT + SLACK + 5)
    assert took_idle < HEADER_TIMEOUT + SLACK, took_idle
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as raw:  # not even the TLS handshake
        took_raw, _ = read_until_closed(raw, HEADER_TIMEOUT + SLACK + 5)
    assert took_raw < HEADER_TIMEOUT + SLACK, took_raw
    print(f"\nclosed: slow headers after {took:.2f} s, slow body (408) after {took_body:.2f} s, an idle TLS "
          f"connection after {took_idle:.2f} s, no TLS handshake after {took_raw:.2f} s")
    assert not gateway.upstream.seen


def test_connections_over_the_cap_are_refused_and_idle_ones_closed(gateway):
    socks = [gateway.connect() for _ in range(MAX_CONNECTIONS + 10)]
    t0 = time.monotonic()
    try:
        refused = []
        for s in socks[MAX_CONNECTIONS:]:
            refused.append(parse(read_until_closed(s, 5.0)[1])[0])
        assert refused == [503] * 10 and time.monotonic() - t0 < 2.0, refused
        last = max(read_until_closed(s, HEADER_TIMEOUT + SLACK + 5)[0] for s in socks[:MAX_CONNECTIONS])
        assert time.monotonic() - t0 < HEADER_TIMEOUT + SLACK, last
    finally:
        for s in socks:
            s.close()
    print(f"\n{MAX_CONNECTIONS + 10} idle connections: 10 refused (503) at once, all closed after "
          f"{time.monotonic() - t0:.2f} s")
    assert "refused a connection" in gateway.log()


def test_bad_paths_get_400_without_a_traceback(gateway):
    for path in ("/v1/fleet/%00", "/v1/fleet/push%0Amessages", "/v1/fleet/a%20b", "/v1/fleet/%ff",
                 "/v1/fleet/" + "a" * 300, "/v1/fleet/\x01", "/v1/fleet/" + "a" * 20000):
        status, _ = gateway.post(path, b"x")
        assert status == 400, (path[:40], status)
    with gateway.connect() as s:  # headers over 16 KiB (h11's bound, and the gateway's): refused, not forwarded
        s.sendall(b"POST /v1/fleet/push-messages HTTP/1.1\r\nHost: x\r\n" + b"X-A: b\r\n" * 3000 + b"\r\n")
        assert parse(read_until_closed(s, 5.0)[1])[0] in (400, 431)
    log = gateway.log()
    assert "Traceback" not in log and "InvalidURL" not in log
    assert "refused POST /v1/fleet/push\\x0amessages" in log  # a newline in a path cannot forge a log line
    assert not gateway.upstream.seen


def test_a_good_request_is_still_passed_on_unchanged(gateway):
    body = os.urandom(MAX_BODY - 4096)  # just under the limit
    status, reply = gateway.post("/v1/fleet/push-messages", body, headers="x-node: n\xe9\r\n")
    assert status == 200, reply
    assert reply.decode() == f"{len(body)} {hashlib.sha256(body).hexdigest()}"
    # as sent, headers included (a value's non-ASCII bytes are passed on, not re-encoded)
    assert gateway.upstream.seen[-1] == ("/v1/fleet/push-messages", len(body), hashlib.sha256(body).hexdigest(),
                                         "n\xe9".encode().decode("latin-1"))
    assert gateway.proc.poll() is None


def test_the_body_limit_is_sized_from_the_plan(plan_file, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from depl import cli
    from depl.plan import Plan
    from depl.train.engine.federation import job_from_plan
    from depl.train.apps.fleet_gateway import PLAN_MARGIN, PLAN_SLACK, plan_body_limit
    from depl.train.task.prune import build_version, n_parameters

    limit, weights = plan_body_limit(plan_file)
    largest = max(n_parameters(build_version(v)) for v in job_from_plan(Plan.load(plan_file)).versions.values())
    assert 4 * largest <= weights < 4 * largest + 4096  # float32 weights, and a few buffers
    assert limit == PLAN_MARGIN * weights + PLAN_SLACK
    # a plan that cannot be read: one line, exit 2, before listening
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text("{\"format\": \"depl.plan/1\"")
    make_certificates(tmp_path, os.environ)
    r = CliRunner().invoke(cli.app, ["fleet-gateway", "--listen", "127.0.0.1:9092", "--ssl-certfile", "server.pem",
                                     "--ssl-keyfile", "server.key", "--plan", "bad.json"], env={"COLUMNS": "250"})
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and "bad.json" in lines[0], r.stderr
