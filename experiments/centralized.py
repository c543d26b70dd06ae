"""The centralized baseline of every dataset and model here, beside the papers' figures.

    python -m experiments centralized --profile quick        (make centralized)

One centralized run (algorithm=centralized: the pooled training data, a Lightning Trainer)
per dataset and the model the papers train on it. FedDyn (Sec. 3, App. A.2) states its
centralized accuracies and recipes; for the other datasets no paper gives one, so the row
has no paper value and the recipe is ours (named in `assumed`). Datasets whose files are
not here show "not run" and the missing files. The target is `TARGET` (experiments/baselines.py).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

import fedrepro  # noqa: F401  (torchvision shim first)
from experiments.feddyn.claims import CHECKS
from fedrepro.data.loaders import unavailable
from fedrepro.reports.claims import evaluate_claims, write_claims
from fedrepro.reports.grid import Cell
from fedrepro.results import run_metrics


@dataclass(frozen=True)
class Baseline:
    dataset: str
    model: str
    paper: str  # the paper's centralized test accuracy (%), "" when no paper states one
    source: str
    overrides: tuple  # the recipe: lr, batch, epochs and lr schedule
    quick: tuple = ()  # extra caps at profile=quick (a CPU budget), named in the table
    assumed: list = field(default_factory=list)


_HALVED_150 = ("algorithm.epochs=150", "algorithm.lr_step_every=50", "algorithm.lr_step_factor=0.5")
_DECAY_500 = ("algorithm.epochs=500", "algorithm.lr_step_every=1", "algorithm.lr_step_factor=0.992")

BASELINES = [
    Baseline("mnist", "mlp_mnist", "98.4", "FedDyn Sec. 3; A.2 recipe",
             ("train.lr=0.1", "train.batch_size=50", *_HALVED_150)),
    Baseline("emnist_l", "mlp_emnist", "95.0", "FedDyn Sec. 3; A.2 recipe",
             ("train.lr=0.1", "train.batch_size=50", *_HALVED_150)),
    Baseline("cifar10", "cnn_cifar", "85.2", "FedDyn Sec. 3; A.2 recipe",
             ("train.lr=0.1", "train.batch_size=50", "train.weight_decay=1e-3", *_DECAY_500)),
    Baseline("cifar100", "cnn_cifar", "55.3", "FedDyn Sec. 3; A.2 recipe",
             ("train.lr=0.1", "train.batch_size=50", "train.weight_decay=1e-3", *_DECAY_500)),
    Baseline("shakespeare", "lstm", "50.8 (IID) / 51.2 (non-IID)", "FedDyn Sec. 3; A.2 recipe",
             ("train.lr=1.0", "train.batch_size=100", *_HALVED_150), quick=("algorithm.epochs=2",),
             assumed=["the pooled data of the 100 selected roles (FedDyn regenerates splits: its IID and "
                      "non-IID figures come from different pools)"]),
    Baseline("synthetic", "logistic", "", "no paper figure",
             ("dataset=synthetic_feddyn", "train.lr=0.1", "train.batch_size=10", "train.weight_decay=1e-5",
              "algorithm.epochs=50", "algorithm.lr_step_every=null"),
             assumed=["homogeneous generator; lr .1, batch 10, wd 1e-5 (A.1.1's grid), 50 epochs"]),
    Baseline("esr", "mlp_mnist", "", "no paper figure (LoSAC's 2NN: 200-200)",
             ("train.lr=0.1", "train.batch_size=50", "algorithm.epochs=100", "algorithm.lr_step_every=null"),
             assumed=["lr .1 on the batch-mean loss, batch 50, 100 epochs"]),
    Baseline("har", "mlp_mnist", "", "no paper figure (LoSAC's 2NN: 200-200)",
             ("train.lr=0.1", "train.batch_size=50", "algorithm.epochs=100", "algorithm.lr_step_every=null"),
             assumed=["lr .1 on the batch-mean loss, batch 50, 100 epochs"]),
    Baseline("a1a", "binary_logistic", "", "no paper figure (L2GD trains logistic regression)",
             ("train.lr=0.1", "train.batch_size=50", "algorithm.epochs=100", "algorithm.lr_step_every=null"),
             assumed=["lr .1, batch 50, 100 epochs, wd 1e-4; no a1a.t here: tested on the training set"]),
]


def run_overrides(b: Baseline, profile: str) -> list[str]:
    """dataset=, model=, then the recipe (with the profile's extra caps)."""
    data = [x for x in b.overrides if x.startswith("dataset=")] or [f"dataset={b.dataset}"]
    rest = [x for x in b.overrides if not x.startswith("dataset=")]
    caps = list(b.quick) if profile == "quick" else []
    return [*data, f"model={b.model}", "algorithm=centralized", *rest, *caps]


def cell(b: Baseline, profile: str, data_root: str) -> Cell:
    """The baseline's run, or "not run" naming the files missing from `data_root`."""
    overrides = run_overrides(b, profile)
    reason = unavailable(overrides[0].split("=", 1)[1], data_root)
    keys = {"dataset": b.dataset, "model": b.model}
    return Cell(keys, not_run=reason) if reason else Cell(keys, overrides)


def accuracy(run) -> float:
    return 100 * run.summary["final"].get("server_test_acc", math.nan)


def _recipe_epochs(b: Baseline) -> int:
    return int([x for x in b.overrides if x.startswith("algorithm.epochs=")][-1].split("=")[1])


def chosen(datasets: str | None) -> list[Baseline]:
    """The baselines of --datasets (comma-separated keys; None or 'all': every one, the rows whose
    data is not here shown as not run); an unknown key is refused, naming the known ones."""
    if datasets in (None, "all"):
        return list(BASELINES)
    known = [b.dataset for b in BASELINES]
    wanted = [d.strip() for d in datasets.split(",") if d.strip()]
    unknown = [d for d in wanted if d not in known]
    if unknown:
        raise SystemExit(f"centralized: unknown --datasets {unknown}; choose from {', '.join(known)} or 'all'")
    return [b for b in BASELINES if b.dataset in wanted]


def claims_frame(ours: pd.DataFrame, runs: dict, baselines: list[Baseline]) -> pd.DataFrame:
    """FDY-S3-1's frame (experiments/feddyn/claims.py): the datasets with a stated accuracy, their
    best test accuracy over the epochs run, against the recipe's epochs."""
    rows = []
    for i, b in enumerate(baselines):
        if not b.paper:
            continue
        row = {"dataset": b.dataset, "stated": [float(v) for v in re.findall(r"\d+\.\d+", b.paper)],
               "status": ours.iloc[i]["status"], "reason": ours.iloc[i]["reason"], "recipe_epochs": _recipe_epochs(b)}
        if row["status"] == "ok":
            run = runs[i][0]
            acc = pd.to_numeric(run_metrics(run.folder)["server_test_acc"], errors="coerce")
            row.update(best=100 * acc.max(), epochs=run.summary["rounds_completed"])
        rows.append(row)
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Centralized:
    """One centralized run per dataset, its test accuracy beside the paper's."""
    name = "centralized"
    title = "Centralized baselines: every dataset and model here, beside the papers' accuracies"
    claims = ("FDY-S3-1",)

    def cells(self, options, scale):
        return [cell(b, options.profile, options.data_root) for b in chosen(options.datasets)]

    def render(self, results) -> int:
        args = results.options
        baselines = chosen(args.datasets)
        cells = [cell(b, args.profile, args.data_root) for b in baselines]
        ours, runs = results.measure(cells, accuracy)
        rows = []
        for i, (b, c) in enumerate(zip(baselines, cells)):
            r = ours.iloc[i]
            done = runs.get(i, [])
            epochs = done[0].summary["rounds_completed"] if done else ""
            rows.append({"dataset": b.dataset, "model": b.model,
                         "ours": f"{r['ours_mean']:.1f}" if r["status"] == "ok" else r["status"],
                         "paper": b.paper or "—", "epochs": epochs, "recipe": " ".join(run_overrides(b, args.profile)[2:]),
                         "why not": r["reason"].split(". ")[0] if r["status"] != "ok" else "",
                         "data": r.get("data", "") or ""})
        table = pd.DataFrame(rows)
        out = Path(args.results_root) / "tables"
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / "centralized.csv", index=False)
        notes = [f"profile={args.profile}, seeds 0..{args.seeds - 1}: test accuracy (%) of the centralized model "
                 "after its last epoch (server_test_acc)"]
        notes += [f"{b.dataset}: {'; '.join(b.assumed)}" for b in baselines if b.assumed]
        left = [b.dataset for b in BASELINES if b not in baselines]
        if left:
            notes.append(f"rows of {', '.join(left)} omitted (not selected with --datasets); --datasets all lists them")
        if args.profile == "quick":
            notes.append("profile=quick caps epochs at 100 (one epoch stands for a round); Shakespeare at 2 epochs "
                         "(the LSTM on this CPU), so its number is far from converged")
        lines = [f"# Centralized baselines (profile={args.profile})", "",
                 "| dataset | model | ours (%) | paper (%) | epochs run | recipe | not run because |",
                 "|---|---|---|---|---|---|---|"]
        lines += [f"| {r.dataset} | {r.model} | {r.ours} | {r.paper} | {r.epochs} | `{r.recipe}` | {r['why not']} |"
                  for _, r in table.iterrows()]
        lines += ["", *[f"- {n}" for n in notes]]
        (out / "centralized.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        header = f"### Claims on our centralized runs, profile={args.profile}, seed 0"
        print("\n" + write_claims(out / "centralized_claims.md",
                                  evaluate_claims(list(self.claims), claims_frame(ours, runs, baselines), CHECKS), header))
        return 0


TARGET = Centralized()
