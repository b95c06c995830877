# make smoke   the whole recipe end to end on this CPU (tiny model, real verl/vLLM/Ray/sandbox), 10-15 min
# make test    every test, the end-to-end smoke included; installs what is missing first
# make bench   the sandbox benchmark (numbers go to docs/performance.md)
# make bench-learning   accuracy under GRPO: the smoke's RL stage, 2 more seeds, 2 controls (~25 min; docs/performance.md)
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.retool-setup-done
SETUP_INPUTS := pyproject.toml $(wildcard patches/*.patch) scripts/setup.sh scripts/install_system_packages.sh

.PHONY: setup smoke test test-fast bench bench-learning lint clean-runs

setup: $(STAMP)
	@bash scripts/install_system_packages.sh >/dev/null

$(STAMP): $(SETUP_INPUTS)
	bash scripts/setup.sh
	@touch $@

smoke: setup
	./run_smoke_cpu.sh

test: setup
	$(PY) -m pytest

test-fast: setup
	$(PY) -m pytest -m "not slow"

bench: setup
	$(PY) bench/sandbox_bench.py --output docs/performance.md
	$(PY) bench/sandbox_bench.py --sessions 1024 --session-cells plain,numpy+sympy:200 --output docs/performance.md

bench-learning: setup
	$(PY) bench/learning_signal.py --output docs/performance.md

lint: setup
	$(PY) -m ruff check --select F,E9 retool tests bench retool_sft_preprocess.py

clean-runs:
	rm -rf runs
