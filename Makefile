# Two commands do everything on a fresh machine with Python 3.11:
#   make book   the virtual environment, every chapter executed, the HTML book
#   make test   unit tests, every chapter under papermill, the book built with
#               warnings as errors, and the checks on the built pages
# and `make serve` serves the built book on 127.0.0.1, where its live figures
# run (opened from disk they show their defaults).
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# serve needs no packages: the venv's Python where it exists, else the system's
PYTHON_OR_VENV = $(if $(wildcard $(PY)),$(PY),$(PYTHON))

# Bytecode is written as modules are first imported, by every process make
# starts. Some machines (these among them) set PYTHONDONTWRITEBYTECODE=1, and
# then no process writes it: each one compiles torch and the rest again, about
# 7 s of every kernel, rank and test process here. Compiling the whole venv at
# install time instead took 40 s on 2 cores, mostly for modules nothing
# imports. The build's cache keys and the package archive skip __pycache__.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: book test serve lab install clean gpu-check format

book: $(STAMP)
	$(PY) tools/build.py

# Timed from make's start (MAKE_START is read when make parses this file), so
# the venv set-up a fresh clone does first is included. Two chains share the
# two cores. One is the test book (every page at test sizes, two at a time,
# and the HTML), then the tests of the built book on BOOK_TEST_WORKERS
# workers. Beside it, from the start, the tests that read no built page (not
# marked `book`; their log is printed at the end) on TEST_WORKERS workers.
# Last, on their own, the tests marked `alone`, which measure what another
# test's load would change (collected from the files that hold them). Each
# pytest sends the slowest units first (their order in tests/conftest.py,
# which xdist keeps), lists the slowest tests, and caps each test at 60 s
# (pytest-timeout).
#
# make test is bound by CPU from start to end (both cores busy in every
# phase), so the order saves only what waits. The unit tests used to wait for
# the test book, and the book's tests for the unit tests: 543-574 s from a
# fresh clone. Started together, each chain fills the cores the other leaves
# idle: 447-497 s on the same machine; 611 s in a run where the host lent it
# less (a single-thread probe 1.4x slower than at best; make's CPU time 757 s
# against 554-626 s).
# The book's tests took 253 s in one process on a quiet machine, and on three
# workers 436 s of CPU (each worker starts its own Chromium), CPU the unit
# tests beside them would lack: two workers here.
#
# Both parallel runs give torch one thread a process (OMP_NUM_THREADS=1):
# with two workers and two pages on two cores, a second thread only waits for
# a core. Five torch-heavy test files took 100.6 s of CPU (87.8 s wall) on
# torch's default two threads, 80.0 s (72.5 s) on one. The pages set their
# own threads; the tests marked `alone` keep the default.
MAKE_START := $(shell date +%s)
TEST_WORKERS ?= 2
BOOK_TEST_WORKERS ?= 2
PYTEST := MLBOOK_TEST_REUSE=1 $(PY) -m pytest -p no:cacheprovider --durations=10
# The files that hold tests marked `book` and `alone`: their runs collect
# only these. Collecting every file imports torch and every chapter: 6.3 s a
# worker here, against 1.9 s for the files with tests marked `book`.
BOOK_FILES := $(shell grep -l 'mark\.book' tests/test_*.py)
ALONE_FILES := $(shell grep -l 'mark\.alone' tests/test_*.py)
PYTEST_SHARED := OMP_NUM_THREADS=1 $(PYTEST)

test: $(STAMP)
	@ready=$$(date +%s); mkdir -p _build; \
	MLBOOK_TEST_DEST=_build/no-book $(PYTEST_SHARED) tests -n $(TEST_WORKERS) \
		--dist loadgroup --no-loadscope-reorder -m "not book and not alone" \
		> _build/unit-tests.log 2>&1 & \
	units=$$!; \
	$(PY) tools/build.py --small --no-cache --jobs 2; built=$$?; \
	booked=$$(date +%s); \
	$(PYTEST_SHARED) $(BOOK_FILES) -n $(BOOK_TEST_WORKERS) --dist loadgroup \
		--no-loadscope-reorder -m "book and not alone"; rc=$$?; \
	checked=$$(date +%s); \
	wait $$units; urc=$$?; cat _build/unit-tests.log; \
	$(PYTEST) $(ALONE_FILES) -m alone; alone=$$?; [ $$alone -eq 5 ] && alone=0; \
	[ $$rc -eq 0 ] && rc=$$urc; [ $$rc -eq 0 ] && rc=$$alone; [ $$rc -eq 0 ] && rc=$$built; \
	end=$$(date +%s); \
	echo "make test: $$((end - $(MAKE_START))) s wall ($$((ready - $(MAKE_START))) s set-up, $$((booked - ready)) s test book, $$((checked - booked)) s its tests, unit tests beside both; $$((end - checked)) s after), exit status $$rc"; \
	exit $$rc

# The built HTML book on 127.0.0.1 only (PORT=0 picks a free port); it prints the
# address. Browsers refuse Pyodide's fetches from file://, so a live figure's
# controls work only when the book is served; nothing here listens beyond this machine.
PORT ?= 8000
serve:
	$(PYTHON_OR_VENV) tools/serve.py --port $(PORT)

# JupyterLab on the repository (so mlbook/ and book/ are a click away), opened
# at notebooks/. It refuses to run as root without --allow-root (containers
# run as root), so that is added for root only.
lab: $(STAMP)
	$(VENV)/bin/jupyter lab --LabApp.default_url=/lab/tree/notebooks $(if $(filter 0,$(shell id -u)),--allow-root,)

install: $(STAMP)

# One formatter and linter for all Python, the pages' code cells included
# (tools/format_pages.py runs ruff on them in notebook mode). make test fails on
# anything this would change, naming the file and line.
format: $(STAMP)
	$(VENV)/bin/ruff check --fix --quiet mlbook tools tests
	$(VENV)/bin/ruff format --quiet mlbook tools tests
	$(PY) tools/format_pages.py --fix

# Every chapter on a CUDA GPU at reader sizes (DEVICE="cuda"); what it measured goes
# to _build/gpu/. Refuses (status 2) without one. See tools/gpu_check.py and the README.
gpu-check: $(STAMP)
	$(PY) tools/gpu_check.py

# The venv (tools/install.py: uv installs the pinned stack, pip and the package,
# editable, from pip's configured sources in seconds, where pip takes about
# 85 s here; pip if uv cannot), the scripts the book serves itself (vega and
# Pyodide for the live figures), JupyterLab's "open text notebooks as
# notebooks" setting, and Chromium for the browser checks (Debian's, driven by
# pip's playwright; skipped if present). Without Chromium the browser checks
# skip, except under CI (CI=true), where they are mandatory: there a failed
# install stops here.
$(STAMP): requirements.txt pyproject.toml tools/install.py tools/vendor_js.py tools/lab_settings.py tools/labext/prose.js
	$(PYTHON) -m venv --without-pip $(VENV)
	@# vendor_js.py needs only the standard library (and npm): it runs while
	@# the packages install, and its status is checked once both have ended
	@$(PYTHON) tools/vendor_js.py & vendor=$$!; \
	$(PY) tools/install.py requirements.txt; installed=$$?; \
	wait $$vendor; vendored=$$?; \
	[ $$installed -eq 0 ] && [ $$vendored -eq 0 ]
	$(PY) tools/lab_settings.py
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { echo "installing Debian's chromium for the browser checks"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || \
	    { [ "$$CI" = true ] && { echo "chromium could not be installed, and under CI the browser checks are mandatory"; exit 1; }; \
	      echo "chromium could not be installed: the browser checks will be skipped (they fail under CI=true)"; }; }
	touch $(STAMP)

clean:
	rm -rf _build
