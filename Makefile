# The two commands of the README's Quick start: `make demo` and `make test`; `make test-fast` is the quick check
# while working (the tests not marked slow).
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The tested versions of every distribution (`make lock` writes it). Installed as
# constraints: each install takes exactly these versions of what it needs, and the
# ranges in pyproject.toml stay what library users get.
LOCK   := requirements/lock.txt
# The installer itself, pinned likewise.
PIP    := pip==26.3

.PHONY: demo test test-fast install install-plan clean bench lock fashion-data

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet $(PIP)

# Planning needs only the light dependencies.
$(VENV)/.plan-installed: pyproject.toml $(LOCK) | $(BIN)/python
	$(BIN)/pip install --quiet -c $(LOCK) -e ".[dev]"
	touch $@

# Tests cover training too, so they install the `train` extra.
$(STAMP): pyproject.toml $(LOCK) | $(BIN)/python
	$(BIN)/pip install --quiet -c $(LOCK) -e ".[dev,train]"
	touch $@ $(VENV)/.plan-installed

install-plan: $(VENV)/.plan-installed
install: $(STAMP)

demo: $(VENV)/.plan-installed
	$(BIN)/depl scenarios
	$(BIN)/depl plan paper-alexnet --out demo-plan.json
	$(BIN)/depl simulate demo-plan.json --runs 20000 --png demo-plan.png

# The layers of the house first (pyproject's [tool.importlinter]), then every test and doctest,
# one pytest worker per core (tests train with one torch thread each); a test file stays on one
# worker, so its module fixtures are built once; the files with the most slow tests are sent first
# (tests/conftest.py orders them; --no-loadscope-reorder keeps that order), the quick ones fill the end.
test: $(STAMP) fashion-data
	$(BIN)/lint-imports --no-cache
	FLWR_TELEMETRY_ENABLED=0 MPLBACKEND=Agg $(BIN)/python -m pytest -n auto --dist loadfile --no-loadscope-reorder

# The same without the tests marked slow (pyproject's [tool.pytest.ini_options] markers: those that train a
# search or a federation, fit laws on runs, export a model, run the planner or a Monte Carlo for many draws, fuzz
# hundreds of documents): every other test, and the layers.
# CI runs `make test`.
test-fast: $(STAMP) fashion-data
	$(BIN)/lint-imports --no-cache
	FLWR_TELEMETRY_ENABLED=0 MPLBACKEND=Agg $(BIN)/python -m pytest -n auto --dist loadfile --no-loadscope-reorder -m "not slow"

# Fashion-MNIST (fashion-small's data) where the tests can have it: Debian's dataset-fashion-mnist, installed when
# its folder is missing and this runs as root with apt-get; otherwise one line saying how.  Never fails: the tests
# that train on it skip without it (depl never downloads data).
FASHION := /usr/share/datasets/fashion-mnist
fashion-data:
	@if [ -e $(FASHION)/train-images-idx3-ubyte.gz ] || [ -e $(FASHION)/train-images-idx3-ubyte ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "make: installing Fashion-MNIST (apt-get install dataset-fashion-mnist)"; \
	  { apt-get install -y -q dataset-fashion-mnist || { apt-get update -q && apt-get install -y -q dataset-fashion-mnist; }; } \
	    >/dev/null 2>&1 || echo "make: dataset-fashion-mnist could not be installed; the tests that train on Fashion-MNIST skip"; \
	else echo "make: Fashion-MNIST is not in $(FASHION): \`sudo apt-get install dataset-fashion-mnist\` (Debian/Ubuntu), or DEPL_DATA=DIR holding its idx files; the tests that train on it skip"; fi

bench: $(VENV)/.plan-installed
	$(BIN)/python benchmarks/bench_planner.py

# Re-resolve every dependency of `.[dev,train]` to its newest release that pyproject.toml
# allows, in a throwaway venv, with pip-tools: exact pins, `# via` notes, no index options.
# Run it on a machine like CI's (Python 3.11, Linux x86-64, the CPU build of torch on disk):
# torch is written without its local label (2.13.0, not 2.13.0+cpu), so the lock installs
# where that file is not on disk too, and a lock with CUDA packages (nvidia-*) is refused.
LOCK_VENV := /tmp/depl-lock-venv
lock:
	rm -rf $(LOCK_VENV)
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install --quiet $(PIP) pip-tools==7.6.2
	mkdir -p $(dir $(LOCK))
	CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_VENV)/bin/pip-compile --quiet --upgrade --extra dev --extra train \
	    --strip-extras --allow-unsafe --no-emit-index-url --no-emit-find-links \
	    --output-file $(LOCK_VENV)/lock.txt pyproject.toml
	! grep -qi '^nvidia-' $(LOCK_VENV)/lock.txt || { echo "make lock: the lock pulls CUDA packages (nvidia-*)"; exit 1; }
	{ echo "# The tested versions of every distribution of a \`.[dev,train]\` install"; \
	  echo "# ($$($(LOCK_VENV)/bin/python -c 'import platform as p; print("Python", p.python_version(), "on", p.system(), p.machine())'))."; \
	  echo "# The Makefile installs with \`pip install -c $(LOCK) -e '.[dev,train]'\` (or '.[dev]')."; \
	  echo "# \`make lock\` rewrites it; pyproject.toml keeps the ranges library users get."; \
	  sed -e 's/^\(torch==[0-9.]*\)+[a-z0-9.]*/\1/' $(LOCK_VENV)/lock.txt; } > $(LOCK).tmp
	mv $(LOCK).tmp $(LOCK)
	rm -rf $(LOCK_VENV)

clean:
	rm -rf $(VENV) demo-plan.json demo-plan.png
