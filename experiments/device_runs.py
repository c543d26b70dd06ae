"""Paper targets' runs on a lent GPU machine, many at once, inside one call's time limit.

    python -m experiments.device_runs plan fen-table2 feddyn-table1 ... --profile quick \
        --datasets cifar10 --skip participation=p100 > runs.json      # here: what is not done yet
    python -m experiments.device_runs run runs.json --jobs 8 --stop-launching 400 --deadline 480 \
        --results-root device-results --bundle $OUT/runs.tar.gz        # there: train, bundle
    tar -xzf runs.tar.gz -C docs/measured/runs                        # here: into the run archive

`plan` lists the runs the named targets need that have no outcome here (finished or diverged, on
any accelerator), once each, in the order the targets are named (the most wanted first). `run`
starts them in that order, `--jobs` at a time, each a process with `--threads` torch threads and
`train.accelerator=cuda`, so their run keys name the GPU (its numbers agree with the CPU's to float
rounding only); a table reads such a run where its own is missing and names the device
(`grid.finished_elsewhere`). On one H100 12 jobs fit (with 10 000-sample evaluation batches a
CIFAR-10 CNN process held 6-13 GB and 15 ran out of its memory; now 2 500 on a GPU) and share it
best under NVIDIA MPS (device_runs.sh starts it): docs/performance.md. No run starts after
`--stop-launching` seconds; runs still going at `--deadline` are stopped (their folders stay
behind, unfinished, and are not bundled). The finished runs' small files (`fedrepro.archive`:
config, summary, metrics, partition) go into one tarball laid out as the run archive, since a
device call returns at most 8 files. experiments/device_runs.sh is the call's whole command. On
this machine, `run --accelerator cpu --threads N --jobs 1` is a lane over the same plan.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path


# A run's final outcomes (fedrepro.status.run_state): a diverged run is reused, never recomputed,
# so planning it again only spends GPU time on the same divergence.
FINAL = ("done", "diverged")


def plan(argv: list[str]) -> int:
    from experiments import registry
    from experiments.__main__ import parser_for, run_status
    from fedrepro.reports import target as targets
    from fedrepro.store import ARCHIVE

    ap = argparse.ArgumentParser(prog="python -m experiments.device_runs plan")
    ap.add_argument("targets", nargs="+", help="make names, the most wanted first (fen-table2 ...)")
    ap.add_argument("--skip", action="append", default=[], metavar="OVERRIDE",
                    help="leave out runs with this override (repeatable), e.g. participation=p100")
    ours, rest = ap.parse_known_args(argv)
    planned: dict[str, dict] = {}
    for name in ours.targets:
        paper, target = registry.find(name)
        options = parser_for(paper, target, name).parse_args(rest)
        options.group, options.paper, options.archive = name, paper, ARCHIVE
        for r in targets.plan(target, options):
            if r["key"] in planned or any(s in r["overrides"] for s in ours.skip):
                continue
            if run_status(r, options)["state"] in FINAL:  # here, or on another accelerator
                continue
            planned[r["key"]] = {"key": r["key"], "label": r["label"], "target": name, "overrides": r["overrides"]}
    json.dump(list(planned.values()), sys.stdout, indent=1)
    print(f"{len(planned)} runs not done here", file=sys.stderr)
    return 0


def _device_overrides(overrides: list[str], results_root: str, accelerator: str) -> list[str]:
    kept = [o for o in overrides if not o.startswith(("results_root=", "train.accelerator="))]
    return [*kept, f"results_root={results_root}", f"train.accelerator={accelerator}"]


def run(argv: list[str]) -> int:
    from fedrepro.archive import save
    from fedrepro.config import compose_config, run_key
    from fedrepro.reports.cli import count

    ap = argparse.ArgumentParser(prog="python -m experiments.device_runs run")
    ap.add_argument("plan", type=Path)
    ap.add_argument("--jobs", type=count, default=8)
    ap.add_argument("--stop-launching", type=float, default=400, help="seconds: no run starts later")
    ap.add_argument("--deadline", type=float, default=480, help="seconds: runs still going are stopped")
    ap.add_argument("--results-root", default="results")
    ap.add_argument("--accelerator", default="cuda")
    ap.add_argument("--threads", type=count, default=1, help="torch threads a run (on a GPU 1 is enough)")
    ap.add_argument("--bundle", type=Path, required=True, help="the tarball of the finished runs")
    ap.add_argument("--logs", type=Path, default=None, help="a folder for each run's output")
    args = ap.parse_args(argv)
    start = time.monotonic()
    todo = json.loads(args.plan.read_text())
    logs = args.logs or Path(tempfile.mkdtemp())
    logs.mkdir(parents=True, exist_ok=True)
    running: list[tuple[subprocess.Popen, dict, float]] = []
    keys: list[str] = []
    queue = list(todo)
    while queue or running:
        elapsed = time.monotonic() - start
        for p, r, t0 in list(running):
            if p.poll() is not None:
                running.remove((p, r, t0))
                print(f"{elapsed:6.0f}s  rc {p.returncode}  {time.monotonic() - t0:5.0f}s  {r['label']}", flush=True)
        if elapsed > args.deadline:
            for p, r, _ in running:
                p.kill()
                print(f"{elapsed:6.0f}s  stopped at the deadline: {r['label']}", flush=True)
            break
        while queue and len(running) < args.jobs and elapsed < args.stop_launching:
            r = queue.pop(0)
            overrides = _device_overrides(r["overrides"], args.results_root, args.accelerator)
            keys.append(run_key(compose_config(overrides)))
            with open(logs / f"{keys[-1]}.log", "w") as out:
                p = subprocess.Popen([sys.executable, "-m", "experiments.device_runs", "one", str(args.threads),
                                      *overrides],
                                     stdout=out, stderr=subprocess.STDOUT)
            running.append((p, r, time.monotonic()))
        if not queue or elapsed >= args.stop_launching:
            queue.clear()
        time.sleep(1)
    with tempfile.TemporaryDirectory() as archive:
        saved, skipped = save(args.results_root, keys, Path(archive))
        with tarfile.open(args.bundle, "w:gz") as tar:
            for key in saved:
                tar.add(Path(archive) / key, arcname=key)
    print(f"{len(saved)} of {len(todo)} runs finished and bundled in {args.bundle} "
          f"({len(skipped)} started but unfinished, {len(todo) - len(keys)} never started)", flush=True)
    return 0


def one(argv: list[str]) -> int:
    """One run in this process (the parent starts one process a run): THREADS OVERRIDE ..."""
    import torch

    from fedrepro.config import compose_config
    from fedrepro.runner import execute

    torch.set_num_threads(int(argv[0]))
    overrides = argv[1:]
    outcome = execute(compose_config(overrides))
    print(outcome)
    return 0 if getattr(outcome, "summary", None) else 1


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbs = {"plan": plan, "run": run, "one": one}
    if not argv or argv[0] not in verbs:
        print(__doc__)
        return 2
    return verbs[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
