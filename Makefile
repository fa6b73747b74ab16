# dlcompare: `make bench` and `make test` set everything up on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

# The install variant (cpu, cuda12, cuda13) comes from this machine's NVIDIA driver, unless given.
VARIANTS := cpu cuda12 cuda13
ifeq ($(origin VARIANT), undefined)
VARIANT := $(shell $(PYTHON) -m harness.install.variant choose)
endif
ifeq ($(filter $(VARIANT),$(VARIANTS)),)
$(error VARIANT=$(VARIANT) is not an install variant; valid: $(VARIANTS))
endif
STAMP := $(VENV)/.installed-$(VARIANT)
# The variant's environments beside $(VENV), NAME:LOCK each: one CUDA major per environment
# (TensorFlow's CUDA 12 stack in $(VENV)-tf on the GPU variants); none on cpu.
EXTRA_ENVS := $(shell $(PYTHON) -m harness.install.variant extra $(VARIANT))
ALL_EXTRA := $(VENV)-tf

FRAMEWORK ?= all
DEVICE ?= auto
# make bench's workloads: the mission's three unless given (WORKLOAD=all: every workload).
ifeq ($(origin WORKLOAD), undefined)
BENCH_WORKLOAD := mlp,cnn,rnn-caption
else
BENCH_WORKLOAD := $(WORKLOAD)
endif
WORKLOAD ?= all
PROFILE ?= quick
# default: each variable-length workload's own strategy; all: every strategy and attention kernel.
STRATEGY ?= default
# The run's time budget: verdicts settle within it (harness.running.turns); empty: the profile's fixed
# rounds. 30 minutes for the default three workloads, 1 hour for WORKLOAD=all, 10 minutes for a MODEL file.
ifeq ($(origin BUDGET), undefined)
BUDGET := $(if $(MODEL),10m,$(if $(filter all,$(BENCH_WORKLOAD)),1h,30m))
endif
DATA ?= resident
PRECISION ?= fp32
# FORCE=1: time a precision the device only emulates (bf16 without bfloat16 instructions) instead of skipping it.
FORCE ?=
# PROFILE_OPS=1: a profiled pass per cell after its timing, each framework's profiler (docs/profiling.md).
PROFILE_OPS ?=
ARGS ?=
# MODEL=my_model.py: a Keras 3 model file as the workload, on every Keras backend (docs/your-keras-model.md).
MODEL ?=
CALIBRATION ?=
# LOAD=rank: on a machine that never quiets, rank the cells that ran beside other CPU load, the load
# stated beside every verdict (--rank-under-load); empty: such cells are shown, never ranked.
LOAD ?=
ifeq ($(filter $(LOAD),rank),)
ifneq ($(LOAD),)
$(error LOAD=$(LOAD) is not a load policy; valid: rank, or empty (contended cells not ranked))
endif
endif
BENCH_ARGS = $(if $(MODEL),--model $(MODEL)) $(if $(CALIBRATION),--calibration $(CALIBRATION)) $(if $(LOAD),--rank-under-load) --framework $(FRAMEWORK) --device $(DEVICE) --workload $(BENCH_WORKLOAD) --profile $(PROFILE) --strategy $(STRATEGY) --data $(DATA) --precision $(PRECISION) $(if $(BUDGET),--budget $(BUDGET)) $(if $(filter 1 yes true,$(FORCE)),--force-precision) $(if $(filter 1 yes true,$(PROFILE_OPS)),--profile-ops) $(ARGS)

.PHONY: install bench crossover export test test-fast lint list report sweep compare rerun fidelity doctor lock lock-check lock-diff env calibrate clean-venv gpu-check gpu-study

# A GPU variant's locks install from the registry alone, whatever this machine's pip configuration
# offers (a local torch-2.13.0+cpu wheel satisfies torch==2.13.0); the cpu variant uses it. Each
# environment is then checked for the builds its lock resolved (harness/install/builds.py).
ifeq ($(VARIANT),cpu)
PIP_LOCK := $(PY) -m pip install
else
PIP_LOCK := PIP_CONFIG_FILE=/dev/null $(PY) -m pip install --isolated --index-url https://pypi.org/simple
endif

# What the machine needs (Python, venv, a C compiler and headers, disk) is checked before any
# download (harness/install/prerequisites.py); CHECK_PREREQUISITES=0 skips it.
CHECK_PREREQUISITES ?= 1

# One set of environments holds one variant: switching variants recreates them (tensorflow-cpu and
# tensorflow's CUDA build, for one, cannot share one). Each environment installs its own lock
# (locks/<lock>.txt, every dependency pinned) and this project without dependencies.
$(STAMP): pyproject.toml locks/$(VARIANT).txt $(foreach e,$(EXTRA_ENVS),locks/$(lastword $(subst :, ,$(e))).txt)
	@if ls $(VENV)/.installed-* >/dev/null 2>&1 && [ ! -e $(STAMP) ]; then \
		echo "install variant changed to $(VARIANT): recreating $(VENV) $(ALL_EXTRA)"; rm -rf $(VENV) $(ALL_EXTRA); fi
	$(if $(filter 0 no false,$(CHECK_PREREQUISITES)),,$(PYTHON) -m harness.install.prerequisites $(VARIANT) $(VENV))
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PIP_LOCK) --quiet -r locks/$(VARIANT).txt
	$(PY) -m pip install --quiet --no-deps -e .
	$(PY) -m harness.install.builds $(VARIANT) main
	@for e in $(EXTRA_ENVS); do name=$${e%%:*}; lock=$${e#*:}; folder=$(VENV)-$$name; \
		echo "environment $$name: $$folder from locks/$$lock.txt"; \
		test -x $$folder/bin/python || $(PYTHON) -m venv $$folder || exit 1; \
		$$folder/bin/python -m pip install --quiet --upgrade pip || exit 1; \
		$(subst $(PY),$$folder/bin/python,$(PIP_LOCK)) --quiet -r locks/$$lock.txt || exit 1; \
		$$folder/bin/python -m pip install --quiet --no-deps -e . || exit 1; \
		$$folder/bin/python -m harness.install.builds $(VARIANT) $$name || exit 1; \
		echo $(VARIANT) > $$folder/dlcompare-variant; done
	$(PY) -m harness.install.environments --record $(VARIANT)
	echo $(VARIANT) > $(VENV)/dlcompare-variant
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

bench: $(STAMP)
	$(PY) -m harness bench $(BENCH_ARGS)

# Export, reload in a fresh process and serve each model (docs/export.md): FRAMEWORK, DEVICE, WORKLOAD
# (default: the task's own, mlp and cnn), PATHS (export paths, default all), ARGS (any other option).
PATHS ?= all
export: $(STAMP)
	$(PY) -m harness export --framework $(FRAMEWORK) --device $(DEVICE) --path $(PATHS) $(if $(filter-out all,$(WORKLOAD)),--workload $(WORKLOAD)) $(ARGS)

# The suite runs in TEST_WORKERS test processes (pytest-xdist), each test file whole in one of them,
# so that a file's module fixtures and the conformance pool (tests/conftest.py) run once: on 2 cores
# one process's imports and compiles, mostly single-threaded, overlap the other's work. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

# The harness-logic tests alone (no framework, worker or subprocess; no seconds of NumPy reference work).
test-fast: $(STAMP)
	$(PY) -m pytest -m "not frameworks and not workers and not slow"

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

list: $(STAMP)
	$(PY) -m harness list

report: $(STAMP)
	$(PY) -m harness report $(RUN) $(ARGS)

doctor: $(STAMP)
	$(PY) -m harness doctor

# Re-resolve every environment's lock file from locks/<lock>.in (package metadata only; the GPU
# locks from the registry alone, not this machine's pip configuration).
lock: $(STAMP)
	$(PY) -m harness.install.lock
	$(PY) -m harness.install.wheel_files

# Each lock checked: its stored metadata consistent (every requirement pinned at a version it
# accepts), and pip's dry-run install of the lock with every dependency resolving as pinned.
lock-check: $(STAMP)
	$(PY) -m harness.install.lock --check

# What .venv holds that differs from its lock (a plugin's framework, and what it changed).
lock-diff: $(STAMP)
	$(PY) -m harness.install.builds diff $(VARIANT)

# The first-GPU self-test: install, doctor with the CUDA libraries each framework maps, a
# one-kernel smoke test per framework, the conformance checks on cuda, the CUDA tests and a
# short mlp bench, into one folder (GPU_CHECK). On a machine without a GPU it says what it would verify.
GPU_CHECK ?= reports/gpu-check-$(shell date +%Y%m%d-%H%M%S)
GPU_CHECK_BUDGET ?= 10m
# GPU_CHECK_STEPS=cuda-tests,bench: only those steps (a short lease); the summary lists the others as left out.
GPU_CHECK_STEPS ?=
# INSTALL=0: check the frameworks $(PYTHON) already holds (a GPU image's own) instead of installing the locks.
INSTALL ?= 1
gpu-check:
	@mkdir -p $(GPU_CHECK)
ifeq ($(filter 0 no false,$(INSTALL)),)
	@$(MAKE) --no-print-directory install > $(GPU_CHECK)/install.log 2>&1 || { tail -n 20 $(GPU_CHECK)/install.log; \
		printf '# make gpu-check: make install failed\n\nIt said: %s\n\nIts whole output: install.log\n' \
			"$$(grep -m 1 '^error:' $(GPU_CHECK)/install.log || tail -n 1 $(GPU_CHECK)/install.log)" \
			> $(GPU_CHECK)/summary.md; \
		echo "gpu-check: make install failed: $(GPU_CHECK)/install.log"; exit 2; }
	$(PY) -m harness.checks.gpu_check $(GPU_CHECK) --budget $(GPU_CHECK_BUDGET) $(if $(GPU_CHECK_STEPS),--steps $(GPU_CHECK_STEPS)) $(ARGS)
else
	$(PYTHON) -m harness.checks.gpu_check $(GPU_CHECK) --budget $(GPU_CHECK_BUDGET) --no-install $(if $(GPU_CHECK_STEPS),--steps $(GPU_CHECK_STEPS)) $(ARGS)
endif

# The GPU user's first answer in one command (harness/gpu_study.py): the crossover, every adapter on
# mlp, cnn and rnn-caption on cuda, the input-pipeline sweep on cuda and the test suite, each run into
# GPU_STUDY (default evidence/gpu-study-<gpu>-<day>) beside NOTES.md; about an hour on one GPU.
# GPU_STUDY_STEPS=crossover,bench: only those; INSTALL=0: the image's own frameworks; DRY_RUN=1: the commands.
GPU_STUDY ?=
GPU_STUDY_STEPS ?=
DRY_RUN ?=
GPU_STUDY_ARGS = $(if $(GPU_STUDY),--out $(GPU_STUDY)) $(if $(GPU_STUDY_STEPS),--steps $(GPU_STUDY_STEPS)) $(if $(filter 1 yes true,$(DRY_RUN)),--dry-run) $(ARGS)
ifeq ($(filter 0 no false,$(INSTALL)),)
gpu-study: $(STAMP)
	$(PY) -m harness.gpu_study $(GPU_STUDY_ARGS)
else
gpu-study:
	$(PYTHON) -m harness.gpu_study --no-install $(GPU_STUDY_ARGS)
endif

# A named environment over .venv with other versions, for `--env NAME=.venv-NAME/bin/python`:
# make env ENV_NAME=torch-2.12 PACKAGES="torch==2.12.0"
env: $(STAMP)
	$(PY) -m harness.install.environments $(ENV_NAME) $(PACKAGES)

# A/A calibration of the verdict rules: identical and slowed twins, many repeats (about 1 minute each here).
REPEATS ?= 12
calibrate: $(STAMP)
	$(PY) -m harness calibrate --framework $(if $(filter all,$(FRAMEWORK)),torch-eager,$(FRAMEWORK)) --workload $(if $(filter all,$(WORKLOAD)),mlp,$(WORKLOAD)) --repeats $(REPEATS) $(ARGS)

clean-venv:
	rm -rf $(VENV)

SWEEP ?= batch_size=16,32,64,128,256,512,1024

sweep: $(STAMP)
	$(PY) -m harness sweep --framework $(FRAMEWORK) --device $(DEVICE) --workload $(if $(filter all,$(WORKLOAD)),mlp,$(WORKLOAD)) --profile $(PROFILE) --data $(DATA) --sweep $(SWEEP) $(if $(LOAD),--rank-under-load) $(ARGS)

# CPU against GPU along the mlp's width and the batch, taking turns in one run: where the GPU starts
# to win (harness crossover: torch-eager, 16 cells, 12 minutes; docs/commands.md). FRAMEWORK,
# SWEEP and BUDGET given here replace its defaults; a CPU-only machine is told so and nothing runs.
crossover: $(STAMP)
	$(PY) -m harness crossover $(if $(filter command line,$(origin FRAMEWORK)),--framework $(FRAMEWORK)) $(if $(filter command line,$(origin SWEEP)),--sweep '$(SWEEP)') $(if $(filter command line,$(origin BUDGET)),--budget $(BUDGET)) $(if $(LOAD),--rank-under-load) $(ARGS)

compare: $(STAMP)
	$(PY) -m harness compare $(A) $(B) $(ARGS)

# The rerun experiment: the same bench twice, back to back, then compared. Identical code should
# come out neither faster nor slower, with no "fastest" verdict of one run contradicted by the other.
ifeq ($(origin RERUN), undefined)
RERUN := reports/rerun-$(shell date +%Y%m%d-%H%M%S)
endif

rerun: $(STAMP)
	$(PY) -m harness bench $(BENCH_ARGS) --out $(RERUN) --run-id a
	$(PY) -m harness bench $(BENCH_ARGS) --out $(RERUN) --run-id b
	$(PY) -m harness compare $(RERUN)/a $(RERUN)/b

# The fidelity check: each adapter beside its framework's idiomatic script (fidelity/), mlp at
# batch 32 and 1024, interleaved rounds; writes fidelity.md next to report.md.
fidelity: $(STAMP)
	$(PY) -m harness fidelity --framework $(FRAMEWORK) --device $(DEVICE) --profile $(PROFILE) $(ARGS)
