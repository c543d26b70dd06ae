"""Reports: reference loading, paper-vs-ours tables, claim verdicts, figures."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from experiments.fedelasticnet.claims import CHECKS
from fedrepro.reports import claims, figures, reference, tables
from fedrepro.reports.reference import ReferenceNotFoundError

KEYS = ["dataset_key", "split_key", "algorithm_key"]
T2_ALGS = ["fedprox", "fen_alg1", "scaffold", "fen_alg2", "feddyn", "fen_alg3"]


def ours_frame(values: dict, row=("mnist", "iid"), n_seeds=1, half=0.0, **extra) -> pd.DataFrame:
    """Long-format `ours` for one (dataset, split) row: {algorithm_key: mean}."""
    recs = []
    for alg, mean in values.items():
        recs.append(dict(dataset_key=row[0], split_key=row[1], algorithm_key=alg, ours_mean=mean,
                         ours_lo=mean - half, ours_hi=mean + half, n_seeds=n_seeds, status="ok",
                         reason="", profile="quick", seeds="0" if n_seeds == 1 else "0,1,2",
                         data="synthetic", **extra))
    return pd.DataFrame(recs)


def paper_like(**override) -> dict:
    # The paper's MNIST IID row of Table 2 (x1e7): every FEN-T2 claim holds on it.
    vals = dict(fedprox=20.3, fen_alg1=7.51, scaffold=40.58, fen_alg2=36.98, feddyn=20.3, fen_alg3=2.55)
    vals.update(override)
    return vals


def verdict(claim_id, ours):
    row = claims.evaluate_claims([claim_id], ours, checks=CHECKS).iloc[0]
    return row["verdict"], row["detail"]


# ---------------------------------------------------------------------------------- reference


def test_missing_reference_root_names_path_and_env(monkeypatch, tmp_path):
    monkeypatch.setenv(reference.ENV_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError) as info:
        reference.load_reference("fedelasticnet_table2")
    assert "nowhere" in str(info.value) and reference.ENV_VAR in str(info.value)


def test_a_target_stopped_by_a_fedrepro_error_prints_its_line_not_a_traceback(tmp_path):
    """A table target whose FEDREPRO_REFERENCE_ROOT names no folder: exit status 2 and
    the error's one line, naming the folder and the variable; a bug keeps its traceback."""
    import os
    import subprocess
    import sys

    from fedrepro.reports.cli import run_target

    env = {**os.environ, "FEDREPRO_REFERENCE_ROOT": str(tmp_path / "nowhere")}
    out = subprocess.run([sys.executable, "-m", "experiments", "feddyn", "table2", "--profile", "smoke",
                          "--done-only", "--results-root", str(tmp_path)], capture_output=True, text=True, env=env,
                         timeout=300, cwd=Path(__file__).resolve().parent.parent)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines()[-1] == (
        f"fedrepro: error: reference folder not found: {tmp_path / 'nowhere'} (from FEDREPRO_REFERENCE_ROOT="
        f"{tmp_path / 'nowhere'}); unset FEDREPRO_REFERENCE_ROOT to use the package's copy.")

    def bug() -> int:
        raise ValueError("a bug")
    with pytest.raises(ValueError, match="a bug"):
        run_target(bug)


def test_status_of_a_target_without_its_reference_folder_is_that_error_not_zero_runs(tmp_path, monkeypatch):
    """`python -m experiments status` (and `archive`) plan a target from its cells: a target whose
    cells need a missing reference folder reports that error, not "0 runs" with exit 0."""
    from experiments.__main__ import main as experiments_main

    monkeypatch.setenv("FEDREPRO_REFERENCE_ROOT", str(tmp_path / "nowhere"))
    with pytest.raises(ReferenceNotFoundError, match="FEDREPRO_REFERENCE_ROOT"):
        experiments_main(["status", "feddyn-table2", "--results-root", str(tmp_path), "--profile", "smoke"])
    assert not (tmp_path / "tables").exists()


def test_missing_reference_file_is_clear():
    with pytest.raises(ReferenceNotFoundError, match="no_such_table"):
        reference.load_reference("no_such_table")


def test_load_fen_table2_keys_and_values():
    ref = reference.load_reference("fedelasticnet_table2")
    assert len(ref) == 84
    assert set(ref["dataset_key"]) == {"mnist", "emnist_l", "cifar10", "cifar100", "shakespeare"}
    assert set(ref["split_key"]) == {"iid", "dirichlet0.6", "dirichlet0.3", "natural"}
    assert set(ref["algorithm_key"]) == set(T2_ALGS)
    emnist = ref[(ref.dataset_key == "emnist_l") & (ref.split_key == "iid") & (ref.algorithm_key == "fen_alg2")]
    assert emnist["value_raw"].item() == "34.90" and emnist["paper_value"].item() == pytest.approx(34.9)
    missing = ref[(ref.split_key == "natural") & (ref.algorithm_key == "fen_alg3")].iloc[0]
    assert math.isnan(missing["paper_value"]) and missing["confidence"] == "unreadable"
    # Shakespeare's Non-IID row is its natural split.
    assert set(ref[ref.split_key == "natural"]["dataset_key"]) == {"shakespeare"}


def test_feddyn_split_by_transmitted_in_table3():
    ref = reference.load_reference("fedelasticnet_table3")
    algs = set(ref["algorithm_key"])
    assert {"feddyn_model", "feddyn_update"} <= algs and "feddyn" not in algs


def test_key_normalizers():
    assert reference.dataset_key("CIFAR-100") == "cifar100"
    assert reference.dataset_key("EMNIST-L") == "emnist_l"
    assert reference.split_key("Dirichlet (.6)", "0.6") == "dirichlet0.6"
    assert reference.split_key("Dirichlet (.3)") == "dirichlet0.3"
    assert reference.split_key("Non-IID") == "natural"
    assert reference.algorithm_key("Algorithm 2") == "fen_alg2"


# ---------------------------------------------------------------------------------- tables


@pytest.fixture
def t2():
    return reference.load_reference("fedelasticnet_table2")


def compare(ours, ref, **kw):
    return tables.compare_table(ours, ref, KEYS, value_name="cumulative nonzeros",
                                unit_note="x1e7 elements", **kw)


def cell(table, row, alg):
    hit = table[(table.dataset_key == row[0]) & (table.split_key == row[1]) & (table.algorithm_key == alg)]
    assert len(hit) == 1
    return hit.iloc[0]


def test_reference_only_rows_show_not_run(t2):
    table = compare(ours_frame({"fedprox": 20.0}), t2)
    assert len(table) == 84  # nothing dropped
    r = cell(table, ("cifar10", "iid"), "fedprox")
    assert r["status"] == "not run" and r["reason"] == "not run in this profile"
    assert r["ours"] == "not run in this profile" and r["paper"] == "163.82" and math.isnan(r["ratio"])
    custom = compare(ours_frame({"fedprox": 20.0}), t2, missing_reason="CIFAR data not here")
    assert cell(custom, ("cifar10", "iid"), "fedprox")["ours"] == "not run (CIFAR data not here)"


def test_ours_only_row_is_kept(t2):
    table = compare(ours_frame({"fedprox": 3.0}, row=("mnist", "dirichlet0.1")), t2)
    assert len(table) == 85
    r = cell(table, ("mnist", "dirichlet0.1"), "fedprox")
    assert r["status"] == "ok" and r["paper"] == "" and r["paper_confidence"] == "no reference"


def test_ratio_and_seed_interval_formatting(t2):
    one = compare(ours_frame({"fedprox": 40.6}), t2)
    assert cell(one, ("mnist", "iid"), "fedprox")["ratio"] == pytest.approx(2.0)
    assert cell(one, ("mnist", "iid"), "fedprox")["ours"] == "40.60"
    three = compare(ours_frame({"fedprox": 20.0}, n_seeds=3, half=0.5), t2)
    r = cell(three, ("mnist", "iid"), "fedprox")
    assert r["ours"] == "20 ± 0.5" and r["ratio"] == pytest.approx(20.0 / 20.3)


def test_non_ok_statuses_are_shown(t2):
    ours = ours_frame({"fedprox": 20.0, "scaffold": float("nan"), "feddyn": float("nan")})
    ours.loc[ours.algorithm_key == "scaffold", ["status", "reason"]] = ["diverged", ""]
    ours.loc[ours.algorithm_key == "feddyn", ["status", "reason"]] = ["failed", "out of memory"]
    table = compare(ours, t2)
    assert cell(table, ("mnist", "iid"), "scaffold")["ours"] == "diverged"
    assert cell(table, ("mnist", "iid"), "feddyn")["ours"] == "failed (out of memory)"
    assert math.isnan(cell(table, ("mnist", "iid"), "feddyn")["ratio"])


def test_ocr_and_unreadable_marks(t2):
    t4 = reference.load_reference("fedelasticnet_table4")
    table = compare(ours_frame({"fedprox": 1.0}), t4)
    assert cell(table, ("shakespeare", "natural"), "scaffold")["paper"] == "684.79?"
    assert cell(table, ("shakespeare", "natural"), "feddyn_update")["paper"] == "316.64"
    assert cell(compare(ours_frame({"fedprox": 1.0}), t2), ("shakespeare", "natural"),
                "fen_alg3")["paper"] == "unreadable"
    md = tables.to_markdown(table, "FEN Table 4", [])
    assert "684.79?" in md and "ocr-uncertain" in md


def test_numeric_keys_join_across_types():
    ref = pd.DataFrame({"participation": ["0.10", "1.00"], "paper_value": [5.0, 8.0],
                        "value_raw": ["5", "8"], "confidence": ["ok", "ok"]})
    ours = pd.DataFrame({"participation": [0.1], "ours_mean": [10.0], "status": ["ok"]})
    table = tables.compare_table(ours, ref, ["participation"], value_name="v", unit_note="")
    assert list(table["status"]) == ["ok", "not run"] and table["ratio"].iloc[0] == pytest.approx(2.0)


def test_duplicate_keys_are_refused(t2):
    ours = pd.concat([ours_frame({"fedprox": 1.0}), ours_frame({"fedprox": 2.0})])
    with pytest.raises(ValueError, match="several rows"):
        compare(ours, t2)


def test_markdown_and_files(t2, tmp_path):
    table = compare(ours_frame({"fedprox": 20.0, "fen_alg3": 2.0}, n_seeds=3, half=0.1), t2)
    md = tables.to_markdown(table, "FEN Table 2", ["quick profile: 20 rounds instead of 100"])
    assert md.startswith("### FEN Table 2")
    assert "- profile: quick" in md and "- seeds: 0,1,2" in md and "- data: synthetic" in md
    assert "- executor:" not in md  # the runs did not name one
    named = compare(ours_frame({"fedprox": 20.0}, executor="BatchedExecutor"), t2)
    assert "- executor: BatchedExecutor" in tables.to_markdown(named, "FEN Table 2", [])
    assert "x1e7 elements" in md and "quick profile: 20 rounds" in md
    assert "| 0.99 |" in md.replace("  ", "")  # ratio to 2 decimals: 20/20.3
    header, rule = md.splitlines()[2:4]
    assert header.count("|") == rule.count("|") == 7
    paths = tables.write_table(table, tmp_path / "out", "table2", title="FEN Table 2")
    assert paths["md"].read_text().startswith("### FEN Table 2")
    assert len(pd.read_csv(paths["csv"])) == len(table)


# ---------------------------------------------------------------------------------- claims


def test_t2_2_holds_fails_ties_and_not_evaluated():
    assert verdict("FEN-T2-2", ours_frame(paper_like()))[0] == "holds"
    v, detail = verdict("FEN-T2-2", ours_frame(paper_like(fen_alg1=21.0)))
    assert v == "fails" and "mnist/iid" in detail and "fen_alg1 21" in detail
    v, detail = verdict("FEN-T2-2", ours_frame(paper_like(fen_alg2=40.58 * 1.005)))
    assert v == "holds (tie)" and "tie" in detail
    assert verdict("FEN-T2-2", ours_frame(paper_like(fen_alg2=40.58 * 1.02)))[0] == "fails"
    v, detail = verdict("FEN-T2-2", ours_frame({k: x for k, x in paper_like().items() if k != "scaffold"}))
    assert v == "not evaluated" and "needs runs of: scaffold" in detail


def test_every_row_counts_rows_evaluated():
    ours = pd.concat([ours_frame(paper_like()), ours_frame(paper_like(), row=("emnist_l", "iid")),
                      ours_frame({"fedprox": 1.0}, row=("cifar10", "iid"))])
    v, detail = verdict("FEN-T2-1", ours)
    assert v == "holds" and "2 of 2 rows evaluated" in detail and "12 of 14 scope rows not evaluated" in detail


def test_t2_1_is_strict():
    assert verdict("FEN-T2-1", ours_frame(paper_like(fen_alg3=7.51)))[0] == "fails"


def test_t2_3_equality():
    assert verdict("FEN-T2-3", ours_frame(paper_like()))[0] == "holds"
    assert verdict("FEN-T2-3", ours_frame(paper_like(feddyn=20.3 * 1.005)))[0] == "holds (tie)"
    v, detail = verdict("FEN-T2-3", ours_frame(paper_like(feddyn=21.0)))
    assert v == "fails" and "differ by" in detail


@pytest.mark.parametrize("scaffold,expected", [(2.0 * 20.3, "holds"), (1.9 * 20.3, "holds"),
                                               (2.1 * 20.3, "holds"), (1.85 * 20.3, "fails"),
                                               (2.2 * 20.3, "fails")])
def test_t2_4_ratio_bounds(scaffold, expected):
    assert verdict("FEN-T2-4", ours_frame(paper_like(scaffold=scaffold)))[0] == expected


def test_interval_detail_with_seeds():
    clear = verdict("FEN-T2-2", ours_frame(paper_like(), n_seeds=3, half=0.1))[1]
    assert "3 of 3 compared quantities are clear of the intervals" in clear
    # Alg 2 is 1.5 % below SCAFFOLD but the +-1 intervals overlap.
    v, detail = verdict("FEN-T2-2", ours_frame(paper_like(fen_alg2=40.58 * 0.985), n_seeds=3, half=1.0))
    assert v == "holds" and "2 of 3" in detail and "fen_alg2" in detail.split("not clear")[1]
    assert "intervals" not in verdict("FEN-T2-2", ours_frame(paper_like()))[1]


def test_t2_5_needs_counts_then_checks_identity():
    assert verdict("FEN-T2-5", ours_frame(paper_like()))[0] == "not evaluated"
    # 199,210 parameters x 1,000 client-rounds = 19.921 x 1e7.
    ours = ours_frame(paper_like(fedprox=19.921, feddyn=19.921), dim=199_210, client_rounds=1000)
    ours["profile"] = "smoke"
    v, detail = verdict("FEN-T2-5", ours)
    assert v == "holds" and "skipped" in detail  # smoke does not keep the paper's rounds
    ours.loc[ours.algorithm_key == "fedprox", "ours_mean"] = 19.921 * (1 - 1e-5)  # a few exact zeros
    v, detail = verdict("FEN-T2-5", ours)
    assert v == "holds" and "exact zeros" in detail
    ours.loc[ours.algorithm_key == "fedprox", "ours_mean"] = 19.921
    ours["profile"] = "paper"
    v, detail = verdict("FEN-T2-5", ours)
    assert v == "holds" and "fedprox/paper = 0.981" in detail
    ours.loc[ours.algorithm_key == "feddyn", "ours_mean"] = 19.0
    assert verdict("FEN-T2-5", ours)[0] == "fails"


def test_t2_6_and_t2_7():
    assert verdict("FEN-T2-6", ours_frame(paper_like()))[0] == "holds"
    assert verdict("FEN-T2-6", ours_frame(paper_like(fen_alg3=10.0)))[0] == "fails"
    assert verdict("FEN-T2-7", ours_frame(paper_like(fen_alg3=10.0)))[0] == "holds"
    assert verdict("FEN-T2-7", ours_frame(paper_like(fen_alg3=11.0)))[0] == "fails"
    # Shakespeare is outside FEN-T2-7's scope.
    v, detail = verdict("FEN-T2-7", ours_frame(paper_like(fen_alg3=11.0), row=("shakespeare", "iid")))
    assert v == "not evaluated"


def test_registry_unknown_and_markdown():
    assert all(f"FEN-T2-{i}" in CHECKS for i in range(1, 8))
    with pytest.raises(ValueError, match="unknown claim"):
        claims.evaluate_claims(["FEN-T9-9"], ours_frame(paper_like()), checks=CHECKS)
    df = claims.evaluate_claims(["FEN-T2-1", "FDY-T1-1"], ours_frame(paper_like()), checks=CHECKS)
    assert list(df.columns) == ["claim_id", "claim", "verdict", "detail"]
    assert df.iloc[1]["verdict"] == "not evaluated"
    md = claims.claims_markdown(df)
    assert "**FEN-T2-1** holds" in md and "not evaluated" in md


# ---------------------------------------------------------------------------------- figures


def test_figures_write_png(tmp_path):
    run_a = pd.DataFrame({"round": [1, 2, 3, 4], "all_test_acc": [0.1, float("nan"), 0.5, 0.7]})
    run_b = pd.DataFrame({"round": [1, 2, 3, 4], "all_test_acc": [0.2, 0.3, 0.4, 0.6],
                          "cum_nonzeros": [1e5, 2e5, 3e5, 4e5]})
    path = figures.accuracy_figure({"fedprox": run_a, "fen_alg1": run_b}, tmp_path / "f" / "acc.png",
                                   title="MNIST IID")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 1000
    other = figures.metric_figure({"fen_alg1": run_b}, tmp_path / "nnz.png", y="cum_nonzeros",
                                  ylabel="cumulative nonzeros", logy=True)
    assert other.stat().st_size > 1000
    with pytest.raises(ValueError, match="lacks columns"):
        figures.metric_figure({"a": run_a}, tmp_path / "x.png", y="cum_nonzeros")


def test_mean_interval_of_non_finite_seeds_has_no_spread():
    """An undefined metric (NaN) or a diverged seed (inf) over several seeds: the mean, no stdev."""
    import math

    from fedrepro.reports.grid import mean_interval

    assert all(math.isnan(v) for v in mean_interval([math.nan, math.nan]))
    assert mean_interval([1.0, math.inf]) == (math.inf, math.inf, math.inf)
    mean, lo, hi = mean_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and lo < 1.0 and hi > 3.0  # t(2) = 4.30: half-width 2.48


def test_a_panels_not_run_note_gives_each_reason_once_after_its_curves():
    from fedrepro.reports.figures import not_run_note

    missing = {"fedprox": "not run: not computed yet", "fen_alg1": "not run: not computed yet",
               "feddyn": "diverged: round 43"}
    assert not_run_note(missing, drawn=True) == ("not run:\nfedprox, fen_alg1: not computed yet\n"
                                                 "feddyn: diverged: round 43")
    assert not_run_note({k: missing[k] for k in ("fedprox", "fen_alg1")}, drawn=False) == \
        "not run: not computed yet"
    assert not_run_note({k: missing[k] for k in ("fedprox", "fen_alg1")}, drawn=True) == \
        "not run:\nfedprox, fen_alg1: not computed yet"
