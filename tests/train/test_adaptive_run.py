"""Adaptive runs for real (tiny): validation split, decisions in the store, stop, resume, `runs show`."""

import json
import subprocess

import numpy as np
import pytest

from depl.plan import Epoch, Plan, with_figures
from depl.planners import make_plan
from depl.scenario import load_scenario, parse_scenario
from depl.store import Store
from depl.train.loops import adaptive as ad
from depl.train.task import data as data_mod
from depl.train.engine.federation import node_data
from trainkit import scenario_dict

pytestmark = pytest.mark.slow  # trains for real: make test runs it, make test-fast does not
# The planner of the closed loop's re-plans (a Policy option) in the tests of what a run records, of stacks and of
# resumes: best-exp re-plans these plans' rests as DepL does (the same decisions) in a sixth of the time; the
# planners are tested on their own.
REPLANNER = "best-exp"


def plan_file(tmp_path, target: float, epochs: int = 4, omega: float = 0.9):
    d = scenario_dict(lr=0.2)
    d["target"] = {**d["target"], "loss": target, "quantile": omega}
    s = parse_scenario(d)
    p = with_figures(Plan("hand", "tiny", True, ["d1", "d2"], [Epoch(k + 1, "full", "A", 100.0) for k in range(epochs)],
                          0.0, 0.0, 0.0, 0.0, 0.0), s)
    f = tmp_path / "plan.json"
    p.save(f)
    return Plan.load(f)


def test_a_carved_validation_split_is_held_out_deterministically_and_apart_from_training():
    spec = data_mod.DataSpec("mnist1d", ((0.0, 0.5),), validation=0.1)   # a run made before fresh splits
    assert spec.split == "carved" and "split" not in spec.to_json()
    xv, yv = data_mod.validation(spec)
    xt, yt = data_mod.select(spec)
    assert len(yv) == 200 and len(yt) == 1800
    train_rows = {r.tobytes() for r in xt}
    assert not any(r.tobytes() in train_rows for r in xv)       # never trained on
    assert np.array_equal(data_mod.validation(spec)[1], yv)     # the same split every time
    assert data_mod.DataSpec("mnist1d", ((0.0, 0.5),)).to_json().get("validation") is None  # old runs keep their identity


def test_a_fresh_mnist1d_validation_split_costs_no_training_sample_and_is_apart_from_train_and_test():
    spec = data_mod.DataSpec("mnist1d", ((0.0, 0.5),), validation=0.1, split="fresh")
    assert data_mod.DataSpec.from_json(spec.to_json()) == spec and spec.to_json()["split"] == "fresh"
    xt, yt = data_mod.select(spec)
    xv, yv = data_mod.validation(spec)
    assert len(yt) == 2000 and len(yv) == 200                   # every selected sample trained on
    src = data_mod.mnist1d()
    seen = {r.tobytes() for r in np.concatenate([src.x_train, src.x_test])}
    assert not any(r.tobytes() in seen for r in xv)              # neither a training nor a test sample
    assert np.bincount(yv).tolist() == [20] * 10                 # class-balanced, as the generator's own
    assert abs(float(xv.mean()) - float(src.x_train.mean())) < 0.1 and abs(float(xv.std()) - 1.0) < 0.1  # its scale
    assert np.array_equal(data_mod.validation(spec)[0], xv)      # the same samples every time
    # the generator at the source's own seed, normalised as fresh samples are, gives the source's samples back:
    raw, y = data_mod._mnist1d_raw(5000, 42)
    mean, sd = data_mod._mnist1d_scale()
    assert np.array_equal(((raw[:4000] - mean) / sd).astype(np.float32), src.x_train[:, 0])
    with pytest.raises(data_mod.DataError, match="cannot"):
        data_mod.validation(data_mod.DataSpec("digits", ((0.0, 1.0),), validation=0.1, split="fresh"))


def test_an_adaptive_run_of_mnist1d_small_trains_on_all_of_its_plans_samples_at_the_plans_phi():
    s = load_scenario("mnist1d-small")
    plan = make_plan(s, "depl")
    job = ad.adaptive_job(plan)
    assert job.data.split == "fresh"
    assert ad.training_samples(job) == s.samples(plan.datasets) == 4000
    policy = ad.policy_for(plan, job)
    assert policy.phi == s.phi(s.samples(plan.datasets))
    d0 = policy.initial()
    assert d0.action == "continue" and list(d0.rest) == list(plan.epochs)   # no epoch-0 re-plan
    assert "all 4000 selected samples trained on" in ad.split_note(job)


def test_a_digits_adaptive_run_still_carves_its_validation_split_out_and_says_so(depl_cli, tmp_path):
    d = scenario_dict(source="digits", net="cnn2d", lr=0.2, share_to=1.0)
    d["datasets"][0]["samples"], d["datasets"][1]["samples"] = 718, 719   # scikit-learn's 1,437 training images
    d["target"] = {**d["target"], "loss": 2.0, "quantile": 0.9}
    s = parse_scenario(d)
    plan = with_figures(Plan("hand", "tiny", True, ["d1", "d2"], [Epoch(1, "full", "A", 100.0)], 0.0, 0.0, 0.0, 0.0,
                             0.0), s)
    job = ad.adaptive_job(plan)
    n = len(data_mod.digits().y_train)
    assert job.data.split == "carved" and job.data.to_json().get("split") is None
    assert ad.training_samples(job) == n - round(0.1 * n) and len(data_mod.validation(job.data)[1]) == round(0.1 * n)
    assert "carved out" in ad.split_note(job)
    plan.save(tmp_path / "plan.json")
    r, big = depl_cli.each([["run", tmp_path / "plan.json", "--adaptive", "--seeds", "2", "--out", tmp_path / "o"],
                            ["run", tmp_path / "plan.json", "--adaptive", "--validation", "0.6", "--out", tmp_path / "o2"]])
    assert r.returncode == 0, r.stderr
    assert "adaptive: 2 seeds" in r.stdout                  # trained together: one stack of 2 (--seed-batch 32)
    assert f"carved out of the {n} selected" in r.stdout and f"trains on {ad.training_samples(job)}" in r.stdout
    assert big.returncode == 2 and "at most 0.5" in big.stderr and "Traceback" not in big.stderr  # only fresh splits grow


def test_an_adaptive_seed_decides_after_every_epoch_on_the_validation_split_and_records_it(depl_cli, tmp_path,
                                                                                          monkeypatch):
    plan = plan_file(tmp_path, target=2.0)
    job = ad.adaptive_job(plan)
    selected = []  # what the run's nodes take their training samples from
    real_select = data_mod.select
    monkeypatch.setattr(data_mod, "select", lambda spec: selected.append(len(real_select(spec)[1])) or real_select(spec))
    node_data.cache_clear()
    with Store(tmp_path / "runs.sqlite") as st:
        rid = ad.adaptive_run_id(job, {})
        st.start_run(rid, "plan", {"adaptive": True})
        taken = ad.run_seed(st, rid, job, plan, 7, method=REPLANNER)
        assert selected and set(selected) == {2000}   # all of the plan's samples (d1 + d2), none held out
        traj = st.trajectory(rid, 7)
        ds = st.decisions(rid, 7)
        assert [d["epoch"] for d in ds] == list(range(len(traj) + 1)) and ds[-1]["rest"] == []
        assert ds[-1]["action"] in ("stop", "end") and [d.action for d in taken] == [d["action"] for d in ds]
        # decided on the validation split, not the test set
        assert all(d["observed"] != r.test_loss for d, r in zip(ds[1:], traj))
        for d in taken[:-1]:  # the rule: no decision lowers the conditional probability of meeting ℓmax
            assert d.p_new >= d.p_plan
        assert ds[-1]["cost_spent"] > 0 and ds[-1]["time_spent"] > 0
        assert ad.finished(st, rid, 7) and ad.run_seed(st, rid, job, plan, 7, method=REPLANNER) == []  # nothing left
    r = depl_cli("runs", "show", "--store", str(tmp_path / "runs.sqlite"), "--json")
    assert r.returncode == 0, r.stderr
    (run,) = json.loads(r.stdout)["runs"]
    assert [d["action"] for d in run["decisions"]] == [d["action"] for d in ds]


def test_run_adaptive_refuses_bad_input_with_one_line(depl_cli, tmp_path):
    f = tmp_path / "plan.json"
    plan_file(tmp_path, target=2.25)
    cases = ((["--slow", "nope:2"], "no such cluster"), (["--slow", "A:0"], "CLUSTER:FACTOR"),
             (["--backend", "flower"], "local back end"))
    done = depl_cli.each([["run", f, "--adaptive", *bad, "--out", tmp_path / "o"] for bad, _ in cases])
    for (bad, why), r in zip(cases, done):
        assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr, (bad, r.stderr)


def test_the_adaptive_options_without_adaptive_are_refused_not_ignored(depl_cli, tmp_path):
    """--rule and --validation (a split only a closed loop holds out) on an open-loop run or validation: exit 2, one
    line naming the option, nothing trained."""
    f = tmp_path / "plan.json"
    plan_file(tmp_path, target=2.25)
    cases = [(cmd, bad, says) for cmd in (["run", f], ["validate", "mnist1d-small", f])
             for bad, says in ((["--rule", "slack"], "--rule applies to --adaptive"),
                               (["--validation", "0.2"], "--validation 0.2: applies to --adaptive"))]
    done = depl_cli.each([[*cmd, *bad, "--seeds", "2", "--out", tmp_path / "o"] for cmd, bad, _ in cases])
    for (cmd, bad, says), r in zip(cases, done):
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, (cmd, bad, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o" / "runs.sqlite").exists()


def test_a_validation_split_too_small_to_measure_the_gap_is_refused_and_one_sample_never_makes_a_stop_sure():
    """A one-sample split has no spread: its gap sd was 0, so any validation loss ≤ ℓmax made a "sure" slack stop
    (1 − P(stop) = 0 ≤ δ, even δ = 0). The job refuses it; validation_loss gives such a split an infinite sd."""
    import torch

    from trainkit import make_plan

    plan = make_plan([("full", "A")] * 3, share_to=0.02)      # 80 selected samples: a 0.01 split is 1 sample
    with pytest.raises(data_mod.DataError, match="at least 2"):
        ad.adaptive_job(plan, validation=0.01)
    assert len(data_mod.validation(ad.adaptive_job(plan, validation=0.05).data)[1]) == 4
    one = (torch.zeros(1, 1, 40), torch.zeros(1, dtype=torch.long))
    loss, sd = ad.validation_loss(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(40, 10)), one, 1000)
    assert np.isfinite(loss) and sd == np.inf


def test_a_carved_split_share_out_of_range_names_the_carved_range():
    """nan passes the CLI's range check; for a carved split it was told "must lie strictly between 0 and 1" (0.7 is
    refused too: the range is (0, 0.5])."""
    for bad in (float("nan"), 0.7, -0.1):
        with pytest.raises(data_mod.DataError, match=r"carved split holds out more than 0 and at most 0\.5"):
            data_mod.validation(data_mod.DataSpec("digits", ((0.0, 1.0),), validation=bad))


def test_seeds_train_in_one_stack_while_their_rests_agree_and_a_changed_rest_leaves_it(tmp_path):
    """Seeds 1-3 of a loose plan: seed 1 stops after epoch 3, seed 2 is re-planned there (it leaves the stack
    and goes on in the per-seed loop), seed 3 trains the plan to its end in the stack. A kill after the
    stack's last epoch resumes seed 2 from its checkpoint. Decisions as the per-seed loop's, losses to float
    rounding. (slack=0: the conditional rule alone decides, so that some seed is re-planned; re-planned by
    REPLANNER: the test is of the stack, not of the planner.)"""
    plan = plan_file(tmp_path, target=2.0)
    job = ad.adaptive_job(plan, validation=0.1)
    rid = ad.adaptive_run_id(job, {})
    seeds = [1, 2, 3]
    with Store(tmp_path / "seed.sqlite") as ref:
        ref.start_run(rid, "plan", {"adaptive": True})
        for s in seeds:
            ad.run_seed(ref, rid, job, plan, s, slack=0, method=REPLANNER)
        want = {s: ([d["action"] for d in ref.decisions(rid, s)], [r.test_loss for r in ref.trajectory(rid, s)])
                for s in seeds}
    assert want[1][0][-1] == "stop" and "replan" in want[2][0] and want[3][0][-1] == "end"   # every way out

    class Killed(Exception):
        pass

    def kill(seed, epoch, r, d):
        if seed == 3 and epoch == 4:
            raise Killed

    with Store(tmp_path / "batch.sqlite") as st:
        st.start_run(rid, "plan", {"adaptive": True})
        with pytest.raises(Killed):
            ad.run_batch(st, rid, job, plan, seeds, progress=kill, slack=0, method=REPLANNER)
        assert ad.pending(st, rid, seeds) == [2]             # the stack's seeds are done; seed 2 left it
        ad.run_batch(st, rid, job, plan, seeds, slack=0, method=REPLANNER)      # the resume
        assert ad.pending(st, rid, seeds) == []
        for s in seeds:
            ds, traj = st.decisions(rid, s), st.trajectory(rid, s)
            assert [d["action"] for d in ds] == want[s][0]
            assert np.allclose([r.test_loss for r in traj], want[s][1], rtol=0, atol=1e-4)
            # every seed trained what its decisions said: epoch k's (model, cluster) from the rest decided before
            for row in traj:
                decided = [d for d in ds if d["epoch"] < row.epoch][-1]
                assert [row.epoch, row.model, row.cluster] in [list(e[:3]) for e in decided["rest"]]


def _everything(st: Store, rid: str, seeds) -> dict:
    """Every seed's decisions and epoch rows as recorded, but the wall seconds (not a result)."""
    return {s: ([{k: v for k, v in d.items()} for d in st.decisions(rid, s)],
                [(r.epoch, r.model, r.cluster, r.test_loss, r.test_accuracy, r.train_loss) for r in st.trajectory(rid, s)])
            for s in seeds}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Seeds 1-3 of a loose plan by the conditional rule (slack=0), uninterrupted: seeds 1 and 3 in one stack to
    their end, seed 2 re-planned after epoch 3 (it leaves the stack for the per-seed loop) by REPLANNER."""
    tmp = tmp_path_factory.mktemp("uninterrupted")
    plan = plan_file(tmp, target=2.0)
    job = ad.adaptive_job(plan, validation=0.1)
    rid = ad.adaptive_run_id(job, {})
    with Store(tmp / "ref.sqlite") as ref:
        ref.start_run(rid, "plan", {"adaptive": True})
        ad.run_batch(ref, rid, job, plan, [1, 2, 3], slack=0, method=REPLANNER)
        want = _everything(ref, rid, [1, 2, 3])
    assert "replan" in [d["action"] for d in want[2][0]] and want[1][0][1]["stack"] == [1, 2, 3]
    return plan, job, rid, want


@pytest.mark.parametrize("kill_at", [(2, 3), (2, 4)], ids=["at-the-replan", "per-seed-loop"])
def test_an_interrupted_adaptive_run_resumes_bit_for_bit(tmp_path, uninterrupted, kill_at):
    """Interrupted after an epoch — at the decision that sends seed 2 out of the stack (seeds 1 and 3 go on in it),
    or in seed 2's per-seed loop — and resumed: every decision and every loss as the uninterrupted run's, bit for
    bit. The stack is re-formed from its recorded composition (`stack`) and its seeds' checkpoints; resumed in
    the per-seed loop instead, its seeds' later losses moved by float rounding (the batched kernels round
    otherwise, and differently for stacks of other sizes)."""
    plan, job, rid, want = uninterrupted

    class Killed(Exception):
        pass

    def kill(seed, epoch, r, d):
        if (seed, epoch) == kill_at:
            raise Killed

    with Store(tmp_path / "runs.sqlite") as st:
        st.start_run(rid, "plan", {"adaptive": True})
        with pytest.raises(Killed):
            ad.run_batch(st, rid, job, plan, [1, 2, 3], progress=kill, slack=0, method=REPLANNER)
        assert ad.pending(st, rid, [1, 2, 3])
        ad.run_batch(st, rid, job, plan, [1, 2, 3], slack=0, method=REPLANNER)      # the resume
        assert _everything(st, rid, [1, 2, 3]) == want


def test_an_adaptive_run_killed_mid_stack_resumes_bit_for_bit_from_the_command_line(depl_cli, tmp_path):
    """`depl run --adaptive --rule conditional` killed (SIGKILL) once its stack has trained an epoch, then run again:
    the store holds what an uninterrupted run's holds, every loss and decision bit for bit (seeds 0-1 one stack,
    seed 2 alone in the per-seed loop: --seed-batch 2; a seed of the re-formed stack stops and leaves it).  The
    uninterrupted run and the resumed one run in one interpreter (one start-up), after the kill."""
    import signal
    import sqlite3
    import time

    plan_file(tmp_path, target=2.0, epochs=4)
    args = ["run", str(tmp_path / "plan.json"), "--adaptive", "--rule", "conditional", "--seeds", "3", "--seed-batch", "2"]
    proc = depl_cli.start(*args, "--out", tmp_path / "cut", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = tmp_path / "cut" / "runs.sqlite"
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.1) as c:
                    if c.execute("SELECT COUNT(*) FROM epochs").fetchone()[0] >= 2:   # the stack's first epoch
                        break
            except sqlite3.Error:
                pass
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL                  # killed, not finished
    with Store(db, readonly=True) as st:
        (rid,) = [r["run_id"] for r in st.runs()]
        assert ad.pending(st, rid, [0, 1, 2])                    # something was left to do
        killed_at = max(r.epoch for r in st.trajectory(rid, 0))
    ref, again = depl_cli.each([[*args, "--out", tmp_path / "ref"], [*args, "--out", tmp_path / "cut"]])
    assert ref.returncode == 0 and again.returncode == 0, (ref.stderr, again.stderr)
    with Store(tmp_path / "ref" / "runs.sqlite", readonly=True) as a, Store(db, readonly=True) as b:
        assert [r["run_id"] for r in a.runs()] == [rid]
        want = _everything(a, rid, [0, 1, 2])
        assert _everything(b, rid, [0, 1, 2]) == want
    # after the kill, the stack re-formed went on with both seeds, and one of them stopped there and left it
    assert any(d["action"] == "stop" and d["epoch"] > killed_at for s in (0, 1) for d in want[s][0])


@pytest.fixture(scope="module")
def certified_loose(depl_cli, tmp_path_factory):
    """A loose plan (ℓmax 2.0, ω 0.5, 6 epochs) and its `depl certify` certificate: 7 fresh runs, all meeting ℓmax."""
    folder = tmp_path_factory.mktemp("certified")
    plan = plan_file(folder, target=2.0, epochs=6, omega=0.5)
    r = depl_cli("certify", str(folder / "plan.json"), "--batch", "8", "--out", str(folder / "cert"))
    assert r.returncode == 0, r.stderr
    cert = folder / "cert" / "plan-certificate.json"
    assert json.loads(cert.read_text())["verdict"] == "certified"
    return plan, folder / "plan.json", cert


def test_slack_rule_runs_stop_by_the_plans_slack_and_end_where_the_open_loop_was_at_that_epoch(depl_cli, tmp_path,
                                                                                           certified_loose):
    """`depl run --adaptive --certificate FILE` (its default rule, slack) on a loose plan: δ = the certificate's
    anytime lower bound − ω; every stop spends it (its note says so; no decision rests on the law's conditional
    statements), and a stopped seed's final test loss is its open-loop run's test loss at the stop's epoch (a fresh
    MNIST-1D split: the same epochs trained).  Without the certificate there is no certified slack, and no stop."""
    from depl.certificate import anytime_lower

    plan, path, cert = certified_loose
    c = json.loads(cert.read_text())
    slack = anytime_lower(c["hits"], c["runs"], c["alpha"]) - plan.omega
    assert slack > 0
    cases = ((["--rule", "slack"], "--adaptive"), (["--adaptive", "--rule", "greedy"], "choose slack or"),
             (["--certificate", str(cert)], "--certificate applies to --adaptive"))
    a, none, o, r, *done = depl_cli.each(   # one start-up for them all
        [["run", path, "--adaptive", "--seeds", "3", "--certificate", cert, "--out", tmp_path / "a"],
         ["run", path, "--adaptive", "--seeds", "1", "--out", tmp_path / "n"],
         ["run", path, "--seeds", "3", "--out", tmp_path / "o"],
         ["runs", "show", "--out", tmp_path / "a", "--json"]] +
        [["run", path, *bad, "--out", tmp_path / "b"] for bad, _ in cases])
    assert a.returncode == 0, a.stderr
    assert "rule slack" in a.stdout and f"a stop may spend δ = {slack:.4f}" in a.stdout   # what it may spend
    assert "fresh runs of this plan" in a.stdout and f"with confidence {1 - c['alpha']:g} over the certificate's" in a.stdout
    assert none.returncode == 0, none.stderr
    assert "no certified slack" in none.stdout and "stop 1" not in none.stdout
    assert "3/3 seeds" in a.stderr and "/3 epochs" not in a.stderr    # the bar counts seeds, and says so
    assert o.returncode == 0, o.stderr
    with Store(tmp_path / "a" / "runs.sqlite", readonly=True) as st, Store(tmp_path / "o" / "runs.sqlite",
                                                                           readonly=True) as op:
        (rid,) = [r["run_id"] for r in st.runs()]
        (oid,) = [r["run_id"] for r in op.runs()]
        stops = 0
        for seed in range(3):
            ds = st.decisions(rid, seed)
            assert ds[0]["action"] == "continue" and ds[0]["slack"]["delta"] == pytest.approx(slack)
            assert all(d["action"] in ("continue", "stop", "end") for d in ds)
            last, traj = ds[-1], st.trajectory(rid, seed)
            if last["action"] == "stop":
                stops += 1
                assert "the plan's slack" in last["note"]
                assert 1 - _normal_cdf((plan.loss_target - last["observed"]) / last["gap_sd"]) <= slack + 1e-12
                assert last["epoch"] < 6 and len(traj) == last["epoch"]
            ref = op.trajectory(oid, seed)
            assert abs(traj[-1].test_loss - ref[len(traj) - 1].test_loss) < 2e-3
        assert stops > 0
        finals = [st.trajectory(rid, seed)[-1].test_loss for seed in range(3)]
        lengths = [len(st.trajectory(rid, seed)) for seed in range(3)]
    # `runs show`: an adaptive run's final losses are each seed's last, not the band's at the shortest seed's end
    (shown,) = json.loads(r.stdout)["runs"]
    assert shown["final_loss_mean"] == pytest.approx(np.mean(finals), abs=1e-6)
    assert (shown["epochs_min"], shown["epochs"]) == (min(lengths), max(lengths)) and min(lengths) < 6
    # its band: at every epoch over the seeds that trained it, to the last seed's end
    assert shown["band"]["epoch"][-1] == max(lengths)
    assert shown["band"]["mean"][-1] == pytest.approx(np.mean([f for f, n in zip(finals, lengths) if n == max(lengths)]))
    for (bad, says), r in zip(cases, done):
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, (bad, r.stderr)


def test_a_certificate_of_another_plan_is_refused_before_any_training(depl_cli, tmp_path, certified_loose):
    """`--certificate FILE` of another plan (another ω, more epochs, another run's runs, not a certificate): exit 2,
    the file and the field named, nothing trained."""
    plan, path, cert = certified_loose
    c = json.loads(cert.read_text())
    other = plan_file(tmp_path, target=2.0, epochs=7, omega=0.5)
    cases = (({"omega": 0.6}, "omega = 0.6"),
             ({"evidence": {**c["evidence"], "run_id": "certify-000000000000"}}, "run_id"),
             ({"format": "depl.plan/1"}, "format"))
    bads = [tmp_path / f"bad-{i}.json" for i in range(len(cases))]
    for bad, (changed, _) in zip(bads, cases):
        bad.write_text(json.dumps({**c, **changed}))
    *done, r = depl_cli.each(   # one start-up for them all
        [["run", path, "--adaptive", "--seeds", "1", "--certificate", bad, "--out", tmp_path / "x"] for bad in bads] +
        [["run", tmp_path / "plan.json", "--adaptive", "--seeds", "1", "--certificate", cert, "--out", tmp_path / "y"]])
    for bad, (_, says), b in zip(bads, cases, done):
        assert b.returncode == 2 and says in b.stderr and str(bad) in b.stderr and "Traceback" not in b.stderr
    assert r.returncode == 2 and "epochs = 6, the plan's is 7" in r.stderr and "Traceback" not in r.stderr
    assert len(other.epochs) == 7 and not (tmp_path / "x" / "runs.sqlite").exists()


def test_stops_by_the_gap_measured_on_earlier_runs_of_the_same_data_and_the_rule_in_the_runs_spec(depl_cli, tmp_path,
                                                                                             certified_loose):
    """`--gap-from STORE`: a run's stops read P(test loss > ℓmax) from the validation–test gap measured on an earlier
    adaptive run of the same data (24 seeds, δ = 0: every epoch logged), not from the sample-count Gaussian; the run's spec records the rule —
    δ and its source, the gap model and where it was measured — and so does every seed's epoch-0 decision.  The
    first run, without it, records the sampling model.  A store of no such run is refused before any training."""
    from depl.gap import measure
    from depl.runspec import RunSpec

    plan, path, cert = certified_loose
    # δ = 0 (no certificate): no stop, every epoch measured; 24 seeds: a stop at the certificate's δ ≈ 0.04 needs
    # (1 − δ)/δ of them
    first, b, c, o = depl_cli.each([   # one start-up for them all, one after another
        ["run", path, "--adaptive", "--seeds", "24", "--out", tmp_path / "a"],
        ["run", path, "--adaptive", "--seeds", "3", "--first-seed", "24", "--gap-from", tmp_path / "a", "--certificate",
         cert, "--out", tmp_path / "b"],
        ["run", path, "--adaptive", "--seeds", "1", "--gap-from", tmp_path / "b" / "x", "--out", tmp_path / "c"],
        ["run", path, "--seeds", "1", "--gap-from", tmp_path / "a", "--out", tmp_path / "c"]])
    assert first.returncode == 0, first.stderr
    assert "validation–test gap: modelled from sample counts" in first.stdout
    assert b.returncode == 0, b.stderr
    assert "validation–test gap: measured — 1 run(s) of" in b.stdout and "24 seeds reached" in b.stdout
    assert "marginally over the 24 gap runs" in b.stdout
    with Store(tmp_path / "a" / "runs.sqlite", readonly=True) as st:
        (run_a,) = st.runs()
    with Store(tmp_path / "b" / "runs.sqlite", readonly=True) as st:
        (run,) = st.runs()
        rid = run["run_id"]
        spec = RunSpec.from_json(run["spec"]).adaptive
        gap = measure([tmp_path / "a"], plan.loss_target, run["spec"]["job"]["data"])
        assert RunSpec.from_json(run_a["spec"]).adaptive["gap"]["model"] == "sampling"
        assert run_a["run_id"] != rid   # another gap, another run
        assert spec["rule"] == "slack" and spec["decisions"]["conditional"] is False
        slack = spec["slack"]
        assert slack["source"] == "certificate" and slack["delta"] == pytest.approx(slack["lower"] - plan.omega)
        assert slack["delta"] > 0 and slack["why"] == str(cert) and "marginally over the 24 gap runs" in spec["statement"]
        assert spec["gap"]["model"] == "measured" and spec["gap"]["seeds"] == gap.seeds == 24
        assert spec["gap"]["digest"] == gap.digest and spec["gap"]["threshold"] == gap.threshold(slack["delta"])
        stops = 0
        for seed in (24, 25, 26):
            ds = st.decisions(rid, seed)
            assert ds[0]["slack"] == slack and ds[0]["gap"] == spec["gap"]      # the epoch-0 record, per seed
            for d in ds[1:]:
                if d["action"] == "stop":
                    stops += 1
                    assert gap.exceed(d["observed"]) <= slack["delta"] and "gap measured on 24 seeds" in d["note"]
                    assert d["observed"] < plan.loss_target - spec["gap"]["threshold"]
                else:  # went on: no stop the measured gap allowed
                    assert gap.exceed(d["observed"]) > slack["delta"] or d["action"] == "end"
        assert stops > 0
    assert c.returncode == 2 and "--gap-from" in c.stderr and "Traceback" not in c.stderr
    assert o.returncode == 2 and "--gap-from applies to --adaptive" in o.stderr


def _normal_cdf(z: float) -> float:
    from scipy import stats

    return float(stats.norm.cdf(z))


def test_runs_show_json_says_how_many_seeds_are_behind_each_epoch_of_an_adaptive_runs_band(depl_cli, tmp_path):
    """A committed adaptive store (mnist1d-small, ω 0.9, 200 seeds that stop at epochs 9-12): the band past the first
    stop is over the seeds still training, and --json says how many (an open-loop band: every seed, every epoch)."""
    import shutil
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "docs" / "adaptive-store" / "mnist1d-small-w0.9-calibrated" / "runs.sqlite"
    shutil.copy(src, tmp_path / "runs.sqlite")
    r = depl_cli("runs", "show", "--store", str(tmp_path / "runs.sqlite"), "--json")
    assert r.returncode == 0, r.stderr
    (run,) = json.loads(r.stdout)["runs"]
    with Store(tmp_path / "runs.sqlite", readonly=True) as st:
        lengths = [len(v) for v in st.losses(run["run"]).values()]
    assert run["band"]["seeds"] == [sum(n >= k for n in lengths) for k in run["band"]["epoch"]]
    assert run["band"]["seeds"][0] == run["seeds"] == 200 and run["band"]["seeds"][-1] < 200



def switch_plan_file(tmp_path, schedule, target: float = 2.0):
    """A plan of `schedule` [(version, cluster)] on the tiny scenario (full → half → quarter prunes)."""
    d = scenario_dict(lr=0.2)
    d["target"] = {**d["target"], "loss": target, "quantile": 0.9}
    s = parse_scenario(d)
    epochs = [Epoch(k + 1, m, c, 100.0 if c == "A" else 50.0) for k, (m, c) in enumerate(schedule)]
    p = with_figures(Plan("hand", "tiny", True, ["d1", "d2"], epochs, 0.0, 0.0, 0.0, 0.0, 0.0), s)
    f = tmp_path / "plan.json"
    p.save(f)
    return f


@pytest.mark.parametrize("schedule,rule", [([("full", "A"), ("half", "B")], "slack"),
                                           ([("full", "A"), ("full", "A"), ("half", "B"), ("quarter", "B")],
                                            "conditional")])
def test_an_adaptive_run_keeps_each_seeds_model_of_the_epoch_it_ended_at(depl_cli, tmp_path, schedule, rule):
    import depl
    from depl.train.engine.federation import evaluate, test_data
    from depl.train.task.prune import make_net

    f = switch_plan_file(tmp_path, schedule)
    out = tmp_path / "o"
    r, none = depl_cli.each([["run", f, "--adaptive", "--seeds", "2", "--rule", rule, "--out", out],
                             ["run", f, "--adaptive", "--seeds", "2", "--rule", rule, "--keep-models", "none",
                              "--out", tmp_path / "n"]])
    assert r.returncode == 0, r.stderr
    assert "models (all, each of the epoch its seed ended at)" in r.stdout and "2 written now" in r.stdout
    plan = Plan.load(f)
    job = ad.adaptive_job(plan)
    with Store(out / "runs.sqlite") as st:
        (run,) = st.runs("plan")
        rid = run["run_id"]
        (folder,) = (out / "models").iterdir()
        assert folder.name == rid
        for seed in (0, 1):
            traj, ds = st.trajectory(rid, seed), st.decisions(rid, seed)
            side = json.loads((folder / f"seed-{seed}.json").read_text())
            # the epoch it ended at: its last recorded epoch, where its last decision left no rest
            assert side["epochs"] == traj[-1].epoch == ds[-1]["epoch"] and ds[-1]["rest"] == []
            assert side["stop"]["epoch"] == side["epochs"] and side["stop"]["action"] == ds[-1]["action"]
            assert side["stop"]["action"] in ("stop", "end")
            assert side["version"] == traj[-1].model                   # the version it trained last (pruned there)
            assert side["final_test_loss"] == pytest.approx(traj[-1].test_loss, abs=1e-12)
            model = depl.load_model(out, seed=seed)
            assert side["parameters"] == sum(p.numel() for p in model.parameters())
            x, y = test_data(job.seeded(seed).data)                   # the run's own test data
            loss, acc = evaluate(model, x, y)
            assert loss == pytest.approx(side["final_test_loss"], abs=1e-6)
            assert acc == pytest.approx(side["final_test_accuracy"], abs=1e-9)
    if rule == "slack":   # the run's last version is pruned: the model kept is the pruned network, not the full one
        full = job.versions["full"]
        assert side["version"] in ("half", "quarter") and side["spec"]["ratio"] > 0
        assert side["parameters"] < 0.6 * sum(p.numel() for p in make_net(full).parameters())
    else:                 # the closed loop ended the seeds before the plan's 4 epochs
        assert side["epochs"] < len(plan.epochs)
    assert none.returncode == 0, none.stderr
    assert not (tmp_path / "n" / "models").exists() and "models (" not in none.stdout
