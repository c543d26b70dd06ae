"""The scaled sign compressor, and `make fen-compression`: FedElasticNet against compressed
baselines with error feedback at matched uplink bits (REV-R2-7, REV-R2-8)."""
import math

import pandas as pd
import pytest
import torch

from conftest import torch_threads
from experiments.__main__ import main
from experiments.fedelasticnet import compression as fc
from experiments.fedelasticnet.claims import CHECKS
from fedrepro.compression import Channel, Sign, build_channel, make_compressor
from fedrepro.config import compose_config, validate
from test_fen_tables import mnist_runs_here


# --- the sign compressor ---------------------------------------------------------------------


def test_sign_sends_the_mean_magnitude_with_each_sign_and_costs_d_plus_32_bits():
    x = torch.tensor([1.0, -3.0, 0.0, 2.0])  # ||x||_1 / d = 6 / 4
    c = Sign().compress(x)
    assert c.values.tolist() == [1.5, -1.5, 1.5, 1.5]  # 0 goes as +
    assert c.bits == 4 + 32 and Sign().bits(199_210) == 199_242
    assert c.symbols() == torch.tensor(1.5).numpy().astype("<f4").tobytes() + bytes([0b01000000])
    err = float((c.values - x).square().sum())  # ||x||^2 - ||x||_1^2 / d = 14 - 9
    assert err == pytest.approx(5.0) and Sign().contraction(x) == pytest.approx(5 / 14)
    assert not Sign().unbiased and Sign().omega(4) == math.inf
    assert Sign().compress(torch.zeros(3)).values.tolist() == [0.0, 0.0, 0.0]


def test_sign_with_error_feedback_keeps_what_was_not_sent():
    ch = Channel(Sign(), uplink_feedback="ef", num_clients=2)
    x = torch.tensor([1.0, -3.0, 0.0, 2.0])
    first = ch.upload(0, 1, "delta", x)
    e = ch.streams["up/delta"].memory[1]
    assert first.used.tolist() == [1.5, -1.5, 1.5, 1.5] and e.tolist() == [-0.5, -1.5, -1.5, 0.5]
    second = ch.upload(1, 1, "delta", x)  # p = e + x = [0.5, -4.5, -1.5, 2.5], ||p||_1 / 4 = 2.25
    assert second.used.tolist() == [2.25, -2.25, -2.25, 2.25]
    assert ch.streams["up/delta"].memory[1].tolist() == [-1.75, -2.25, 0.75, 0.25]
    assert ch.streams["up/delta"].memory[0].tolist() == [0.0] * 4  # the other client untouched


def test_sign_ef_config_builds_the_channel():
    cfg = compose_config(["compressor=sign_ef"])
    validate(cfg)
    ch = build_channel(cfg.compressor, num_clients=3, seed=0)
    assert isinstance(ch.compressors["up"], Sign) and ch.feedback["up"] == "ef"
    assert compose_config(["compressor=sign"]).compressor.error_feedback == "none"
    assert isinstance(make_compressor("sign", cfg.compressor), Sign)


def test_qsgd_levels_follow_the_bits_asked_for():
    d = 10_000
    low, high = fc.qsgd_levels(3 * d, d), fc.qsgd_levels(8 * d, d)
    assert 1 <= low[0] < high[0] and abs(low[1] / (3 * d) - 1) < 0.02 and abs(high[1] / (8 * d) - 1) < 0.02
    assert fc.qsgd_levels(1e12, d)[0] == fc.QSGD_MAX


# --- the claims on hand-made pair frames --------------------------------------------------------


def _pairs(fen: dict, base: dict, bits: dict | None = None) -> pd.DataFrame:
    """A pairs frame: {baseline: accuracies per seed} against {fen series: accuracies per seed};
    bits: {baseline: its totals per seed} (FedElasticNet's are 1e8)."""
    rows = []
    for claim, f, b in fc.PAIRS:
        n = len(base[b])
        rows.append({"claim": claim, "fen": f, "base": b, "status": "ok", "reason": "", "fen_bits": [1e8] * n,
                     "base_bits": (bits or {}).get(b, [1e8] * n), "budget": [1e8] * n,
                     "fen_acc": fen[f], "base_acc": base[b]})
    return pd.DataFrame(rows)


FEN = {"fen_alg1": [97.8, 97.7, 97.9], "fen_alg2": [97.8, 97.9, 97.8], "fen_alg3": [97.5, 97.6, 97.4]}
EVEN = {b: [97.6, 97.7, 97.6] for _, _, b in fc.PAIRS}


def test_the_claims_hold_when_fedelasticnet_is_within_half_a_point_of_every_baseline():
    for claim in fc.CLAIMS:
        verdict, detail = CHECKS[claim](_pairs(FEN, EVEN))
        assert verdict == "holds", detail
        assert "matched within 5 %" in detail and "CIFAR-10: not run here (compute)" in detail


def test_the_claims_fail_when_a_baseline_is_clearly_a_point_better():
    better = {**EVEN, "fedavg_sign_ef": [98.9, 99.0, 98.9], "scaffold_topk_ef": [99.0, 98.9, 99.0]}
    for claim, pair in (("REV-R2-7", "fen_alg2 vs scaffold_topk_ef"), ("REV-R2-8", "fen_alg1 vs fedavg_sign_ef")):
        verdict, detail = CHECKS[claim](_pairs(FEN, better, {"fedavg_sign_ef": [1.1e7] * 3}))
        assert verdict == "fails" and f"fails: mnist {pair}" in detail
    assert "not matched within 5 %" in CHECKS["REV-R2-8"](_pairs(FEN, better, {"fedavg_sign_ef": [1.1e7] * 3}))[1]


def test_the_claims_are_undecided_within_noise_and_not_evaluated_without_runs():
    noisy = {**EVEN, "feddyn_topk_ef": [96.5, 99.5, 98.0], "fedavg_qsgd_ef": [96.8, 99.4, 97.9]}
    for claim in fc.CLAIMS:
        verdict, detail = CHECKS[claim](_pairs(FEN, noisy))
        assert verdict == "not evaluated" and "within noise" in detail and "straddles -0.5" in detail
    missing = _pairs(FEN, EVEN)
    missing.loc[missing.base == "feddyn_topk_ef", ["status", "reason"]] = ["not run", "needs fen_alg3's runs"]
    verdict, detail = CHECKS["REV-R2-7"](missing)
    assert verdict == "not evaluated" and "needs fen_alg3's runs" in detail
    assert CHECKS["REV-R2-8"](pd.DataFrame({"acc": [1.0]}))[0] == "not evaluated"


def test_budget_covers_both_runs_when_matched_else_the_smaller_total():
    assert fc.budget(100.0, 104.0) == 104.0 and fc.budget(100.0, 96.0) == 100.0
    assert fc.budget(100.0, 11.0) == 11.0 and fc.budget(100.0, 120.0) == 100.0
    curve = pd.DataFrame({"round": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "up_bits": [0.0, *range(10, 110, 10)],
                          "acc": [10.0, *range(50, 60)]})
    assert fc.acc_within(curve, 1e9) == 59.0  # the whole run: its last 10 % of rounds (round 10)
    assert fc.acc_within(curve, 50.0) == 54.0  # rounds 0-5 fit: the tail is round 5
    assert math.isnan(fc.acc_within(curve.iloc[1:], 5.0))


# --- end to end -------------------------------------------------------------------------------


def test_smoke_run_renders_the_table_and_judges_both_claims(tmp_path, capsys, monkeypatch):
    mnist_runs_here(monkeypatch)
    with torch_threads(1):
        assert main(["fen", "compression", "--profile", "smoke", "--seeds", "2", "--jobs", "1",
                     "--results-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    table = pd.read_csv(tmp_path / "tables" / "fedelasticnet_compression.csv")
    assert len(table) == 8 and (table.status == "ok").all() and (table[table.series_key.isin(fc.RATED)].rate != "").all()
    pairs = pd.read_csv(tmp_path / "tables" / "fedelasticnet_compression_pairs.csv")
    assert list(pairs.claim) == [c for c, _, _ in fc.PAIRS] and (pairs.status == "ok").all()
    md = (tmp_path / "tables" / "fedelasticnet_compression.md").read_text()
    assert "not run here (compute)" in md and "profile=smoke, seeds 0..1" in md and "k = round(" in md
    claims = (tmp_path / "tables" / "fedelasticnet_compression_claims.md").read_text()
    assert "**REV-R2-7**" in claims and "**REV-R2-8**" in claims and "profile=smoke" in claims
    assert "acc(fen_alg1) - acc(fedavg_sign_ef) = " in out
