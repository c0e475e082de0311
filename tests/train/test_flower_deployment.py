"""A real Flower deployment on loopback: SuperLink and SuperNodes as separate processes,
TLS on every connection, SuperNode authentication on, the app submitted by `depl run
--backend flower --superlink` (i.e. `flwr run`), the same trajectory as the local back end.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")
if not (shutil.which("openssl") and shutil.which("ssh-keygen")):
    pytest.skip("needs openssl and ssh-keygen to make the certificates and keys", allow_module_level=True)

from depl.store import Store  # noqa: E402
from depl.train.federation import LocalFederation, job_from_plan, walk_plan  # noqa: E402
from trainkit import make_plan  # noqa: E402

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(*cmd, env, cwd):
    r = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{cmd}: {r.stdout}\n{r.stderr}"
    return r.stdout


def make_certificates(d: Path, env) -> None:
    """A throw-away CA and a server certificate for 127.0.0.1 (as docs/flower-deployment.md shows)."""
    (d / "san.cnf").write_text("[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = 127.0.0.1\n[ext]\n"
                               "subjectAltName = IP:127.0.0.1, DNS:localhost\nbasicConstraints = CA:FALSE\n"
                               "keyUsage = digitalSignature, keyEncipherment\nextendedKeyUsage = serverAuth\n")
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", "ca.key",
        "-out", "ca.crt", "-subj", "/CN=depl-test-ca", env=env, cwd=d)
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-config", "san.cnf", env=env, cwd=d)
    run("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.pem", "-days", "1", "-extfile", "san.cnf", "-extensions", "ext", env=env, cwd=d)


class Processes:
    """Long-running processes, each in its own session, killed (with their children) at the end."""

    def __init__(self, d: Path, env):
        self.d, self.env, self.procs = d, env, []

    def start(self, name, *cmd):
        log = open(self.d / f"{name}.log", "w")
        p = subprocess.Popen([str(c) for c in cmd], env=self.env, cwd=self.d, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def stop(self):
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        time.sleep(1)
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=10)


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_plan_runs_on_a_tls_deployment_with_authenticated_supernodes():
    d = Path(tempfile.mkdtemp(prefix="depl-dep-", dir="/tmp"))
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_HOME": str(d / "flwr"),
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    procs = Processes(d, env)
    try:
        make_certificates(d, env)
        for i in (0, 1):
            run("ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-C", "", "-f", f"node{i}", env=env, cwd=d)
        port = free_port()
        (d / "flwr").mkdir()
        (d / "flwr" / "config.toml").write_text(
            f'[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\naddress = "127.0.0.1:{port}"\n'
            f'root-certificates = "{d / "ca.crt"}"\n')
        link = procs.start("superlink", BIN / "flower-superlink", "--ssl-ca-certfile", "ca.crt", "--ssl-certfile",
                           "server.pem", "--ssl-keyfile", "server.key", "--enable-supernode-auth",
                           "--disable-runtime-dependency-installation", "--database", "state.db",
                           "--port", port)
        wait_for(lambda: "Uvicorn running on https" in (d / "superlink.log").read_text(), 60, "the SuperLink")
        assert link.poll() is None
        for i in (0, 1):
            run(BIN / "flwr", "supernode", "register", f"node{i}.pub", "loopback", env=env, cwd=d)
        # node 0 is node 0 of both clusters, node 1 the second node of cluster A
        for i, conf in ((0, "cluster='A,B' node=0"), (1, "cluster='A' node=1")):
            procs.start(f"node{i}", BIN / "flower-supernode", "--root-certificates", "ca.crt", "--superlink",
                        f"127.0.0.1:{port}", "--auth-supernode-private-key", f"node{i}", "--node-config", conf,
                        "--port", free_port())
        wait_for(lambda: run(BIN / "flwr", "supernode", "list", "loopback", env=env, cwd=d).count("online") >= 2,
                 60, "two SuperNodes online")

        plan = make_plan([("full", "A"), ("half", "B")])  # FedAvg on 2 nodes, hand-off, switch
        plan.save(d / "plan.json")
        r = subprocess.run([sys.executable, "-c", "from depl.cli import main; main()", "run", str(d / "plan.json"),
                            "--backend", "flower", "--superlink", "loopback", "--out", str(d / "out")],
                           env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert "[depl] seed 0 epoch 2 half on B" in r.stdout
        with Store(d / "out" / "runs.sqlite") as s:
            (run_row,) = s.runs("plan")
            got = s.losses(run_row["run_id"])[0]
        local = [x.test_loss for x in walk_plan(job_from_plan(plan), 0, LocalFederation())]
        assert got == pytest.approx(local, rel=1e-5, abs=1e-6)
        # TLS is on: a plain-HTTP client cannot talk to the SuperLink
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = c.recv(64)
        assert not reply.startswith(b"HTTP/1.1 200")
    finally:
        procs.stop()
        shutil.rmtree(d, ignore_errors=True)
