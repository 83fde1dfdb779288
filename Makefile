# Set-up and everyday targets. `make run` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test bench lint clean demo

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,lint]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m tests.storegen demo/state.db

# The main job on a bundled demo store: preview the nightly prune, then stats.
run: demo
	$(BIN)/hermes-maint prune --db demo/state.db --dry-run
	$(BIN)/hermes-maint stats --db demo/state.db

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/report.py

lint: $(STAMP)
	$(BIN)/ruff check maint tests bench

clean:
	rm -rf $(VENV) demo build *.egg-info .pytest_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
