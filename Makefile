# The two set-up commands of the README: `make demo` (train the embedded example) and `make test`.
# Both create or reuse .venv. The demo installs what it needs: torch, the core and the default plugins
# (editable), with scikit-learn for the example's data and matplotlib for `surge plot`. `make test` adds the
# rest: every first-party plugin, the test tooling, Lightning (the `bench` extra) for the side-by-side
# comparisons of tests/test_porting.py and tests/test_lightning_*.py, and the `docs` extra for tests/test_docs_site.py.
# `make docs` builds the documentation site (mkdocs.yml) into site/, strictly: a broken link fails it.
#
# TORCH_SPEC picks the torch build. The default pins the CPU wheel release this project is tested with;
# on a GPU machine, pass the build you want, and TORCH_INDEX_URL for the index that serves it (it becomes
# pip's --index-url for the torch install only), e.g. `make test TORCH_INDEX_URL=<your index>/cu126`.
# Every later install keeps that torch: nothing else asks for more than torch>=2.10 (Lightning: >=2.1).

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX_URL ?=
BIN := $(VENV)/bin
DEMO_STAMP := $(VENV)/.surge-demo-installed
STAMP := $(VENV)/.surge-installed
DOCS_STAMP := $(VENV)/.surge-docs-installed
DEMO_PLUGIN_DIRS := plugins/surge-devices plugins/surge-checkpoint plugins/surge-csv plugins/surge-progress
PLUGIN_DIRS := $(sort $(wildcard plugins/surge-*))
PYTEST_ARGS ?=
# The suite runs on every core (pytest-xdist, one worker each), a worker taking the next test when it is free
# (`worksteal`: the long multi-process tests do not hold up a queue); PYTEST_XDIST= (empty) runs it in one process.
PYTEST_XDIST ?= -n auto --dist worksteal
# Byte-code for the project's own modules, written before a run: every child interpreter the tests start imports
# them, and where PYTHONDONTWRITEBYTECODE is set (as in many CI images) each child would otherwise compile them
# again (about 0.5 s of CPU per child on a 2-core machine). Only stale files are compiled; a few seconds at most.
COMPILE = $(BIN)/python -m compileall -q -j 0 core $(wildcard plugins/*/src)

.PHONY: demo test test-fast fuzz bench docs lint clean test-tpu test-gpu

$(DEMO_STAMP): pyproject.toml $(addsuffix /pyproject.toml,$(DEMO_PLUGIN_DIRS)) Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "setuptools>=68" wheel
	$(BIN)/python -m pip install --quiet $(if $(TORCH_INDEX_URL),--index-url "$(TORCH_INDEX_URL)") "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet --no-build-isolation -e ".[standard,examples]" $(addprefix -e ,$(DEMO_PLUGIN_DIRS))
	touch $@

$(STAMP): $(DEMO_STAMP) $(wildcard plugins/*/pyproject.toml)
	$(BIN)/python -m pip install --quiet --no-build-isolation -e ".[standard,examples,test,bench,docs]" $(addprefix -e ,$(PLUGIN_DIRS))
	touch $@

# The demo's set-up and the `docs` extra: what `mkdocs build` needs (it reads the sources, imports none of them).
$(DOCS_STAMP): $(DEMO_STAMP)
	$(BIN)/python -m pip install --quiet --no-build-isolation -e ".[standard,examples,docs]"
	touch $@

demo: $(DEMO_STAMP)
	$(BIN)/surge fit

test: $(STAMP)
	$(COMPILE)
	$(BIN)/python -m pytest $(PYTEST_XDIST) $(PYTEST_ARGS)

# `make test-fast`: the same set-up and suite less the tests marked `slow` (those that start child processes or
# run whole programs side by side with Lightning), for a quick loop while editing. CI runs `make test`: all of it.
test-fast: $(STAMP)
	$(COMPILE)
	$(BIN)/python -m pytest $(PYTEST_XDIST) -m "not slow" $(PYTEST_ARGS)

# `make fuzz`: the property tests (Hypothesis marks them) exploring: ten times the examples of `make test`, from new
# seeds (CI replays fixed ones; the profiles are in conftest.py). Never part of CI. A failure prints how to
# reproduce it; add that case to its test as an explicit @example(...), so that CI replays it from then on.
fuzz: $(STAMP)
	$(COMPILE)
	$(BIN)/python -m pytest $(PYTEST_XDIST) -m hypothesis --hypothesis-profile=fuzz $(PYTEST_ARGS)

# `make docs`: the documentation site into site/ (`$(BIN)/mkdocs serve` serves it while editing). --strict: a broken
# link, anchor or API reference, or a docstring the reference cannot read, fails the build.
docs: $(DOCS_STAMP)
	$(BIN)/mkdocs build --strict

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py $(BENCH_ARGS)   # e.g. BENCH_ARGS="--no-instructions --markdown bench.md"

lint: $(STAMP)
	$(BIN)/python -m pip install --quiet ruff mypy
	$(BIN)/ruff check core plugins tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) surge_runs site

# `make test-gpu`: benchmarks/gpu_check.py (docs/guide.md, "GPU check"), on a machine with CUDA, in under 10 minutes:
# training bit for bit equal to hand-written CUDA loops (32-true, 16-mixed, bf16-mixed), DDP over NCCL on the
# GPUs found (2+), host-device syncs per step and the overhead benchmark on the GPU. The venv needs a CUDA build
# of torch: create it with one (a fresh clone, `make clean` first, or another VENV), e.g.
#   make test-gpu TORCH_SPEC=torch==2.13.0 TORCH_INDEX_URL=<your PyTorch index>/cu126
#   make test-gpu VENV=.venv-gpu TORCH_INDEX_URL=<your PyTorch index>/cu126 GPU_CHECK_ARGS="--checks parity,ddp"
# It prints its report and writes it to GPU_CHECK_MD. Exit status 0: every check passed (a skipped one says why);
# 1: a check failed or ran out of time; 2: no CUDA device, nothing checked (never a pass).
GPU_CHECK_MD ?= gpu-check.md
GPU_CHECK_ARGS ?=

test-gpu: $(STAMP)
	$(BIN)/python benchmarks/gpu_check.py --markdown $(GPU_CHECK_MD) $(GPU_CHECK_ARGS)

# `make test-tpu`: the surge-tpu plugin on torch_xla, in its own venv because torch_xla needs the torch
# release it was built for (older than the torch>=2.10 the core declares, hence --no-deps for surge).
# PJRT_DEVICE=CPU runs XLA on the host CPU, so no TPU is needed. torch is named in every install that
# could resolve it, so pip never swaps it for a newer release. On a TPU VM: make test-tpu TPU_PJRT=TPU.
# The default torch wheel is the CUDA build (about 7 GB with its libraries); TPU_PIP_ARGS can point the torch
# install at an index that serves the smaller CPU build (e.g. TPU_PIP_ARGS="--extra-index-url <url>").
TPU_VENV ?= .venv-tpu
TPU_TORCH_SPEC ?= torch==2.9.1
TPU_XLA_SPEC ?= torch-xla==2.9.0
TPU_PJRT ?= CPU
TPU_PIP_ARGS ?=
TPU_BIN := $(TPU_VENV)/bin
TPU_STAMP := $(TPU_VENV)/.surge-installed

$(TPU_STAMP): pyproject.toml plugins/surge-devices/pyproject.toml plugins/surge-tpu/pyproject.toml Makefile
	test -x $(TPU_BIN)/python || $(PYTHON) -m venv $(TPU_VENV)
	$(TPU_BIN)/python -m pip install --quiet "setuptools>=68" wheel
	$(TPU_BIN)/python -m pip install --quiet $(TPU_PIP_ARGS) "$(TPU_TORCH_SPEC)" "$(TPU_XLA_SPEC)"
	$(TPU_BIN)/python -c 'import tomllib; deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]; print("\n".join(d for d in deps if not d.startswith("torch")))' > $(TPU_VENV)/core-deps.txt
	$(TPU_BIN)/python -m pip install --quiet "$(TPU_TORCH_SPEC)" -r $(TPU_VENV)/core-deps.txt "pytest>=8" "pytest-timeout>=2.3"
	$(TPU_BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e . -e plugins/surge-devices -e plugins/surge-tpu
	touch $@

test-tpu: $(TPU_STAMP)
	PJRT_DEVICE=$(TPU_PJRT) $(TPU_BIN)/python -m pytest plugins/surge-tpu/xla_tests -q $(PYTEST_ARGS)
