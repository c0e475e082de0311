"""Fitting loss models to measured runs (`depl fit`).

* `runs` — the profiling experiments of a store as arrays;
* `increments` — the paper's model (eq. 8: A, B by least squares, X_m and the
  switch jumps by maximum likelihood, alternatives compared);
* `level` — the measured-level model (a median curve to a floor × log-normal noise);
* `gof` — goodness of fit: KS with parametric-bootstrap p-values, held-out likelihood;
* `report` — the fit report, the PNGs, and the scenario sections written for `depl plan`.
"""
