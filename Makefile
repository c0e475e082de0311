# The two commands of the README's Quick start: `make demo` and `make test`.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test install install-plan clean bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Planning needs only the light dependencies.
$(VENV)/.plan-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

# Tests cover training too, so they install the `train` extra.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[dev,train]"
	touch $@ $(VENV)/.plan-installed

install-plan: $(VENV)/.plan-installed
install: $(STAMP)

demo: $(VENV)/.plan-installed
	$(BIN)/depl scenarios
	$(BIN)/depl plan paper-alexnet --out demo-plan.json
	$(BIN)/depl simulate demo-plan.json --runs 20000 --png demo-plan.png

# The layers of the house first (pyproject's [tool.importlinter]), then every test and doctest,
# one pytest worker per core (tests train with one torch thread each); a test file stays on one
# worker, so its module fixtures are built once.
test: $(STAMP)
	$(BIN)/lint-imports --no-cache
	FLWR_TELEMETRY_ENABLED=0 MPLBACKEND=Agg $(BIN)/python -m pytest -n auto --dist loadfile

bench: $(VENV)/.plan-installed
	$(BIN)/python benchmarks/bench_planner.py

clean:
	rm -rf $(VENV) demo-plan.json demo-plan.png
