# Two commands on a fresh machine with only Python 3:  `make demo`  and  `make test`.
# Each creates the virtual environment .venv on first use (numpy, scipy, galois, mpi4py + mpich from PyPI, ...).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# One BLAS thread: small solves on a shared 2-core machine stall for milliseconds with two.
export OPENBLAS_NUM_THREADS ?= 1

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[mpi,plots,data,dev]"
	touch $(STAMP)

# The main job: the default experiment (every scheme, heavy-tailed delays and the ByteDance trace, MPI + simulator),
# its results, report.md and plots in results/default (--replace: results of an older default spec are replaced;
# with the same spec it resumes).
demo: $(STAMP)
	$(BIN)/gradcode compare --out results/default --replace

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_codes.py --blas-threads 1
	$(BIN)/python benchmarks/bench_sim.py
	$(BIN)/python benchmarks/bench_mpi.py

clean:
	rm -rf $(VENV) build *.egg-info
