#!/usr/bin/env bash
# Paper targets' CIFAR-10 runs on a lent GPU machine (issue 32; experiments/device_runs.py).
#
# CIFAR-10 (139 MB) is larger than one device call carries (64 MiB with the working tree), so it
# travels in parts over consecutive calls to the same warm machine:
#   here:   bash experiments/device_runs.sh split         # .devchunks/{00,01,02}: CIFAR10 as a tar in 48.5 MB parts
#   there:  bash experiments/device_runs.sh stash        # call 1 (carry .devchunks/00), call 2 (01): kept in /root
#   there:  bash experiments/device_runs.sh run PLAN     # call 3 (carry .devchunks/02, .whl): join, check, train
# Each call carries the working tree too (tracked files on 2026-11-27: 54 MB by `du -b`, 42 MB of
# them the run archive); with only the archive taken out, the last call (its 42.7 MB part and the
# wheels beside the rest) was refused as over 64 MiB, so for these calls take docs/ out of the
# index and ignore it (3 MB are left), and put it back after:
#   git rm -r --cached -q docs && echo /docs/ >> .git/info/exclude
#   ... the three calls ...;  git reset -q -- docs  (and drop that exclude line)
# `run` joins the parts into ../shared/data/CIFAR10 beside the repository's copy there (the data
# root the plan's runs name), checks them against CHECKSUMS.sha256, installs the carried wheels
# (hydra-core, omegaconf, antlr4, zstandard: that machine lacks them) and runs
# `python -m experiments.device_runs run PLAN`; $OUT/runs.tar.gz holds the finished runs.
# JOBS (12), STOP_LAUNCHING, DEADLINE, ACCELERATOR and MPS (1, the default: start NVIDIA MPS
# first; 0: not) pass through; RESULTS is the store (default ~/device-results, kept between calls
# to a warm machine). Locally, ACCELERATOR=cpu with STASH, DATA and RESULTS in /tmp checks it.
set -u
STEP=${1:?split [BYTES], stash or run PLAN}
STASH=${STASH:-/root/devchunks}
OUT=${OUT:-results/device_runs}
PY=${PY:-python3}
case "$STEP" in
  split)
    rm -rf .devchunks && mkdir -p .devchunks/all
    tar -C ../shared/data -cf .devchunks/all/cifar10.tar CIFAR10 CHECKSUMS.sha256
    split -b "${2:-48500000}" -d .devchunks/all/cifar10.tar .devchunks/all/part
    for part in .devchunks/all/part*; do mkdir -p ".devchunks/${part##*part}" && mv "$part" ".devchunks/${part##*part}/"; done
    rm -rf .devchunks/all; du -sh .devchunks/*;;
  stash)
    mkdir -p "$STASH" && cp .devchunks/*/part* "$STASH"/ && ls -la "$STASH";;
  run)
    PLAN=${2:?the plan (python -m experiments.device_runs plan ...)}
    # checked before the data is joined: a typo costs no device time
    case "${MPS:-1}" in 0|1) ;; *) echo "MPS=$MPS: 1 (start NVIDIA MPS) or 0 (not)"; exit 2;; esac
    mkdir -p "$OUT" "$STASH" && cp .devchunks/*/part* "$STASH"/ 2>/dev/null
    DATA=${DATA:-../shared/data}
    mkdir -p "$DATA"
    cat "$STASH"/part* | tar -C "$DATA" -xf - || exit 1
    (cd "$DATA" && grep CIFAR10/ CHECKSUMS.sha256 | sha256sum -c -) 2>&1 | tee "$OUT/run.log" || exit 1
    SCRATCH=$(mktemp -d)
    # the store outlives the call on a warm machine: a run stopped at one call's deadline resumes
    # from its checkpoint in the next call's plan, and finished ones are bundled again, not rerun
    RESULTS=${RESULTS:-$HOME/device-results}
    if ! $PY -c "import hydra, omegaconf, zstandard" 2>/dev/null; then
      $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SCRATCH/site" .whl/*.whl || exit 1
      export PYTHONPATH="$SCRATCH/site:$PWD"
    fi
    export PYTHONPATH=${PYTHONPATH:-$PWD} PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
    # the disk too: a checkpoint holds every client's latest model and per-client state, twice
    # (the previous one is kept); on 2026-11-27 Fig. 11's ResNet-18 runs and the massive SCAFFOLD
    # runs together needed about 80 GB of a 64 GB disk, and two failed writing (performance.md)
    { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null; nproc; df -h "$HOME" | tail -1; } \
      | tee -a "$OUT/run.log"
    # NVIDIA MPS lets the processes' kernels run at once instead of time-slicing the GPU
    # (8 processes without it finished runs at 2.2x one process's rate: docs/performance.md)
    if [ "${MPS:-1}" = 1 ] && [ "${ACCELERATOR:-cuda}" = cuda ]; then
      nvidia-cuda-mps-control -d && timeout 90 $PY -c "import torch; print('MPS ok', torch.ones(9, device='cuda').sum().item())" \
        || { echo quit | nvidia-cuda-mps-control; echo "MPS did not start: time-slicing"; }
    fi 2>&1 | tee -a "$OUT/run.log"
    $PY -m experiments.device_runs run "$PLAN" --jobs "${JOBS:-12}" --stop-launching "${STOP_LAUNCHING:-400}" \
      --deadline "${DEADLINE:-480}" --accelerator "${ACCELERATOR:-cuda}" --results-root "$RESULTS" \
      --logs "$SCRATCH/logs" --bundle "$OUT/runs.tar.gz" 2>&1 | tee -a "$OUT/run.log"
    [ "${MPS:-1}" = 1 ] && [ "${ACCELERATOR:-cuda}" = cuda ] && echo quit | nvidia-cuda-mps-control 2>/dev/null
    { df -h "$HOME" | tail -1; du -sh "$RESULTS" 2>/dev/null; } | tee -a "$OUT/run.log"
    tail -n 3 "$SCRATCH"/logs/*.log > "$OUT/run_tails.log" 2>/dev/null
    ls -la "$OUT";;
  *) echo "unknown step $STEP: split [BYTES], stash or run PLAN"; exit 2;;
esac
