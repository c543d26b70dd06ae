"""What a target's runs cost here: seconds a round of each kind of run a target plans, timed over
a few rounds on this machine (or a GPU), and the hours its runs take at the profile.

    python -m experiments.cost TARGET [TARGET ...] [--profile quick] [--rounds 2] [--device cuda]
                               [--data-root DIR] [target options: --datasets, --splits, --series ...]

For every target it asks `cells()` for the runs it needs (`fedrepro.reports.target.plan`, the
list `make status` prints), groups them by dataset, model, client count, participation and local
work (local epochs; L2GD's rounds are one local step or one averaging, a fraction of a FedAvg
round of the same model: ResNet-56's FedAvg round was 240 s here, L2GD's 28 s), and times the
first run of each group: `fedrepro.run.build_federation` of that run's config on the
device, one warm-up round, then `--rounds` rounds of `RoundLoop.run_round` without evaluation,
and one evaluation alone (a run the machine refuses, say for memory, is a row that says why).
A round then costs train + evaluation / eval_every seconds; a run, that
times its rounds at the profile (capped as the profile caps them); the group, that times its
runs. Nothing is written to the results store. Loading and splitting the data, the runs'
checkpoints and CSV writes are left out, and the other runs of a group (other algorithms or
compressors) are taken to cost what the first does: an estimate to plan with, to about 20 %.
CIFAR-shaped data from `python -m experiments.l2gd.fake_cifar DIR` times as the real files do
(the same sizes): that is how the CIFAR rows were priced on a GPU that CIFAR-10 could not reach.
Writes <out>/cost.csv and prints a table.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import pandas as pd
import torch

import fedrepro  # noqa: F401  (torchvision shim first)
from experiments import registry
from experiments.bench_round import device_name, synchronize
from fedrepro.errors import ConfigError, one_line
from fedrepro.reports import target as targets
from fedrepro.reports.cli import count, table_parser
from fedrepro.reports.tables import markdown_grid

log = logging.getLogger("fedrepro.experiments")


def group_of(cfg) -> tuple:
    """What a round's cost depends on most: (dataset, model, clients, participation, local work)."""
    p = cfg.participation
    share = f"{p.cohort_size} a round" if p.cohort_size else f"{p.rate:.0%}"
    work = "1 step" if cfg.algorithm.name == "l2gd" else f"{cfg.train.local_epochs} epochs"
    return cfg.dataset.name, cfg.model.name, int(cfg.train.num_clients), share, work


def time_run(cfg, device: str, rounds: int) -> dict:
    """(train seconds a round, evaluation seconds, eval_every, rounds at the profile) of one run
    (`cfg`: its composed config, as `plan` gives it)."""
    from fedrepro.config import effective
    from fedrepro.run import federation_for

    fed = federation_for(cfg, device)
    eff = effective(cfg)
    fed.loop.run_round(0)  # warm-up: first-call allocations, kernel choices
    synchronize()
    t0 = time.perf_counter()
    for t in range(1, rounds + 1):
        fed.loop.run_round(t)
    synchronize()
    train = (time.perf_counter() - t0) / rounds
    t0 = time.perf_counter()
    fed.loop.evaluate(rounds + 1)
    synchronize()
    return {"train_s": train, "eval_s": time.perf_counter() - t0, "eval_every": int(eff.eval_every),
            "rounds_a_run": int(eff.rounds)}


def target_rows(name: str, argv: list[str], device: str, rounds: int) -> list[dict]:
    """One row per group of the target's planned runs (at the options in argv)."""
    paper, target = registry.find(name)
    ap = table_parser(target.title)
    if hasattr(target, "add_options"):
        target.add_options(ap)
    options, _ = ap.parse_known_args(argv)
    groups: dict[tuple, list[dict]] = {}
    for run in targets.plan(target, options):
        groups.setdefault(group_of(run["config"]), []).append(run)
    rows = []
    for (dataset, model, clients, share, work), runs in groups.items():
        common = {"target": registry.make_name(paper, target), "profile": options.profile, "dataset": dataset,
                  "model": model, "clients": clients, "participation": share, "local_work": work, "runs": len(runs),
                  "timed_run": runs[0]["label"]}
        try:
            measured = time_run(runs[0]["config"], device, rounds)
        except ConfigError as exc:  # e.g. the clients' state does not fit this machine: said in the row
            rows.append({**common, "refused": one_line(str(exc))})
            log.warning(f"{common['target']} {dataset}/{model}: not timed: {one_line(str(exc))}")
            continue
        per_round = measured["train_s"] + measured["eval_s"] / measured["eval_every"]
        hours = per_round * measured["rounds_a_run"] / 3600
        rows.append({**common, **measured, "seconds_per_round": per_round, "hours_a_run": hours,
                     "hours_all_runs": hours * len(runs), "refused": ""})
        log.info(f"{rows[-1]['target']} {dataset}/{model}, {clients} clients, {share}: {per_round:.2f} s a round "
                 f"({measured['train_s']:.2f} s training, {measured['eval_s']:.2f} s an evaluation every "
                 f"{measured['eval_every']}), {hours:.2f} h a run, {len(runs)} runs")
    return rows


def markdown(frame: pd.DataFrame, where: str) -> str:
    lines = [[r.target, r.profile, f"{r.dataset} / {r.model}", r.clients, r.participation, r.local_work, r.runs]
             + ([f"{r.seconds_per_round:.2f}", r.rounds_a_run, f"{r.hours_a_run:.2f}", f"{r.hours_all_runs:.1f}"]
                if not r.refused else [f"not timed: {r.refused}", "", "", ""])
             for r in frame.itertuples()]
    headers = ["target", "profile", "data / model", "clients", "a round", "local work", "runs", "s a round",
               "rounds a run", "h a run", "h all runs"]
    return (f"### What the runs cost on {where} ({time.strftime('%Y-%m-%d')}, {torch.get_num_threads()} threads)\n\n"
            + markdown_grid(headers, lines, right_align={3, 6, 7, 8, 9, 10}) + "\n")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    names = []
    while argv and not argv[0].startswith("-"):
        names.append(argv.pop(0))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=not names)
    ap.add_argument("--rounds", type=count, default=2, help="rounds timed a run (after one warm-up round)")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU machine")
    ap.add_argument("--out", default=os.path.join(os.environ.get("FEDREPRO_RESULTS", "results"), "cost"))
    own, rest = ap.parse_known_args(argv)
    if not names:
        ap.error("name one or more targets (python -m experiments list)")
    where = device_name(own.device)
    rows = [row for name in names for row in target_rows(name, rest, own.device, own.rounds)]
    frame = pd.DataFrame(rows).assign(device=where, threads=torch.get_num_threads(), date=time.strftime("%Y-%m-%d"))
    out = Path(own.out)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "cost.csv", index=False)
    print(markdown(frame, where))
    print(f"[cost] csv: {out / 'cost.csv'}")
    return 0


if __name__ == "__main__":
    from fedrepro.reports.cli import run_target

    raise SystemExit(run_target(main))
