"""The command line: the only place that knows argv, exit codes and rich output.

Each command parses its options, calls its workflow (depl.workflows: a plain function returning a frozen
result), prints the result (text or --json), and maps the workflow's refusals to exit codes.

* `app` — the typer app and `main` (the `depl` console script);
* `console` — the consoles, `fail`, the exit codes (0 ok, 2 bad input,
  3 infeasible, 4 a promise refuted), `--json` output, Enum choices;
* one module per command family: `planning` (scenarios, plan, simulate,
  predict), `reproduce`, `training` (run, profile, runs, export-app, run-app),
  `fitting` (fit, calibrate), `validation` (validate), `certify`, `coverage`.
"""

from .app import app, main

__all__ = ["app", "main"]
