"""Reports: plots and summaries over finished plans and simulations (they only read)."""
