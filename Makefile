# make smoke   the whole recipe end to end on this CPU (tiny model, real verl/vLLM/Ray/sandbox), 10-15 min
# make lint    ruff's rule set in pyproject.toml ([tool.ruff]) and its formatter's check; make test runs both first
# make format  ruff format: what make lint's format check asks for
# make test    every test, the end-to-end smoke included; installs what is missing first. Two phases: every test but
#              tests/e2e on TEST_WORKERS pytest processes (default 2; a whole file per process), then tests/e2e alone,
#              whose runs use every core. TEST_REPORTS=<dir> writes each phase's JUnit report there
# make test-shakedown   SHAKEDOWN=1 ./run_smoke_cpu.sh end to end and its checklist (~15 min; not in make test)
# make test-faults      failure accounting in both async trainer modes, mass faults included (~33 min with its smoke
#                       run on a 2-core AVX2-only Zen 1, before patch 0007; make test runs the separate_async fault
#                       run only)
# make rehearse-nodes  two Ray nodes on this host: the node check, SFT on two torchrun nodes, RL sync killed and
#                       resumed, RL separate_async across the nodes (~8 min; results in docs/performance.md)
# make bench   the sandbox benchmark (numbers go to docs/performance.md)
# make bench-loadtest   the sandbox under one RL step's tool calls, 1,024 trajectories, both session modes (~30 min)
# make bench-learning   accuracy under GRPO: the smoke's RL stage, 2 more seeds, 2 controls, the off-by-one diagnostic,
#                       then 3 seeds in each async trainer mode (~75 min; docs/performance.md)
# make bench-async      sync vs colocate_async vs separate_async side by side, and resume in the async modes (~40 min)
# make bench-filter     the overlong-prompt filter at start-up on 1,791,700 DAPO-shaped rows: verl's at 1 and 2 workers,
#                       then the configured one (56 min on 2 cores, data already generated; docs/performance.md)
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.retool-setup-done
SETUP_INPUTS := pyproject.toml sandbox/pyproject.toml $(wildcard patches/*.patch) scripts/setup.sh scripts/install_system_packages.sh

.PHONY: setup smoke test test-fast test-shakedown test-faults rehearse-nodes bench bench-loadtest bench-learning bench-async bench-filter bench-soak lint format clean-runs

setup: $(STAMP)
	@bash scripts/install_system_packages.sh >/dev/null

$(STAMP): $(SETUP_INPUTS)
	bash scripts/setup.sh
	@touch $@

smoke: setup
	./run_smoke_cpu.sh

TEST_WORKERS ?= 2
LINTED := retool sandbox tests bench retool_sft_preprocess.py
test: setup
	@status=0; \
	$(PY) -m ruff check $(LINTED) || status=$$?; \
	$(PY) -m ruff format --check $(LINTED) || status=$$?; \
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --ignore=tests/e2e \
	  $(if $(TEST_REPORTS),--junitxml=$(TEST_REPORTS)/parallel.xml) || status=$$?; \
	$(PY) -m pytest tests/e2e $(if $(TEST_REPORTS),--junitxml=$(TEST_REPORTS)/e2e.xml) || status=$$?; \
	exit $$status

test-fast: setup
	$(PY) -m pytest -m "not slow"

test-shakedown: setup
	$(PY) -m pytest -m shakedown tests/e2e/test_shakedown_run.py

test-faults: setup
	$(PY) -m pytest -m "not shakedown" tests/e2e/test_failure_accounting.py

rehearse-nodes: setup
	$(PY) bench/rehearse_nodes.py --output docs/performance.md

bench: setup
	$(PY) bench/sandbox_bench.py --output docs/performance.md
	$(PY) bench/sandbox_bench.py --sessions 1024 --session-cells plain,numpy+sympy:200 --output docs/performance.md

bench-loadtest: setup
	$(PY) bench/sandbox_loadtest.py --output docs/performance.md

bench-learning: setup
	$(PY) bench/learning_signal.py --output docs/performance.md

bench-async: setup
	$(PY) bench/async_modes.py --output docs/performance.md
	$(PY) bench/async_resume.py --output docs/performance.md

bench-filter: setup
	$(PY) bench/overlong_filter.py --output docs/performance.md

SOAK_MINUTES ?= 120
bench-soak: setup
	$(PY) bench/soak.py --minutes $(SOAK_MINUTES) --output docs/performance.md

lint: setup
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)

format: setup
	$(PY) -m ruff format $(LINTED)

clean-runs:
	rm -rf runs
