"""A depl command in a process forked from an interpreter that has already imported what every command imports.

A test runs the command line as a user does: `depl ARGS…` in a process of its own, with its arguments, environment
and working folder, its stdout and stderr captured, its exit code returned.  A fresh interpreter spends ~5 s of CPU
importing torch, Flower, scipy.stats and depl's training side before the command starts — most of the suite's CPU,
over a few hundred commands.  Here one interpreter per test process (the *zygote*) imports them once and forks a
child per command; the child takes the command's environment, folder and standard streams, then runs the same entry
point code (`python -c CODE ARGS…`) and exits as that interpreter would (SystemExit's code, a traceback and 1 on an
uncaught exception, its atexit handlers run).  The child is what a fresh interpreter would be after those imports:
depl reads its environment and folder when a command runs, never at import (nothing of `depl.cli` is imported
before the fork, so the console takes the command's COLUMNS).

Written here because the standard library's forkserver runs Python callables for multiprocessing, not a command
line with its own streams, folder and environment.  `DEPL_TEST_FRESH=1` runs every command in a fresh interpreter
instead; commands whose start-up is what a test checks (another entry code, a prelude, PYTHON*/LD_* variables, a
command prefix) always do (tests/conftest.py, DeplCli).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

# imported once, before any fork: what a training command imports (the command line itself is not: the console
# reads COLUMNS when it is imported)
PRELOAD = ("torch", "depl.workflows.training", "depl.workflows.search", "depl.workflows.validation")

ZYGOTE = r"""
import json, os, sys
for name in json.loads(sys.argv[1]):
    __import__(name)
reply = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)   # the zygote writes nothing else: a stray print cannot garble a reply
reply.write("ready\n")
for line in sys.stdin:
    req = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.setsid()   # its own process group: a timeout kills what it started too
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, req["out"], os.O_WRONLY | os.O_TRUNC),
                                (2, req["err"], os.O_WRONLY | os.O_TRUNC)):
            new = os.open(path, flags)
            os.dup2(new, fd)
            os.close(new)
        reply.close()
        sys.stdin = open(0, closefd=False)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        if req["safe_path"]:   # python -P: the working folder is not on sys.path
            sys.path[:] = [p for p in sys.path if p not in ("", ".")]
        import importlib
        importlib.invalidate_caches()
        sys.argv = ["-c", *req["args"]]
        code = compile(req["code"], "<string>", "exec")
        del req, line, pid
        exec(code, sys.modules["__main__"].__dict__)   # as `python -c CODE`: in __main__, its exceptions uncaught
        sys.exit(0)
    reply.write(json.dumps({"pid": pid}) + "\n")
    _, status = os.waitpid(pid, 0)
    reply.write(json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n")
"""


class Zygote:
    """One forking interpreter per test process, started at its first command, stopped when the process ends."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.buffer = b""

    def _line(self, deadline: float | None) -> dict | None:
        """The zygote's next reply line (None at its end or at the deadline)."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return {"ready": True} if line == b"ready" else json.loads(line)

    def start(self, env: dict[str, str]) -> bool:
        if self.proc is not None and self.proc.poll() is None:
            return True
        self.proc = subprocess.Popen([sys.executable, "-c", ZYGOTE, json.dumps(PRELOAD)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self.buffer = b""
        if self._line(time.monotonic() + 300) != {"ready": True}:
            self.stop()
            return False
        return True

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def run(self, code: str, args: list[str], cwd, env: dict[str, str], timeout: float, safe_path: bool,
            argv: list[str]) -> subprocess.CompletedProcess | None:
        """`python [-P] -c CODE ARGS…` forked; None where the zygote could not start (the caller runs it afresh)."""
        if not self.start(env):
            return None
        with tempfile.TemporaryDirectory(prefix="depl-cli-") as d:
            out, err = os.path.join(d, "out"), os.path.join(d, "err")
            for f in (out, err):
                open(f, "wb").close()
            req = {"args": [str(a) for a in args], "cwd": os.path.abspath(cwd or os.getcwd()), "out": out,
                   "err": err, "safe_path": safe_path, "env": env, "code": code}
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
            started = self._line(time.monotonic() + 60)
            if started is None:   # the zygote died (or hangs): this command and the next afresh
                self.stop()
                return None
            pid = started["pid"]
            deadline = time.monotonic() + timeout
            done = self._line(deadline)
            if done is None:   # past its timeout: the command and whatever it started
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self._line(None)
                raise subprocess.TimeoutExpired(argv, timeout)
            enc = {"encoding": "utf-8", "errors": "replace"}
            with open(out, **enc) as fo, open(err, **enc) as fe:
                return subprocess.CompletedProcess(argv, done["code"], fo.read(), fe.read())


ZYG = Zygote()
atexit.register(ZYG.stop)


def usable(code_is_entry: bool, env: dict[str, str | None] | None, prefix) -> bool:
    """A command the zygote may run: the usual entry code, no command prefix, no interpreter start-up variable."""
    if os.environ.get("DEPL_TEST_FRESH") == "1" or prefix or not code_is_entry:
        return False
    return not any(k.startswith(("PYTHON", "LD_", "OMP_", "MKL_")) for k in (env or {}))
