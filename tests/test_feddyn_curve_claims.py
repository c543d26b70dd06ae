"""FedDyn's claims judged on curves (experiments/feddyn/claims.py, 'Figures' and 'Sec. 3') on
made-up runs: the tail statistics, FDY-F4-1's 0.5-point margin in every panel, FDY-F1-1's argmax
with its 0.3-point tie, FDY-F1-2's plateau and spread, FDY-F2-1/2's comparisons, a panel without
runs left undecided, and FDY-S3-1's best centralized epoch against the stated accuracies."""
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
    p.curves = {label: {0: curve(f)} for label, f in finals.items()}
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


def test_f4_1_one_seed_is_decided_only_beyond_the_tail_spread():
    ok = panel("A", {"feddyn": 97.8, "scaffold": 98.0, "fedavg": 97.0, "fedprox": 96.0})
    assert judge(8, [ok])["FDY-F4-1"][0] == "holds"  # 0.2 behind: clears the 0.5 margin by 0.3
    near = panel("B", {"feddyn": 97.6, "scaffold": 98.0, "fedavg": 97.0, "fedprox": 96.0})
    verdict, detail = judge(8, [ok, near])["FDY-F4-1"]  # 0.4 behind: 0.1 from the margin, inside 0.25
    assert verdict == "not evaluated" and "within noise of the 0.5-point margin: scaffold" in detail
    behind = panel("C", {"feddyn": 97.0, "scaffold": 98.0, "fedavg": 97.0, "fedprox": 96.0})
    verdict, detail = judge(8, [ok, near, behind])["FDY-F4-1"]
    assert verdict == "fails" and "more than 0.5 behind scaffold" in detail


def seeded(title: str, finals: dict) -> figures.Panel:
    """A panel whose curves have one run per seed: {label: [final of seed 0, seed 1, ...]}."""
    p = panel(title, {})
    for label, per_seed in finals.items():
        p.cells[label] = Cell({"curve": label})
        p.curves[label] = {seed: curve(f) for seed, f in enumerate(per_seed)}
    return p


def test_f4_1_on_several_seeds_reads_the_paired_differences_interval():
    base = {"scaffold": [90.0] * 5, "fedavg": [90.0] * 5}
    # seed 0 alone would fail (1.4 behind fedprox); the five seeds' differences straddle -0.5
    spread = seeded("Dir (.3), 1 %", {"feddyn": [88.6, 92.0, 89.0, 91.5, 90.2], "fedprox": [90.0] * 5, **base})
    verdict, detail = judge(6, [spread])["FDY-F4-1"]
    assert verdict == "not evaluated" and "(5 seeds)" in detail
    steady = seeded("Dir (.3), 1 %", {"feddyn": [88.5, 88.6, 88.4, 88.5, 88.7], "fedprox": [90.0] * 5, **base})
    verdict, detail = judge(6, [steady])["FDY-F4-1"]
    assert verdict == "fails" and "more than 0.5 behind scaffold, fedavg, fedprox" in detail
    frame = figures.curve_frame(6, [steady])
    row = frame[frame["curve"] == "feddyn"].iloc[0]
    assert row["seeds"] == (0, 1, 2, 3, 4) and row["tail"] == pytest.approx(88.54)


def test_f4_1_pairs_only_the_seeds_both_curves_have():
    base = {"scaffold": [90.0], "fedavg": [90.0]}
    # FedProx has seed 0 only: one shared seed, 0.2 behind, clears the margin beyond the band
    p = seeded("A", {"feddyn": [89.8, 80.0, 80.0], "fedprox": [90.0], **base})
    verdict, detail = judge(6, [p])["FDY-F4-1"]
    assert verdict == "holds" and "fedprox -0.20)" in detail  # one shared seed, not 3


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


def test_f1_1_ties_by_the_gap_whatever_alpha_01s_rank():
    third_but_close = {"alpha=0.001": 66.06, "alpha=0.01": 66.03, "alpha=0.1": 65.93}  # CIFAR-10 at quick
    verdict, detail = judge(1, [panel("(a)", third_but_close)])["FDY-F1-1"]
    assert verdict == "holds (tie)" and "alpha=0.1 within 0.3 point" in detail


def test_f1_2_a_curve_still_rising_where_the_profile_stopped_it_is_censored():
    def rising(horizon: int) -> figures.Panel:
        p = panel("(a)", {})
        for label, final in {"alpha=0.001": 66.0, "alpha=0.01": 66.1, "alpha=0.1": 65.9}.items():
            p.cells[label] = Cell({"curve": label}, [f"train.rounds={horizon}"])
            p.curves[label] = {0: curve(final, rounds=20).assign(
                all_test_acc=lambda d: d["round"] * final / 2000)}  # rising to the last round
        return p
    verdict, detail = judge(1, [rising(1000)])["FDY-F1-2"]
    assert verdict == "not evaluated" and "stopped at round 20 of 1000" in detail and "censoring" in detail
    assert judge(1, [rising(20)])["FDY-F1-2"][0] == "fails"  # the paper's horizon reached: not converging


ACT, ALL = "FedSplit Act, s=", "FedSplit All, s="


def grid(server: str, tails: dict) -> dict:
    """{label: final} of a FedSplit variant's step grid; a step given None is missing (see `missing`)."""
    return {f"{server}{s:g}": f for s, f in tails.items() if f is not None}


def test_f2_2_needs_a_five_point_gap_between_each_variants_best_step():
    full = panel("100 %", {"FedDyn": 98.0, **grid(ACT, {0.1: 97.0, 1: 95.0, 10: 94.0})}, participation=1.0)
    tenth = panel("10 %", {"FedDyn": 98.0, **grid(ACT, {0.1: 90.0, 1: 96.0, 10: 93.0}),
                           **grid(ALL, {0.1: 88.0, 1: 90.0, 10: 85.0})})
    verdict, detail = judge(2, [full, tenth])["FDY-F2-2"]
    assert verdict == "holds" and "best s = 1" in detail  # Act's best (96) against All's best (90)
    close = panel("10 %", {"FedDyn": 98.0, **grid(ACT, {0.1: 90.0, 1: 96.0, 10: 93.0}),
                           **grid(ALL, {0.1: 88.0, 1: 90.0, 10: 93.0})})
    assert judge(2, [full, close])["FDY-F2-2"][0] == "fails"  # All tuned to s=10 is 3 points behind
    near = panel("10 %", {"FedDyn": 96.1, **grid(ACT, {0.1: 90.0, 1: 96.0, 10: 93.0}),
                          **grid(ALL, {0.1: 88.0, 1: 90.0, 10: 85.0})})
    assert judge(2, [full, near])["FDY-F2-2"][0] == "not evaluated"  # FedDyn 0.1 ahead: one seed's noise


def test_f2_a_diverged_step_loses_a_missing_step_leaves_the_claim_open_an_all_diverged_variant_loses():
    def f2_2(act_missing: dict):
        p = panel("10 %", {"FedDyn": 98.0, **grid(ACT, {0.1: 92.0, 1: None, 10: 91.0}),
                           **grid(ALL, {0.1: 80.0, 1: 82.0, 10: 81.0})}, missing=act_missing)
        return judge(2, [p])["FDY-F2-2"]
    verdict, detail = f2_2({f"{ACT}1": "diverged: local training diverged in round 55"})
    assert verdict == "holds" and "1 diverged" in detail and "best s = 0.1" in detail
    verdict, detail = f2_2({f"{ACT}1": "not run: not computed yet"})
    assert verdict == "not evaluated" and "1 (not run)" in detail and "the grid is not complete" in detail
    diverged = {f"{ACT}{s:g}": "diverged: in round 55" for s in (0.1, 1, 10)}
    verdict, detail = judge(2, [panel("10 %", {"FedDyn": 98.0, **grid(ALL, {1: 82.0})}, missing=diverged)])["FDY-F2-2"]
    # an Act that never trained loses to FedDyn and to an All that did
    assert verdict == "fails" and "diverged at every step" in detail
    assert "holds: FedDyn > FedSplit Act" in detail and "fails: FedSplit Act > All" in detail
    both = {**diverged, f"{ALL}1": "diverged: in round 9"}
    assert judge(2, [panel("10 %", {"FedDyn": 98.0}, missing=both)])["FDY-F2-2"][0] == "not evaluated"


def test_f2_1_reads_the_tail_and_the_rounds_to_table_2s_targets():
    def f2_1(full):
        frame = figures.curve_frame(2, [full])
        frame.attrs["targets_100_iid"] = (97.5,)
        return evaluate_claims(["FDY-F2-1"], frame, CHECKS).iloc[0]
    # FedSplit never reaches 97.5 %, FedDyn does (FedSplit's censored count is more than FedDyn's)
    ahead = f2_1(panel("100 %", {"FedDyn": 98.0, **grid(ACT, {0.1: 96.0, 1: 97.0})}, participation=1.0))
    assert ahead["verdict"] == "holds" and "rounds to 97.5 %" in ahead["detail"] and "best s = 1" in ahead["detail"]
    behind = f2_1(panel("100 %", {"FedDyn": 97.0, **grid(ACT, {0.1: 98.0, 1: 96.0})}, participation=1.0))
    assert behind["verdict"] == "fails"
    never = f2_1(panel("100 %", {"FedDyn": 98.0}, participation=1.0,
                       missing={f"{ACT}{s:g}": "diverged: in round 4" for s in (0.1, 1)}))
    assert never["verdict"] == "holds" and "fedsplit never (diverged)" in never["detail"]


def test_s3_1_reads_the_best_epoch_and_leaves_a_capped_shortfall_undecided(tmp_path):
    """FDY-S3-1 on the centralized target's runs (experiments/centralized.py): within 1 point of
    the stated accuracy holds; short of it after fewer epochs than the recipe's is undecided;
    a dataset whose run is missing leaves the claim undecided."""
    from types import SimpleNamespace

    from experiments import centralized

    def run(name, accs, epochs):
        folder = tmp_path / name
        folder.mkdir()
        pd.DataFrame({"round": range(1, len(accs) + 1), "server_test_acc": accs}).to_csv(folder / "metrics.csv")
        return [SimpleNamespace(folder=folder, summary={"rounds_completed": epochs})]

    names = [b.dataset for b in centralized.BASELINES]
    ours = pd.DataFrame({"status": ["not run"] * len(names), "reason": ["data not here"] * len(names)})
    runs = {names.index("mnist"): run("mnist", [0.95, 0.979, 0.976], 150),      # best 97.9 vs 98.4
            names.index("emnist_l"): run("emnist_l", [0.90, 0.92], 100),        # 92.0 vs 95.0, capped
            names.index("shakespeare"): run("shakespeare", [0.50, 0.515], 150)}  # 51.5 vs 50.8 / 51.2
    for i in runs:
        ours.loc[i, ["status", "reason"]] = ["ok", ""]
    frame = centralized.claims_frame(ours, runs, centralized.BASELINES)
    assert list(frame["dataset"]) == ["mnist", "emnist_l", "cifar10", "cifar100", "shakespeare"]
    assert frame.set_index("dataset").loc["shakespeare", "stated"] == [50.8, 51.2]
    verdict, detail = CHECKS["FDY-S3-1"](frame)
    assert verdict == "not evaluated"
    assert "mnist (best 97.9 vs stated 98.4 after 150 of 150 epochs)" in detail
    assert "emnist_l (best 92.0 vs stated 95 after 100 of 150 epochs (censored" in detail
    assert "cifar10 (data not here)" in detail
    frame.loc[frame["dataset"] == "mnist", "best"] = 96.0  # 2.4 short after the recipe's epochs
    assert CHECKS["FDY-S3-1"](frame)[0] == "fails"
