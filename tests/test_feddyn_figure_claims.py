"""FedDyn's figure claims (experiments/feddyn/claims.py, 'Figures') on made-up curves: the tail
statistics, FDY-F4-1's 0.5-point margin in every panel, FDY-F1-1's argmax with its 0.3-point tie,
FDY-F1-2's plateau and spread, FDY-F2-2's 5-point gap, and a panel without runs left undecided."""
from __future__ import annotations

import pandas as pd
import pytest

from experiments.feddyn import figures
from experiments.feddyn.claims import CHECKS
from fedrepro.reports.claims import evaluate_claims
from fedrepro.reports.grid import Cell


def curve(final: float, rounds: int = 20, start: float = 10.0) -> pd.DataFrame:
    """Accuracy (fraction) rising linearly from `start` % at round 0 to `final` % at round
    rounds // 2, then flat: the last 20 % of rounds all read `final`."""
    half = rounds // 2
    acc = [start + (final - start) * min(r, half) / half for r in range(rounds + 1)]
    return pd.DataFrame({"round": range(rounds + 1), "all_test_acc": [a / 100 for a in acc]})


def panel(title: str, finals: dict, participation: float = 0.1, missing: dict = ()) -> figures.Panel:
    labels = [*finals, *dict(missing)]
    p = figures.Panel(title, {label: Cell({"curve": label}) for label in labels}, participation)
    p.curves = {label: curve(f) for label, f in finals.items()}
    p.missing = dict(missing)
    return p


def judge(number: int, panels: list) -> dict:
    frame = evaluate_claims(list(figures.FIGURE_CLAIMS[number]), figures.curve_frame(number, panels), CHECKS)
    return dict(zip(frame["claim_id"], zip(frame["verdict"], frame["detail"])))


def test_tails_read_the_last_tenth_of_the_evaluated_rounds():
    metrics = curve(90.0, rounds=20)
    metrics.loc[20, "all_test_acc"] = 0.80  # the last round alone drops
    t = figures._tails(metrics)
    assert t["rounds"] == 20 and t["final"] == pytest.approx(80.0)
    assert t["tail"] == pytest.approx(85.0)  # rounds 19 and 20 (2 of the 20 after round 0)
    assert t["prev_tail"] == pytest.approx(90.0) and t["best"] == pytest.approx(90.0) and t["finite"]


def test_f4_1_holds_within_half_a_point_and_fails_beyond_it():
    ok = panel("A", {"feddyn": 97.6, "scaffold": 98.0, "fedavg": 97.0, "fedprox": 96.0})
    assert judge(8, [ok])["FDY-F4-1"][0] == "holds"
    behind = panel("B", {"feddyn": 97.0, "scaffold": 98.0, "fedavg": 97.0, "fedprox": 96.0})
    verdict, detail = judge(8, [ok, behind])["FDY-F4-1"]
    assert verdict == "fails" and "more than 0.5 behind scaffold" in detail


def test_f4_1_is_undecided_while_a_panel_lacks_a_run():
    ok = panel("A", {"feddyn": 98.0, "scaffold": 97.0, "fedavg": 97.0, "fedprox": 96.0})
    gap = panel("B", {"feddyn": 98.0, "scaffold": 97.0, "fedavg": 97.0}, missing={"fedprox": "not run: diverged"})
    verdict, detail = judge(8, [ok, gap])["FDY-F4-1"]
    assert verdict == "not evaluated" and "not run: diverged: [B] fedprox" in detail


def test_f1_1_argmax_with_a_tie_and_f1_2_spread():
    alphas = {"alpha=0.001": 95.0, "alpha=0.01": 96.0, "alpha=0.1": 96.2}
    assert judge(1, [panel("(a)", alphas)])["FDY-F1-1"][0] == "holds (tie)"
    assert judge(1, [panel("(a)", {**alphas, "alpha=0.1": 97.0})])["FDY-F1-1"][0] == "holds"
    assert judge(1, [panel("(a)", {**alphas, "alpha=0.1": 95.5})])["FDY-F1-1"][0] == "fails"
    assert judge(1, [panel("(a)", alphas)])["FDY-F1-2"][0] == "holds"  # flat tails, 1.2-point spread
    flat = {"alpha=0.001": 96.0, "alpha=0.01": 96.1, "alpha=0.1": 96.2}
    verdict, detail = judge(1, [panel("(a)", flat)])["FDY-F1-2"]
    assert verdict == "fails" and "max - min = 0.20" in detail


def test_f2_2_needs_a_five_point_gap_between_act_and_all():
    full = panel("100 %", {"FedDyn": 98.0, "FedSplit Act": 97.0}, participation=1.0)
    tenth = panel("10 %", {"FedDyn": 98.0, "FedSplit Act": 96.0, "FedSplit All": 90.0})
    assert judge(2, [full, tenth])["FDY-F2-2"][0] == "holds"
    close = panel("10 %", {"FedDyn": 98.0, "FedSplit Act": 96.0, "FedSplit All": 93.0})
    assert judge(2, [full, close])["FDY-F2-2"][0] == "fails"


def test_f2_1_reads_the_tail_and_the_rounds_to_table_2s_targets():
    def f2_1(full):
        frame = figures.curve_frame(2, [full])
        frame.attrs["targets_100_iid"] = (97.5,)
        return evaluate_claims(["FDY-F2-1"], frame, CHECKS).iloc[0]
    # FedSplit never reaches 97.5 %, FedDyn does (a censored count is larger than any finite one)
    ahead = f2_1(panel("100 %", {"FedDyn": 98.0, "FedSplit Act": 97.0}, participation=1.0))
    assert ahead["verdict"] == "holds" and "rounds to 97.5 %" in ahead["detail"]
    behind = f2_1(panel("100 %", {"FedDyn": 97.0, "FedSplit Act": 98.0}, participation=1.0))
    assert behind["verdict"] == "fails"
