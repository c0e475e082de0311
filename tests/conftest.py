"""Every test runs with Flower's telemetry off, whatever the environment says (make test sets it too); `depl_cli` runs
the command line as a user does, in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

import forked

os.environ["FLWR_TELEMETRY_ENABLED"] = "0"
# The automatic choice of how seeds train measures for seconds to a minute per network: off in every test (the
# fixed defaults, as with --seed-batch 32), but the tests of the choice itself, which turn it on with a cache of
# their own (tests/train/test_autochoice.py); no test reads or writes the user's cache.
os.environ["DEPL_AUTOCHOICE"] = "0"
os.environ["DEPL_CACHE"] = os.path.join(tempfile.gettempdir(), f"depl-test-cache-{os.getpid()}")
# the α ledger of the built-ins (depl.workflows.alpha_spent): a folder of this test session's, not the user's
os.environ["DEPL_ALPHA_LEDGER"] = os.path.join(tempfile.gettempdir(), f"depl-test-alpha-{os.getpid()}")
# the tasks' seed books (depl.ledger.TaskSeeds): this test session's, not the user's; each test has its own (below),
# so that two tests judging one built-in on the same seeds are two users, not one re-analysing a task's seeds
os.environ["DEPL_SEED_LEDGER"] = os.path.join(tempfile.gettempdir(), f"depl-test-seeds-{os.getpid()}")

# the installed `depl` script's entry point, run by this interpreter so that this checkout's depl is the one run
ENTRY = "from depl.cli import main; main()"
# wide enough that no message is wrapped mid-line; no display: the plots are written to files
CLI_ENV = {"COLUMNS": "200", "MPLBACKEND": "Agg"}
# `depl ARGS…` for each ARGS of a JSON list, one after another in one interpreter (one start-up), as the installed
# script runs each: after each, a line `MARK n` (n its exit code) on stdout and on stderr
MARK = "\x1e depl exit "
EACH = f"""
import json, sys
{{prelude}}
from depl.cli import main
for argv in json.loads(sys.argv[1]):
    sys.argv = ["depl", *argv]
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    for stream in (sys.stdout, sys.stderr):
        print({MARK!r} + str(code), file=stream, flush=True)
"""


class DeplCli:
    """`depl ARGS…` in a subprocess: `depl_cli(*args)` runs it to the end, `depl_cli.start(*args)` leaves it running.

    `env` adds to this process's environment and CLI_ENV, or overrides them; a None value unsets the variable
    (`{"COLUMNS": None}`: no terminal width, as in a pipe).  `code` replaces the entry point (e.g. to report on exit
    what was imported); `safe_path` (python -P) keeps the working folder off sys.path, as for the installed script;
    `prefix` runs the interpreter through a command (e.g. `ip netns exec NAME`).
    """

    def argv(self, *args, code: str = ENTRY, safe_path: bool = False, prefix: list[str] = ()) -> list[str]:
        return [*map(str, prefix), sys.executable, *(["-P"] if safe_path else []), "-c", code, *map(str, args)]

    @staticmethod
    def environ(env: dict[str, str | None] | None) -> dict[str, str]:
        merged = {**os.environ, **CLI_ENV, **(env or {})}
        return {k: v for k, v in merged.items() if v is not None}

    def __call__(self, *args, cwd=None, env: dict[str, str | None] | None = None, timeout: float = 900,
                 code: str = ENTRY, safe_path: bool = False, prefix: list[str] = (),
                 _each: bool = False) -> subprocess.CompletedProcess:
        argv, environ = self.argv(*args, code=code, safe_path=safe_path, prefix=prefix), self.environ(env)
        if forked.usable(code == ENTRY or _each, env, prefix):   # forked from a warm interpreter (tests/forked.py)
            done = forked.ZYG.run(code, list(args), cwd, environ, timeout, safe_path, argv)
            if done is not None:
                return done
        return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=environ, timeout=timeout)

    def each(self, commands: list[list], cwd=None, env: dict[str, str | None] | None = None,
             timeout: float = 900, prelude: str = "", safe_path: bool = False,
             prefix: list[str] = ()) -> list[subprocess.CompletedProcess]:
        """`depl ARGS…` for each ARGS of `commands` in one process (as a single command's), one after another as
        the script runs each (`main()` anew): a CompletedProcess each, its exit code, stdout and stderr.  `prelude`:
        code run before depl is imported (e.g. an import hook: a fresh interpreter); `safe_path`, `prefix` as for a
        single command."""
        import json

        r = self(json.dumps([[str(a) for a in c] for c in commands]), cwd=cwd, env=env, timeout=timeout,
                 code=EACH.replace("{prelude}", prelude), safe_path=safe_path, prefix=prefix, _each=not prelude)
        # each piece after the first: the exit code of the command before it, a newline, the next command's output
        outs, errs = r.stdout.split(MARK), r.stderr.split(MARK)
        assert len(outs) == len(errs) == len(commands) + 1, (r.returncode, r.stderr[-2000:])
        codes = [int(x.partition("\n")[0]) for x in errs[1:]]
        assert codes == [int(x.partition("\n")[0]) for x in outs[1:]] and r.returncode == 0, r.stderr[-2000:]
        text = [(o if i == 0 else o.partition("\n")[2], e if i == 0 else e.partition("\n")[2])
                for i, (o, e) in enumerate(zip(outs[:-1], errs[:-1]))]
        return [subprocess.CompletedProcess(["depl", *map(str, c)], code, out, err)
                for c, code, (out, err) in zip(commands, codes, text)]

    def start(self, *args, cwd=None, env: dict[str, str | None] | None = None, stdout=subprocess.PIPE,
              stderr=subprocess.PIPE) -> subprocess.Popen:
        return subprocess.Popen(self.argv(*args), stdout=stdout, stderr=stderr, text=True, cwd=cwd,
                                env=self.environ(env))


@pytest.fixture(autouse=True)
def _own_seed_book(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("DEPL_SEED_LEDGER", str(tmp_path_factory.mktemp("seeds")))


@pytest.fixture(scope="session")
def depl_cli() -> DeplCli:
    return DeplCli()


def pytest_collection_modifyitems(config, items):
    """Files with the most tests marked slow first, then by their number of tests, each file's tests together and in
    their order: under `make test`'s `--dist loadfile --no-loadscope-reorder` the long files start first and the
    quick ones fill the end, so no worker is left with a long file while the other has finished."""
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    slow = {f: sum(1 for i in its if i.get_closest_marker("slow")) for f, its in files.items()}
    order = sorted(files, key=lambda f: (-slow[f], -len(files[f])))
    items[:] = [i for f in order for i in files[f]]
