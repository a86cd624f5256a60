# Two commands: `make run` (the quickstart main job) and `make test` (lint + test suite).
# Both create .venv when missing and install the pinned recipe into it, once; `make test`
# adds the test tools (requirements-dev.txt).
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip -q --disable-pip-version-check
STAMP := $(VENV)/.fedsynth-installed
TEST_STAMP := $(VENV)/.fedsynth-test-installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

BROWSER := /usr/bin/chromium

.PHONY: install install-gpu run test lint format clean

install: $(STAMP)

# pip byte-compiles on one core; compileall does the same on every core, in half the time
# (measured: docs/suites.md#quick). Like pip, it skips files that are not Python 3.11 (some
# packages ship such files), hence `|| true`.
$(STAMP): pyproject.toml requirements.txt requirements-nodeps.txt constraints.txt
	test -x $(PY) || python3.11 -m venv $(VENV) || python3 -m venv $(VENV)
	$(PIP) install --no-compile torch==2.13.0
	$(PIP) install --no-compile -c constraints.txt -r requirements.txt
	$(PIP) install --no-compile --no-deps -r requirements-nodeps.txt
	$(PY) -m compileall -q -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
		> /dev/null || true
	$(PIP) install --no-deps --no-build-isolation -e .
	touch $(STAMP)

# What only `make test` needs (pytest, ruff, selenium, ray): `make run` does not wait for it.
$(TEST_STAMP): $(STAMP) requirements-dev.txt
	$(PIP) install -c constraints.txt -r requirements-dev.txt
	touch $(TEST_STAMP)

# A CUDA host (docs/gpu.md): its own venv, so the CPU path above stays as it is. PyPI's
# torch 2.13.0 for Linux x86_64 is its CUDA build (here it is the local CPU wheel, checked
# below); the gpu extra adds vLLM. Run with GPU_VENV's fedsynth, no HF_HUB_OFFLINE.
GPU_VENV := .venv-gpu
GPU_PIP := $(GPU_VENV)/bin/pip -q --disable-pip-version-check
install-gpu:
	test -x $(GPU_VENV)/bin/python || python3.11 -m venv $(GPU_VENV) || python3 -m venv $(GPU_VENV)
	$(GPU_PIP) install torch==2.13.0
	$(GPU_VENV)/bin/python -c "import sys, torch; sys.exit(None if torch.version.cuda else \
		'torch ' + torch.__version__ + ' is a CPU build: install a CUDA build of torch 2.13.0')"
	$(GPU_PIP) install -c constraints.txt -r requirements.txt
	$(GPU_PIP) install --no-deps -r requirements-nodeps.txt
	$(GPU_PIP) install -c constraints.txt --no-build-isolation -e ".[gpu]"
	$(GPU_VENV)/bin/python -c "import torch, vllm; print('torch', torch.__version__, \
		'CUDA', torch.version.cuda, 'GPUs', torch.cuda.device_count(), 'vllm', vllm.__version__)"

run: $(STAMP)
	$(VENV)/bin/fedsynth quickstart

# Debian's Chromium + ChromeDriver for the site test (CI runs as root).
$(BROWSER):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver

# One pytest worker per core (at most 4; pytest-xdist), each taking whole files so that a
# module's fixtures are built once, the end-to-end files first; every worker has its own
# caches (tests/conftest.py). The `alone` tests (a local Ray cluster, two tasks at once)
# run afterwards, serially: beside another worker they took 3-5x as long (measured). The
# 15 slowest tests are listed, for the suite's 15-minute target (README).
test: $(TEST_STAMP) $(BROWSER)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python -m pytest -q -m "not slow and not alone" -n auto --maxprocesses=4 \
		--dist loadfile --no-loadscope-reorder --durations=15
	$(VENV)/bin/python -m pytest -q -m "alone and not slow"

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

format: $(TEST_STAMP)
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) runs .pytest_cache
