# Entry points on a fresh machine: `make lab`, `make test` and `make site`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: lab test bench site

# Small matrix products stall with BLAS threads on a loaded 2-core machine.
export OPENBLAS_NUM_THREADS ?= 1

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[lab,test,site]'
	touch $(STAMP)

lab: $(STAMP)
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=. --LabApp.default_url=/lab/tree/notebooks \
		$$([ "$$(id -u)" = 0 ] && echo --allow-root)

# One test worker more than there are cores: the browser, Pyodide and grader tests spend
# much of their time waiting on Chromium, Node.js or a kernel (2 cores: 360 s with 2
# workers, 314 s with 3; BENCHMARKS.md, issue 29).
WORKERS ?= $(shell $(PYTHON) -c "import os; print((os.cpu_count() or 1) + 1)")

# The kit's modules are compiled once first, and every worker, kernel and grader reads
# them: where PYTHONDONTWRITEBYTECODE is set (as on the CI machine), each would compile
# what it imports again, ~0.14 CPU s a kernel (BENCHMARKS.md, issue 29).
test: $(STAMP)
	bash tools/ensure_chromium.sh
	$(VENV)/bin/ruff check .
	$(PY) -m compileall -q ipukit
	$(PY) -m pytest -n $(WORKERS)

# bench_budgets.py (first) prints issue 29's budgets against what it measures, and which hold.
bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(PY) $$b || exit 1; done

# _site/: the lessons as a website, and _site/lite/ (JupyterLite: the kit on Pyodide, no CDN).
# Pyodide's runtime and wheels are fetched once per machine into ~/.cache/ipukit-site
# (IPUKIT_SITE_CACHE), each checked by sha256. Serve: python3 -m http.server -d _site
site: $(STAMP)
	$(PY) tools/site/build.py --out _site
