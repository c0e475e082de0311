"""The command line: the only place that knows argv, exit codes and rich output.

Each command parses its options, calls its workflow (depl.workflows: a plain function returning a frozen
result), prints the result (text or --json), and maps the workflow's refusals to exit codes.

* `app` — the typer app and `main` (the `depl` console script);
* `console` — the consoles, `fail`, the exit codes (0 ok, 2 bad input,
  3 infeasible, 4 a promise refuted), `--json` output, Enum choices;
* one module per command family: `planning` (scenarios, plan, simulate,
  predict), `reproduce`, `run`, `profile`, `runs` (runs show), `models` (runs
  models, export-model), `apps` (export-app, run-app, fleet-gateway),
  `fitting` (fit, calibrate), `validation` (validate), `certify`, `coverage`;
  `training` holds what the training commands share (`trains_seeds`: their
  options, --executor among them).

Each command ends its text with the command a user would run next (one dim
line, `console.next_step`; none under --json).  No command function is over
60 lines (tests/cli/test_layers.py): option declarations are module constants.
"""

from .app import app, main

__all__ = ["app", "main"]
