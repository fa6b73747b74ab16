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
DATA ?= all
PRECISION ?= fp32
ARGS ?=

.PHONY: bench test lint list report clean-venv

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
	$(PY) -m harness report $(RUN)

clean-venv:
	rm -rf $(VENV)
