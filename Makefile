# vdrnn: the everyday commands. `make help` lists them.
PYTHON ?= python3
ARGS ?=

.PHONY: help install test test-unit lint train sweep tensorboard bench tables reproduce-medium reproduce-large \
	reproduce-wt2-medium reproduce-wt2-large

help:
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

install: ## pip install torch==2.13.0 from pip's configured index (from PyPI on Linux the CUDA build; the CPU-only one: README, Set up), then vdrnn and its dev tools
	$(PYTHON) -m pip install torch==2.13.0
	$(PYTHON) -m pip install -e '.[dev]'

test: ## run the whole test suite, a worker per core (real data from $VDRNN_DATA_DIR; tests needing it skip without)
	$(PYTHON) -m pytest -q -n auto

test-unit: ## only the fast unit tests (no subprocess training runs)
	$(PYTHON) -m pytest -q -n auto -m "not slow"

lint: ## static checks
	$(PYTHON) -m ruff check vdrnn tests scripts

train: ## train one model: make train ARGS="dropout=zaremba seed=2"
	vdrnn train $(ARGS)

sweep: ## the five PTB schemes x 3 seeds, medium model: make sweep ARGS="trainer.epochs=10"
	vdrnn train -m dropout=none,zaremba,moon,variational,variational_untied seed=1,2,3 $(ARGS)

tensorboard: ## compare runs: make tensorboard LOGDIR=multirun/2026-11-26
	tensorboard --logdir $(or $(LOGDIR),.)

bench: ## time a training step against cuDNN (needs CUDA)
	$(PYTHON) scripts/bench.py $(ARGS)

tables: ## rewrite every table under results/ from its committed runs (ARGS=--check: compare only)
	$(PYTHON) scripts/tables.py $(ARGS)

reproduce-medium: ## every Table 1 row, medium model, 2 seeds (ARGS="--gpus 0 1 -- trainer.amp=bf16": GPUs, then overrides); rerun to resume; report in runs/ptb-medium/report
	$(PYTHON) scripts/reproduce.py --size medium --seeds 1 2 $(ARGS)

reproduce-large: ## the same for the large model
	$(PYTHON) scripts/reproduce.py --size large --seeds 1 2 $(ARGS)

reproduce-wt2-medium: ## the WikiText-2 table's medium rows, 2 seeds; report in runs/wt2-medium/report
	$(PYTHON) scripts/reproduce.py --corpus wt2 --size medium --seeds 1 2 $(ARGS)

reproduce-wt2-large: ## the same for the large model
	$(PYTHON) scripts/reproduce.py --corpus wt2 --size large --seeds 1 2 $(ARGS)
