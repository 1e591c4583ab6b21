# Two commands do all the set-up on a fresh machine (Python 3.11 + pip): `make demo`, `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Every package of a venv, torch included, comes from a lock with hashes (requirements/*.lock),
# so a fresh machine installs exactly what the last green CI ran; `make lock` refreshes them.
LOCK := requirements/main.lock
# The XLA lane: torch_xla X.Y needs torch X.Y exactly (requirements/xla.in).
XLA_VENV ?= .venv-xla
XLA_PY := $(XLA_VENV)/bin/python
XLA_LOCK := requirements/xla.lock
UV_COMPILE = $(VENV)/bin/uv pip compile --quiet --upgrade --generate-hashes \
	--custom-compile-command "make lock"
# One lane per hosted image of images.toml (tests/lanes.py builds them with uv).
LANES_DIR ?= .lanes
JOBS ?= 2
# xdist hands out single tests, so a module-scoped fixture ran once per worker that got one of
# its tests (the MSHNet TPU notebook, 630-995 s, twice in the XLA lane): --dist loadscope hands
# out whole modules. (loadgroup would pick modules, but pytest 9 ignores its xdist_group marks:
# xdist 3.8 renames node ids through an attribute pytest 9 no longer reads.) The balance cost
# is small: on the last measured main lane, whole modules greedily on two workers came within
# 3% of an even split of every test.
XDIST = -n $(JOBS) --dist loadscope
# Tests run JOBS workers, each starting notebook kernels and subprocesses: one intra-op
# thread apiece keeps 2 cores from thrashing (torch's default would take every core each).
# The main lane runs one worker more than the cores: many of its tests wait (the Drive
# stand-in's latency and bandwidth, the Kaggle and Colab stand-ins' polls, kills timed by
# what a run wrote); a third worker computes meanwhile. On the 2-core CI machine: 1,239 s at
# -n 2 (vmstat: 12% of the CPU idle), 1,026 s at -n 3 (1.4% idle), the same 1,243 tests.
MAIN_JOBS ?= 3
# The main and quick lanes' notebook kernels are forked from one process per worker that
# imported torch and the rest once (tests/kernel_zygote.py: where that would not be what a fresh
# kernel is, a real one starts). Not the image lanes: their bootstraps install packages. Not the
# XLA lane: its workers import torch_xla, which sets PJRT_DYNAMIC_PLUGINS, so none would fork.
# Inductor's compile threads are one, as the intra-op threads are: its config reads the count
# when imported, and bench.bench_compile (run in a worker by the bench smoke tests) set it to 1
# in the worker's environment mid-lane, so every kernel after it differed from the zygote's.
KERNELS = TA_KERNEL_ZYGOTE=1 TORCHINDUCTOR_COMPILE_THREADS=1

.PHONY: install install-xla lock fuse lanes demo test test-quick test-main test-main-tests \
	test-quick-tests test-slurm test-xla test-lanes clean-xla lint notebooks check \
	bench clean gpu-check gpu-wheels coverage docs docs-deps system-deps

# A venv $(1) with exactly the packages of lock $(2), then the library itself (no deps: the
# lock has them all). pip installs only uv (the lock's version and hashes); uv installs the rest:
# parallel downloads and unpacking, 83 s on a fresh machine where pip took 185-213 s (CI's
# measured install phase). Its cache is inside the venv, removed once installed (uv links the
# venv's files to it: the venv is the one copy of its 6.8 GB). --compile-bytecode: the .pyc
# files pip wrote, which a machine with PYTHONDONTWRITEBYTECODE=1 (this one, CI's) would
# otherwise never write: every process would compile torch's sources again (17 s a torch import
# instead of 4). First one line, not pip's "no matching distribution", when PYTHON is too old (a
# Mac's python3 is Apple's 3.9).
define make_venv
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; sys.exit(0 if v >= (3, 11) else \
	"make: PYTHON=$(PYTHON) is Python %d.%d; train-anywhere needs 3.11 or newer: install one " \
	"(python.org, or brew install python@3.12 on a Mac) and run make again with PYTHON=python3.12" % v)'
	$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install --quiet --upgrade pip
	awk '/^uv==/ {on = 1} on {print} on && !/\\$$/ {exit}' $(2) > $(1)/uv.txt
	$(1)/bin/python -m pip install --quiet --no-cache-dir --require-hashes --no-deps -r $(1)/uv.txt
	UV_CACHE_DIR=$(1)/.uv-cache $(1)/bin/uv pip install --quiet --compile-bytecode \
		--python $(1)/bin/python --require-hashes --no-deps -r $(2)
	UV_CACHE_DIR=$(1)/.uv-cache $(1)/bin/uv pip install --quiet --python $(1)/bin/python \
		--no-deps -e .
	$(1)/bin/uv pip check --quiet --python $(1)/bin/python
	rm -rf $(1)/.uv-cache $(1)/uv.txt
	touch $@
endef

install: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml $(LOCK)
	$(call make_venv,$(VENV),$(LOCK))

# The XLA venv through uv (the main venv's): parallel downloads, and a cache of its own inside
# it, removed once installed (uv links the venv's files to it, so the venv holds the one copy
# of its 7.6 GB and `make clean-xla` frees all of it; the suite does once the XLA lane passed).
XLA_UV = UV_CACHE_DIR=$(XLA_VENV)/.uv-cache $(VENV)/bin/uv
install-xla: $(XLA_VENV)/.installed
$(XLA_VENV)/.installed: pyproject.toml $(XLA_LOCK) $(VENV)/.installed
	rm -rf $(XLA_VENV)
	$(VENV)/bin/uv venv --quiet --seed --python $(PYTHON) $(XLA_VENV)
	$(XLA_UV) pip install --quiet --python $(XLA_PY) --require-hashes --no-deps -r $(XLA_LOCK)
	$(XLA_UV) pip install --quiet --python $(XLA_PY) --no-deps -e .
	$(XLA_UV) pip check --quiet --python $(XLA_PY)
	rm -rf $(XLA_VENV)/.uv-cache
	touch $@

clean-xla:
	rm -rf $(XLA_VENV)

# Refresh every lock to the newest versions the ranges allow (README, "Locked versions"); then
# `make test` proves them and the commit carries them. main.lock covers Linux, macOS and
# Python 3.11+ (markers pick per machine); the hosted images' bootstrap locks follow images.toml.
# Not in main.lock: rfc3987-syntax (and lark, its one use), an optional format checker of
# jsonschema's format-nongpl extra (jupyter-events asks for it). jsonschema imports it when
# present, and it builds a grammar on import: 2.3 s of CPU in every process that reads a
# notebook (nbformat), each `train-anywhere` command and each papermill run among them. Without
# it jsonschema leaves those formats unchecked ("iri"), as its documentation says of any
# format whose checker is not installed; pip check does not ask for an extra's packages.
lock: install
	$(UV_COMPILE) --universal --python-version 3.11 --extra dev --extra jupyter \
		--extra docs --no-emit-package rfc3987-syntax --no-emit-package lark \
		pyproject.toml requirements/main.in -o $(LOCK)
	$(UV_COMPILE) --python-platform x86_64-manylinux_2_28 --python-version 3.11 --extra dev \
		pyproject.toml requirements/xla.in -o $(XLA_LOCK)
	$(PY) -m tests.lanes lock

# The Drive stand-in (tests/drive_fuse.py) mounts a FUSE file system: it needs Debian's fuse3
# (libfuse3 and fusermount3) and /dev/fuse. Installed here when missing (CI runs as root).
fuse:
	@if command -v fusermount3 >/dev/null && ldconfig -p | grep -q libfuse3; then :; else \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 && \
	  apt-get clean; fi
	@test -e /dev/fuse || { echo "make fuse: /dev/fuse is missing: the Drive stand-in needs \
	a machine (or container) with FUSE (docker run --device /dev/fuse --cap-add SYS_ADMIN)"; \
	exit 1; }

# The one target that renders: a notebook edited by hand, or run in place with its cells current,
# is kept as it is and named, with what to run (build_notebooks.py --carry-back / --force).
notebooks: install
	$(PY) build_notebooks.py

check: install
	$(PY) build_notebooks.py --check

lint: install
	$(VENV)/bin/ruff check .

demo: notebooks
	$(PY) -m lib.cli.demo

# The whole suite, measured (tests/suite.py): installs, lint, --check, the main lane (the XLA
# venv is built beside it, downloads and unpacking, and the Slurm lane runs, its cells mostly
# waiting), the XLA lane with the image lanes beside it; then a table of each phase's seconds
# and the peak disk used. Standard library only: no venv needed yet.
test:
	$(PYTHON) -m tests.suite

# The inner loop (at most 5 minutes here): lint, --check, the unit tests and one notebook per
# workload (tests marked `quick`), measured the same way.
test-quick:
	$(PYTHON) -m tests.suite --quick

test-main: install fuse docs-deps lint check test-main-tests

# tmp_path folders of passed tests are removed as each test ends (pyproject:
# tmp_path_retention_policy), so the lane's disk is what its running tests hold.
test-main-tests: install fuse docs-deps
	OMP_NUM_THREADS=1 $(PY) -m tests.environment
	$(KERNELS) OMP_NUM_THREADS=1 $(PY) -m pytest -n $(MAIN_JOBS) --dist loadscope --durations=30 \
		-m "not xla and not lane and not slurm" tests

test-quick-tests: install
	$(KERNELS) OMP_NUM_THREADS=1 $(PY) -m pytest $(XDIST) --durations=10 \
		-m "quick or not (notebook or xla or lane or slurm or slow)" tests

# `sweep --on slurm` against a real single-node Slurm: tests/slurm_cluster.py installs Debian's
# slurm-wlm and munge when missing (root), starts munged/slurmctld/slurmd on a generated
# slurm.conf in a temporary folder, runs this pytest and stops them whatever happened. One
# worker: the tests share the one node's queue. Not root / not Debian: it says so, and the
# sweep runs on submitit's local executor (the scheduler's tests listed as skipped, -rs).
test-slurm: install
	OMP_NUM_THREADS=1 $(PY) -m tests.slurm_cluster run -- \
		$(PY) -m pytest -n 0 -rs -m slurm tests/test_sweep_slurm.py

# XLA_FLAGS: the TPU stand-in's LLVM level, as tests/notebook_run.py XLA_ON_CPU (why: there).
# uv writes no bytecode, and a machine with PYTHONDONTWRITEBYTECODE=1 (this one, CI's) would have
# every process compile torch's and torch_xla's sources again (13 s of CPU each: 74 s of the
# lane's 458 s of CPU, measured): the first writes it, inside the XLA venv (gone with it).
XLA_PYC = PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/$(XLA_VENV)/.pycache
test-xla: install-xla
	OMP_NUM_THREADS=1 $(XLA_PY) -m tests.environment
	$(XLA_PYC) PJRT_DEVICE=CPU XLA_FLAGS=--xla_backend_optimization_level=0 \
		$(XLA_PY) -m pytest $(XDIST) --durations=30 -m xla tests

# Every lane, built from nothing and kept (to look into one: then `python -m tests.lanes test`).
lanes: install
	TA_LANES_DIR=$(LANES_DIR) $(PY) -m tests.lanes build

# Each lane built from nothing (a lane holds the image's pins and nothing else, so the
# bootstrap's installs are tested on every run), its notebooks run in order in one pytest, then
# removed (5-7 GB each; a failed one is kept) with what only it used of the lanes' shared uv
# cache: JOBS lanes at a time, so at most JOBS on disk, their common CUDA libraries once.
test-lanes: install
	TA_LANES_DIR=$(LANES_DIR) OMP_NUM_THREADS=1 JOBS=$(JOBS) $(PY) -m tests.lanes run

# Line and branch coverage of lib/ and build_notebooks.py over the main and XLA lanes, every
# process the tests start included, combined into one report (BENCHMARKS.md, "The suite").
COV_DIR := $(CURDIR)/.coverage-data
coverage: install install-xla fuse
	rm -rf $(COV_DIR) && mkdir -p $(COV_DIR)
	-COVERAGE_FILE=$(COV_DIR)/cov OMP_NUM_THREADS=1 $(PY) -m coverage run -m pytest -q \
		$(XDIST) -p no:cacheprovider -m "not xla and not lane and not slurm" tests
	-COVERAGE_FILE=$(COV_DIR)/cov PJRT_DEVICE=CPU OMP_NUM_THREADS=1 $(XLA_PY) -m coverage run \
		-m pytest -q $(XDIST) -p no:cacheprovider -m xla tests
	$(PY) -m coverage combine --quiet --data-file=$(COV_DIR)/cov
	@# -i: files a test wrote in a temporary folder and removed (a scaffolded workload, the bench's
	@# copy of build_notebooks.py) have no source left to report; the project's files all do.
	$(PY) -m coverage report -i --data-file=$(COV_DIR)/cov 2>/dev/null | grep -E "^(Name|TOTAL)"
# The documentation site, from nothing: each workload's local notebook run once by papermill
# (SMOKE on the offline sample, on the CPU), the pages around them, sphinx-build -W; open
# docs/_build/html/index.html (offline). tests/test_docs_site.py builds it and checks it in
# Debian's chromium, which `docs-deps` installs (root, Debian) with axe-core (docs/package.json).
docs: install
	OMP_NUM_THREADS=1 JOBS=$(JOBS) $(PY) docs/build.py

# What the suite installs from Debian and npm, one after the other (beside `install`).
system-deps: fuse docs-deps

docs-deps:
	@command -v chromium >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium && apt-get clean; } || { echo "make \
	docs-deps: chromium is missing and could not be installed here: apt-get install chromium"; \
	exit 1; }
	cd docs && npm ci --no-audit --no-fund --silent

bench: install
	$(PY) -m bench

# On a CUDA machine (Colab/Kaggle GPU, the H100): the GPU check, one part per command
# (quick, train, resume, compile, loader, mamba, or all), results in GPU_OUT (BENCHMARKS.md,
# "GPU check"). No venv: the runtime's own torch is the one measured. Wheels carried in .whl
# (`make gpu-wheels` on a machine with network) are installed first.
GPU_OUT ?= gpu-results
GPU_PART ?= quick
gpu-check:
	@if [ -d .whl ]; then $(PYTHON) -m pip install -q --no-index --no-deps --no-compile \
		--upgrade --target .gpu-site .whl/*.whl; fi
	PYTHONPATH=$(CURDIR)/.gpu-site:$(CURDIR) $(PYTHON) -m bench.gpu_check --out $(GPU_OUT) \
		--part $(GPU_PART)

gpu-wheels: install
	$(PY) -m bench.gpu_wheels --dest .whl

clean:
	rm -rf $(VENV) $(XLA_VENV) $(LANES_DIR) runs demo
