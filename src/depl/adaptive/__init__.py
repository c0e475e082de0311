"""The closed loop: after every epoch, keep the plan, stop, or re-plan the rest — without weakening the guarantee.

A plan promises P(ℓ(K) ≤ ℓmax) ≥ ω before training.  During a run the loss
is observed after every epoch (on a validation split, depl.train.loops.adaptive),
and the loss law conditions on it (`LossModel.distribution(..., start=state)`):
p(π | state) = P(ℓ_final ≤ ℓmax | the run's state, the rest π is trained).

**The rule** (docs/adaptive.md has the argument): an action may replace the
rest π of the plan by π' (stop = the empty rest, keeping the current model)
only if

    p(π' | state) ≥ p(π | state)            (certified: π's upper bound, π''s lower bound)

and it is taken only when π' is cheaper.  With V_k the conditional success
probability of the plan in force after epoch k, V is a martingale between
decisions (the law is right) and jumps up at them, so P(success) = E[V_K] ≥
V_0 = p(plan) ≥ ω: the open-loop guarantee holds marginally.  The tempting rule
"any continuation whose conditional probability is ≥ ω" does not keep it (it
spends on the lucky runs the slack that paid for the unlucky ones); the Monte
Carlo of `monte_carlo` shows both (tests/test_adaptive.py).

**Spending the plan's slack on stops.**  A plan whose success probability is
certified at least L > ω with confidence 1 − α has δ = L − ω to spare (`Slack`, slack.py):
L = ω′ where the planner certified the plan at a stricter ω′ = ω + D through the
calibration runs' fixed sequence (`depl plan --slack D`), or L = the anytime lower
bound of fresh runs of the plan (a `depl certify` certificate) — never a bound read
after the planner's choice from the runs that made it, which the fixed sequence
does not protect; δ = 0 otherwise.  A run may also stop when the current model's test
loss exceeds ℓmax with probability at most δ (1 − P(stop) ≤ δ): a run stops
once, so the stops lose at most δ of the open loop's success probability,
P(success) ≥ L − δ = ω — an argument that needs the open-loop certificate
and the validation–test gap (measured on runs that log both losses,
depl.gap; else modelled from sample counts), not the law's conditional
statements (docs/adaptive.md).  Without it a tight plan saves nothing: its
runs cross ℓmax only in their last epochs, where P(stop) is about ½.

**Deadlines.** Epoch times are measured in the scenario's units (a cluster
running `f` times slower than the scenario says takes f·T(k)); when the rest
no longer fits in Tmax minus the time spent, the rest is re-planned on the
clusters as measured — at p(π) if reachable (sound), else at ω (the guarantee
from here on is then conditional), else the run goes on with a recorded notice
that the deadline cannot be met.

The package: `Policy` (policy.py) decides after every epoch by its rule (rules.py: `StoppingRule`, one class per
rule, `RULES` by name), spending the slack certified for its plan (slack.py: `SlackSource`, one class per kind of
evidence, `SOURCES` by name); `Decision` (decision.py) is what it decided; montecarlo.py checks it on the law.
Kept below the training code (no torch): the policy is pure computation, and `monte_carlo` checks it on the law
itself.
"""

from .decision import ACTIONS, Decision
from .montecarlo import MonteCarlo, monte_carlo, simulated_gap
from .policy import CAP, RUN_DATA, Policy
from .rules import DEFAULT_RULE, RULES, ConditionalRule, NaiveRule, SlackRule, StoppingRule, rule_named
from .slack import SOURCES, Slack, SlackSource, check_certificate, promise

__all__ = ["ACTIONS", "CAP", "DEFAULT_RULE", "RULES", "RUN_DATA", "SOURCES", "ConditionalRule",
           "Decision", "MonteCarlo", "NaiveRule", "Policy", "Slack", "SlackRule", "SlackSource", "StoppingRule",
           "check_certificate", "monte_carlo", "promise", "rule_named", "simulated_gap"]
