"""LoSAC's targets (Table II, Figures 6 and 7) end to end at profile=smoke on a tmp results root,
their settings, and the LSC-* claim checks on hand-made frames.

Without real MNIST (FEDREPRO_DATA_ROOT unset or lacking MNIST/raw) Table II's MNIST cells run on
mnist_5k; Figure 6 always attacks mnist_5k (binary view made by the target) to stay fast. HAR's
files are never here: its rows and panel must say "not run" and name them.
"""
import contextlib
import dataclasses
import io
import math
import os
import re
from pathlib import Path

import pandas as pd
import pytest

from conftest import torch_threads
from experiments import registry
from experiments.__main__ import parser_for
from experiments.losac import fig7, settings, table2
from experiments.losac.claims import CHECKS
from fedrepro.config import compose_config
from fedrepro.reports import target
from fedrepro.reports.claims import evaluate_claims

VERDICT = r"(holds|holds \(tie\)|fails|not evaluated)"


def real_mnist():
    root = os.environ.get("FEDREPRO_DATA_ROOT")
    return root if root and (Path(root) / "MNIST" / "raw").is_dir() else None


def verdicts(text: str) -> dict:
    return dict(re.findall(rf"\*\*(LSC-[A-Z0-9-]+)\*\* {VERDICT}:", text))


def render(name: str, argv: list[str], **scale) -> int:
    """`python -m experiments losac NAME ARGV`, shrunk by `scale` (the target's SCALE knobs)."""
    paper, found = registry.find("losac", name)
    return target.run(found, parser_for(paper, found, name).parse_args(argv), scale)


# ---------------------------------------------------------------------------------------------
# Settings


def test_table2_recipe_maps_the_paper_step_and_blocks():
    mnist, esr = settings.TABLE2["mnist"], settings.TABLE2["esr"]
    assert (mnist.lr, esr.lr, settings.TABLE2["har"].lr) == (0.06, 0.0092, 0.007352)  # n_i * 1e-4
    assert [mnist.batch_size(m) for m in settings.MS] == [300, 200, 120]  # SCAFFOLD: n_i / M
    cfg = compose_config(esr.overrides("losac", 3, 4))
    assert (cfg.algorithm.name, cfg.algorithm.blocks, cfg.train.local_steps) == ("losac", 3, 4)
    assert (cfg.split.kind, cfg.split.sorted_fraction, cfg.participation.cohort_size) == ("mixed", 1.0, 10)
    assert cfg.train.clip_norm is None and cfg.train.weight_decay == 0 and cfg.train.lr_decay == 1
    assert cfg.dataset.binary and cfg.train.rounds == 2000
    scaffold = compose_config(mnist.overrides("scaffold", 5, 6))
    assert (scaffold.algorithm.name, scaffold.train.batch_size, scaffold.train.lr) == ("scaffold", 120, 0.06)


def test_figure_recipes_compose():
    cfg = compose_config(settings.FIG6["esr"].overrides("mimesvrg"))
    assert (cfg.algorithm.blocks, cfg.participation.rate, cfg.train.lr, cfg.model.name) == (1, 1.0, 0.092,
                                                                                          "binary_logistic")
    cfg = compose_config(settings.FIG7.overrides("losac_prox", 8))
    assert (cfg.algorithm.prox, cfg.algorithm.prox_weight, list(cfg.algorithm.prox_shape)) == ("nuclear", 0.1, [64, 64])
    assert (cfg.dataset.rank, cfg.train.lr, cfg.algorithm.blocks) == (8, 0.005, 5)
    assert compose_config(settings.FIG7.overrides("scaffold_prox", 8)).train.batch_size == 20


# ---------------------------------------------------------------------------------------------
# Targets end to end (smoke)


@pytest.fixture(scope="module")
def table2_smoke(tmp_path_factory):
    """Table II's M=2, T=2 cells of MNIST (20 clients: fast) and HAR (not here)."""
    root = tmp_path_factory.mktemp("losac_t2")
    data_root = real_mnist() or str(root / "no-data")
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, torch_threads(1):
        if not real_mnist():
            mp.setitem(settings.DATASETS, "mnist", ["dataset=mnist_5k", "model=mlp_mnist"])
        mp.setitem(settings.TRAIN_SIZES, "mnist", 12_000)  # n_i = 600 as in the paper: lr 0.06 kept
        with contextlib.redirect_stdout(out):
            assert render("table2", ["--profile", "smoke", "--results-root", str(root / "results"),
                                     "--data-root", data_root, "--datasets", "mnist,har", "--cells", "M2T2"],
                          num_clients=20) == 0
    return root / "results", out.getvalue()


@pytest.mark.slow
def test_table2_smoke_has_ours_paper_status_and_not_run_har(table2_smoke):
    root, printed = table2_smoke
    table = pd.read_csv(root / "tables" / "losac_table2.csv", keep_default_na=False)
    assert {"ours", "paper", "status", "reason", "ratio"} <= set(table.columns)
    assert len(table) == 12  # 2 datasets x 2 methods x 3 metrics
    mnist = table[table.dataset_key == "mnist"].set_index(["algorithm_key", "metric"])
    assert set(mnist.status) == {"ok"}
    assert mnist.loc[("scaffold", table2.ROUNDS), "paper"] == "64 (1x)"
    assert mnist.loc[("losac", table2.ROUNDS), "paper"] == "56 (1.14x)"
    accuracy = table2.read_label(table2.ACC, 3)  # smoke reads round 3, and the row says so
    assert accuracy == "test_accuracy_at_round_3 (paper: 500)"
    assert mnist.loc[("losac", accuracy), "paper"] == "95.91"
    assert mnist.loc[("scaffold", table2.ROUNDS), "ours"] == "3+ (1x)"  # 3 rounds: censored
    losac = mnist.loc[("losac", table2.ROUNDS), "ours"]
    assert re.fullmatch(r"3\+ \((\?|[<>]?[0-9.]+x)\)(, diverged in round \d+)?", losac)
    assert float(mnist.loc[("losac", accuracy), "ours"]) >= 0  # a number: the accuracy in %
    har = table[table.dataset_key == "har"]
    assert set(har.status) == {"not run"}
    assert all("X_train.txt" in r and "UCI HAR Dataset" in r for r in har.reason)
    md = (root / "tables" / "losac_table2.md").read_text()
    assert "177 (1x)" in md and "Speed-up (SCAFFOLD rounds / LoSAC rounds)" in md
    assert "train.lr = n_i eta = 600 x 0.0001 = 0.06" in md
    claims = (root / "tables" / "losac_table2_claims.md").read_text()
    assert set(verdicts(claims)) == set(table2.CLAIMS)
    assert verdicts(claims)["LSC-T2-1"] == "not evaluated"  # both censored at 3 rounds
    assert "Claims on our numbers" in printed and "[losac table2] md:" in printed
    runs = pd.read_csv(root / "tables" / "losac_table2_runs.csv")
    assert set(runs[runs.dataset_key == "mnist"].acc_round) == {3}


@pytest.mark.slow
def test_fig6_smoke_writes_curves_and_not_run_har(tmp_path, monkeypatch):
    monkeypatch.setitem(settings.FIG6, "mnist", dataclasses.replace(settings.FIG6["mnist"], data=("dataset=mnist_5k",)))
    out = io.StringIO()
    with torch_threads(1), contextlib.redirect_stdout(out):
        assert render("fig6", ["--profile", "smoke", "--results-root", str(tmp_path), "--data-root",
                               str(tmp_path / "no-data"), "--datasets", "mnist,har"]) == 0
    figs = tmp_path / "figures"
    assert (figs / "losac_fig6.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    curves = pd.read_csv(figs / "losac_fig6.csv")
    assert set(curves.algorithm) == set(settings.FIG6_ALGORITHMS) and set(curves.dataset) == {"mnist"}
    assert curves.groupby("algorithm").iteration.max().eq(100).all()  # iteration 0..100
    summary = pd.read_csv(figs / "losac_fig6_summary.csv")
    ok = summary[summary.status == "ok"]
    assert set(ok.attack_round) == {3}  # smoke caps the rounds at 3
    gap = ok.set_index("algorithm").upload_vs_gradient
    assert gap["dsgd"] < 1e-4 and gap["mimesvrg"] < 1e-4 and gap["scaffold"] > gap["dsgd"]
    har = summary[summary.dataset == "har"]
    assert set(har.status) == {"not run"} and all("X_train.txt" in r for r in har.reason)
    claims = (figs / "losac_fig6_claims.md").read_text()
    assert verdicts(claims) == {"LSC-F6-1": "not evaluated", "LSC-F6-2": "not evaluated"}  # round 3, not 5
    assert "binary view made by experiments/losac/fig6.py" in out.getvalue()


@pytest.mark.slow
def test_fig7_smoke_writes_curves(tmp_path):
    out = io.StringIO()
    with torch_threads(1), contextlib.redirect_stdout(out):
        assert render("fig7", ["--profile", "smoke", "--results-root", str(tmp_path), "--ranks", "4"],
                      num_clients=20) == 0
    figs = tmp_path / "figures"
    assert (figs / "losac_fig7.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    curves = pd.read_csv(figs / "losac_fig7.csv")
    assert set(curves.method) == set(settings.FIG7_METHODS) and set(curves.rank_true) == {4}
    assert list(curves[curves.method == "losac_prox"]["round"]) == [0, 1, 2, 3]
    assert (curves[curves["round"] == 0].error == 2.0).all()  # X starts at 0: ||X_G||_F = sqrt(4)
    claims = (figs / "losac_fig7_claims.md").read_text()
    assert verdicts(claims) == {c: "not evaluated" for c in fig7.CLAIMS}  # 3 of 500 rounds
    assert "lambda = 0.1" in (figs / "losac_fig7.md").read_text()


# ---------------------------------------------------------------------------------------------
# Claims on hand-made frames


def t2(alg, dataset="mnist", m=2, t=2, rounds=50.0, censored=False, loss=0.1, acc=95.0, acc_round=500,
       status="ok", reason=""):
    return dict(dataset_key=dataset, algorithm_key=alg, M=m, T=t, status=status, reason=reason, rounds=rounds,
                censored=censored, loss=loss, acc=acc, acc_round=acc_round, diverged_at=math.nan)


def verdict(claim, rows):
    out = evaluate_claims([claim], pd.DataFrame(rows), checks=CHECKS).iloc[0]
    return out["verdict"], out["detail"]


def test_t2_1_fewer_rounds_with_censoring_and_not_run():
    assert verdict("LSC-T2-1", [t2("losac", rounds=40), t2("scaffold", rounds=60)])[0] == "holds"
    assert verdict("LSC-T2-1", [t2("losac", rounds=70), t2("scaffold", rounds=60)])[0] == "fails"
    assert verdict("LSC-T2-1", [t2("losac", rounds=40), t2("scaffold", rounds=100, censored=True)])[0] == "holds"
    v, detail = verdict("LSC-T2-1", [t2("losac", rounds=100, censored=True), t2("scaffold", rounds=100, censored=True)])
    assert v == "not evaluated" and detail.startswith("undetermined")
    har = [t2(a, dataset="har", status="not run", reason="data not here: X_train.txt") for a in ("losac", "scaffold")]
    v, detail = verdict("LSC-T2-1", [t2("losac", rounds=40), t2("scaffold", rounds=60), *har])
    assert v == "holds" and "X_train.txt" in detail and "26 of 27" in detail


def test_t2_2_and_t2_8_mean_speedups():
    fast = [t2("losac", rounds=20), t2("scaffold", rounds=60)]  # speed-up 3
    assert verdict("LSC-T2-2", fast)[0] == "holds" and verdict("LSC-T2-8", fast)[0] == "holds"
    slow = [t2("losac", rounds=50), t2("scaffold", rounds=60)]  # 1.2
    assert verdict("LSC-T2-2", slow)[0] == "fails" and verdict("LSC-T2-8", slow)[0] == "fails"
    exactly_two = [t2("losac", rounds=30), t2("scaffold", rounds=60)]
    assert verdict("LSC-T2-8", exactly_two)[0] == "holds"  # >= 2.0
    assert verdict("LSC-T2-2", exactly_two)[0] == "fails"  # (2 - 1) > 1.0 is false
    bound = [t2("losac", rounds=30), t2("scaffold", rounds=100, censored=True)]  # > 3.3
    assert verdict("LSC-T2-2", bound)[0] == "holds"
    open_ = [t2("losac", rounds=80), t2("scaffold", rounds=100, censored=True)]  # > 1.25: could be either
    assert verdict("LSC-T2-2", open_)[0] == "not evaluated"


def test_t2_7_is_decided_only_at_round_500():
    good = [t2("losac", loss=0.1, acc=96), t2("scaffold", loss=0.2, acc=94)]
    assert verdict("LSC-T2-7", good)[0] == "holds"
    bad = [t2("losac", loss=0.3, acc=96), t2("scaffold", loss=0.2, acc=94)]
    assert verdict("LSC-T2-7", bad)[0] == "fails"
    early = [t2("losac", loss=0.1, acc=96, acc_round=100), t2("scaffold", loss=0.2, acc=94, acc_round=100)]
    v, detail = verdict("LSC-T2-7", early)
    assert v == "not evaluated" and "would hold" in detail and "round 100" in detail
    gone = t2("losac", loss=math.inf, acc=math.nan, status="diverged", acc_round=100) | {"diverged_at": 43}
    diverged = [gone, t2("scaffold", loss=0.2, acc=94, acc_round=500)]
    assert verdict("LSC-T2-7", diverged)[0] == "fails"  # a diverged run is the worst, known at round 500


def test_t2_5_counts_cells_not_run_as_undecided():
    rows = []
    for d in ("mnist", "esr"):
        for t in settings.TS:
            rows += [t2("losac", d, 2, t, rounds=60, loss=0.3, acc=90), t2("losac", d, 3, t, rounds=50, loss=0.2, acc=91),
                     t2("losac", d, 5, t, rounds=40, loss=0.1, acc=92)]
    v, detail = verdict("LSC-T2-5", rows)  # 6 of 9 hold, HAR's 3 could make it 7
    assert v == "not evaluated" and "6 of 9 hold, 3 undecided" in detail
    rows[2] = t2("losac", "mnist", 5, 2, rounds=40, loss=0.25, acc=92)  # loss no longer monotone
    assert verdict("LSC-T2-5", rows)[0] == "fails"


def dlg(alg, dataset="mnist", before=10.0, after=9.0, rounds=5, iterations=100, status="ok"):
    return dict(dataset_key=dataset, algorithm_key=alg, status=status, reason="", initial_distance=before,
                final_distance=after, attack_round=rounds, iterations=iterations)


def test_f6_claims():
    leak = [dlg("dsgd"), dlg("mimesvrg")]
    assert verdict("LSC-F6-1", leak)[0] == "holds"
    assert verdict("LSC-F6-1", [dlg("dsgd"), dlg("mimesvrg", after=11.0)])[0] == "fails"
    defend = [dlg(a, after=11.0) for a in ("fedavg", "scaffold", "losac")]
    assert verdict("LSC-F6-2", defend)[0] == "holds"
    assert verdict("LSC-F6-2", defend[:2] + [dlg("losac", after=9.0)])[0] == "fails"
    assert verdict("LSC-F6-1", [dlg("dsgd", rounds=3), dlg("mimesvrg", rounds=3)])[0] == "not evaluated"
    # a move below 1 % of the starting distance is no leak and no defence, whatever its sign
    still = [dlg(a, before=970.85, after=970.85 * (1 + sign * 8e-6)) for a, sign in (("dsgd", -1), ("mimesvrg", -1))]
    assert verdict("LSC-F6-1", still)[0] == "fails"
    grows_slightly = [dlg(a, before=172.77, after=172.77 * (1 + 5e-6)) for a in ("fedavg", "scaffold", "losac")]
    assert verdict("LSC-F6-2", grows_slightly)[0] == "fails"
    assert verdict("LSC-F6-1", [dlg(a, before=100.0, after=98.9) for a in ("dsgd", "mimesvrg")])[0] == "holds"


def lowrank(alg, rank, got_rank, error, rounds_run=500):
    return dict(rank=rank, algorithm_key=alg, status="ok", reason="", final_error=error, final_rank=got_rank,
                rounds_run=rounds_run, rounds_planned=500)


def test_f7_claims():
    rows = [lowrank("losac_prox", 8, 8, 0.3), lowrank("scaffold_prox", 8, 20, 0.5)]
    assert [verdict(c, rows)[0] for c in fig7.CLAIMS] == ["holds", "holds", "holds"]
    rows = [lowrank("losac_prox", 8, 9, 0.6), lowrank("scaffold_prox", 8, 8, 0.5)]
    assert [verdict(c, rows)[0] for c in fig7.CLAIMS] == ["fails", "fails", "fails"]
    assert "|difference| 0" in verdict("LSC-F7-2", rows)[1]
    capped = [lowrank("losac_prox", 8, 8, 0.3, 100), lowrank("scaffold_prox", 8, 20, 0.5, 100)]
    assert verdict("LSC-F7-1", capped)[0] == "not evaluated"
