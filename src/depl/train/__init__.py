"""Real training: networks, offline data, pruning, federation, runs (needs `depl[train]`)."""
