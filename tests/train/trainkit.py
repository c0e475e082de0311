"""Small scenarios and hand-written plans for the real-training tests."""

from __future__ import annotations

import pytest

from depl.certificate import Certificate
from depl.plan import Epoch, Plan, with_figures
from depl.scenario import parse_scenario
from depl.train.task import data


def fashion_here() -> bool:
    """Fashion-MNIST is where depl reads it (the system's folder or $DEPL_DATA)."""
    try:
        data.source_folder(data.FASHION, None)
    except data.DataError:
        return False
    return True


needs_fashion = pytest.mark.skipif(not fashion_here(), reason=f"Fashion-MNIST is not in "
                                   f"{data.SYSTEM_FOLDERS[data.FASHION]} nor in $DEPL_DATA (`apt-get install "
                                   "dataset-fashion-mnist`, or `make test` as root on Debian/Ubuntu)")


def search_fields(c: dict) -> dict:
    """A certified search's certificate read through the one Certificate type: its evidence beside its fields
    (`met`: its hits, `outcome`: its verdict, `seeds`: [first, last])."""
    cert = Certificate.from_json(c)
    return {**cert.evidence, "certified": cert.certified, "outcome": cert.verdict.value, "alpha": cert.alpha,
            "omega": cert.omega, "loss_target": cert.loss_target, "runs": cert.runs, "met": cert.hits,
            "seeds": list(cert.seeds[0]) if cert.seeds else []}


def predicts_as_exported(project, folder, seed: int, exported) -> None:
    """The model `depl run` kept in project/folder for seed (depl.load_model) and its export (torch.export.load,
    without depl) give the same outputs on 5 inputs of the width of its first Linear layer."""
    import torch

    import depl

    model = depl.load_model(project / folder, seed, allow_code=[project])
    width = next(m for m in model.modules() if isinstance(m, torch.nn.Linear)).in_features
    x = torch.randn(5, width, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        mine = model(x)
        theirs = torch.export.load(str(exported)).module()(x)
    assert mine.shape[0] == 5 and torch.allclose(mine, theirs, atol=1e-6)


def scenario_dict(width: int = 16, nodes: tuple[int, int] = (2, 1), share_to: float = 0.5, iid: bool = True,
                  source: str = "mnist1d", net: str = "cnn1d", path: str | None = None, lr: float = 0.05,
                  training: dict | None = None) -> dict:
    law = {"progress": {"A": 0.3, "B": 1.0}, "noise": {"family": "invgamma", "mean": 1.0, "var": 0.01}}
    ds = [{"name": "d1", "samples": 1000, "source": source, "share": [0.0, share_to / 2]},
          {"name": "d2", "samples": 1000, "source": source, "share": [share_to / 2, share_to]}]
    if path:
        for d in ds:
            d["path"] = path
    return {
        "name": "tiny", "initial_loss": 2.3, "target": {"loss": 1.0, "quantile": 0.99, "deadline": 1000.0},
        "training": {"lr": lr, "momentum": 0.9, "batch_size": 64, "iid": iid, **(training or {})},
        "clusters": [{"name": "A", "capacity": 100, "bandwidth": 10, "unit_cost": 1.0, "nodes": nodes[0]},
                     {"name": "B", "capacity": 50, "bandwidth": 10, "unit_cost": 1.2, "nodes": nodes[1]}],
        "datasets": ds,
        "models": [
            {"name": "full", "size": 1, "work": 1, **law, "train": {"net": net, "width": width, "prune_ratio": 0.0}},
            {"name": "half", "size": 1, "work": 0.5, **law, "train": {"net": net, "width": width, "prune_ratio": 0.5}},
            {"name": "quarter", "size": 1, "work": 0.3, **law, "train": {"net": net, "width": width, "prune_ratio": 0.75}},
        ],
        # pruning goes one way: full -> half -> quarter
        "switches": [{"from": a, "to": b, "jump": {"family": "norm", "mean": 0.0, "var": 0.01}}
                     for a, b in (("full", "half"), ("half", "quarter"), ("full", "quarter"))],
    }


def make_plan(schedule: list[tuple[str, str]], **kw) -> Plan:
    """A plan (as `depl plan` would write it: its figures computed) with epochs (model, cluster)."""
    s = parse_scenario(scenario_dict(**kw), "test scenario")
    epochs = [Epoch(k + 1, m, c, 1.0) for k, (m, c) in enumerate(schedule)]
    return with_figures(Plan("hand", "tiny", True, ["d1", "d2"], epochs, 0.0, 0.0, 0.0, 0.0, 0.0), s)


SWITCH_PLAN = [("full", "A"), ("full", "A"), ("half", "B"), ("quarter", "B")]


# ---- a tiny regression of your own: a data factory whose targets are (N, 1), (N,) or (N, 3) ------------------------

REGRESSION_MODULE = '''"""A tiny regression: 4 inputs, targets a linear map of them plus noise."""
import torch
from torch import nn


def make_net(outputs: int = 1) -> nn.Module:
    """(N, 4) in, (N, outputs) out."""
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, outputs))


def make_flat_net(outputs: int = 1) -> nn.Module:
    """(N, 4) in, (N,) out: one prediction per sample, as targets of shape (N,) are."""
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, outputs), nn.Flatten(0))


class Branchy(nn.Module):
    """A branch on the data's values: torch.export cannot trace it."""

    def __init__(self, outputs: int):
        super().__init__()
        self.l = nn.Linear(4, outputs)

    def forward(self, x):
        return self.l(x) if x.sum() > 0 else -self.l(x)


def make_branchy_net(outputs: int = 1) -> nn.Module:
    return Branchy(outputs)


def _draw(outputs):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(160, 4, generator=g)
    y = x @ torch.linspace(-1.0, 1.0, 4 * outputs).view(4, outputs) + 0.1 * torch.randn(160, outputs, generator=g)
    return (x[:120], y[:120]), (x[120:], y[120:])


def load_column():
    """Targets of shape (N, 1): what nn.MSELoss expects beside an (N, 1) output."""
    return _draw(1)


def load_flat():
    """Targets of shape (N,)."""
    (x, y), (xt, yt) = _draw(1)
    return (x, y[:, 0]), (xt, yt[:, 0])


def load_wide():
    """Three targets per sample, (N, 3)."""
    return _draw(3)
'''

REGRESSION_SCENARIO = '''name = "tiny-regression"
initial_loss = 1.0
max_epochs = 4

[target]
loss = 0.7
quantile = 0.9
deadline = 200.0

[training]
loss = "{loss}"
optimizer = "adam"
lr = 0.01
batch_size = 16
{training}
[[clusters]]
name = "edge"
capacity = 100.0
bandwidth = 10.0
unit_cost = 1.0
nodes = 1

[[datasets]]
name = "a"
samples = 120
source = "tinyreg:{factory}"
share = [0.0, 1.0]

[[models]]
name = "full"
size = 1.0
work = 1.0
progress = {{ A = 0.5, B = 1.0 }}
noise = {{ family = "invgamma", mean = 1.0, var = 0.01 }}
train = {{ net = "tinyreg:{net}", net_args = {{ outputs = {outputs} }} }}
'''

REGRESSION_TARGETS = {"column": ("load_column", 1), "flat": ("load_flat", 1), "wide": ("load_wide", 3)}


def write_regression(folder, targets: str = "column", epochs: int = 2, loss: str = "mse", training: str = "",
                     net: str = "make_net"):
    """A project folder of your own regression (tinyreg.py, TARGETS.toml) whose factory gives targets of the shape
    `targets` names (column (N, 1), flat (N,), wide (N, 3)), and a plan of `epochs` epochs on it (plan.json);
    returns the folder.  `loss`: its [training] loss (your own MODULE:FUNCTION: its module written in the folder
    before), `training`: more lines of [training], `net`: its network (make_net, (N, outputs) out, or make_flat_net,
    (N,) out).  Its code must be allowed (--allow-code FOLDER or $DEPL_CODE) to
    be run."""
    from pathlib import Path

    from depl.scenario import load_scenario

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tinyreg.py").write_text(REGRESSION_MODULE, encoding="utf-8")
    factory, outputs = REGRESSION_TARGETS[targets]
    text = REGRESSION_SCENARIO.format(factory=factory, outputs=outputs, loss=loss, training=training, net=net)
    (folder / f"{targets}.toml").write_text(text, encoding="utf-8")
    s = load_scenario(folder / f"{targets}.toml")
    schedule = [Epoch(k + 1, "full", "edge", 1.0) for k in range(epochs)]
    with_figures(Plan("hand", s.name, True, ["a"], schedule, 0.0, 0.0, 0.0, 0.0, 0.0), s).save(folder / "plan.json")
    return folder


# ---- a task of your own with your own loss: a Friedman #1 regression, an MLP, a Huber loss -------------------------

HUBER_MODULE = '''"""Friedman #1 (5 inputs): an MLP, its data drawn per seed, and a Huber loss of my own."""
import torch
from torch import nn


def make_net(hidden: int = 16) -> nn.Module:
    """(N, 5) in, one prediction per sample (N, 1) out."""
    return nn.Sequential(nn.Linear(5, hidden), nn.ReLU(), nn.Linear(hidden, 1))


def make_wide(hidden: int = 16) -> nn.Module:
    """Another network of the same file."""
    return nn.Sequential(nn.Linear(5, 2 * hidden), nn.ReLU(), nn.Linear(2 * hidden, 1))


def load_data(seed: int = 0):
    """(train, test): 160 and 40 samples of y = Friedman #1, standardised, plus noise; the seed draws them."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(200, 5, generator=g)
    y = 10 * torch.sin(torch.pi * x[:, 0] * x[:, 1]) + 20 * (x[:, 2] - 0.5) ** 2 + 10 * x[:, 3] + 5 * x[:, 4]
    y = (y - 14.4) / 4.9 + 0.1 * torch.randn(200, generator=g)
    return (x[:160], y[:160]), (x[160:], y[160:])


def huber(out, y):
    """One loss per sample, shape (batch,)."""
    return torch.nn.functional.huber_loss(out.reshape(len(y)), y, reduction="none")
'''

HUBER_SCENARIO = '''name = "friedman"
initial_loss = 1.0
max_epochs = 3

[target]
loss = 0.6
quantile = 0.5
deadline = 200.0

[training]
loss = "friedman:huber"
optimizer = "adam"
lr = 0.02
batch_size = 32
data_draw = "run"

[[clusters]]
name = "edge"
capacity = 100.0
bandwidth = 10.0
unit_cost = 1.0
nodes = 1

[[datasets]]
name = "a"
samples = 160
source = "friedman:load_data"
share = [0.0, 1.0]

[[models]]
name = "full"
size = 1.0
work = 1.0
progress = { A = 0.5, B = 1.0 }
noise = { family = "invgamma", mean = 1.0, var = 0.01 }
train = { net = "friedman:make_net", net_args = { hidden = 16 } }
'''


def write_own_loss_task(folder):
    """A project folder of your own task with your own loss (friedman.py: network, data factory, Huber loss;
    friedman.toml: `[training] loss = "friedman:huber"`); returns the folder.  Its code must be allowed
    (--allow-code FOLDER or $DEPL_CODE) to be run."""
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "friedman.py").write_text(HUBER_MODULE, encoding="utf-8")
    (folder / "friedman.toml").write_text(HUBER_SCENARIO, encoding="utf-8")
    return folder
