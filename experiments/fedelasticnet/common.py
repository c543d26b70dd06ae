"""FedElasticNet's runs, built from settings.yaml and conf/experiment/fen/, and the panels its
tables and figures draw.

One function turns (dataset, split, algorithm key, participation) into config overrides, so
every table and figure that needs the same run asks for identical overrides and the results
store (keyed by the resolved config) computes it once. What data is here is read from the data
folder each caller names (the target's --data-root, options.data_root). `selection` reads
--datasets, --splits and --data-root; the figure helpers draw a grid of panels, each a set of curves or the reason it is
empty.
"""
from __future__ import annotations

import math
import textwrap
from functools import lru_cache
from pathlib import Path
from typing import Optional

import pandas as pd
from omegaconf import OmegaConf

import fedrepro  # noqa: F401  (torchvision shim first)
from fedrepro.config import CONF_DIR
from fedrepro.data.loaders import unavailable
from fedrepro.reports.figures import not_run_note, panel_grid
from fedrepro.reports.grid import Cell, why_no_numbers
from fedrepro.results import run_metrics

EXPERIMENTS = CONF_DIR / "experiment" / "fen"  # conf/experiment/fen/<dataset>.yaml: each dataset's setting


def dataset_setting(dataset: str) -> dict:
    """conf/experiment/fen/<dataset>.yaml as the tables use it: `run`, its data, model and train
    keys as overrides (dataset first), and `table5`, its per-algorithm values (Table 5's rows)."""
    raw = OmegaConf.to_container(OmegaConf.load(EXPERIMENTS / f"{dataset}.yaml"))
    groups = dict(next(iter(d.items())) for d in raw["defaults"] if isinstance(d, dict))
    choices = {group.removeprefix("override /"): choice for group, choice in groups.items()}
    run = [f"dataset={choices['dataset']}", f"model={choices['model']}",
           *(f"train.{key}={value}" for key, value in raw["train"].items())]
    return {"run": run, "table5": raw["per_algorithm"]}


def _load_settings() -> dict:
    settings = OmegaConf.to_container(OmegaConf.load(Path(__file__).with_name("settings.yaml")))
    for dataset, entry in settings["datasets"].items():
        entry.update(dataset_setting(dataset))
    return settings


SETTINGS = _load_settings()
KEYS = ["dataset_key", "split_key", "algorithm_key"]
IMAGE4 = ["mnist", "emnist_l", "cifar10", "cifar100"]
SIX = ["fedprox", "fen_alg1", "scaffold", "fen_alg2", "feddyn", "fen_alg3"]  # Table 2, Figs. 1, 6-9
PARTICIPATION = {"p10": "10 %", "p100": "100 %"}
LABELS = {"mnist": "MNIST", "emnist_l": "EMNIST-L", "cifar10": "CIFAR-10", "cifar100": "CIFAR-100",
          "shakespeare": "Shakespeare", "iid": "IID", "dirichlet1.0": "Dirichlet (1.0)",
          "dirichlet0.6": "Dirichlet (.6)", "dirichlet0.3": "Dirichlet (.3)", "dirichlet0.1": "Dirichlet (.1)",
          "natural": "non-IID"}
ACCURACY = "all_test_acc"  # FedDyn's reported model: the mean of every client's latest model


# ---------------------------------------------------------------------------------------------
# Settings -> runs


def hparams(dataset: str, algorithm: str) -> dict:
    """Table 5's (lambda1, lambda2, epsilon) of an algorithm key on a dataset."""
    return dict(SETTINGS["datasets"][dataset]["table5"][SETTINGS["algorithms"][algorithm]["table5"]])


def run_overrides(dataset: str, split: str, algorithm: str, participation: str, profile: str,
                  **changes) -> list[str]:
    """The overrides of one run; `changes` replace Table 5 values (e.g. lambda1 in a sweep)."""
    alg = SETTINGS["algorithms"][algorithm]
    names = {"lambda1": "lambda1", "lambda2": alg["lambda2_is"], "epsilon": "epsilon"}
    values = {**hparams(dataset, algorithm), **changes}
    out = [*SETTINGS["datasets"][dataset]["run"], *SETTINGS["splits"][split], *alg["run"],
           *(f"algorithm.{names[k]}={v}" for k, v in values.items()), f"participation={participation}"]
    return out + extra_caps(participation, profile)


def extra_caps(participation: str, profile: str) -> list[str]:
    """Table 4's caps: 100 % participation at profile=quick costs about a 10 % cell."""
    return list(SETTINGS["full_participation_quick_caps"]) if (participation, profile) == ("p100", "quick") else []


def not_run_reason(overrides: list[str], data_root: str) -> Optional[str]:
    """Why these overrides cannot run on the data in `data_root` (missing data files, a missing
    loader or config file), or None."""
    for item in overrides:
        group, _, choice = item.partition("=")
        if group == "dataset":
            missing = unavailable(choice, data_root)
            if missing:
                return missing
        if "." not in group and not (CONF_DIR / group / f"{choice}.yaml").exists():
            return f"no config {group}={choice} yet"
    return None


def dataset_reason(dataset: str, data_root: str) -> Optional[str]:
    """Why `dataset`'s runs cannot run on the data in `data_root`, or None."""
    if dataset not in SETTINGS["datasets"]:
        return "no paper setting for this dataset in settings.yaml"
    return not_run_reason(SETTINGS["datasets"][dataset]["run"], data_root)


def runnable_datasets(data_root: str) -> list[str]:
    return [d for d in SETTINGS["datasets"] if dataset_reason(d, data_root) is None]


def cell(keys: dict, participation: str, profile: str, *, data_root: str, **changes) -> Cell:
    """One run of a table, "not run" when its data is not in `data_root`; its overrides (and so
    its run key) do not depend on what data is here."""
    d, s, a = keys["dataset_key"], keys["split_key"], keys["algorithm_key"]
    if d not in SETTINGS["datasets"]:
        return Cell(dict(keys), not_run=dataset_reason(d, data_root))
    overrides = run_overrides(d, s, a, participation, profile, **changes)
    return Cell(dict(keys), overrides, not_run=not_run_reason(overrides, data_root))


def table_grid(reference: pd.DataFrame, participation: str, profile: str, data_root: str) -> list[Cell]:
    """A run per (dataset, split, algorithm) row of a paper's table."""
    rows = reference[KEYS].drop_duplicates()
    return [cell(dict(r), participation, profile, data_root=data_root) for _, r in rows.iterrows()]


def tail_mean(frame: pd.DataFrame, column: str) -> float:
    """Mean of a metric over the evaluations in the last 10 % of the rounds."""
    rows = frame[["round", column]].dropna()
    last = rows["round"].max()
    tail = rows[rows["round"] >= min(last, math.floor(0.9 * last) + 1)]
    return float(tail[column].mean())


def tail_accuracy(frame: pd.DataFrame, column: str = ACCURACY) -> float:
    """Mean test accuracy (points) over the evaluations in the last 10 % of the rounds."""
    return 100 * tail_mean(frame, column)


# ---------------------------------------------------------------------------------------------
# Command line: which rows


def _choose(arg: Optional[str], known: list[str], default: list[str], what: str) -> list[str]:
    if arg is None:
        return default
    if arg == "all":
        return known
    wanted = [x.strip() for x in arg.split(",") if x.strip()]
    unknown = [x for x in wanted if x not in known]
    if unknown:
        raise SystemExit(f"unknown {what} {unknown}; choose from {', '.join(known)} or 'all'")
    return wanted


def selection(args, datasets: list[str], splits: list[str],
              panels: bool = False) -> tuple[list[str], list[str], list[str]]:
    """(chosen datasets, chosen splits, notes naming what was left out and why); a figure
    (`panels`) keeps the left-out panels, marked "not run". The data is looked for in
    args.data_root."""
    runnable = [d for d in datasets if dataset_reason(d, args.data_root) is None]
    chosen_d = _choose(args.datasets, datasets, runnable, "datasets")
    chosen_s = _choose(args.splits, splits, splits, "splits")
    left: dict[str, list[str]] = {}  # reason -> datasets left out for it
    for d in datasets:
        if d not in chosen_d:
            left.setdefault(dataset_reason(d, args.data_root) or "not selected with --datasets", []).append(d)
    gone = "not run" if panels else "omitted"
    notes = [f"{'panels' if panels else 'rows'} of {', '.join(ds)} {gone} ({why})"
             + ("" if panels else "; --datasets all lists them as not run") for why, ds in left.items()]
    if len(chosen_s) < len(splits):
        notes.append(f"splits {', '.join(s for s in splits if s not in chosen_s)} {gone} (--splits {args.splits})")
    return chosen_d, chosen_s, notes


def setting_notes(datasets: list[str], participation: str, profile: str, data_root: str) -> list[str]:
    """The settings of the datasets whose data is in `data_root`: the paper's, the profile's caps
    and what the runs did."""
    here = [d for d in datasets if dataset_reason(d, data_root) is None]
    notes = []
    for d in here:
        notes.append(f"setting {d}: {' '.join(SETTINGS['datasets'][d]['run'])} participation={participation}; "
                     "lambda1/lambda2/epsilon from Table 5 (see table5)")
    cap = OmegaConf.load(CONF_DIR / "profile" / f"{profile}.yaml").get("max_rounds")
    for d in here:
        rounds = next((int(o.split("=")[1]) for o in SETTINGS["datasets"][d]["run"]
                       if o.startswith("train.rounds=")), None)
        if cap and rounds and rounds > cap:
            notes.append(f"{d}: profile={profile} runs {cap} of the paper's {rounds} rounds, so cumulative "
                         f"counts are about {cap / rounds:.2g} of the paper's (claims skip the comparison)")
    caps = extra_caps(participation, profile)
    if caps:
        notes.append(f"extra caps at profile=quick and 100 % participation: {' '.join(caps)} "
                     "(100 clients x 6 steps ~ the 600 local steps of a 10 % round; settings.yaml)")
    for d in here:  # what the runs did, beside the paper's setting printed above
        notes.append(f"{d} as run: {effective_setting(d, participation, profile)}")
    return notes


@lru_cache(maxsize=None)
def effective_setting(dataset: str, participation: str, profile: str) -> str:
    """The profile's caps on one dataset's runs, as the run logs them ('profile=quick: rounds
    200 -> 100, local epochs 5 -> 1, ...'), read from the composed config of its FedProx run
    (composed once per process: the setting files do not change under it)."""
    from fedrepro.config import compose_config
    from fedrepro.run import profile_caps

    split = SETTINGS["datasets"][dataset]["splits"][0]
    overrides = run_overrides(dataset, split, "fedprox", participation, profile)
    return profile_caps(compose_config([*overrides, f"profile={profile}"]))


# ---------------------------------------------------------------------------------------------
# Figures: a grid of panels, each a set of curves or the reason it is empty


def new_figure(n: int, title: str, ncols: int = 3, size=(4.4, 3.3)):
    cols = min(n, ncols)
    rows = -(-n // cols)
    fig, axes = panel_grid(rows, cols, size, extra_height=0.6)
    for ax in axes.ravel()[n:]:
        ax.remove()
    # A no-break space keeps "10 %" on one line when the title wraps.
    fig.suptitle("\n".join(textwrap.wrap(title.replace(" %", "\u00a0%"), 55 * cols)), fontsize=9)
    return fig, list(axes.ravel()[:n])


def draw_reason(ax, title: str, reason: str) -> None:
    text = reason if reason.startswith("not run") else f"not run: {reason}"
    lines = [line for paragraph in text.splitlines() for line in textwrap.wrap(paragraph, 34)]
    ax.text(0.5, 0.5, "\n".join(lines), ha="center", va="center",
            transform=ax.transAxes, color="0.4")
    ax.set_title(title, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])


def draw_curves(ax, title: str, curves: dict[str, object], y: str, ylabel: str,
                scale: float = 1.0) -> None:
    """The panel's curves ({label: metrics frame}); a label whose value is a string has no runs,
    and the panel says which and why."""
    drawn = 0
    for label, frame in curves.items():
        if isinstance(frame, str):
            continue
        pts = frame[["round", y]].dropna() if y in frame else frame.iloc[:0]
        if len(pts):
            ax.plot(pts["round"], pts[y] * scale, label=label, marker="." if len(pts) < 30 else None)
            drawn += 1
    if not drawn:
        return draw_reason(ax, title, f"no {y} values recorded")
    missing = {label: why for label, why in curves.items() if isinstance(why, str)}
    if missing:
        text = not_run_note(missing, drawn=True)
        ax.text(0.5, 0.03, "\n".join(textwrap.fill(line, 60) for line in text.splitlines()), ha="center",
                va="bottom", transform=ax.transAxes, fontsize="x-small", color="0.4")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small")


def save(fig, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def panels_figure(panels: list[tuple[str, object]], path, *, title: str, y: str = ACCURACY,
                  ylabel: str = "test accuracy", scale: float = 1.0, ncols: int = 3) -> Path:
    """One panel per (title, {label: metrics frame} or the reason it is empty); the data drawn,
    panel by panel, beside it as <stem>_data.csv."""
    fig, axes = new_figure(len(panels), title, ncols)
    for ax, (name, content) in zip(axes, panels):
        if isinstance(content, str):
            draw_reason(ax, name, content)
        else:
            draw_curves(ax, name, content, y, ylabel, scale)
    panel_data(panels, y, scale).to_csv(Path(path).with_name(f"{Path(path).stem}_data.csv"), index=False)
    return save(fig, path)


def panel_data(panels: list[tuple[str, object]], y: str, scale: float = 1.0) -> pd.DataFrame:
    """The long form of what panels_figure draws: panel, series, round, value (y x scale); a
    panel without data is one row with its reason."""
    rows = []
    for name, content in panels:
        if isinstance(content, str):
            rows.append({"panel": name, "series": "", "round": None, "value": None, "reason": content})
            continue
        for label, frame in content.items():
            if isinstance(frame, str):  # a curve without runs: its reason
                rows.append({"panel": name, "series": label, "round": None, "value": None, "reason": frame})
                continue
            pts = frame[["round", y]].dropna() if y in frame else frame.iloc[:0]
            rows += [{"panel": name, "series": label, "round": int(r), "value": v * scale, "reason": ""}
                     for r, v in zip(pts["round"], pts[y])]
    frame = pd.DataFrame(rows, columns=["panel", "series", "round", "value", "reason"])
    return frame.astype({"round": "Int64"})  # whole rounds, blank where a panel has none


def group_panels(cells: list[Cell], ours: pd.DataFrame, summaries: dict, row_keys: list[str],
                 label_key: str) -> dict[tuple, object]:
    """{row: {label: seed-0 metrics frame, or the reason that curve has none} or, when no curve
    of the row has runs, the reason}, one row per distinct `row_keys` value (in the cells'
    order), a line per `label_key`. `ours` and `summaries` are what `measure` returns for
    `cells` (one `ours` row per cell, in their order): a cell without runs gives its row's
    reason (not run, not computed yet, failed with the error)."""
    panels: dict[tuple, dict] = {}
    for i, c in enumerate(cells):
        curves = panels.setdefault(tuple(c.keys[k] for k in row_keys), {})
        runs = summaries.get(i, [])
        if not runs:
            curves[c.keys[label_key]] = why_no_numbers(ours, i)
            continue
        status = runs[0].summary["status"]
        curves[c.keys[label_key] + ("" if status == "finished" else f" ({status})")] = run_metrics(runs[0].folder)
    return {row: curves if any(not isinstance(v, str) for v in curves.values()) else not_run_note(curves, drawn=False)
            for row, curves in panels.items()}


def titled(panels: dict[tuple, object]) -> list[tuple[str, object]]:
    return [(" ".join(LABELS.get(str(v), str(v)) for v in row), content) for row, content in panels.items()]
