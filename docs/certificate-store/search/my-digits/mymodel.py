"""My network and my data, for depl (here: an MLP on scikit-learn's 8×8 digits)."""
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset


def make_net(hidden: int = 32) -> nn.Module:
    """A batch of inputs (N, 64) in, class logits (N, 10) out."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(),
                         nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def load_data():
    """(train, test): a Dataset of (x, y) pairs, or a pair of tensors (X, y)."""
    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    train, test = order[:1400], order[1400:]
    return TensorDataset(x[train], y[train]), (x[test], y[test])
