# Set-up and everyday targets. `make run` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
RUNTIME := $(VENV)/.runtime

.PHONY: run test test-fast bench bench-quick lint docs clean

# Runtime dependencies only: what an operator installs.
$(RUNTIME): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUNTIME)

# Everything the tests, benchmarks and linter need.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,lint]'
	touch $(STAMP)

# The main job on the demo store (built fresh each time): preview the nightly prune, then stats.
run: $(RUNTIME)
	rm -f demo/state.db demo/state.db-wal demo/state.db-shm
	$(BIN)/hermes-maint demo demo/state.db
	$(BIN)/hermes-maint prune --db demo/state.db --dry-run
	$(BIN)/hermes-maint stats --db demo/state.db

# The whole suite, spread over JOBS processes. No test times the machine (live writers are checked for
# correctness; their latency is the benchmarks'), so nothing needs to run alone.
JOBS ?= 2
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(JOBS)

# The edit loop: everything but the tests marked slow (live writers, kills, big stores).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n $(JOBS) -m "not slow"

# Every benchmark (long), then docs/benchmarks.md rendered from their results.
bench: $(STAMP)
	$(BIN)/python bench/report.py

# The edit loop for scale work: the scale benchmark at 1k and 10k sessions (--big: 60k and 420k).
bench-quick: $(STAMP)
	$(BIN)/python bench/scale_bench.py --quick

lint: $(STAMP)
	$(BIN)/ruff check maint tests bench docs

# The generated docs (tests/test_docs.py checks each): docs/cli.md from each command's --help, the settings
# table of docs/configuration.md from maint/settings.py, docs/benchmarks.md from bench/results/.
docs: $(STAMP)
	$(BIN)/python docs/gen_cli.py
	$(BIN)/python bench/report.py --no-run

clean:
	rm -rf $(VENV) demo build *.egg-info .pytest_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
