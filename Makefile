# dlcompare: `make bench` and `make test` set everything up on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

FRAMEWORK ?= all
DEVICE ?= auto
WORKLOAD ?= all
PROFILE ?= quick
STRATEGY ?= all
DATA ?= resident
PRECISION ?= fp32
ARGS ?=

.PHONY: bench test lint list report sweep compare clean-venv

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[all,dev]'
	touch $(STAMP)

bench: $(STAMP)
	$(PY) -m harness bench --framework $(FRAMEWORK) --device $(DEVICE) --workload $(WORKLOAD) --profile $(PROFILE) --strategy $(STRATEGY) --data $(DATA) --precision $(PRECISION) $(ARGS)

test: $(STAMP)
	$(PY) -m pytest

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

list: $(STAMP)
	$(PY) -m harness list

report: $(STAMP)
	$(PY) -m harness report $(RUN) $(ARGS)

clean-venv:
	rm -rf $(VENV)

SWEEP ?= batch_size=16,32,64,128,256,512,1024

sweep: $(STAMP)
	$(PY) -m harness sweep --framework $(FRAMEWORK) --device $(DEVICE) --workload $(if $(filter all,$(WORKLOAD)),mlp,$(WORKLOAD)) --profile $(PROFILE) --sweep $(SWEEP) $(ARGS)

compare: $(STAMP)
	$(PY) -m harness compare $(A) $(B) $(ARGS)
