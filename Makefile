# Canon: `make run` starts everything, `make test` checks everything.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: run test check lint bench soak clean browser xmlsec1

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

run: $(STAMP)
	$(PY) -m devtools.devstack run

test: $(STAMP) browser xmlsec1
	$(PY) -m devtools.devstack exec -- $(MAKE) --no-print-directory check

# The admin's browser tests drive Debian's Chromium; install it where we may (root with apt),
# with a font for the Chinese admin's pages (fonts-noto-cjk).
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null && \
	  fc-list :lang=zh 2>/dev/null | grep -q . || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	       chromium chromium-driver fonts-noto-cjk >/dev/null) ; } || \
	  echo "chromium is not installed: the browser tests will be skipped"

# SAML sign-in (pysaml2) signs and checks with Debian's xmlsec1; install it where we may, as
# chromium above. Production installs it the same way (docs/PRODUCTION.md).
xmlsec1:
	@command -v xmlsec1 >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	       xmlsec1 >/dev/null) ; } || \
	  echo "xmlsec1 is not installed: the SAML tests will be skipped"

# Runs inside `make test`, with DATABASE_URL and REDIS_URL pointing at the stack. lint-imports checks
# the floors' contract in pyproject.toml. The suite runs on PYTEST_WORKERS pytest-xdist workers, a
# file's tests on one worker: much of it waits on real processes, so two fit a 2-core machine.
PYTEST_WORKERS ?= 2
check:
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .
	$(VENV)/bin/lint-imports
	$(PY) manage.py check
	$(PY) manage.py makemigrations --check --dry-run
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# Benchmarks (docs/BENCHMARKS.md): the `bench` extra, langchain-postgres without its pgvector<0.4
# pin, Debian's wrk, and groff for B8's Chinese man pages (its corpus comes from Debian packages). BENCH_ARGS, e.g. "--chunks 100000 --seconds 15" or "--only B1,B2".
BENCH_STAMP := $(VENV)/.bench-$(shell cksum pyproject.toml | cut -d' ' -f1)
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps langchain-postgres==0.0.19
	@rm -f $(VENV)/.bench-*
	@touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	@command -v wrk >/dev/null && command -v groff >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk groff-base >/dev/null ; }
	$(PY) -m bench $(BENCH_ARGS)

# A randomised soak with real processes killed at random (docs/SOAK.md); not part of `make test`.
# Its own database (canon_soak) and Redis (port 6395). SOAK_ARGS, e.g. "--minutes 5 --seed 7".
soak: $(STAMP)
	$(PY) -m devtools.devstack exec -- $(PY) -m tests.soak $(SOAK_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) .data .mypy_cache .ruff_cache .pytest_cache
