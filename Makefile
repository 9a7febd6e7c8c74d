# The two commands a fresh machine needs are `make demo` and `make test`.
# Both create .venv and install what they need; nothing is assumed installed by hand.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NVCC   ?= $(shell command -v nvcc 2>/dev/null)
# CI runs the safemon.torch tests too. Pinned to the CPU build that this machine image keeps on
# disk (pip takes it from there, ~190 MB, no download); an unpinned `torch` resolves to a CUDA
# build of several GB on PyPI. Override with `make TORCH_PIN=... test`, or TORCH_PIN= to skip
# torch (its tests then skip).
TORCH_PIN ?= torch==2.13.0

.PHONY: help venv demo run test lint typecheck cuda-check audit-ptx gpu-check clean

help:
	@echo "make demo   - set up .venv and run the demo on the default backend"
	@echo "make run    - set up .venv and start the daemon on the embedded default config"
	@echo "make test   - set up .venv and run the whole CPU test suite (what CI runs)"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	if [ -n "$(TORCH_PIN)" ]; then $(PY) -m pip install --quiet '$(TORCH_PIN)' && \
	  $(PY) -m pip install --quiet -e '.[test,torch]'; fi
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/safemon demo

run: $(STAMP)
	$(VENV)/bin/safemon run

# Every .cu compiled with the run-time defines and flags, so CUDA syntax errors fail CI without a GPU.
cuda-check: $(STAMP)
	@if [ -n "$(NVCC)" ]; then $(PY) -m safemon.kernels.nvcc_check --nvcc "$(NVCC)"; \
	else echo "cuda-check: nvcc not found, skipped"; fi

# Static PTX audit of every shipped build (docs/AUDIT.md): barriers/races, fma in exact builds,
# float atomics, .ftz, global stores. Fails on any finding.
audit-ptx: $(STAMP)
	@if [ -n "$(NVCC)" ]; then $(VENV)/bin/safemon audit ptx --nvcc "$(NVCC)"; \
	else echo "audit-ptx: nvcc not found, skipped"; fi

lint: $(STAMP)
	$(VENV)/bin/ruff check safemon tests

typecheck: $(STAMP)
	$(VENV)/bin/mypy

test: $(STAMP) cuda-check audit-ptx lint typecheck
	$(PY) -m pytest -m "not gpu and not slow and not multigpu" -q

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
