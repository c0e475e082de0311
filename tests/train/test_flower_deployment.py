"""A real Flower deployment on loopback: SuperLink and SuperNodes as separate processes,
TLS on every connection, SuperNode authentication on, the app submitted by `depl run
--backend flower --superlink` (i.e. `flwr run`), the same trajectory as the local back end.

As docs/flower-deployment.md deploys it: the SuperLink listens on 127.0.0.1 (its operator's
side: Control API) and `depl fleet-gateway` is its network face, passing on the Fleet API only.
Through that face a SuperNode whose key the operator did not register is refused by Flower, and
a `flwr` client (holding the CA certificate, as every SuperNode does) can neither register a key
nor start a run.
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

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not

pytest.importorskip("flwr")
if not (shutil.which("openssl") and shutil.which("ssh-keygen")):
    pytest.skip("needs openssl and ssh-keygen to make the certificates and keys", allow_module_level=True)

from depl.store import Store  # noqa: E402
from depl.train.engine.federation import LocalFederation, job_from_plan, walk_plan  # noqa: E402
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


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_plan_runs_on_a_tls_deployment_with_authenticated_supernodes(depl_cli):
    d = Path(tempfile.mkdtemp(prefix="depl-dep-", dir="/tmp"))
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_HOME": str(d / "flwr"),
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    procs = Processes(d, env)
    try:
        make_certificates(d, env)
        for i in (0, 1, 2):
            run("ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-C", "", "-f", f"node{i}", env=env, cwd=d)
        port, face = free_port(), free_port()  # the SuperLink (loopback) and its network face (the gateway)
        (d / "flwr").mkdir()
        (d / "flwr" / "config.toml").write_text(
            f'[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\naddress = "127.0.0.1:{port}"\n'
            f'root-certificates = "{d / "ca.crt"}"\n')
        link = procs.start("superlink", BIN / "flower-superlink", "--ssl-ca-certfile", "ca.crt", "--ssl-certfile",
                           "server.pem", "--ssl-keyfile", "server.key", "--enable-supernode-auth",
                           "--disable-runtime-dependency-installation", "--database", "state.db",
                           "--host", "127.0.0.1", "--port", port)
        plan = make_plan([("full", "A"), ("half", "B")])  # FedAvg on 2 nodes, hand-off, switch
        plan.save(d / "plan.json")
        # the gateway's body limit sized from the plan (its messages must pass it, a stranger's 300 MB not)
        procs.start("gateway", sys.executable, "-m", "depl.cli", "fleet-gateway", "--listen", f"127.0.0.1:{face}",
                    "--superlink", f"127.0.0.1:{port}", "--ssl-certfile", "server.pem", "--ssl-keyfile", "server.key",
                    "--ssl-ca-certfile", "ca.crt", "--plan", "plan.json")
        wait_for(lambda: "Uvicorn running on https" in (d / "superlink.log").read_text(), 60, "the SuperLink")
        wait_for(lambda: listening(face), 60, "the gateway")
        assert link.poll() is None
        for i in (0, 1):
            run(BIN / "flwr", "supernode", "register", f"node{i}.pub", "loopback", env=env, cwd=d)
        # node 0 is node 0 of both clusters, node 1 the second node of cluster A; node 2's key is not registered
        nodes = {i: procs.start(f"node{i}", BIN / "flower-supernode", "--root-certificates", "ca.crt", "--superlink",
                                f"127.0.0.1:{face}", "--auth-supernode-private-key", f"node{i}", "--node-config", conf,
                                "--port", free_port(), *(["--max-retries", "0"] if i == 2 else []))
                 for i, conf in ((0, "cluster='A,B' node=0"), (1, "cluster='A' node=1"), (2, "cluster='A' node=0"))}
        wait_for(lambda: run(BIN / "flwr", "supernode", "list", "loopback", env=env, cwd=d).count("online") >= 2,
                 60, "two SuperNodes online")
        # refused: the unregistered SuperNode stops, and it is not among the SuperLink's nodes
        wait_for(lambda: nodes[2].poll() is not None, 60, "the unregistered SuperNode to be refused")
        assert nodes[2].returncode != 0 and nodes[0].poll() is None
        assert run(BIN / "flwr", "supernode", "list", "loopback", env=env, cwd=d).count("online") == 2
        # refused: a client that reaches only the network face (CA certificate in hand) has no Control API
        outsider = {**env, "FLWR_HOME": str(d / "outsider")}
        (d / "outsider").mkdir()
        (d / "outsider" / "config.toml").write_text(
            f'[superlink]\ndefault = "face"\n\n[superlink.face]\naddress = "127.0.0.1:{face}"\n'
            f'root-certificates = "{d / "ca.crt"}"\n')
        for cmd in (["supernode", "register", "node2.pub", "face"], ["supernode", "list", "face"]):
            r = subprocess.run([BIN / "flwr", *cmd], env=outsider, cwd=d, capture_output=True, text=True, timeout=120)
            assert r.returncode != 0, (cmd, r.stdout, r.stderr)
        assert "refused POST /v1/control/register-node" in (d / "gateway.log").read_text()
        assert run(BIN / "flwr", "supernode", "list", "loopback", env=env, cwd=d).count("registered") <= 2

        r = depl_cli("run", d / "plan.json", "--backend", "flower", "--superlink", "loopback", "--out", d / "out",
                     env=env, timeout=600)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert "[depl] seed 0 epoch 2 half on B" in r.stdout
        with Store(d / "out" / "runs.sqlite") as s:
            (run_row,) = s.runs("plan")
            got = s.losses(run_row["run_id"])[0]
        local = [x.test_loss for x in walk_plan(job_from_plan(plan), 0, LocalFederation())]
        assert got == pytest.approx(local, rel=1e-5, abs=1e-6)
        from depl.train.apps.fleet_gateway import plan_body_limit

        limit = plan_body_limit(d / "plan.json")[0]
        assert limit < 8 << 20 and f"limits: body {limit} bytes" in (d / "gateway.log").read_text()
        # TLS is on: a plain-HTTP client cannot talk to the SuperLink
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = c.recv(64)
        assert not reply.startswith(b"HTTP/1.1 200")
    finally:
        procs.stop()
        shutil.rmtree(d, ignore_errors=True)


def test_depl_run_refuses_a_connection_without_tls_or_to_a_control_api_on_the_network(depl_cli, tmp_path, plan_file):
    (tmp_path / "flwr").mkdir()
    (tmp_path / "flwr" / "config.toml").write_text(
        '[superlink]\ndefault = "plain"\n\n[superlink.plain]\naddress = "127.0.0.1:9093"\ninsecure = true\n\n'
        '[superlink.remote]\naddress = "192.0.2.7:9093"\nroot-certificates = "/nonexistent/ca.crt"\n')
    run = ["run", plan_file, "--backend", "flower", "--out", tmp_path / "o"]
    refused = (("plain", "insecure = true"), ("remote", "reached over the network"), ("nosuch", "not found"))
    # one start-up for them all, each command as the installed script runs it (main() anew)
    *done, insecure = depl_cli.each([*([*run, "--superlink", conn] for conn, _ in refused), [*run, "--insecure"]],
                                    env={"FLWR_HOME": str(tmp_path / "flwr")}, timeout=120)
    for (conn, why), r in zip(refused, done):
        assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr, (conn, r.stderr)
        assert r.stderr.count("\n") == 1  # one line
        if conn != "nosuch":
            assert "--insecure" in r.stderr  # the line says how to go on anyway
    assert not (tmp_path / "o").exists()  # nothing written, by any of them
    r = insecure
    assert r.returncode == 2 and "--insecure applies to --superlink only" in r.stderr
