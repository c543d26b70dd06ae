"""What the LoSAC figure targets share: a federation built from a config and driven round by
round in this process (Figures 6 and 7 need what a stored run does not keep: client 1's
round-5 upload, the server matrix after every round), and small output helpers.

`build_loop` builds what `fedrepro.run.run_experiment` runs (`run.build_federation`: model,
algorithm, executor, ledger, channel, RoundLoop) with the same seeds, so a figure's round t
is the round t a stored run of the same config would compute; it writes nothing and keeps
no checkpoints. Table II goes through the results store instead (`measure_cells`).
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Optional

import pandas as pd

import fedrepro  # noqa: F401  (torchvision shim first)
from fedrepro.config import validate
from fedrepro.data.common import DatasetTensors
from fedrepro.data.loaders import dataset_for
from fedrepro.metrics.ledger import Ledger
from fedrepro.reports.grid import Cell, measure_cells
from fedrepro.run import Federated, build_federation, client_partition


def collect(cells: list[Cell], args, extra: list[str], *, run: bool = True, log=print) -> tuple[pd.DataFrame, dict]:
    """measure_cells for the LoSAC and L2GD targets, which read their frames from the runs
    themselves (no per-cell metric): run (or reuse) every runnable cell, or with run=False only
    read another target's runs from the store."""
    return measure_cells(cells, lambda r: math.nan, profile=args.profile, seeds=args.seeds,
                         results_root=args.results_root, extra=extra, jobs=args.jobs, log=log, run=run)


def build_loop(cfg, data: Optional[DatasetTensors] = None, ledger_class: type = Ledger, **ledger_kw) -> Federated:
    """The federation `run_experiment` would build for `cfg` (on the CPU, same seeds), on `data`
    when given (a relabelled view, e.g. Figure 6's binary MNIST), else the config's dataset.
    The ledger is `ledger_class(d, ..., **ledger_kw)` (a subclass may keep messages)."""
    validate(cfg)
    data = data if data is not None else dataset_for(cfg)
    return build_federation(cfg, data, client_partition(cfg, data), "cpu", ledger_class=ledger_class, **ledger_kw)


def parser(description: str, datasets: str = "", ignored: tuple = ()):
    """The shared table/figure options (reports.cli), with --datasets defaulting to every paper
    row (`datasets` names the keys; empty: the option is ignored) and `ignored` options said so."""
    from fedrepro.reports.cli import table_parser

    ap = table_parser(description)
    ap.set_defaults(datasets="all")
    for action in ap._actions:
        if action.dest == "datasets":
            action.help = (f"comma-separated dataset keys ({datasets}) or 'all' (default: every paper row; rows "
                           "whose data is not here are listed as 'not run')") if datasets else "ignored here"
        elif action.dest in ignored:
            action.help = "ignored here"
    return ap


def missing_reason(name: str, data_root) -> Optional[str]:
    """Why dataset `name` cannot load from `data_root`, naming each missing file (shorter than
    `loaders.unavailable`: the common folder once), or None when its files are there."""
    from fedrepro.data.loaders import LOADERS

    missing = [Path(m) for m in LOADERS[name].missing(Path(data_root).expanduser())]
    if not missing:
        return None
    folder = Path(os.path.commonpath([str(m.parent) for m in missing]))
    return f"data not here: {folder}/ lacks " + ", ".join(str(m.relative_to(folder)) for m in missing)


def figure_dir(results_root) -> Path:
    path = Path(results_root) / "figures"
    path.mkdir(parents=True, exist_ok=True)
    return path
