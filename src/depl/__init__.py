"""depl: dependable distributed training.

Plan the cheapest training whose ω-quantile of the final test loss is at or
below a target by a deadline (the DepL method), run it for real, and check it.
"""

__version__ = "0.1.0"
