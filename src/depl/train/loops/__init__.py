"""The closed loops over runs: the certified search (`depl plan --certify`), `depl certify`, `--adaptive` runs and `depl validate`'s held-out seeds."""
