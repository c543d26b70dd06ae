"""One shape for every paper table and figure: a `Target` says which runs it needs (`cells`),
writes its tables and figures from them (`render`) and names the claims it judges (`claims`).

    cells(options, scale) -> [grid.Cell]    every run of the results store the target reads
    render(results) -> exit status          its tables / figures / claims, from those runs
    claims                                  the claim ids (reference/claims.csv) it judges

`options` is the target's parsed command line (`reports.cli.table_parser`: --profile, --seeds,
--jobs, --launcher, --results-root, --data-root, --datasets, --splits, --done-only, plus what the
target adds in `add_options(parser)`, an optional method). It is the only way these choices
travel: a target's "data not here" checks read options.data_root, every run's config gets
data_root=options.data_root as its first override (so a launcher's worker process reads the same
folder), and the sweep takes options.launcher and options.done_only; nothing goes through
os.environ.

`scale` shrinks a target without touching module globals (tests, a quick look): a mapping of
knobs the target documents in its `SCALE` (name -> what it means; none without it); a knob it
does not name is refused.

`run(target, options, scale)` is the one driver: it asks `cells`, computes (or reuses, or with
--done-only only reads) every run of every cell for seeds 0..n-1 in one sweep through the
launcher, and hands the outcomes to `render` as `Results`. `Results.measure(cells, metric)`
builds the long `ours` frame (`grid.cell_frame`) of any subset of those cells; asking it for a
cell `cells` did not declare is a bug in the target (`UndeclaredCellError`), except with
run=False, which reads another target's runs from the store as they are. `plan` lists a
target's runs with their keys without computing anything: what `status` and `archive` read.

A run chosen from other runs' outcomes (an adaptive grid) is declared by `cells` once those
outcomes are in the store; `run` asks `cells` again after each sweep until it names nothing
new, so such a target completes in one call, and `status` lists such a run once it is known.

Most targets are a `PaperTarget`: a name, a title and the module functions that declare
its cells and render it.

A target that trains in loops of its own, outside the results store (LoSAC's DLG attack, the
low-rank figure), declares no cells and says so in `trains_outside_store` (its reason).
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence, runtime_checkable

import pandas as pd

from fedrepro.errors import ConfigError
from fedrepro.reports import grid
from fedrepro.reports.grid import Cell


@runtime_checkable
class Target(Protocol):
    name: str  # its name within its paper: "table2", "fig3", "costs"
    title: str  # one line: what the paper's table or figure shows
    claims: Sequence[str]

    def cells(self, options: argparse.Namespace, scale: Mapping[str, Any]) -> list[Cell]: ...

    def render(self, results: "Results") -> int: ...


@dataclass(frozen=True, eq=False)
class PaperTarget:
    """A Target made of functions, the shape of almost every paper target: `cells_of(options,
    scale)` and `render_with(results)` are the module functions that do the work; `options`
    adds the target's own command-line options; `SCALE` names its knobs."""
    name: str
    title: str
    cells_of: Callable[[argparse.Namespace, Mapping[str, Any]], list[Cell]]
    render_with: Callable[["Results"], int]
    claims: Sequence[str] = ()
    SCALE: dict = field(default_factory=dict)
    options: Optional[Callable[[argparse.ArgumentParser], None]] = None
    trains_outside_store: Optional[str] = None  # why, for a target that declares no cells

    def cells(self, options: argparse.Namespace, scale: Mapping[str, Any]) -> list[Cell]:
        return self.cells_of(options, scale)

    def render(self, results: "Results") -> int:
        return self.render_with(results)

    def add_options(self, ap: argparse.ArgumentParser) -> None:
        if self.options is not None:
            self.options(ap)


class UndeclaredCellError(RuntimeError):
    """render asked for a run that cells() did not declare: status and archive would miss it."""


def check_scale(target, scale: Mapping[str, Any]) -> dict:
    """`scale` as a dict, after refusing the knobs `target.SCALE` does not name."""
    known = dict(getattr(target, "SCALE", {}))
    unknown = sorted(set(scale) - set(known))
    if unknown:
        offer = ", ".join(f"{k} ({v})" for k, v in known.items()) or "none"
        raise ConfigError(f"target {target.name} has no scale knob {', '.join(unknown)}; its knobs: {offer}")
    return dict(scale)


def _run_key(cell: Cell, seed: int) -> tuple:
    """What identifies one run of a target: its cell's overrides (data_root aside) and seed."""
    return (*cell.overrides, f"seed={seed}")


def _as_the_targets_runs(cells: list[Cell], options) -> list[Cell]:
    """Every run reads --data-root (a cell's own data_root= wins: Hydra takes the last), is
    logged under the target's group and paper (`options.group` / `options.paper`, W&B's group
    and tag; not in the run key) and takes the command line's --override after the cell's own."""
    first = [f"data_root={options.data_root}"]
    first += [f"logger.{k}={v}" for k in ("group", "paper") if (v := getattr(options, k, None))]
    extra = list(getattr(options, "override", None) or [])
    return [Cell(c.keys, [*first, *c.overrides, *extra], c.not_run) for c in cells]


@dataclass
class Results:
    """The outcomes of a target's runs, handed to its `render`."""
    options: argparse.Namespace
    scale: dict
    cells: list[Cell]
    outcomes: dict[tuple, Any] = field(default_factory=dict)  # _run_key -> RunResult | Failure

    def measure(self, cells: list[Cell], metric: Optional[Callable] = None, *, extra: Sequence[str] = (),
                run: bool = True) -> tuple[pd.DataFrame, dict]:
        """(ours frame, {index in `cells`: [RunResult]}) of `cells` (each with `extra` appended
        to its overrides, as it was declared), `metric(run)` on each finished run (None: NaN).
        run=False: another target's cells, read from the store as they are."""
        o = self.options
        cells = [Cell(c.keys, [*c.overrides, *extra], c.not_run) for c in cells]
        if not run:
            return stored(cells, o, metric)
        by_cell = {}
        for i, cell in enumerate(cells):
            if cell.not_run:
                continue
            got = []
            for seed in range(o.seeds):
                key = _run_key(cell, seed)
                if key not in self.outcomes:
                    raise UndeclaredCellError(
                        f"render asked for a run its target's cells() did not declare: "
                        f"{' '.join(cell.overrides)} seed={seed}")
                got.append(self.outcomes[key])
            by_cell[i] = got
        return grid.cell_frame(cells, by_cell, metric or (lambda r: math.nan), profile=o.profile)


def stored(cells: list[Cell], options: argparse.Namespace,
           metric: Optional[Callable] = None) -> tuple[pd.DataFrame, dict]:
    """(ours frame, {index: [RunResult]}) of `cells` from the results store alone, as `options`
    would run them (data root, overrides): nothing is computed. Another target's runs, or, in a
    target's cells(), the runs whose outcomes choose its later runs."""
    by_cell = grid.collect(_as_the_targets_runs(cells, options), profile=options.profile, seeds=options.seeds,
                           results_root=options.results_root, run=False)
    return grid.cell_frame(cells, by_cell, metric or (lambda r: math.nan), profile=options.profile)


def _runnable(cells: list[Cell]) -> list[Cell]:
    """The cells once each (two cells with the same overrides are one run)."""
    seen, out = set(), []
    for c in cells:
        if c.not_run is None and tuple(c.overrides) not in seen:
            seen.add(tuple(c.overrides))
            out.append(c)
    return out


def run(target: Target, options: argparse.Namespace, scale: Optional[Mapping[str, Any]] = None) -> int:
    """The target's runs (one sweep, through --launcher with --jobs), then its render. cells() is
    asked again after each sweep until it names no new run: a run chosen from other runs'
    outcomes (compare-compression's Top-k k, from Alg. 3's bits) is declared once they exist."""
    scale = check_scale(target, scale or {})
    done_only = bool(getattr(options, "done_only", False))
    outcomes, swept = {}, set()
    while True:
        cells = target.cells(options, scale)
        todo = [c for c in _runnable(cells) if tuple(c.overrides) not in swept]
        if not todo:
            break
        swept.update(tuple(c.overrides) for c in todo)
        by_cell = grid.collect(_as_the_targets_runs(todo, options), profile=options.profile, seeds=options.seeds,
                               results_root=options.results_root, jobs=options.jobs,
                               launcher=getattr(options, "launcher", "local"),
                               launcher_config=getattr(options, "launcher_config", "slurm"),
                               done_only=done_only)
        outcomes.update({_run_key(cell, seed): outcome
                         for i, cell in enumerate(todo) for seed, outcome in enumerate(by_cell.get(i, []))})
        if done_only:  # nothing new can finish while nothing trains
            break
    return target.render(Results(options, scale, cells, outcomes))


def plan(target: Target, options: argparse.Namespace, scale: Optional[Mapping[str, Any]] = None) -> list[dict]:
    """Every run the target needs, computed by nothing: [{label, key, overrides, results_root,
    config}] (config: the composed run config the key was computed from)."""
    from fedrepro.config import compose_config, run_key

    scale = check_scale(target, scale or {})
    out = []
    for cell in _runnable(_as_the_targets_runs(target.cells(options, scale), options)):
        for seed in range(options.seeds):
            overrides = grid.run_overrides(cell, seed, profile=options.profile, results_root=options.results_root)
            cfg = compose_config(overrides)
            out.append({"label": grid.cell_label(cell, seed), "key": run_key(cfg), "overrides": overrides,
                        "results_root": str(cfg.results_root), "config": cfg})
    return out
