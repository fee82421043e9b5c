# Two entry points for a fresh machine: `make run` (the quickstart job) and `make test`.
# Both bootstrap .venv idempotently: torch's pinned CPU wheel first, then the package.
# `make test` then runs the real-timm group (`make test-timm`) in .venv-timm: timm needs a torchvision, and no
# torchvision installs beside the pinned CPU torch 2.13.0, so that group has its own environment with torch 2.14.1
# and torchvision 0.29.1 (from this machine's disk; about 5.5 GB) and the package installed from the same checkout.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.dmlkit-installed
VENV_TIMM := .venv-timm
PY_TIMM := $(VENV_TIMM)/bin/python
STAMP_TIMM := $(VENV_TIMM)/.dmlkit-installed
LINT_PATHS := .

.PHONY: run test test-timm lint venv venv-timm clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

venv-timm: $(STAMP_TIMM)

$(STAMP_TIMM): pyproject.toml
	test -x $(PY_TIMM) || $(PYTHON) -m venv $(VENV_TIMM)
	$(PY_TIMM) -m pip install -q --upgrade pip
	$(PY_TIMM) -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(PY_TIMM) -m pip install -q -e '.[test,timm]'
	touch $(STAMP_TIMM)

run: $(STAMP)
	$(VENV)/bin/dmlkit train configs/quickstart.yaml --run-dir runs/quickstart-$$(date +%Y%m%d-%H%M%S)

test: $(STAMP)
	$(PY) -m pytest -q -m "not timm" --durations=25  # the slowest tests in the log: the suite aims at 15 minutes on 2 cores
	$(MAKE) test-timm

# ruff's lint and format check over the Python sources (pyproject.toml [tool.ruff]); .ci/run runs it
lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)

test-timm: $(STAMP_TIMM)
	DMLKIT_REQUIRE_TIMM=1 $(PY_TIMM) -m pytest -q -m timm

clean:
	rm -rf $(VENV) $(VENV_TIMM) runs .pytest_cache
