"""Where the seed batches train: the executors' registry (loop, stack, processes, ray) and the Ray pool."""
