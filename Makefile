# Two entry points for a fresh machine: `make run` (the quickstart job) and `make test`.
# Both bootstrap .venv idempotently: torch's pinned CPU wheel first, then the package.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.dmlkit-installed

.PHONY: run test venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/dmlkit train configs/quickstart.yaml --run-dir runs/quickstart-$$(date +%Y%m%d-%H%M%S)

test: $(STAMP)
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) runs .pytest_cache
