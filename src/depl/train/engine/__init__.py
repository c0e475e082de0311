"""A plan trained: FedAvg epoch by epoch, a run's id and resume, seeds in batches and their one writer, the vectorised stack, the measured choice of how to train, profiling and measured bands."""
