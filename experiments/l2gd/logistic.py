"""L2GD Figures 2 and 3: the loss f after 100 iterations against p (lambda = 10) and against
lambda (p = 0.65), l2-regularized logistic regression (L2 = 1) on a1a and a2a over 5 workers.

    python -m experiments l2gd fig2 [--profile quick] [--seeds 1] [--eta 0.14]

Fig. 2 runs uncompressed L2GD, Fig. 3 the natural compressor at the workers (identity at the
master). f = (1/n) sum_i f_i(x_i) is the personalized loss (`personal_loss`) of the last
iteration. Every sweep point is one run of the results store (reused on the next call); the
datasets whose training file is not here (a2a) are "not run" with the missing file named.
Beside the sweep's empirical optimum the target prints the optimal p of Theorems 3 (rate) and 4
(communication) for the data's constants (L = max_i L_i, mu = L2 / n, alpha of Lemma 5 from the
compressor's omega; fedrepro.algorithms.l2gd), and Remark 3's uncompressed p*.

Claims spanning both figures (L2G-F2-3, F3-3, F3-4) are judged on this figure's runs and those of
the other figure already in the results store. Writes <results-root>/figures/l2gd_fig<N>.{png,csv,md},
l2gd_fig<N>_optimal_p.csv and l2gd_fig<N>_claims.md. The Targets: targets.py.
"""
from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd

import fedrepro  # noqa: F401  (torchvision shim first)
from experiments.l2gd import settings
from experiments.l2gd.claims import CHECKS
from experiments.l2gd.common import fmt, mean_or_nan, rounds_of
from fedrepro.algorithms import l2gd as theory
from fedrepro.data.loaders import unavailable
from fedrepro.reports.claims import evaluate_claims, write_claims
from fedrepro.reports.figures import figure_dir, panel_grid
from fedrepro.reports.grid import Cell
from fedrepro.reports.tables import markdown_grid
from fedrepro.results import run_metrics

# a name under the fedrepro loggers (reports.cli sets those up), not experiments.*
log = logging.getLogger("fedrepro.experiments")

KEYS = ["figure", "dataset_key", "compressor_key", "sweep", "p", "lam"]


def constants(dataset: str, data_root: str) -> dict:
    """L, mu (logistic_constants on the 5 workers' rows of seed 0's split, with the bias column) and
    the step eta every point of the sweeps uses (settings.theory_eta)."""
    import torch

    from fedrepro.config import compose_config
    from fedrepro.data.loaders import dataset_for
    from fedrepro.run import client_partition

    cfg = compose_config([*settings.logistic_overrides(dataset, "none", 0.5, 1.0, 0.1), f"data_root={data_root}",
                          "seed=0"])
    data = dataset_for(cfg)
    parts = client_partition(cfg, data)
    feats = [torch.cat([data.x_train[torch.as_tensor(p)], torch.ones(len(p), 1)], 1) for p in parts]
    L, mu = theory.logistic_constants(feats, settings.L2)
    return {"L": L, "mu": mu, "eta": settings.theory_eta(L), "rows": [len(p) for p in parts]}


def constants_here(args) -> dict:
    """{dataset: constants} of the datasets here, eta replaced by --eta when given."""
    consts = {}
    for dataset in settings.LOGISTIC_DATASETS:
        if unavailable(dataset, args.data_root) is None:
            consts[dataset] = constants(dataset, args.data_root)
            if args.eta is not None:
                consts[dataset]["eta"] = args.eta
    return consts


def cells(fig: settings.LogisticFigure, data_root: str, eta: dict, scale: dict) -> list[Cell]:
    """One run per point of both sweeps on each dataset (scale: p_grid, lambda_grid)."""
    out = []
    for dataset in settings.LOGISTIC_DATASETS:
        reason = unavailable(dataset, data_root)
        points = [("p", p, settings.LAMBDA_FOR_P) for p in scale.get("p_grid", settings.P_GRID)] + \
                 [("lam", settings.P_FOR_LAMBDA, lam) for lam in scale.get("lambda_grid", settings.LAMBDA_GRID)]
        for sweep, p, lam in points:
            keys = {"figure": fig.number, "dataset_key": dataset, "compressor_key": fig.compressor, "sweep": sweep,
                    "p": p, "lam": lam}
            out.append(Cell(keys, not_run=reason) if reason else
                       Cell(keys, settings.logistic_overrides(dataset, fig.compressor, p, lam, eta[dataset])))
    return out


def summarize(run) -> dict:
    """One run: f at the last iteration (inf when diverged or not finite), communications, bits/n."""
    m = run_metrics(run.folder)
    ran, planned = rounds_of(run)
    finished = run.summary["status"] == "finished"
    last = m.dropna(subset=["personal_loss"]).iloc[-1] if "personal_loss" in m else None
    f = float(last["personal_loss"]) if finished and last is not None else math.inf
    comms = int((m["up_messages"].fillna(0) > 0).sum()) if "up_messages" in m else 0
    n = settings.NUM_WORKERS
    bits = (m["cum_up_wire_bits"].dropna().iloc[-1] + m["cum_down_wire_bits"].dropna().iloc[-1]) / n \
        if "cum_up_wire_bits" in m and m["cum_up_wire_bits"].notna().any() else 0.0
    # a diverged run ended early but was not capped: it counts as run to the end (loss inf)
    return {"final_loss": f if math.isfinite(f) else math.inf, "initial_loss": float(m["personal_loss"].iloc[0]),
            "communications": comms, "bits_per_n": float(bits), "rounds_run": ran if finished else planned,
            "rounds_planned": planned, "diverged_at": math.nan if finished else ran + 1}


def frame(cell_list: list[Cell], status: pd.DataFrame, runs: dict, eta: dict) -> pd.DataFrame:
    rows = []
    for i, cell in enumerate(cell_list):
        st = status.iloc[i]
        row = {**cell.keys, "status": st["status"], "reason": st["reason"], "seeds": st.get("seeds", ""),
               "eta": eta.get(cell.keys["dataset_key"], math.nan)}
        done = runs.get(i, []) if st["status"] in ("ok", "diverged") else []
        if done:
            per = [summarize(r) for r in done]
            row["final_loss"] = mean_or_nan(p["final_loss"] for p in per)
            row["final_losses"] = [p["final_loss"] for p in per]  # seed by seed (the claims' paired intervals)
            row["final_loss_sd"] = float(np.std([p["final_loss"] for p in per])) if len(per) > 1 else 0.0
            row["diverged_at"] = min(p["diverged_at"] for p in per)
            row["agg_weight"] = row["eta"] * cell.keys["lam"] / (settings.NUM_WORKERS * cell.keys["p"])
            for key in ("initial_loss", "communications", "bits_per_n"):
                row[key] = float(np.mean([p[key] for p in per]))
            row["rounds_run"] = min(p["rounds_run"] for p in per)
            row["rounds_planned"] = max(p["rounds_planned"] for p in per)
        rows.append(row)
    return pd.DataFrame(rows)


def optimal_p_table(summary: pd.DataFrame, consts: dict, fig: settings.LogisticFigure) -> pd.DataFrame:
    """Per dataset: the sweep's empirical optimum (p at lambda = 10; lambda at p = 0.65) beside
    Theorems 3 and 4's p* (and Remark 3's for the uncompressed figure)."""
    rows = []
    omega = settings.COMPRESSOR_OMEGA[fig.compressor]
    for dataset in settings.LOGISTIC_DATASETS:
        s = summary[(summary.dataset_key == dataset) & summary.status.isin(["ok", "diverged"])]
        row = {"dataset": dataset, "compressor": fig.compressor, "lam": settings.LAMBDA_FOR_P}
        if dataset not in consts:
            reason = summary[summary.dataset_key == dataset]["reason"].iloc[0]
            rows.append({**row, "note": f"not run ({reason})"})
            continue
        c = consts[dataset]
        alpha = theory.compression_alpha(omega, 0.0, c["mu"]) if omega else 0.0
        lam = settings.LAMBDA_FOR_P
        row.update({"L": c["L"], "mu": c["mu"], "alpha": alpha, "eta": c["eta"],
                    "p_rate": theory.optimal_p(c["L"], lam, settings.NUM_WORKERS, alpha, "rate"),
                    "p_communication": theory.optimal_p(c["L"], lam, settings.NUM_WORKERS, alpha, "communication"),
                    "p_remark3": theory.optimal_p(c["L"], lam, settings.NUM_WORKERS, 0.0, "rate", "uncompressed")
                    if not omega else math.nan})
        ps = s[s.sweep == "p"]
        if len(ps):
            best = ps.loc[ps["final_loss"].astype(float).idxmin()]
            row.update({"empirical_p": float(best["p"]), "loss_at_empirical_p": float(best["final_loss"])})
            near = ps[ps["final_loss"].astype(float) <= 1.01 * float(best["final_loss"])]["p"].astype(float)
            row["p_within_1pct"] = " ".join(f"{v:g}" for v in sorted(near))
        lams = s[s.sweep == "lam"]
        if len(lams):
            best = lams.loc[lams["final_loss"].astype(float).idxmin()]
            row.update({"empirical_lam": float(best["lam"]), "loss_at_empirical_lam": float(best["final_loss"])})
        capped = len(s) and (s["rounds_run"] < s["rounds_planned"]).any()
        row["note"] = f"stopped at iteration {int(s['rounds_run'].min())} (profile cap)" if capped else ""
        rows.append(row)
    return pd.DataFrame(rows)


def draw(summary: pd.DataFrame, table: pd.DataFrame, fig: settings.LogisticFigure, path, title: str) -> None:
    plot, axes = panel_grid(2, 2, (4.4, 3.3), extra_height=0.4)
    opt = table.set_index("dataset")
    for r, dataset in enumerate(settings.LOGISTIC_DATASETS):
        for c, sweep in enumerate(("p", "lam")):
            ax = axes[r][c]
            s = summary[(summary.dataset_key == dataset) & (summary.sweep == sweep)]
            fixed = f"lambda = {settings.LAMBDA_FOR_P:g}" if sweep == "p" else f"p = {settings.P_FOR_LAMBDA:g}"
            ax.set_title(f"({'abcd'[2 * r + c]}) {dataset}, {fixed}", fontsize="medium")
            ax.set_xlabel("p" if sweep == "p" else "lambda")
            ax.set_ylabel("f(x) after the last iteration")
            ok = s[s.status.isin(["ok", "diverged"])]
            if ok.empty:
                reason = s["reason"].iloc[0] if len(s) else "no runs"
                ax.text(0.5, 0.5, "not run:\n" + "\n".join(_wrap(str(reason), 42)), ha="center", va="center",
                        transform=ax.transAxes, fontsize="small")
                ax.set_xticks([])
                ax.set_yticks([])
                continue
            x = ok[sweep].astype(float).to_numpy()
            y = ok["final_loss"].astype(float).to_numpy()
            finite = np.isfinite(y)
            ax.plot(x[finite], y[finite], marker="o", markersize=3, linewidth=1, label=f"C_i = {fig.compressor}")
            if (~finite).any():
                top = y[finite].max() if finite.any() else 1.0
                ax.plot(x[~finite], np.full((~finite).sum(), top), "rx", label="diverged")
            if sweep == "p" and dataset in opt.index and "p_rate" in opt.columns and pd.notna(opt.loc[dataset, "p_rate"]):
                ax.axvline(opt.loc[dataset, "p_rate"], color="tab:green", linestyle="--", linewidth=1,
                           label=f"Thm 3 p* = {opt.loc[dataset, 'p_rate']:.2f}")
                ax.axvline(opt.loc[dataset, "p_communication"], color="tab:red", linestyle=":", linewidth=1,
                           label=f"Thm 4 p* = {opt.loc[dataset, 'p_communication']:.2f}")
            if finite.any() and y[finite].max() / max(y[finite].min(), 1e-12) > 20:
                ax.set_yscale("log")
            ax.grid(alpha=0.3)
            ax.legend(fontsize="x-small")
    plot.suptitle(title, fontsize="medium")
    plot.tight_layout()
    plot.savefig(path, format="png")


def _wrap(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width) or [""]


def markdown(summary: pd.DataFrame, table: pd.DataFrame, fig: settings.LogisticFigure, args, consts) -> str:
    rows = []
    for dataset in settings.LOGISTIC_DATASETS:
        for sweep in ("p", "lam"):
            s = summary[(summary.dataset_key == dataset) & (summary.sweep == sweep)]
            if not s.status.isin(["ok", "diverged"]).any():
                rows.append([dataset, sweep, "", f"not run ({s['reason'].iloc[0]})", "", ""])
                continue
            for r in s.to_dict("records"):
                ran = f"{int(r['rounds_run'])} of {int(r['rounds_planned'])}" if pd.isna(r.get("diverged_at")) \
                    else f"diverged in iteration {int(r['diverged_at'])}"
                rows.append([dataset, f"p = {r['p']:g}, lambda = {r['lam']:g}", f"{r['agg_weight']:.3g}",
                             fmt(r.get("final_loss")), fmt(r.get("communications"), 3), ran])
    opt_rows = []
    for r in table.to_dict("records"):
        if "L" not in r or pd.isna(r.get("L")):
            opt_rows.append([r["dataset"], r.get("note", ""), "", "", "", "", "", ""])
            continue
        opt_rows.append([r["dataset"], f"{r['L']:.3f} / {r['mu']:.3g} / {r['alpha']:.3g}", f"{r['eta']:.4g}",
                         fmt(r.get("empirical_p"), 3), f"{r['p_rate']:.3f}", f"{r['p_communication']:.3f}",
                         fmt(r.get("p_remark3"), 3), fmt(r.get("empirical_lam"), 3)])
    notes = [f"profile {args.profile}; seeds {args.seeds} (loss = mean over seeds); f = (1/n) sum_i f_i(x_i) at the "
             f"last iteration, the regularizer L2/2 ||x_i||^2 included",
             f"C_i = {fig.compressor}, C_M = identity; n = {settings.NUM_WORKERS}, {settings.ITERATIONS} iterations, "
             f"L2 = {settings.L2:g}",
             *(f"{d}: eta = {c['eta']:.4g} from L = {c['L']:.4f} (worker rows {c['rows']}); the aggregation step "
               f"x_i - a (x_i - xbar), a = eta lambda / (n p), overshoots for a > 1 and diverges for a > 2: at lambda = "
               f"{settings.LAMBDA_FOR_P:g} for p < {c['eta'] * settings.LAMBDA_FOR_P / (2 * settings.NUM_WORKERS):.3g}, "
               f"at p = {settings.P_FOR_LAMBDA:g} for lambda > "
               f"{2 * settings.NUM_WORKERS * settings.P_FOR_LAMBDA / c['eta']:.3g}" for d, c in consts.items()),
             *settings.LOGISTIC_ASSUMED]
    return "\n".join([
        f"### L2GD Figure {fig.number}: {fig.title}", "",
        "Optimal p at lambda = 10: the sweep's argmin beside Theorem 3 (rate) and Theorem 4 (communication), "
        "Remark 3 (uncompressed); the lambda sweep's argmin at p = 0.65:", "",
        markdown_grid(["dataset", "L / mu / alpha", "eta", "empirical p", "Thm 3 p*", "Thm 4 p*", "Remark 3 p*",
                       "empirical lambda"], opt_rows, right_align={2, 3, 4, 5, 6, 7}), "",
        "Points within 1 % of the sweep's best f (p grid, lambda = 10): "
        + "; ".join(f"{r['dataset']}: {r['p_within_1pct']}" for r in table.to_dict("records")
                    if isinstance(r.get("p_within_1pct"), str)), "",
        markdown_grid(["dataset", "point", "eta lambda / (n p)", "f after the last iteration", "communications",
                       "iterations"], rows, right_align={2, 3, 4}), "",
        *(f"- {n}" for n in notes)]) + "\n"


def other_figure(fig: settings.LogisticFigure, results, consts) -> pd.DataFrame:
    """The other figure's runs that are in the results store (for the claims that span both)."""
    other = settings.LOGISTIC_FIGURES[5 - fig.number]
    eta = {d: c["eta"] for d, c in consts.items()}
    cell_list = cells(other, results.options.data_root, eta, results.scale)
    status, runs = results.measure(cell_list, run=False)
    return frame(cell_list, status, runs, eta)


def figure_cells(fig: settings.LogisticFigure, args, scale: dict) -> list[Cell]:
    """Every run of the figure (Target.cells): eta comes from the data (or --eta)."""
    eta = {d: c["eta"] for d, c in constants_here(args).items()}
    return cells(fig, args.data_root, eta, scale)


def render(fig: settings.LogisticFigure, results) -> int:
    """The figure, its tables and claims from its runs (Target.render)."""
    args = results.options
    log.info(f"L2GD Figure {fig.number} ({fig.title}) at profile={args.profile}, seeds={args.seeds}")
    consts = constants_here(args)
    eta = {d: c["eta"] for d, c in consts.items()}
    cell_list = cells(fig, args.data_root, eta, results.scale)
    status, runs = results.measure(cell_list)
    summary = frame(cell_list, status, runs, eta)
    table = optimal_p_table(summary, consts, fig)

    out_dir = figure_dir(args.results_root)
    name = f"l2gd_fig{fig.number}"
    paths = {"png": out_dir / f"{name}.png", "csv": out_dir / f"{name}.csv", "md": out_dir / f"{name}.md",
             "optimal_p": out_dir / f"{name}_optimal_p.csv", "claims": out_dir / f"{name}_claims.md"}
    draw(summary, table, fig, paths["png"], f"L2GD Figure {fig.number} (ours): {fig.title}, profile {args.profile}")
    summary.to_csv(paths["csv"], index=False)
    table.to_csv(paths["optimal_p"], index=False)
    md = markdown(summary, table, fig, args, consts)
    paths["md"].write_text(md, encoding="utf-8")
    print(md)
    judged = pd.concat([summary, other_figure(fig, results, consts)], ignore_index=True)
    print(write_claims(paths["claims"], evaluate_claims(list(fig.claims), judged, checks=CHECKS),
                       f"Claims on our numbers ({', '.join(fig.claims)}; rules of claims.csv), judged on this figure's "
                       f"runs and those of Figure {5 - fig.number} already in the results store:"))
    for key, path in paths.items():
        print(f"[l2gd fig{fig.number}] {key}: {path}")
    return 0
