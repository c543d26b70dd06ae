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
JOBS ?= 1
# How a table target starts its runs: local (this process; joblib processes when JOBS > 1),
# joblib, submitit_local, submitit_slurm (FEDREPRO_SLURM='partition=...,timeout_min=...'), ray.
LAUNCHER ?= local
# DONE_ONLY=1: a table or figure target trains nothing and fills its cells from the finished
# runs in the results store (the others "not run (not computed yet)").
DONE_ONLY ?=
export PROFILE SEEDS JOBS LAUNCHER DONE_ONLY
# glibc's malloc: keep the few-MB per-step temporaries of the batched executor in the heap
# instead of mapping and unmapping them every step (docs/performance.md)
export GLIBC_TUNABLES ?= glibc.malloc.mmap_threshold=268435456:glibc.malloc.trim_threshold=268435456

.PHONY: install quickstart test clean table2 table3 table4 table5 fen-costs \
	feddyn-table1 feddyn-table2 feddyn-table4 feddyn-table5 feddyn-table6 centralized \
	losac-table2 losac-fig1 losac-fig2 losac-fig3 losac-fig4 losac-fig5 losac-fig6 losac-fig7 \
	l2gd-fig2 l2gd-fig3 l2gd-table2 l2gd-fig4 l2gd-fig5 l2gd-fig6 l2gd-fig7 l2gd-fig8 l2gd-fig9 \
	l2gd-fig10 l2gd-fig11 compare-compression status archive restore bench

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

# Local-training throughput of every path side by side (docs/performance.md); PROFILE=paper
# adds the projected wall time of FedElasticNet Table 2's MNIST rows.
bench: install
	$(PY) -m experiments.bench --profile $(PROFILE)

# Which runs of a target are done, running, failed or missing (make status TARGET=table2), or,
# without TARGET, every run of the results store; PROFILE and SEEDS as for the target.
status: install
	$(PY) -m fedrepro.status $(TARGET)

# The run archive (docs/measured/runs/): `make archive TARGET=table4` keeps a target's finished
# runs' small files in the repository; `make restore` puts every archived run back into
# results/runs/, so a table filled over several machines or sessions renders without retraining.
archive: install
	$(PY) -m fedrepro.archive save $(TARGET)

restore: install
	$(PY) -m fedrepro.archive restore

# Paper tables: our value beside the paper's (PROFILE=smoke|quick|paper, SEEDS=n, JOBS=n,
# LAUNCHER=local|joblib|submitit_local|submitit_slurm|ray, DONE_ONLY=1; every table and figure
# target below).
table2 table3 table4 table5: install
	$(PY) -m experiments.fedelasticnet.$@

feddyn-table1 feddyn-table2 feddyn-table4 feddyn-table5 feddyn-table6: install
	$(PY) -m experiments.feddyn.$(subst feddyn-,,$@)

# LoSAC: Table II, Figures 1-5 (loss and accuracy curves), Figure 6 (DLG), Figure 7 (low rank;
# its claims need PROFILE=paper).
losac-table2: install
	$(PY) -m experiments.losac.table2

losac-fig1 losac-fig2 losac-fig3 losac-fig4 losac-fig5: install
	$(PY) -m experiments.losac.curves --figure $(subst losac-fig,,$@)

losac-fig6 losac-fig7: install
	$(PY) -m experiments.losac.$(subst losac-,,$@)

# Compressed L2GD: Figures 2-3 (a1a / a2a sweeps of p and lambda, optimal p of Theorems 3-4),
# Table 2 and Figures 4-11 (CIFAR-10; GPU-scale at PROFILE=paper), and, beyond the papers,
# compressors x algorithms at equal bits on MNIST (docs/l2gd_experiments.md).
l2gd-fig2 l2gd-fig3: install
	$(PY) -m experiments.l2gd.logistic --figure $(subst l2gd-fig,,$@)

l2gd-table2: install
	$(PY) -m experiments.l2gd.cifar --figure table2

l2gd-fig4 l2gd-fig5 l2gd-fig6 l2gd-fig7 l2gd-fig8 l2gd-fig9 l2gd-fig10 l2gd-fig11: install
	$(PY) -m experiments.l2gd.cifar --figure $(subst l2gd-fig,,$@)

compare-compression: install
	$(PY) -m experiments.l2gd.compare_compression

# The centralized baseline of every dataset here, beside the papers' centralized accuracies.
centralized: install
	$(PY) -m experiments.centralized

# Figures: make fen-fig1 ... fen-fig9, fen-costs (nonzeros / entropy against the round),
# feddyn-fig1 ... feddyn-fig13.
fen-fig%: install
	$(PY) -m experiments.fedelasticnet.figures --figure $*

fen-costs: install
	$(PY) -m experiments.fedelasticnet.figures --figure costs

feddyn-fig3: install
	$(PY) -m experiments.feddyn.fig3

feddyn-fig%: install
	$(PY) -m experiments.feddyn.figures --figure $*

clean:
	rm -rf results outputs multirun
