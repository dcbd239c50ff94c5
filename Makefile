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
# `make openqa-table PRECISION=fp32` (or realm-table, pretrain-table) runs a table in fp32, as
# every table measured before 2026-11-27 was.
PRECISION ?=
PRECISION_SET := $(if $(PRECISION),--set precision=$(PRECISION))
QA_PORT ?= 8000
# torch's CPU wheel: pip's find-links folder where there is one (uv does not read pip's
# config), else PyTorch's CPU index. Never the CUDA build.
FIND_LINKS ?= $(shell $(PYTHON) -m pip config list 2>/dev/null | sed -n "s/.*find-links='\([^']*\)'.*/\1/p" | head -1)
TORCH_SOURCE := $(if $(FIND_LINKS),--find-links $(FIND_LINKS),--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match)

.PHONY: venv demo test test-fast test-slow serve serve-qa stop bench retrieval-table pretrain-table realm-mechanism realm-gain realm-table openqa-table openqa-open-phase warm-start-table scaling-table lock lint clean

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
	@# the commit form CONTRIBUTING.md asks for, checked at each commit of this clone
	@git rev-parse --git-dir >/dev/null 2>&1 && git config core.hooksPath .githooks || true
	@touch $(STAMP)
	@mkdir -p $(PREFECT_HOME)

demo: $(STAMP)
	@mkdir -p $(PREFECT_HOME)
	$(BIN)/python -m flows.demo

# Each tier names its ten slowest tests, so CI's log says where the 30-minute budget goes.
test: $(STAMP)
	$(BIN)/python -m pytest tests -m "not slow" -q --durations=10
	$(BIN)/python -m pytest tests -m slow -q --durations=10

test-fast: $(STAMP)
	$(BIN)/python -m pytest tests -m "not slow" -q

serve: $(STAMP)
	bash flows/serve.sh start $(PORT)

# The query side after `make demo`: a page and an HTTP API on 127.0.0.1:$(QA_PORT).
serve-qa: $(STAMP)
	$(BIN)/realm serve-qa --port $(QA_PORT)

stop:
	bash flows/serve.sh stop

# Every benchmark (about an hour on 2 cores), then README's tables from bench/results/*.json.
bench: $(STAMP)
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/spans.py
	$(BIN)/python bench/embed.py
	$(BIN)/python bench/mips.py
	$(BIN)/python bench/retrieval.py
	$(BIN)/python bench/serve.py
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/pretrain_step.py
	$(BIN)/python bench/pretrain.py
	$(BIN)/python bench/scaling.py
	$(BIN)/python bench/projection.py
	$(BIN)/python bench/readme_tables.py

# README's scaling table and plot: ingest, chunk, spans, embed + index on the corpus replicated
# 1x-16x, time and peak memory per stage (about 10 minutes on 2 cores).
scaling-table: $(STAMP)
	$(BIN)/python bench/scaling.py
	$(BIN)/python bench/projection.py
	$(BIN)/python bench/readme_tables.py

# README's pretraining table and plot: REALM vs the null-only baseline, same budget (demo preset;
# about 36 minutes on 2 cores after `make demo`: reader warm-up 14, REALM 21, null-only 1.5).
pretrain-table: $(STAMP)
	$(BIN)/python bench/pretrain.py $(PRECISION_SET)
	$(BIN)/python bench/readme_tables.py

# REALM's mechanism where the answer is known (docs/experiments/realm_mechanism.md): a synthetic
# corpus of fictional entities through ingest, chunk, spans, the index and pretraining; REALM,
# null-only, a frozen retriever and the reader given the gold block, scored on entities never
# trained on. Extra arguments go to the script, e.g. MECHANISM_ARGS='--set pretrain.steps=2000'.
MECHANISM_ARGS ?=
realm-mechanism: $(STAMP)
	$(BIN)/python bench/realm_mechanism.py $(MECHANISM_ARGS)
	$(BIN)/python bench/readme_tables.py realm_mechanism

# REALM Table 2 on the demo corpus: every ablation row at the pretraining budget of the demo,
# scored on 1,500 held-out spans (bench/configs/realm_table.yaml), paired on the same examples
# where they mask the same spans, and zero-shot recall before and after. Measured 2026-11-26:
# 10,343 s (2 h 52 min) on 2 cores with other jobs beside it at times, the ICT warm start, index
# and reader warm-up included; a row run alone took 10-13 minutes.
realm-table: $(STAMP)
	$(BIN)/python bench/pretrain.py --table --config bench/configs/realm_table.yaml $(PRECISION_SET)
	$(BIN)/python bench/readme_tables.py

# REALM's gain on the demo corpus (bench/configs/realm_gain.yaml): REALM and null-only from the
# same warmed reader, 1,200 steps of 8 with whole blocks read and the retriever frozen for the
# first 300, 1,500 held-out spans, zero-shot SQuAD-open dev recall before and after. Hours on 2
# cores; run it again after a stop and each run resumes from its newest checkpoint. Then the
# open-QA 2x2 (ICT or REALM retriever x warm-up or REALM reader) on the same runs:
#   realm evaluate --preset demo --config bench/configs/realm_gain.yaml --json bench/results/openqa_gain.json
realm-gain: $(STAMP)
	$(BIN)/python bench/pretrain.py --config bench/configs/realm_gain.yaml $(PRECISION_SET)
	$(BIN)/python bench/readme_tables.py

# README's open-QA table (REALM Table 1 layout): every system trained with the same budgets, then
# evaluated in one run with paired intervals, with the two-epoch gold-paragraph phase of
# bench/configs/openqa_table.yaml (25-32 minutes per reader start on 2 cores: MiniLM's, REALM's and
# the null-only run's), pretraining from make realm-table's runs. Measured 2026-11-26: 2 h 0 min
# after make realm-table (three gold phases 84 min, evaluation of eight rows 36 min); after make
# demo alone about 52 min more (the reader warm-up and the two pretraining runs it reads). All of
# that in fp32; the bare command in bf16 (this CPU): 1 h 40 min after make demo (2026-11-27).
# OPENQA_JSON names the results file. The committed bench/results/openqa.json, README's main table,
# is the fp32 run (PRECISION=fp32); the bare command's bf16 run is committed as
# OPENQA_JSON=bench/results/openqa_bf16.json. A bare run without OPENQA_JSON replaces openqa.json.
OPENQA_JSON ?= bench/results/openqa.json
openqa-table: $(STAMP)
	$(BIN)/realm evaluate --preset demo --config bench/configs/openqa_table.yaml $(PRECISION_SET) --json $(OPENQA_JSON)
	$(BIN)/python bench/readme_tables.py

# README's open-domain phase, measured apart from the table (about 21 minutes per system in bf16
# would take make openqa-table past its 2 h target): after the table's gold-paragraph phase, the ICT
# system's reader trains 300 steps of 8 SQuAD-open train questions on its own top-5 blocks, the
# query encoder frozen, best of 3 dev evaluations; with the demo's ICT, with 4x its in-batch
# negatives (60 steps of 1,024 contexts), and with ICT trained on whole 288-wordpiece blocks (the
# demo's 64), the last with the 300-step phase, with one of 600 steps at the phase's lr 5e-5 and at
# 1e-4, and with one of 1,200 steps; and 4x the contexts (60 steps of 1,024) on 288-wordpiece blocks
# with the 600-step phase. Each is paired with the same table's ICT row without the phase, each
# variant with the demo's ICT with the phase, the 600-step phase with the 300-step one, lr 1e-4 with
# 5e-5, 1,200 steps with 600, and 1,024 contexts with 256 (the latter's 1,200-step phase), on the same
# 1,034 test questions.
# After make openqa-table (ICT and the gold phase cached), its parts on 2 cores: the first command
# re-evaluates the table's ICT row (11 min in fp32); each open phase 42 min in fp32 (about 21 in
# bf16) plus a test evaluation (11 min); the 4x ICT about 110 min in fp32 (42 in bf16), the
# 288-wordpiece ICT about 85 min in fp32 (55 in bf16); the fifth command, the same 288-wordpiece
# ICT with a 600-step phase (dev EM every 150 steps), 87 min of phase and 12 of evaluation in fp32;
# the sixth, that phase at lr 1e-4, the same; the seventh, a 1,200-step phase (dev EM every 200 steps),
# 124 min of phase and 10 of evaluation in fp32; the eighth, its ICT about 4.5 h in fp32 (a step of
# 1,024 contexts 240-300 s), then the fifth's phase and evaluation.
# Not yet run as one command: README says which of its commands were run, when, and on which CPU.
OPEN_PHASE := --preset demo --config bench/configs/openqa_table.yaml $(PRECISION_SET) --system ict \
	--set 'openqa_eval.datasets=[squad-open]'
OPEN_STEPS := --set finetune.steps=300 --set finetune.eval_every=100 --set finetune.train_query_encoder=false
OPEN_STEPS_600 := --set finetune.steps=600 --set finetune.eval_every=150 --set finetune.train_query_encoder=false
OPEN_STEPS_1200 := --set finetune.steps=1200 --set finetune.eval_every=200 --set finetune.train_query_encoder=false
ICT_B1024 := --set ict.batch_size=1024 --set ict.micro_batch=256 --set ict.steps=60
ICT_288 := --set ict.block_length=288 --set ict.micro_batch=64
ICT_288_B1024 := $(ICT_288) --set ict.batch_size=1024 --set ict.steps=60
openqa-open-phase: $(STAMP)
	$(BIN)/realm evaluate $(OPEN_PHASE) --json $(REALM_WORK_DIR)/open_phase/ict.json
	$(BIN)/realm evaluate $(OPEN_PHASE) $(OPEN_STEPS) --json $(REALM_WORK_DIR)/open_phase/ict_open.json
	$(BIN)/realm evaluate $(OPEN_PHASE) $(OPEN_STEPS) $(ICT_B1024) --json $(REALM_WORK_DIR)/open_phase/ictb1024_open.json
	$(BIN)/realm evaluate $(OPEN_PHASE) $(OPEN_STEPS) $(ICT_288) --json $(REALM_WORK_DIR)/open_phase/ict288_open.json
	$(BIN)/realm evaluate $(OPEN_PHASE) $(OPEN_STEPS_600) $(ICT_288) --json $(REALM_WORK_DIR)/open_phase/ict288_open600.json
	$(BIN)/realm evaluate $(OPEN_PHASE) $(OPEN_STEPS_600) --set finetune.learning_rate=1e-4 $(ICT_288) --json $(REALM_WORK_DIR)/open_phase/ict288_open600_lr1e-4.json
	$(BIN)/realm evaluate $(OPEN_PHASE) $(OPEN_STEPS_1200) $(ICT_288) --json $(REALM_WORK_DIR)/open_phase/ict288_open1200.json
	$(BIN)/realm evaluate $(OPEN_PHASE) $(OPEN_STEPS_600) $(ICT_288_B1024) --json $(REALM_WORK_DIR)/open_phase/ict288b1024_open600.json
	$(BIN)/python bench/paired_runs.py $(REALM_WORK_DIR)/open_phase/ict_open.json $(REALM_WORK_DIR)/open_phase/ict.json --name openqa_ict_open_test
	$(BIN)/python bench/paired_runs.py $(REALM_WORK_DIR)/open_phase/ictb1024_open.json $(REALM_WORK_DIR)/open_phase/ict.json --name openqa_ictb1024_open_test
	$(BIN)/python bench/paired_runs.py $(REALM_WORK_DIR)/open_phase/ictb1024_open.json $(REALM_WORK_DIR)/open_phase/ict_open.json --name openqa_ictb1024_vs_ict_open_test
	$(BIN)/python bench/paired_runs.py $(REALM_WORK_DIR)/open_phase/ictb1024_open.json $(REALM_WORK_DIR)/open_phase/ict288_open.json --name openqa_ictb1024_vs_ict288_open_test
	$(BIN)/python bench/paired_runs.py $(REALM_WORK_DIR)/open_phase/ict288_open.json $(REALM_WORK_DIR)/open_phase/ict.json --name openqa_ict288_open_test
	$(BIN)/python bench/paired_runs.py $(REALM_WORK_DIR)/open_phase/ict288_open.json $(REALM_WORK_DIR)/open_phase/ict_open.json --name openqa_ict288_vs_ict_open_test
	$(BIN)/python bench/paired_runs.py $(REALM_WORK_DIR)/open_phase/ict288_open600.json $(REALM_WORK_DIR)/open_phase/ict.json --name openqa_ict288_600_open_test
	$(BIN)/python bench/paired_runs.py $(REALM_WORK_DIR)/open_phase/ict288_open600.json $(REALM_WORK_DIR)/open_phase/ict288_open.json --name openqa_ict288_600_vs_300_open_test
	$(BIN)/python bench/paired_runs.py $(REALM_WORK_DIR)/open_phase/ict288_open600.json $(REALM_WORK_DIR)/open_phase/ict_open.json --name openqa_ict288_600_vs_ict_open_test
	$(BIN)/python bench/paired_runs.py $(REALM_WORK_DIR)/open_phase/ict288_open600_lr1e-4.json $(REALM_WORK_DIR)/open_phase/ict.json --name openqa_ict288_600_lr1e-4_open_test
	$(BIN)/python bench/paired_runs.py $(REALM_WORK_DIR)/open_phase/ict288_open600_lr1e-4.json $(REALM_WORK_DIR)/open_phase/ict288_open600.json --name openqa_ict288_600_lr1e-4_vs_5e-5_open_test
	$(BIN)/python bench/paired_runs.py $(REALM_WORK_DIR)/open_phase/ict288_open1200.json $(REALM_WORK_DIR)/open_phase/ict.json --name openqa_ict288_1200_open_test
	$(BIN)/python bench/paired_runs.py $(REALM_WORK_DIR)/open_phase/ict288_open1200.json $(REALM_WORK_DIR)/open_phase/ict288_open600.json --name openqa_ict288_1200_vs_600_open_test
	$(BIN)/python bench/paired_runs.py $(REALM_WORK_DIR)/open_phase/ict288b1024_open600.json $(REALM_WORK_DIR)/open_phase/ict.json --name openqa_ict288b1024_600_open_test
	$(BIN)/python bench/paired_runs.py $(REALM_WORK_DIR)/open_phase/ict288b1024_open600.json $(REALM_WORK_DIR)/open_phase/ict288_open1200.json --name openqa_ict288b1024_600_vs_ict288_1200_open_test
	$(BIN)/python bench/readme_tables.py openqa_ict_open_test

# README's warm-start comparison: ICT vs RetroMAE (enhanced and plain decoder), one budget, one
# retrieval evaluation. README's table is the default: every warm start at 40 steps (the preset's
# 150 are about 2 h of CPU per RetroMAE variant at 45 s/step on 2 cores), then REALM pretraining and
# SQuAD-open fine-tuning from ICT and from RetroMAE (--openqa); about 2.2 h in all.
# WARM_START_ARGS= trains at the preset's budget.
WARM_START_ARGS ?= --steps 40 --openqa
warm-start-table: $(STAMP)
	$(BIN)/python bench/warm_start.py $(WARM_START_ARGS)
	$(BIN)/python bench/readme_tables.py

# README's retrieval table: BM25 / untrained / ICT / reference on the demo preset (reuses `make demo`'s cache).
retrieval-table: $(STAMP)
	$(BIN)/python bench/retrieval.py
	$(BIN)/python bench/readme_tables.py

lint: $(STAMP)
	$(BIN)/ruff check realm_core tasks flows tests bench
	$(BIN)/mypy realm_core flows tasks bench

lock:
	$(BIN)/uv pip compile requirements.in $(TORCH_SOURCE) --python-version 3.11 --no-emit-package realm -o requirements.lock

clean:
	rm -rf $(VENV) work
