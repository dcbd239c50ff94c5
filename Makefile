# Two commands on a fresh machine: `make demo` and `make test`. Both set up .venv themselves,
# idempotently: the install step re-runs only when requirements.lock or pyproject.toml change.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export REALM_WORK_DIR ?= $(CURDIR)/work
export REALM_DATA_DIR ?= $(abspath $(CURDIR)/../shared/data)
export PREFECT_HOME ?= $(REALM_WORK_DIR)/prefect
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
PORT ?= 4200
# The demo preset's encoders run in bf16 where the CPU computes it natively (`precision: auto`);
# `make openqa-table PRECISION=fp32` (or any experiment target) runs it in fp32.
PRECISION ?=
PRECISION_SET := $(if $(PRECISION),--set precision=$(PRECISION))
QA_PORT ?= 8000
# torch's CPU wheel: pip's find-links folder where there is one (uv does not read pip's
# config), else PyTorch's CPU index. Never the CUDA build.
FIND_LINKS ?= $(shell $(PYTHON) -m pip config list 2>/dev/null | sed -n "s/.*find-links='\([^']*\)'.*/\1/p" | head -1)
TORCH_SOURCE := $(if $(FIND_LINKS),--find-links $(FIND_LINKS),--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match)

.PHONY: venv browser demo demo-record test test-fast test-slow serve serve-qa stop bench retrieval-table realm-mechanism laptop realm-reading realm-table openqa-table openqa-open-phase warm-start-table scaling-table lock lint clean

venv: $(STAMP)

# The Makefile is a prerequisite too, so a change to this recipe reaches an existing .venv.
$(STAMP): requirements.lock pyproject.toml Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@test -x $(BIN)/uv || $(BIN)/python -m pip install -q --disable-pip-version-check uv==0.13.9
	$(BIN)/uv pip install --python $(BIN)/python -q $(TORCH_SOURCE) -r requirements.lock
	$(BIN)/uv pip install --python $(BIN)/python -q --no-deps -e .
	@# Bytecode for every installed module, written once here. Where PYTHONDONTWRITEBYTECODE is
	@# set (it is on this project's machines) Python never caches it, and every process (each
	@# `realm` command, torchrun rank, Prefect worker, spaCy process) compiled transformers,
	@# torch and sklearn from source again: about 10 s of a 17 s `realm search` on 2 cores.
	@# A few files in torch's test helpers use Python 3.12 syntax and do not compile: harmless.
	@$(BIN)/python -m compileall -qq -j 0 $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || true
	@# the lab's scripts (bench/, experiments/) import each other's modules (peers, ablations): both
	@# folders on this environment's path, never in the installed package
	@printf '%s\n' "$(CURDIR)/bench" "$(CURDIR)/experiments" > "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/realm-lab.pth"
	@# the commit form CONTRIBUTING.md asks for, checked at each commit of this clone
	@git rev-parse --git-dir >/dev/null 2>&1 && git config core.hooksPath .githooks || true
	@touch $(STAMP)
	@mkdir -p $(PREFECT_HOME)

demo: $(STAMP)
	@mkdir -p $(PREFECT_HOME)
	$(BIN)/python -m flows.demo

# The last demo's record (work/reports/demo.json) into bench/results, where the demo-timings page
# and a fresh run's progress estimate read it.
demo-record:
	cp $(REALM_WORK_DIR)/reports/demo.json bench/results/demo.json
	$(BIN)/python bench/readme_tables.py

# Each tier names its ten slowest tests, so CI's log says where the 30-minute budget goes.
# The page test's browser: Debian's chromium, installed where apt-get is there and this is root;
# elsewhere the page test is skipped and the line below says why.
browser:
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian's chromium for the page test"; \
		apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 \
		|| { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1; } \
		|| echo "warning: apt-get could not install chromium: the page test will be skipped"; \
	else echo "note: no chromium, and no apt-get as root to install it: the page test will be skipped"; fi

# two workers, one thread each (tests/conftest.py), a file to a worker, the longest files first
XDIST = -n 2 --dist loadfile --no-loadscope-reorder

test: $(STAMP) browser
	$(BIN)/python -m pytest tests -m "not slow" -q --durations=10 $(XDIST)
	$(BIN)/python -m pytest tests -m slow -q --durations=10 $(XDIST)

test-fast: $(STAMP)
	$(BIN)/python -m pytest tests -m "not slow" -q

serve: $(STAMP)
	bash flows/serve.sh start $(PORT)

# The query side after `make demo`: a page and an HTTP API on 127.0.0.1:$(QA_PORT).
serve-qa: $(STAMP)
	$(BIN)/realm serve-qa --port $(QA_PORT)

stop:
	bash flows/serve.sh stop

# Every product benchmark (about an hour on 2 cores; docs/benchmarks.md), then the generated
# tables of README and docs/ from bench/results/*.json and experiments/results/*.json.
bench: $(STAMP)
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/spans.py
	$(BIN)/python bench/embed.py
	$(BIN)/python bench/mips.py
	$(BIN)/python bench/retrieval.py
	$(BIN)/python bench/serve.py
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/pretrain_step.py
	$(BIN)/python bench/scaling.py
	$(BIN)/python bench/projection.py
	$(BIN)/python bench/readme_tables.py

# The scaling table and plot: the corpus stages on the corpus replicated 1x-16x (docs/scaling.md).
scaling-table: $(STAMP)
	$(BIN)/python bench/scaling.py
	$(BIN)/python bench/projection.py
	$(BIN)/python bench/readme_tables.py

# --- experiments (experiments/, one page each under docs/experiments/, results in experiments/results) ---

# REALM's mechanism where the answer is known (docs/experiments/realm-mechanism.md). Extra
# arguments go to the script, e.g. MECHANISM_ARGS='--set pretrain.steps=2000'.
MECHANISM_ARGS ?=
realm-mechanism: $(STAMP)
	$(BIN)/python experiments/realm_mechanism.py $(MECHANISM_ARGS)
	$(BIN)/python bench/readme_tables.py realm_mechanism

# REALM's measured gain and Table 1 under REALM's own fine-tuning, end to end on 2 cores overnight
# (the `laptop` preset: docs/experiments/realm-gain.md): the reader warm start, REALM and null-only
# on the same batches, their comparison, every system's open-domain phase, then the run's record
# in bench/results/laptop.json. Run it again after any stop: each stage resumes from its cache or
# newest checkpoint. `make laptop PRESET=gpu` runs the same recipe at a GPU's budget.
PRESET ?= laptop
laptop: $(STAMP)
	$(BIN)/realm pipeline --preset $(PRESET) $(PRECISION_SET)
	$(BIN)/realm record --preset $(PRESET) $(PRECISION_SET) --json bench/results/$(PRESET).json

# Do the pretraining runs' readers copy a span from the block that holds it, and did REALM's
# retriever learn to bring that block (docs/experiments/realm-gain.md, the reading table)? The
# readers of the runs `experiments/pretrain.py` trained at the same config are measured; about
# 10 minutes on 2 cores. READING_NAME names its result file.
READING_ARGS ?= --eval-examples 0
READING_NAME ?= realm_reading_gain
realm-reading: $(STAMP)
	$(BIN)/python experiments/realm_reading.py --config experiments/configs/realm_gain.yaml $(READING_ARGS) \
		--name $(READING_NAME) $(PRECISION_SET)
	$(BIN)/python bench/readme_tables.py $(READING_NAME)

# REALM Table 2 at a 2-core pretraining budget: every ablation row (docs/experiments/table-2.md).
realm-table: $(STAMP)
	$(BIN)/python experiments/pretrain.py --table --config experiments/configs/realm_table.yaml --name realm_table $(PRECISION_SET)
	$(BIN)/python bench/readme_tables.py

# REALM Table 1 on the demo corpus (docs/experiments/table-1.md): every system with the same
# budgets, evaluated in one run with paired intervals. OPENQA_JSON names the results file; the
# committed experiments/results/openqa.json is the fp32 run (PRECISION=fp32).
OPENQA_JSON ?= experiments/results/openqa.json
openqa-table: $(STAMP)
	$(BIN)/realm evaluate --preset demo --config experiments/configs/openqa_table.yaml $(PRECISION_SET) --json $(OPENQA_JSON)
	$(BIN)/python bench/readme_tables.py

# The open-domain phase of open-QA fine-tuning, measured for ICT apart from the table
# (docs/experiments/open-phase.md): every run and pairing listed in
# experiments/configs/open_phase.yaml, each run through the artifact cache (run it again after a
# stop and it resumes). Hours on 2 cores after `make openqa-table`: the page gives each run's cost.
# OPEN_PHASE_ARGS='--only ict --only ict_open' runs a subset; `--list` prints each run's command.
OPEN_PHASE_ARGS ?=
openqa-open-phase: $(STAMP)
	$(BIN)/python experiments/open_phase.py $(PRECISION_SET) $(OPEN_PHASE_ARGS)

# ICT against RetroMAE (enhanced and plain decoder) at one budget, zero-shot and after REALM
# pretraining and SQuAD-open fine-tuning (docs/experiments/warm-starts.md). WARM_START_ARGS=
# trains at the preset's budget instead of 40 steps each.
WARM_START_ARGS ?= --steps 40 --openqa
warm-start-table: $(STAMP)
	$(BIN)/python experiments/warm_start.py $(WARM_START_ARGS)
	$(BIN)/python bench/readme_tables.py

# The retrieval table: BM25 / untrained / ICT / reference on the demo preset (docs/stages/warm-start.md).
retrieval-table: $(STAMP)
	$(BIN)/python bench/retrieval.py
	$(BIN)/python bench/readme_tables.py

lint: $(STAMP)
	$(BIN)/ruff check realm_core tasks flows tests bench experiments
	$(BIN)/mypy realm_core flows tasks bench
	MYPYPATH=bench $(BIN)/mypy experiments

lock:
	$(BIN)/uv pip compile requirements.in $(TORCH_SOURCE) --python-version 3.11 --no-emit-package realm -o requirements.lock

clean:
	rm -rf $(VENV) work
