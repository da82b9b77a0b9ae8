# One command each on a fresh machine: the venv is created and the project installed on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench lint clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tether demo

# Two workers (the machines have two cores; most tests wait on real processes). Tests that share this
# user's CLI server run on one worker (tests/conftest.py). A single file: .venv/bin/python -m pytest FILE
test: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadgroup

# The bench gets its own environment: the peers it compares with (LangGraph) never enter the test venv.
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed

$(BENCH_STAMP): pyproject.toml Makefile
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install --quiet -e '.[dev]' 'langgraph>=0.2' 'langgraph-checkpoint-sqlite>=2.0' \
		'wordllama>=0.4'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m bench

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/pyright

clean:
	rm -rf $(VENV) $(BENCH_VENV) build *.egg-info src/*.egg-info .pytest_cache .ruff_cache
