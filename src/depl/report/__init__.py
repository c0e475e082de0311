"""Reports over finished results: they only read, never plan, train or simulate.

`mpl` sets matplotlib up once (lazily), `plots` holds the plot_* functions of
bands, fits and validations, `figures` the figures of `depl reproduce` and
`results_md` its results.md.  The experiments themselves are in
`depl.experiments`.
"""
