"""`depl certify`: a plan run on fresh seeds until the sequential test decides, for real (digits-small, a
3-epoch plan at ω = 0.5 that the test certifies in one or two batches)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from depl.certificate import Certificate, boundaries
from depl.store import Store

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not


def counted(out: dict) -> list[int]:
    """The seeds a certificate counted, read through the one Certificate type (its --json adds report, exit_code)."""
    c = Certificate.from_json({k: v for k, v in out.items() if k not in ("report", "exit_code")})
    return [s for a, b in c.seeds for s in range(a, b + 1)]


@pytest.fixture(scope="module")
def plan(depl_cli, tmp_path_factory):
    folder = tmp_path_factory.mktemp("certify")
    r = depl_cli("plan", "digits-small", "--quantile", "0.5", "--loss", "1.0", "--out", "plan.json", cwd=folder)
    assert r.returncode == 0, r.stderr
    return folder / "plan.json"


def test_certify_stops_at_the_first_decision_and_says_what_it_certified(depl_cli, plan):
    folder = plan.parent
    r = depl_cli("certify", plan, "--batch", "8", "--out", "c", "--json", cwd=folder)
    assert r.returncode == 0, r.stderr
    cert = json.loads(r.stdout)
    assert cert["verdict"] == "certified" and cert["exit_code"] == 0 and cert["alpha"] == 0.05
    assert cert["evidence"]["prior"] == "spiked" and "prior 'spiked'" in cert["evidence"]["rule"]  # the e-process that decided
    assert cert["evidence"]["statement"].startswith(f"with probability ≥ 0.95 over the {cert['runs']} runs it was built from")
    assert "a new run" in cert["evidence"]["covers"] and "its own" in cert["evidence"]["covers"] and cert["lower_bound"] >= 0.5
    # the outcomes are the store's: ℓ(K) of each counted seed, in seed order from the first fresh seed
    seeds = counted(cert)
    assert cert["seeds"] == [[310_000, 310_000 + cert["runs"] - 1]]  # above the plan's calibration seeds (depl.ledger)
    with Store(folder / "c" / "runs.sqlite") as st:
        (run,) = st.runs("certify")
        losses = st.losses(run["run_id"])
    finals = np.array([losses[s][cert["evidence"]["epochs"] - 1] for s in seeds])
    assert finals.tolist() == pytest.approx(cert["evidence"]["finals"])
    met = np.cumsum(finals <= cert["loss_target"])
    assert met[-1] == cert["hits"]
    # it stopped at the first run after which the test certifies (checked against its boundaries, computed apart)
    cert_at, _ = boundaries(0.5, 0.05, len(seeds))
    n = np.arange(1, len(seeds) + 1)
    assert met[-1] >= cert_at[len(seeds)] and not np.any(met[:-1] >= cert_at[n[:-1]])
    # the batch's seeds after the decision were trained and are named, not counted
    assert len(seeds) + len(cert["evidence"]["trained_not_counted"]) == 8 * -(-len(seeds) // 8)
    assert cert["evidence"]["seed_epochs"] == 8 * -(-len(seeds) // 8) * cert["evidence"]["epochs"]
    assert (folder / "c" / "plan-certificate.json").is_file()

    # a rerun resumes: nothing trained again, the same decision on the same seeds
    again = depl_cli("certify", plan, "--batch", "8", "--out", "c", "--json", cwd=folder)
    assert again.returncode == 0
    second = json.loads(again.stdout)
    assert (second["verdict"], second["seeds"], second["evidence"]["finals"]) == (cert["verdict"], cert["seeds"], cert["evidence"]["finals"])
    with Store(folder / "c" / "runs.sqlite") as st:
        assert st.losses(run["run_id"]) == losses
    text = depl_cli("certify", plan, "--batch", "8", "--out", "c", cwd=folder)  # resumed: nothing trained
    assert text.returncode == 0 and text.stdout.strip().splitlines()[-1].startswith("certified: ")
    assert text.stderr.strip().splitlines()[-1] == f"next: depl run {plan} --seeds N"  # what to run next


def test_the_uniform_prior_decides_as_depl_0_1_0_did(depl_cli, plan):
    """`--prior uniform` is the rule of the committed certificates: it stops where that rule's boundaries say."""
    folder = plan.parent
    r = depl_cli("certify", plan, "--batch", "8", "--prior", "uniform", "--out", "old", "--json", cwd=folder)
    assert r.returncode == 0, r.stderr
    cert = json.loads(r.stdout)
    assert cert["evidence"]["prior"] == "uniform" and "prior 'uniform': θ uniform on [ω, 1]" in cert["evidence"]["rule"]
    with Store(folder / "old" / "runs.sqlite") as st:
        (run,) = st.runs("certify")
        losses = st.losses(run["run_id"])
    met = np.cumsum(np.array([losses[s][cert["evidence"]["epochs"] - 1] for s in counted(cert)]) <= cert["loss_target"])
    cert_at, _ = boundaries(0.5, 0.05, len(met), "uniform")
    assert met[-1] >= cert_at[len(met)] and not np.any(met[:-1] >= cert_at[1:len(met)])


@pytest.mark.parametrize("omega", [0.9, 0.5])
def test_after_every_run_met_lmax_the_advice_is_how_many_more_such_runs_certify(omega):
    """4 of 4 runs met ℓmax: Laplace's rate (5/6 = 0.83 < ω = 0.9) gave "unlikely to be certified at all"; the
    advice is now the runs that certify if each meets ℓmax too — exactly as many as the test takes."""
    from depl.certificate import DEFAULT_PRIOR, Sequential, expected_runs, more_runs_if_all_meet
    from depl.cli.certify import going_on

    rate = 5 / 6
    need = expected_runs(rate, omega, 0.05, max_runs=1000, hits=4, runs=4)
    more = {"rate": rate, "mean_more_runs": need.mean_runs, "median_more_runs": need.median_runs,
            "p_certify": need.certify, "if_all_meet": more_runs_if_all_meet(4, 4, omega, 0.05)}
    said = going_on(4, 4, 4, more)
    assert "unlikely" not in said and said.startswith("every run so far met ℓmax (4 of 4)")
    k = more["if_all_meet"]
    assert f"certifies after {k} more runs" in said and f"--max-runs ({4 + k} or more)" in said
    test = Sequential(omega, 0.05, DEFAULT_PRIOR)
    verdicts = [test.add(True).verdict for _ in range(4 + k)]
    assert verdicts[-1] == "certified" and verdicts[-2] == "undecided"
    missed = going_on(1, 4, 4, {**more, "rate": 2 / 6, "p_certify": 0.0})   # most runs missed: that advice stays
    assert "unlikely to be certified" in missed


def test_an_undecided_certificate_exits_3_and_says_what_more_it_needs(depl_cli, plan):
    r = depl_cli("certify", plan, "--batch", "2", "--max-runs", "2", "--out", "u", cwd=plan.parent)
    assert r.returncode == 3, r.stderr
    assert "more runs" in r.stdout and "rerun with a larger --max-runs" in r.stdout
    assert r.stdout.strip().splitlines()[-1].startswith("undecided: after 2 runs")


@pytest.mark.parametrize("args, why", [(["--alpha", "0"], "--alpha"), (["--max-runs", "0"], "--max-runs"),
                                       (["--alpha", "nan"], "--alpha nan: must be in"),
                                       (["--prior", "jeffreys"], "--prior jeffreys: must be one of spiked")])
def test_certify_refuses_bad_options_in_one_line(depl_cli, plan, args, why):
    r = depl_cli("certify", plan, *args, "--out", "x", cwd=plan.parent)
    assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (plan.parent / "x").exists()  # refused before any work


def test_certify_tests_at_the_plans_alpha_where_alpha_is_not_given(depl_cli, tmp_path):
    """A plan made at α 0.1 ([target] alpha through --alpha) is certified at 0.1, not at the default."""
    r = depl_cli("plan", "digits-small", "--quantile", "0.5", "--loss", "1.0", "--alpha", "0.1", "--out", "p.json",
                 cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    c = depl_cli("certify", "p.json", "--batch", "2", "--max-runs", "2", "--out", "c", "--json", cwd=tmp_path)
    assert c.returncode in (0, 3, 4), c.stderr
    assert json.loads(c.stdout)["alpha"] == 0.1
