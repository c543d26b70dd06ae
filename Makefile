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
# joblib, submitit_local, submitit_slurm, ray. submitit_slurm's partition, time, memory and
# requeues: LAUNCHER_CONFIG, a file of conf/hydra/launcher/ (the one Hydra sweeps use) or a YAML path.
LAUNCHER ?= local
LAUNCHER_CONFIG ?= slurm
# DONE_ONLY=1: a table or figure target trains nothing and fills its cells from the finished
# runs in the results store (the others "not run (not computed yet)").
DONE_ONLY ?=
# OVERRIDES="logger=wandb train.accelerator=cuda": config overrides for every run of a table or figure
# target, after the target's own (--override on the command line).
OVERRIDES ?=
export PROFILE SEEDS JOBS LAUNCHER LAUNCHER_CONFIG DONE_ONLY OVERRIDES

.PHONY: install quickstart test clean claims table2 table3 table4 table5 compare-compression centralized status \
	archive restore targets bench help

$(VENV)/.installed: pyproject.toml constraints.txt
	test -d $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@

## install: create .venv and install the package with its test extras (CPU torch pinned)
install: $(VENV)/.installed

## quickstart: install, then run the default experiment offline (FedAvg, mnist_5k, profile=quick)
quickstart: install
	@start=$$(date +%s); \
	$(PY) -m fedrepro dataset=mnist_5k profile=quick logger.progress=false && \
	echo "[quickstart] wall time $$(( $$(date +%s) - start )) s"

## test: the whole test suite (real-data tests skip without FEDREPRO_DATA_ROOT or ../shared/data)
# TEST_WORKERS processes (pytest-xdist; one thread each, so they do not oversubscribe the cores),
# each test file in one of them (its module fixtures built once); TEST_WORKERS=0: one process.
# --durations: the slowest tests, so the suite's time (kept well under 20 min here) is watched
TEST_WORKERS ?= auto
test: install
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -rs --durations=15 -n $(TEST_WORKERS) --dist loadfile

# Local-training throughput of every path side by side (docs/performance.md); PROFILE=paper
# adds the projected wall time of FedElasticNet Table 2's MNIST rows; on a GPU machine
# ARGS="--device cuda --ratio-to docs/measured/bench.csv" (experiments/bench_gpu.sh without make).
## bench: local-training throughput of every executor side by side (docs/performance.md)
bench: install
	$(PY) -m experiments.bench --profile $(PROFILE) $(ARGS)

# Which runs of a target are done, running, failed or missing (make status TARGET=table2), as the
# target's cells() name them, or, without TARGET, every run of the results store.
## status: which runs of TARGET=... are done, running, failed or missing (no TARGET: the whole store)
status: install
	$(if $(TARGET),$(PY) -m experiments status $(TARGET) $(ARGS),$(PY) -m fedrepro.status)

# The run archive (docs/measured/runs/): `make archive TARGET=table4` keeps a target's finished
# runs' small files in the repository; `make restore` puts every archived run back into
# results/runs/, so a table filled over several machines or sessions renders without retraining.
## archive: copy TARGET=...'s finished runs into the run archive, docs/measured/runs/
archive: install
	$(PY) -m experiments archive $(TARGET) $(ARGS)

## restore: copy every archived run back into results/runs/
restore: install
	$(PY) -m fedrepro.archive restore

## claims: every paper claim with its verdict on our numbers (docs/measured/claims.md)
claims: install
	$(PY) -m experiments.claims_index $(ARGS)

## targets: list every paper target (python -m experiments list)
targets: install
	@$(PY) -m experiments list

# Paper tables and figures, one rule per paper: `make <paper>-<target>` runs
# `python -m experiments <paper> <target>` (PROFILE=smoke|quick|paper, SEEDS=n, JOBS=n,
# LAUNCHER=local|joblib|submitit_local|submitit_slurm|ray, DONE_ONLY=1, OVERRIDES="...",
# ARGS="--datasets all" for the target's own options).
# table2 ... table5 and compare-compression are the names the README promised.
## table2: FedElasticNet Table 2: cumulative uplink nonzeros, 10 % participation
## table3: FedElasticNet Table 3: cumulative entropy of the uploads, 10 % participation
## table4: FedElasticNet Table 4: cumulative entropy of the uploads, 100 % participation
## table5: FedElasticNet Table 5: the hyperparameters the runs used beside the paper's
## feddyn-table1: FedDyn Table 1: models to the target, 100 vs 1000 / 500 devices (CIFAR)
## feddyn-table2: FedDyn Table 2: models to the target accuracy, 100 % and 10 % participation
## feddyn-table4: FedDyn Table 4: models to the target, balanced vs unbalanced data (CIFAR)
## feddyn-table5: FedDyn Table 5: models to the target, 1 % participation
## feddyn-table6: FedDyn Table 6: models to the target loss, synthetic convex problem
## losac-table2: LoSAC Table II: rounds to 85 %, loss and accuracy, SCAFFOLD vs LoSAC
## losac-fig1: LoSAC Figure 1: loss and accuracy curves over heterogeneity c (MNIST)
## losac-fig2: LoSAC Figure 2: curves over the client count S (MNIST)
## losac-fig3: LoSAC Figure 3: curves over the local steps T (MNIST)
## losac-fig4: LoSAC Figure 4: curves over S and T (HAR)
## losac-fig5: LoSAC Figure 5: curves over S and T (ESR)
## losac-fig6: LoSAC Figure 6: the DLG gradient-leakage attack
## losac-fig7: LoSAC Figure 7: low-rank matrix estimation (its claims need PROFILE=paper)
## l2gd-fig2: L2GD Figure 2: a1a / a2a sweeps of p and lambda, uncompressed
## l2gd-fig3: L2GD Figure 3: the same with the natural compressor
## l2gd-table2: L2GD Table 2: bits / n to the target accuracy per model (CIFAR-10)
## l2gd-fig4: L2GD Figure 4: compressed L2GD vs FedAvg and FedOpt, ResNet-18 (CIFAR-10)
## l2gd-fig5: L2GD Figure 5: the same, DenseNet-121 (CIFAR-10)
## l2gd-fig6: L2GD Figure 6: the same, MobileNet (CIFAR-10)
## l2gd-fig7: L2GD Figure 7: FedAvg as a case of L2GD, accuracy (ResNet-56, 100 clients)
## l2gd-fig8: L2GD Figure 8: FedAvg as a case of L2GD, loss (ResNet-56, 100 clients)
## l2gd-fig9: L2GD Figure 9: compressed L2GD vs FedOpt, ResNet-18 (CIFAR-10)
## l2gd-fig10: L2GD Figure 10: compressed L2GD vs FedOpt, DenseNet-121 (CIFAR-10)
## l2gd-fig11: L2GD Figure 11: compressed L2GD vs FedOpt, MobileNet (CIFAR-10)
## l2gd-noise: noise of L2GD's objective against eta lambda / (n p) on the MNIST MLP (L2G-S7-1)
## compare-compression: compressors x algorithms at equal uplink bits on MNIST (beyond the papers)
## centralized: the centralized baseline of every dataset, beside the papers'
## fen-fig1 ... fen-fig9: FedElasticNet Figures 1-9 (accuracy curves, upload histograms, lambda1 sweeps)
## fen-costs: nonzeros and entropy against the round, per algorithm (beyond the paper)
## fen-ablations: epsilon on vs off (FEN-S3-1), FedAvg + l1 with and without l2 (REV-R2-6), 5 seeds
## fen-skew: accuracy from IID to Dirichlet (.1): FedAvg vs the drift-robust methods (FEN-T1-1, REV-R2-3), 5 seeds
## fen-compression: FedElasticNet vs FedDyn / SCAFFOLD / FedAvg + Top-k, sign, QSGD + error feedback at matched uplink bits (REV-R2-7, REV-R2-8), 3 seeds
## fen-theorem: Theorem 3.1's lambda1^2 d term simulated on a convex problem (REV-R2-2), 3 seeds
## fen-overhead: each variant's local training time against its base's, interleaved (FEN-S4-3; a timing, not stored)
## feddyn-fig1 ... feddyn-fig13: FedDyn Figures 1-13 (convergence curves; 3: class concentration of the splits)
table2 table3 table4 table5: install
	$(PY) -m experiments fen $@ $(ARGS)

compare-compression: install
	$(PY) -m experiments l2gd compare-compression $(ARGS)

centralized: install
	$(PY) -m experiments centralized $(ARGS)

fen-%: install
	$(PY) -m experiments fen $* $(ARGS)

feddyn-%: install
	$(PY) -m experiments feddyn $* $(ARGS)

losac-%: install
	$(PY) -m experiments losac $* $(ARGS)

l2gd-%: install
	$(PY) -m experiments l2gd $* $(ARGS)

## clean: remove results/, outputs/ and multirun/
clean:
	rm -rf results outputs multirun

## help: list every target with one line each (the default goal stays the install)
help:
	@echo "Usage: make <target> [PROFILE=smoke|quick|paper] [SEEDS=n] [JOBS=n] [LAUNCHER=...] [DONE_ONLY=1] [OVERRIDES='k=v ...'] [ARGS='...'] [TARGET=...]"
	@awk '/^## [^ ]/ { line = substr($$0, 4); i = index(line, ": "); \
		printf "  %-30s %s\n", substr(line, 1, i - 1), substr(line, i + 2) }' $(firstword $(MAKEFILE_LIST))
