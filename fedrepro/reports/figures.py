"""Redraw the papers' curves from runs' metrics.csv frames (one line per labelled run)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def figure_dir(results_root) -> Path:
    """<results_root>/figures, made if missing: where every figure target writes."""
    path = Path(results_root) / "figures"
    path.mkdir(parents=True, exist_ok=True)
    return path


def not_run_note(missing: dict[str, str], drawn: bool) -> str:
    """What a panel says of its curves without runs ({label: why}): with nothing drawn and one
    reason, that reason; else each reason once, after the curves it holds for."""
    curves_of: dict[str, list[str]] = {}
    for label, reason in missing.items():
        curves_of.setdefault(reason.removeprefix("not run: "), []).append(label)
    if not drawn and len(curves_of) == 1:
        return "not run: " + next(iter(curves_of))
    return "not run:\n" + "\n".join(f"{', '.join(labels)}: {reason}" for reason, labels in curves_of.items())


def panel_grid(rows: int, cols: int, panel: tuple = (4.4, 3.3), *, extra_height: float = 0.0,
               dpi: int = 110, **subplots):
    """A headless figure and its (rows, cols) array of axes: an Agg canvas on a bare Figure
    renders without a display and leaves pyplot's global backend alone. `panel` is one
    panel's (width, height) in inches; `extra_height` leaves room for a suptitle."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(panel[0] * cols, panel[1] * rows + extra_height), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, squeeze=False, **subplots)


def metric_figure(curves: dict[str, pd.DataFrame], out_path, *, x: str = "round", y: str,
                  xlabel: str | None = None, ylabel: str | None = None, title: str = "",
                  logy: bool = False) -> Path:
    """Plot column y against x for each labelled run and save a PNG; rows with NaN y are skipped."""
    if not curves:
        raise ValueError("no curves to plot")
    for label, df in curves.items():
        missing = [c for c in (x, y) if c not in df.columns]
        if missing:
            raise ValueError(f"curve {label!r} lacks columns {missing}; it has {list(df.columns)}")

    fig, axes = panel_grid(1, 1, (6.4, 4.2), dpi=120)
    ax = axes[0, 0]
    drawn = 0
    for label, df in curves.items():
        pts = df[[x, y]].apply(pd.to_numeric, errors="coerce").dropna().sort_values(x)
        if len(pts):
            ax.plot(pts[x], pts[y], label=label, marker="." if len(pts) < 30 else None)
            drawn += 1
    if drawn == 0:
        # Still write the file so a table target's outputs exist; say why it is empty.
        ax.text(0.5, 0.5, f"no {y} values recorded", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.legend(fontsize="small")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel(ylabel or y)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()

    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, format="png")
    return out_path


def accuracy_figure(curves: dict[str, pd.DataFrame], out_path, *, x: str = "round",
                    y: str = "all_test_acc", title: str = "") -> Path:
    """Test accuracy against rounds, one line per run (the papers' accuracy figures)."""
    return metric_figure(curves, out_path, x=x, y=y, ylabel="test accuracy", title=title)
