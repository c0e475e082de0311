"""The certificate's home: every statistic behind "with probability ≥ 1 − α over the runs it was built from,
this plan meets ℓmax with probability ≥ ω", in one package.

* `alpha`      — α's one type (`Alpha`), range (0, 0.5], default 0.05 (`DEFAULT_ALPHA`, `alpha_or_default`: the
  α a verdict is judged at), message and words (`confidence_words`);
* `bounds`     — the binomial bounds on a success probability (Clopper–Pearson, one- and two-sided);
* `sequential` — the anytime-valid sequential test of `depl certify` (a mixture e-process, its prior by
  name: `PRIORS`), its bounds and its exact stopping law;
* `conformal`  — split-conformal ranks on PIT scores (marginal and PAC), and the fixed sequence that keeps a
  certificate valid for the plan a planner picks among many;
* `value`      — the one `Certificate` value every command writes and reads (its kind, `Outcome`, evidence,
  `to_json` / `from_json`) and the verdict → exit code map (`EXIT_CODES`);
* `search`     — the certified search of `depl plan --certify`: one sequential test per candidate plan at its
  share of α (weighted e-Bonferroni), dropping, stopping, and its Monte Carlo.

Plan, certify, validate, simulate, coverage and the closed loop take these from here and compute no binomial or
beta bound of their own.  Pure functions of numbers (numpy, scipy.special): no law, no scenario, no torch.
"""

from __future__ import annotations

from .alpha import (ALPHA_MAX, ALPHA_RULE, DEFAULT_ALPHA, Alpha, alpha_or_default, alpha_problem, check_alpha,
                    confidence_words)
from .bounds import (VERDICTS, bound_words, clopper_pearson_interval, clopper_pearson_lower, clopper_pearson_upper, fixed_n_verdict,
                     one_sided_bounds, quantile_ranks, quantile_ranks_at)
from .sequential import (DEFAULT_PRIOR, PRIORS, Prior, RunsNeeded, Sequential, Verdict, anytime_lower, anytime_upper,
                         boundaries, expected_runs, fewest_runs, fixed_n_for, more_runs_if_all_meet, log_evidence_above,
                         log_evidence_below,
                         prior_named)
from .value import (EXIT_CODES, FORMAT, Certificate, CertificateError, Kind, Outcome, seed_ranges)

__all__ = ["ALPHA_MAX", "ALPHA_RULE", "DEFAULT_ALPHA", "Alpha", "alpha_or_default", "alpha_problem", "check_alpha",
           "confidence_words", "one_sided_bounds", "quantile_ranks_at",
           "VERDICTS", "bound_words", "fixed_n_verdict", "clopper_pearson_interval", "clopper_pearson_lower", "clopper_pearson_upper",
           "quantile_ranks", "DEFAULT_PRIOR", "PRIORS", "Prior", "prior_named", "RunsNeeded", "Sequential", "Verdict",
           "anytime_lower", "anytime_upper", "boundaries", "expected_runs",
           "fewest_runs", "fixed_n_for", "more_runs_if_all_meet", "log_evidence_above", "log_evidence_below",
           "EXIT_CODES", "FORMAT", "Certificate", "CertificateError", "Kind", "Outcome", "seed_ranges"]
