# Two commands on a fresh machine with only Python 3:  `make demo`  and  `make test`.
# Each creates the virtual environment .venv on first use (numpy, scipy, galois, mpi4py + mpich from PyPI, ...).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# One BLAS thread: small solves on a shared 2-core machine stall for milliseconds with two.
export OPENBLAS_NUM_THREADS ?= 1

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[mpi,plots,data,dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m gradcode demo

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_codes.py

clean:
	rm -rf $(VENV) build *.egg-info
