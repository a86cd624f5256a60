# Two commands: `make run` (the quickstart main job) and `make test` (lint + test suite).
# Both create .venv when missing and install the pinned recipe into it, once.
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip -q --disable-pip-version-check
STAMP := $(VENV)/.fedsynth-installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

BROWSER := /usr/bin/chromium

.PHONY: install run test lint format clean

install: $(STAMP)

$(STAMP): pyproject.toml requirements.txt requirements-nodeps.txt constraints.txt
	test -x $(PY) || python3.11 -m venv $(VENV) || python3 -m venv $(VENV)
	$(PIP) install torch==2.13.0
	$(PIP) install -c constraints.txt -r requirements.txt
	$(PIP) install --no-deps -r requirements-nodeps.txt
	$(PIP) install --no-deps --no-build-isolation -e .
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/fedsynth quickstart

# Debian's Chromium + ChromeDriver for the site test (CI runs as root).
$(BROWSER):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver

# One pytest worker per core (at most 4; pytest-xdist), each taking whole files so that a
# module's fixtures are built once, the end-to-end files first; every worker has its own
# caches (tests/conftest.py). The `alone` tests (a local Ray cluster, two tasks at once)
# run afterwards, serially: beside another worker they took 3-5x as long (measured).
test: $(STAMP) $(BROWSER)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python -m pytest -q -m "not slow and not alone" -n auto --maxprocesses=4 \
		--dist loadfile --no-loadscope-reorder
	$(VENV)/bin/python -m pytest -q -m "alone and not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) runs .pytest_cache
