#!/usr/bin/env bash
# docs/performance.md's GPU rows in one call on a lent GPU machine (issue 30, goal 5):
#   bench  `make bench` on the GPU (experiments/bench.py --device cuda): every executor, the plain
#          PyTorch loop, the products alone, evaluation, and FedDyn's MNIST paper-setting rounds
#          against the reference loop written like the papers' code;
#   run    one run end to end (python -m fedrepro, FedDyn on MNIST, profile=quick, 3 rounds) on the
#          GPU and on that machine's CPU: the same numbers to float rounding?
#   cost   what the CIFAR-10 rows cost there (experiments/cost.py on generated CIFAR-shaped files of
#          the real sizes: CIFAR-10's 116 MB training file does not travel with a call), at quick
#          and at paper.
#     bash experiments/bench_gpu.sh [bench] [run] [cost]      (no step named: all three)
# Outputs under $OUT (at most 8 files come back): bench.log, bench/{bench.csv,bench.md,
# bench_eval.csv,bench_eval_stacked.csv}, run_cuda.csv, run_cpu.csv, cost/{quick,paper}/cost.csv.
#
# The machine lacks hydra-core, omegaconf, antlr4 and zstandard: carry their wheels in .whl
# (see docs/performance.md) and MNIST + LIBSVM a1a in .devdata, both ignored through
# .git/info/exclude. Locally, `DEVICE=cpu SECONDS_EACH=0.5 bash experiments/bench_gpu.sh` checks
# the script itself.
set -u
OUT=${OUT:-results/bench_gpu}
DEVICE=${DEVICE:-cuda}
SECONDS_EACH=${SECONDS_EACH:-2}
STEPS=${*:-bench run cost}
mkdir -p "$OUT"
SCRATCH=$(mktemp -d)  # installed wheels, the check's run stores, generated CIFAR files
trap 'rm -rf "$SCRATCH"' EXIT
PY=${PY:-python3}
if ! $PY -c "import hydra, omegaconf, zstandard" 2>/dev/null; then  # the carried wheels
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SCRATCH/site" .whl/*.whl \
    && export PYTHONPATH="$SCRATCH/site:$PWD" || exit 1
fi
export PYTHONPATH=${PYTHONPATH:-$PWD} PYTHONUNBUFFERED=1 FEDREPRO_DATA_ROOT=${FEDREPRO_DATA_ROOT:-.devdata}
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv 2>/dev/null
  nproc
  $PY -c "import torch, fedrepro; print('torch', torch.__version__, 'cuda', torch.cuda.is_available() and torch.cuda.get_device_name())"
} 2>&1 | tee -a "$OUT/bench.log"

if [[ " $STEPS " == *" bench "* ]]; then
  timeout 360 $PY -m experiments.bench --device "$DEVICE" --seconds "$SECONDS_EACH" --rounds 3 --round-threads 1 \
    --ratio-to docs/measured/bench.csv --out "$OUT/bench" 2>&1 | tee -a "$OUT/bench.log"
fi

if [[ " $STEPS " == *" run "* ]]; then
  for acc in "$DEVICE" cpu; do
    start=$(date +%s%N)
    timeout 150 $PY -m fedrepro dataset=mnist data_root="$FEDREPRO_DATA_ROOT" algorithm=feddyn profile=quick \
      train.rounds=3 train.accelerator="$acc" results_root="$SCRATCH/runs_$acc" 2>&1 | tail -3 | tee -a "$OUT/bench.log"
    echo "run on $acc: $(( ($(date +%s%N) - start) / 1000000 )) ms wall (3 rounds, process start and data load included)" \
      | tee -a "$OUT/bench.log"
    cp "$SCRATCH/runs_$acc"/runs/*/metrics.csv "$OUT/run_$acc.csv" 2>/dev/null
  done
fi

if [[ " $STEPS " == *" cost "* ]]; then
  $PY -m experiments.l2gd.fake_cifar "$SCRATCH/fake_cifar" 2>&1 | tail -1 | tee -a "$OUT/bench.log"
  for profile in quick paper; do
    timeout 240 $PY -m experiments.cost fen-table2 feddyn-table1 feddyn-fig11 l2gd-table2 l2gd-fig7 \
      --profile $profile --datasets cifar10 --device "$DEVICE" --data-root "$SCRATCH/fake_cifar" --rounds 2 \
      --out "$OUT/cost/$profile" 2>&1 | tee -a "$OUT/bench.log"
  done
fi
ls -la "$OUT" "$OUT"/* | tee -a "$OUT/bench.log"
