"""The time of a hand-off between two clusters across a rate-limited link, beside eq. (1)'s s/b.

Three Linux network namespaces on this machine — a head (10.77.0.1, a bridge) and one namespace per cluster
(10.77.0.2, 10.77.0.3), each joined to the head's bridge by a veth pair whose two ends are shaped by `tc qdisc ...
tbf` to its cluster's `bandwidth`.  A scenario's `size` is in thousands of parameters (the built-ins:
"size = parameters in thousands"), float32 on the wire, so one size unit is BYTES_PER_UNIT = 4,000 bytes and a
bandwidth of b size units per second is a link of 4,000·b bytes per second (mnist1d-small: edge 50 → 200 kB/s,
far-edge 200 → 800 kB/s).  For each model version, a payload of its s·4,000 bytes goes from the first cluster's
namespace to the second's over TCP (python sockets under `ip netns exec`): the time from the sender's connect
to the receiver's one-byte acknowledgement of the last byte, the median of --repeats, printed beside the
sender's s/b — the hand-off term of eq. (1) (docs/scenario-format.md).  The path from the first cluster to the
second is capped by the first's link (its egress), the slower of the two in mnist1d-small.

Run as root (namespaces, veth, tc):

    PYTHONPATH=src python benchmarks/bench_netns_handoff.py mnist1d-small --repeats 5
    PYTHONPATH=src python benchmarks/bench_netns_handoff.py mnist1d-small --repeats 1 --json   # what the test runs

Exit 0 when it measured, 2 on bad input (a scenario, a cluster), 3 when this machine cannot make namespaces
(not root, no `ip netns`, no `tc`: the line says which).  `tests/train/test_netns.py` builds its namespaces
with `Lab` and `unavailable` from here.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import time
import uuid

BYTES_PER_UNIT = 4000           # a size unit: a thousand float32 parameters
SUBNET = "10.77.0"              # the lab's /24 (inside its own namespaces: nothing outside sees it)
LATENCY = "200ms"               # tbf: the longest a packet may wait in the shaper's queue
WAIT = 60.0                     # seconds any one step of the lab may take before it is given up


def tbf(rate: float) -> list[str]:
    """The `tc qdisc add ... tbf` arguments of a link of `rate` bytes per second (burst: 10 ms of it, ≥ 4 KiB)."""
    return ["tbf", "rate", f"{int(rate * 8)}bit", "burst", str(max(4096, int(rate / 100))), "latency", LATENCY]


def sh(*cmd: str, timeout: float = WAIT) -> str:
    """Run one command to the end; its stderr as a RuntimeError when it fails."""
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {(r.stderr or r.stdout).strip() or f'exit {r.returncode}'}")
    return r.stdout


class Lab:
    """A head namespace with a bridge at SUBNET.1 and one namespace per rate (SUBNET.2, .3, …) on a veth pair to
    it, both ends shaped to that rate (bytes per second; None: not shaped).  Processes started with `start` run in
    their own sessions; `close` ends them, every process left in the namespaces, and the namespaces (their links
    go with them).  A context manager: closed however the block ends."""

    def __init__(self, rates: list[float | None], tag: str | None = None):
        tag = tag or f"depl-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.head = f"{tag}-head"
        self.workers = [f"{tag}-w{i + 1}" for i in range(len(rates))]
        self.procs: list[subprocess.Popen] = []
        self.made: list[str] = []
        try:
            self._build(rates)
        except BaseException:
            self.close()
            raise

    def _build(self, rates):
        for ns in (self.head, *self.workers):
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", self.head, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.head, "addr", "add", f"{self.ip(0)}/24", "dev", "br0")
        sh("ip", "-n", self.head, "link", "set", "br0", "up")
        for i, (ns, rate) in enumerate(zip(self.workers, rates), start=1):
            port = f"v{i}"  # the head's end of worker i's pair; the worker's end is its eth0
            sh("ip", "-n", self.head, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "-n", self.head, "link", "set", port, "master", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.ip(i)}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            if rate is not None:
                for where, dev in ((ns, "eth0"), (self.head, port)):
                    sh("ip", "netns", "exec", where, "tc", "qdisc", "add", "dev", dev, "root", *tbf(rate))

    @staticmethod
    def ip(i: int) -> str:
        """The address of namespace i: 0 the head, 1.. the workers."""
        return f"{SUBNET}.{i + 1}"

    def ns(self, i: int) -> str:
        return self.head if i == 0 else self.workers[i - 1]

    def argv(self, i: int, *cmd) -> list[str]:
        """`cmd` run inside namespace i."""
        return ["ip", "netns", "exec", self.ns(i), *map(str, cmd)]

    def start(self, i: int, *cmd, log=None, env=None, cwd=None, stdout=None) -> subprocess.Popen:
        """A long-running process in namespace i, in its own session, writing to `log` (a path) or `stdout`."""
        out = open(log, "w") if log is not None else stdout
        p = subprocess.Popen(self.argv(i, *cmd), env=env, cwd=cwd, stdout=out,
                             stderr=subprocess.STDOUT if log is not None else None, start_new_session=True,
                             text=True)
        if log is not None:
            out.close()
        self.procs.append(p)
        return p

    def close(self) -> None:
        for p in self.procs:  # each session whole (a Ray node's raylet, a SuperNode's ClientApps)
            _signal_group(p, signal.SIGTERM)
        deadline = time.time() + 20
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                p.wait(timeout=10)
        for ns in self.made:  # whatever still runs in the lab's namespaces (started there, so ours)
            r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=WAIT)
            for pid in r.stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=WAIT)
        self.made = []

    def __enter__(self) -> "Lab":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _signal_group(p: subprocess.Popen, sig) -> None:
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


def unavailable() -> str | None:
    """Why this machine cannot build a Lab (None when it can): tried, with one shaped worker."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    try:
        Lab([1e6], tag=f"depl-probe-{os.getpid()}").close()
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
        return f"cannot build network namespaces here: {e}"
    return None


RECEIVE = """
import socket, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.create_server((host, port))
s.settimeout(float(sys.argv[4]))
print("ready", flush=True)
c, _ = s.accept()
c.settimeout(float(sys.argv[4]))
got = 0
while got < n:
    b = c.recv(1 << 16)
    if not b:
        break
    got += len(b)
c.sendall(b"k")
sys.exit(0 if got == n else 1)
"""

SEND = """
import socket, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
payload = bytes(n)
c = socket.create_connection((host, port), timeout=float(sys.argv[4]))
t = time.perf_counter()
c.sendall(payload)
assert c.recv(1) == b"k"
print(time.perf_counter() - t)
"""


def handoff(lab: Lab, src: int, dst: int, nbytes: int, timeout: float = WAIT, port: int = 7700) -> float:
    """Seconds to send `nbytes` from namespace `src` to namespace `dst` over TCP (connect to acknowledgement)."""
    host = lab.ip(dst)
    recv = lab.start(dst, sys.executable, "-c", RECEIVE, host, port, nbytes, timeout, stdout=subprocess.PIPE)
    try:
        ready, _, _ = select.select([recv.stdout], [], [], timeout)
        if not ready or recv.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the receiver in {lab.ns(dst)} did not start listening within {timeout:g} s")
        r = subprocess.run(lab.argv(src, sys.executable, "-c", SEND, host, port, nbytes, timeout),
                           capture_output=True, text=True, timeout=timeout + 10)
        if r.returncode != 0 or recv.wait(timeout=timeout) != 0:
            raise RuntimeError(f"the hand-off of {nbytes} bytes failed: {r.stderr.strip()[-500:]}")
        return float(r.stdout)
    finally:
        if recv.poll() is None:
            _signal_group(recv, signal.SIGKILL)
            recv.wait(timeout=10)


def measure(scenario, src: str, dst: str, repeats: int) -> dict:
    """Every version's hand-off from cluster `src` to cluster `dst` of `scenario` (a depl Scenario)."""
    clusters = {c.name: c for c in scenario.clusters}
    rates = [clusters[src].bandwidth * BYTES_PER_UNIT, clusters[dst].bandwidth * BYTES_PER_UNIT]
    rows = []
    with Lab(rates) as lab:
        for m in scenario.models:
            nbytes = round(m.size * BYTES_PER_UNIT)
            times = [handoff(lab, 1, 2, nbytes) for _ in range(repeats)]
            eq1 = m.size / clusters[src].bandwidth
            rows.append({"version": m.name, "size": m.size, "bytes": nbytes, "seconds": statistics.median(times),
                         "min": min(times), "max": max(times), "eq1_seconds": eq1,
                         "ratio": statistics.median(times) / eq1})
    return {"format": "depl.bench-netns-handoff/1", "scenario": scenario.name, "from": src, "to": dst,
            "bytes_per_unit": BYTES_PER_UNIT, "rates": {src: rates[0], dst: rates[1]}, "repeats": repeats,
            "versions": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", nargs="?", default="mnist1d-small", help="a built-in or a scenario file")
    ap.add_argument("--from", dest="src", help="the sending cluster (default: the scenario's first)")
    ap.add_argument("--to", dest="dst", help="the receiving cluster (default: the scenario's second)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args(argv)
    from depl.scenario import ScenarioError, load_scenario

    try:
        s = load_scenario(a.scenario)
    except ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    names = [c.name for c in s.clusters]
    src, dst = a.src or names[0], a.dst or (names[1] if len(names) > 1 else None)
    for flag, name in (("--from", src), ("--to", dst)):
        if name not in names:
            print(f"error: {flag} {name!r}: {a.scenario} has clusters {', '.join(names)}", file=sys.stderr)
            return 2
    if src == dst or a.repeats < 1:
        print("error: --from and --to must differ and --repeats be ≥ 1", file=sys.stderr)
        return 2
    why = unavailable()
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 3
    rep = measure(s, src, dst, a.repeats)
    if a.json:
        print(json.dumps(rep, indent=1))
        return 0
    print(f"{s.name}: {src} → {dst}, links {rep['rates'][src]:,.0f} and {rep['rates'][dst]:,.0f} bytes/s "
          f"(bandwidth × {BYTES_PER_UNIT} bytes), median of {a.repeats}")
    print("| version | s | bytes | measured (s) | eq. 1 s/b (s) | measured / (s/b) |")
    print("|---|---|---|---|---|---|")
    for r in rep["versions"]:
        print(f"| {r['version']} | {r['size']:g} | {r['bytes']:,} | {r['seconds']:.3f} | {r['eq1_seconds']:.3f} | "
              f"{r['ratio']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
