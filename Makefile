# Quick start: `make demo`, `make test`. Both create .venv on first use.
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed
# torch is a local CPU wheel: install it first and pin it, so pip never resolves another torch.
TORCH  := torch==2.13.0

.PHONY: demo test lint .venv

.venv: $(STAMP)

$(PY):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PIP) install '$(TORCH)'
	$(PIP) install -e '.[test]' '$(TORCH)'
	touch $@

demo: .venv
	$(PY) -m trnlang.demo

test: .venv
	$(PY) -m pytest -n 2 tests

lint: .venv
	$(VENV)/bin/ruff check .
