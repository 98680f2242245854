# rewardloop: `make run` (the default 3-iteration loop on the embedded tiny model), `make test`.
# Both create .venv with the exact dependency versions of constraints.txt on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORES ?= 2

.PHONY: venv run test test-fast lint dry-run bench report summary mlflow-ui clean-results mutation mutation-smoke tiny tiny-check

venv: $(STAMP)

# The installer: uv, with the same pinned versions pip would install (constraints.txt): 21.8 s with an
# empty uv cache vs pip's 108.8 s on fresh clones here. A uv on PATH (or UV=/path/to/uv) is used as it
# is; otherwise pip puts uv's wheel (UV_VERSION) into the venv first. pip installs everything itself with
# UV=pip, or when uv cannot be had (an index without it). uv reads no pip settings, so a PIP_FIND_LINKS
# (wheels already on disk, e.g. torch) is handed to it as UV_FIND_LINKS.
# Bytecode: uv writes no .pyc (pip does), and where PYTHONDONTWRITEBYTECODE is set (it is on our CI machines)
# Python never caches one either, so every job's process compiled torch, diffusers and transformers from
# source: 16.8 s to import them vs 7.4 s from .pyc (AMD EPYC, 2 cores), paid by every job of every run and
# test. So the venv's processes started from here write their bytecode as they import (the variable is
# emptied below): the first import of a module compiles it once, and only the modules a run imports are
# compiled. (Compiling the whole venv at install, uv's --compile-bytecode, took ~35 s, ~20 s more than a first
# `make run` pays compiling what it imports.)
export PYTHONDONTWRITEBYTECODE :=
UV ?= $(shell command -v uv 2>/dev/null)
UV_VERSION := 0.13.8

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	@uv="$(UV)"; \
	if [ -z "$$uv" ] && $(BIN)/python -m pip install --quiet uv==$(UV_VERSION); then uv=$(BIN)/uv; fi; \
	if [ -n "$$uv" ] && [ "$$uv" != pip ]; then \
		echo "make venv: installing with $$uv"; \
		UV_FIND_LINKS="$${UV_FIND_LINKS:-$$PIP_FIND_LINKS}" $$uv pip install --quiet \
			--python $(BIN)/python -c constraints.txt -e '.[test]'; \
	else \
		echo "make venv: installing with pip"; \
		$(BIN)/python -m pip install --quiet --upgrade pip; \
		$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test]'; \
	fi
	touch $@

run: $(STAMP)
	$(BIN)/snakemake --cores $(CORES)

# The default run's tiny model ships in resources/models/tiny-sd15 (its build_info.json says how it was built
# and proves it: src/rewardloop/models/tiny/builds.py). `make tiny` rebuilds it in place (~12 min on 2 cores,
# replaced only once complete); `make tiny-check` rebuilds it aside and compares the weights' bytes.
TINY := resources/models/tiny-sd15
tiny: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/rewardloop build-tiny --out $(TINY)

tiny-check: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/rewardloop build-tiny --check --out $(TINY)

dry-run: $(STAMP)
	$(BIN)/snakemake -n

lint: $(STAMP)
	$(BIN)/snakemake --lint

# The suite runs in CORES processes (pytest-xdist), each test file whole in one of them (its fixtures built once).
# (--durations: the 25 slowest tests end the output, so a CI log says where its time went)
test: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -n $(CORES) --dist loadfile --durations=25

test-fast: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -n $(CORES) --dist loadfile -m "not workflow"

# Mutation testing of the math and its wiring (pyproject.toml [tool.mutmut]; ~1 h on 2 cores), then
# the survivors; `make mutation-smoke`: the named mutants CI also runs (docs/development.md).
mutation: $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt mutmut
	HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 $(BIN)/mutmut run --max-children $(CORES); $(BIN)/mutmut results

mutation-smoke: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest tests/unit/test_mutation_smoke.py

bench: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python bench/run_all.py

# After `make run`: the HTML report (curves, image grids, config), the per-iteration table, the MLflow UI.
report: $(STAMP)
	$(BIN)/snakemake --report report.html

summary: $(STAMP)
	$(BIN)/rewardloop summary results/

# The address first: MLflow 3's UI opens an experiment on its GenAI pages unless told otherwise.
MLFLOW_PORT ?= 5000
mlflow-ui: $(STAMP)
	@$(BIN)/python -m rewardloop.tracking.browse --results results --url http://127.0.0.1:$(MLFLOW_PORT)
	$(BIN)/mlflow ui --backend-store-uri sqlite:///results/mlflow.db --artifacts-destination results/mlartifacts --port $(MLFLOW_PORT)

clean-results:
	rm -rf results .snakemake
