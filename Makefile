# fedrepro — the two commands a fresh machine needs: `make quickstart` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export PIP_CONSTRAINT := $(CURDIR)/constraints.txt
export WANDB_MODE ?= offline
export PYTHONHASHSEED := 0
# Use ../shared/data (this project's real data) when it is there and nothing else was set.
ifneq ($(wildcard ../shared/data),)
export FEDREPRO_DATA_ROOT ?= $(abspath ../shared/data)
endif
PROFILE ?= quick
SEEDS ?= 1

.PHONY: install quickstart test test-fast table2 clean

$(VENV)/.installed: pyproject.toml constraints.txt
	test -d $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@

install: $(VENV)/.installed

quickstart: install
	@start=$$(date +%s); \
	$(PY) -m fedrepro dataset=mnist_5k profile=quick logger.progress=false && \
	echo "[quickstart] wall time $$(( $$(date +%s) - start )) s"

test: install
	$(PY) -m pytest -q

table2: install
	$(PY) -m experiments.fedelasticnet.table2 --profile $(PROFILE) --seeds $(SEEDS)

clean:
	rm -rf results outputs multirun
