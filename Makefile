# The two set-up commands of the README: `make demo` (train the embedded example) and `make test`.
# Both create or reuse .venv, install torch, the core and every first-party plugin (editable), then run.
#
# TORCH_SPEC picks the torch build. The default pins the CPU wheel release this project is tested with;
# on a GPU machine, pass the CUDA build you want, e.g. `make test TORCH_SPEC="torch==2.13.0"` from an
# index that serves it. The project itself only requires torch>=2.10.

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.surge-installed
PLUGIN_DIRS := $(sort $(wildcard plugins/surge-*))
PYTEST_ARGS ?=

.PHONY: demo test bench lint clean

$(STAMP): pyproject.toml $(wildcard plugins/*/pyproject.toml) Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "setuptools>=68" wheel
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet --no-build-isolation -e ".[test,examples]" $(addprefix -e ,$(PLUGIN_DIRS))
	touch $@

demo: $(STAMP)
	$(BIN)/surge fit

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet --no-build-isolation -e ".[bench]"   # Lightning, for its comparison rows
	$(BIN)/python benchmarks/run_all.py

lint: $(STAMP)
	$(BIN)/python -m pip install --quiet ruff mypy
	$(BIN)/ruff check core plugins tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) surge_runs
