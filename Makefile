# Quick start: `make demo`, `make test`. Both create .venv on first use.
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed
# torch is a local CPU wheel: install it first and pin it, so pip never resolves another torch.
TORCH  := torch==2.13.0

.PHONY: demo test lint fuzz .venv

.venv: $(STAMP)

$(PY):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PIP) install '$(TORCH)'
	$(PIP) install -e '.[test]' '$(TORCH)'
	touch $@

demo: .venv
	$(PY) -m trnlang.demo

# worksteal: a worker that runs out of tests takes half of the other's queue, so the run does not end on one
# worker's backlog; tests/conftest.py puts the long tests at the start of each worker's share.
test: lint
	$(PY) -m pytest -n 2 --dist worksteal tests

# The random-kernel fuzzer (JIT vs interpreter, sentinel-framed strided arguments): FUZZ_CASES seeds
# from FUZZ_SEED, two child processes at a time; `make test` runs a 200-case slice of it.
FUZZ_CASES ?= 10000
FUZZ_SEED  ?= 0
fuzz: .venv
	$(PY) -m tests.fuzz --cases $(FUZZ_CASES) --seed $(FUZZ_SEED) --jobs 2

# ruff (rules in pyproject.toml, mccabe complexity <= 15 included) and mypy over the [tool.mypy] files
# (trnlang/ and codegen/); `make test` runs it first.
lint: .venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
