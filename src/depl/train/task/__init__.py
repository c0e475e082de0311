"""What is trained: networks, pruning, losses, data sources and their arrays, your own code, the final models kept, the cache."""
