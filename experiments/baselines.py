"""Targets beside the papers' own (experiments/registry.py): the centralized baseline and the
ad-hoc grid.

    python -m experiments grid --cell fedavg="algorithm=fedavg" \\
        --cell fedprox="algorithm=fedprox algorithm.mu=0.01" --profile smoke --jobs 2 \\
        --launcher joblib -- train.num_clients=10

Each --cell is NAME=space-separated overrides; what follows `--` applies to every cell. The
table (value of --metric from each run's final row, failed / diverged cells marked) is printed
and written to <results-root>/tables/<--name>.md and .csv; the exit status is 1 when a cell is
not ok.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from experiments import centralized
from fedrepro.errors import ConfigError
from fedrepro.reports.grid import Cell
from fedrepro.reports.tables import compare_table, to_markdown, write_table


@dataclass(frozen=True)
class Grid:
    """An ad-hoc grid of cells given on the command line."""
    name: str = "grid"
    title: str = "An ad-hoc grid of cells (config overrides), its table printed"
    claims: tuple = ()

    @staticmethod
    def add_options(ap) -> None:
        ap.add_argument("--cell", action="append", default=[], metavar="NAME=OVERRIDES",
                        help="a cell: its name and space-separated overrides (repeatable)")
        ap.add_argument("--metric", default="server_test_acc", help="a column of the runs' final row")
        ap.add_argument("--name", default="sweep", help="output file stem under <results-root>/tables")
        ap.add_argument("extra", nargs="*", help="overrides for every cell (after --)")

    def cells(self, options, scale) -> list[Cell]:
        if not options.cell:
            raise ConfigError("give at least one --cell NAME=OVERRIDES")
        cells = []
        for spec in options.cell:
            name, sep, overrides = spec.partition("=")
            if not sep or not name:
                raise ConfigError(f"--cell {spec!r}: expected NAME=OVERRIDES")
            cells.append(Cell({"cell": name.strip()}, [*overrides.split(), *options.extra]))
        return cells

    def render(self, results) -> int:
        o = results.options
        metric = o.metric

        def value(run) -> float:
            v = run.summary.get("final", {}).get(metric)
            return math.nan if v is None else float(v)

        ours, _ = results.measure(results.cells, value)
        reference = pd.DataFrame({"cell": pd.Series(dtype=str), "paper_value": pd.Series(dtype=float),
                                  "value_raw": pd.Series(dtype=str), "confidence": pd.Series(dtype=str)})
        table = compare_table(ours, reference, ["cell"], value_name=metric, unit_note="final round")
        title = f"{o.name}: {metric}"
        notes = [f"overrides for every cell: {' '.join(o.extra) or '(none)'}"]
        print(to_markdown(table, title, notes))
        paths = write_table(table, Path(o.results_root) / "tables", o.name, title=title, notes=notes)
        print(f"[fedrepro] table written to {paths['md']}")
        return 0 if (table["status"] == "ok").all() else 1


TARGETS: list = [centralized.TARGET, Grid()]
