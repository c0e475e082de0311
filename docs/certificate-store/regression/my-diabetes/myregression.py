"""My network and my data for a regression (here: an MLP on scikit-learn's diabetes data)."""
import torch
from sklearn.datasets import load_diabetes
from torch import nn


def make_net(hidden: int = 32) -> nn.Module:
    """A batch of inputs (N, 10) in, one prediction per sample (N, 1) out."""
    return nn.Sequential(nn.Linear(10, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, 1))


def load_data(seed: int = 0):
    """(train, test): pairs of tensors (X, y), y the real-valued target (N,).

    seed picks the split (342 train, 100 test) and so the standardisation, taken from the train
    split alone: the same seed gives the same data, bit for bit."""
    x, y = load_diabetes(return_X_y=True)
    x, y = torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    train, test = order[:342], order[342:]
    mx, sx, my, sy = x[train].mean(0), x[train].std(0), y[train].mean(), y[train].std()
    return ((x[train] - mx) / sx, (y[train] - my) / sy), ((x[test] - mx) / sx, (y[test] - my) / sy)
