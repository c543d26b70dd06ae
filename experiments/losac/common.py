"""What the LoSAC figure targets share: a federation built from a config and driven round by
round in this process (Figures 6 and 7 need what a stored run does not keep: client 1's
round-5 upload, the server matrix after every round), and small output helpers.

`build_loop` does what `fedrepro.run.run_experiment` does before its first round (data,
partition, model, algorithm, executor, RoundLoop) with the same seeds, so a figure's round t
is the round t a stored run of the same config would compute; it writes nothing and keeps
no checkpoints. Table II goes through the results store instead (`measure_cells`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pandas as pd
import torch

import fedrepro  # noqa: F401  (torchvision shim first)
from fedrepro.algorithms import Algorithm, Federation, build_algorithm
from fedrepro.config import Effective, effective, validate
from fedrepro.data.common import DatasetTensors
from fedrepro.data.loaders import dataset_for
from fedrepro.engine.local import SequentialExecutor
from fedrepro.engine.loop import RoundLoop, Schedule
from fedrepro.metrics.ledger import Ledger
from fedrepro.models.flat import FlatModel, model_for
from fedrepro.run import client_partition, evaluation_sets


@dataclass
class Federated:
    """One federation ready to run: the loop and the pieces a figure reads."""

    cfg: object
    eff: Effective
    data: DatasetTensors
    model: FlatModel
    algorithm: Algorithm
    loop: RoundLoop
    client_indices: list  # per client: its rows of data.x_train


def build_loop(cfg, data: Optional[DatasetTensors] = None, ledger_class: type = Ledger, **ledger_kw) -> Federated:
    """The RoundLoop `run_experiment` would build for `cfg` (on the CPU), on `data` when given
    (a relabelled view, e.g. Figure 6's binary MNIST), else the config's dataset. The ledger is
    `ledger_class(d, entropy=..., bin_width=..., **ledger_kw)` (a subclass may keep messages)."""
    validate(cfg)
    eff = effective(cfg)
    data = data if data is not None else dataset_for(cfg)
    parts = client_partition(cfg, data)
    eval_data = evaluation_sets(cfg, data)
    model, theta0 = model_for(cfg, data)
    indices = [torch.as_tensor(p, dtype=torch.long) for p in parts]
    sizes = torch.tensor([len(p) for p in parts], dtype=torch.float32)
    algorithm = build_algorithm(cfg.algorithm)
    algorithm.setup(Federation(len(parts), model.dim, sizes), theta0)
    t, p = cfg.train, cfg.participation
    executor = SequentialExecutor(model, data.x_train, data.y_train, indices, batch_size=t.batch_size,
                                  weight_decay=t.weight_decay, clip_norm=t.clip_norm, seed=cfg.seed,
                                  augment=data.augment)
    ledger = ledger_class(model.dim, entropy=cfg.metrics.entropy, bin_width=cfg.metrics.bin_width, **ledger_kw)
    loop = RoundLoop(model=model, algorithm=algorithm, executor=executor, ledger=ledger,
                     client_sizes=sizes, theta0=theta0, eff=eff, eval_data=eval_data,
                     schedule=Schedule(t.lr, t.lr_decay, t.batch_size, p.mode, p.rate, p.cohort_size, cfg.seed))
    return Federated(cfg, eff, data, model, algorithm, loop, indices)


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


def write_claims(path: Path, claims: pd.DataFrame, header: str) -> str:
    from fedrepro.reports.claims import claims_markdown

    text = f"{header}\n\n{claims_markdown(claims)}"
    path.write_text(text, encoding="utf-8")
    return text
