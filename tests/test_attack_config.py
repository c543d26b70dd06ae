"""`attack=dlg`: DLG on one client's upload of any run, from the config (fedrepro/attacks/upload.py)."""
import json

import pandas as pd
import pytest
import torch

from fedrepro.attacks.upload import CaptureLedger, observed_gradient
from fedrepro.config import compose_config, identity, run_key, validate
from fedrepro.errors import ConfigError
from fedrepro.run import Interrupted
from fedrepro.runner import run_experiment

# 20 clients, everyone every round: client 0 uploads in every round (mnist_5k gives them 200
# samples each without FEDREPRO_DATA_ROOT, 250 with it)
SMALL = ["profile=smoke", "logger.progress=false", "participation=p100", "train.num_clients=20",
         "attack.iterations=5"]


def attacked(results, *overrides):
    return run_experiment(compose_config([*SMALL, "attack=dlg", "attack.round=2", *overrides,
                                          f"results_root={results}"]), quiet=True)


def read_attack(result) -> dict:
    return json.loads((result.folder / "attack.json").read_text())


def test_no_attack_leaves_the_run_key_as_before_and_dlg_gets_its_own():
    plain = compose_config(["profile=smoke"])
    assert "attack" not in identity(plain)
    attack = compose_config(["profile=smoke", "attack=dlg"])
    assert identity(attack)["attack"]["name"] == "dlg"
    assert run_key(attack) != run_key(plain)
    assert run_key(compose_config(["profile=smoke", "attack=dlg", "attack.round=3"])) != run_key(attack)


def test_the_attack_never_changes_the_training_numbers(tmp_path):
    plain = run_experiment(compose_config([*SMALL, f"results_root={tmp_path / 'a'}"]), quiet=True)
    with_attack = attacked(tmp_path / "b")
    assert read_attack(with_attack)["status"] == "ok"
    a, b = (pd.read_csv(r.folder / "metrics.csv") for r in (plain, with_attack))
    pd.testing.assert_frame_equal(a, b)
    assert "attack" not in plain.summary and with_attack.summary["attack"]["status"] == "ok"


def test_dsgd_upload_is_the_clients_gradient_and_fedavg_the_averaged_step(tmp_path):
    """What the attacker matches: DSGD uploads grad f_1(x) itself (client 0's whole data is one
    batch here, no weight decay or clipping); so does FedAvg's (x - x^+)/(lr L) for L = 1, but
    not after L = 5 steps."""
    full_batch = ["train.batch_size=1000", "train.weight_decay=0", "train.clip_norm=null"]
    dsgd = read_attack(attacked(tmp_path, "algorithm=dsgd", *full_batch))
    one_step = read_attack(attacked(tmp_path, "algorithm=fedavg", "train.local_steps=1", *full_batch))
    many = read_attack(attacked(tmp_path, "algorithm=fedavg", "train.local_steps=5", *full_batch))
    assert dsgd["observed"] == "uploaded gradient" and dsgd["upload_vs_gradient"] < 1e-5
    assert one_step["observed"].startswith("averaged gradient") and one_step["upload_vs_gradient"] < 1e-4
    assert many["local_steps"] == 5 and many["upload_vs_gradient"] > 1e-2
    for record in (dsgd, one_step, many):
        assert record["round"] == 2 and record["client"] == 0 and record["samples"] in (200, 250)
        assert record["features"] == 784


def test_attack_curve_and_summary_agree(tmp_path):
    r = attacked(tmp_path, "attack.iterations=7")
    record = read_attack(r)
    curve = pd.read_csv(r.folder / "attack_curve.csv")
    assert list(curve.iteration) == list(range(8))
    assert curve.distance.iloc[0] == pytest.approx(record["initial_distance"])
    assert curve.distance.iloc[-1] == pytest.approx(record["final_distance"])
    assert r.summary["attack"]["final_distance"] == pytest.approx(record["final_distance"])


def test_an_unsampled_client_is_reported_not_attacked(tmp_path):
    # 10 % of 100 clients in 3 smoke rounds: client 99 is drawn in none of rounds 2-3 for seed 0
    r = run_experiment(compose_config(["profile=smoke", "logger.progress=false", "attack=dlg",
                                       "attack.round=2", "attack.client=99", f"results_root={tmp_path}"]),
                       quiet=True)
    record = read_attack(r)
    assert record["status"] == "not attacked" and "not sampled" in record["reason"]
    assert r.summary["status"] == "finished"


def test_attack_survives_a_resume_bit_for_bit(tmp_path):
    """Killed before the attacked round, and again after it: the attack record is the one of an
    uninterrupted run."""
    clean = read_attack(attacked(tmp_path / "clean", "attack.round=3"))
    for stop in (1, 3):
        overrides = [*SMALL, "attack=dlg", "attack.round=3", "train.checkpoint_every=1",
                     f"results_root={tmp_path / str(stop)}"]
        with pytest.raises(Interrupted):
            run_experiment(compose_config(overrides), interrupt_after=stop, quiet=True)
        resumed = read_attack(run_experiment(compose_config(overrides), quiet=True))
        for key in ("status", "round", "initial_distance", "final_distance", "final_grad_loss"):
            assert resumed[key] == clean[key], (stop, key)


def test_attack_config_errors_name_the_fix():
    with pytest.raises(ConfigError, match="cannot attack algorithm=l2gd"):
        validate(compose_config(["attack=dlg", "algorithm=l2gd", "participation=p100"]))
    with pytest.raises(ConfigError, match="attack.client=100"):
        validate(compose_config(["attack=dlg", "attack.client=100"]))
    with pytest.raises(ConfigError, match="ef21"):
        validate(compose_config(["attack=dlg", "compressor=topk_ef21"]))
    with pytest.raises(ConfigError, match="attack.label_mode='guess'"):
        validate(compose_config(["attack=dlg", "attack.label_mode=guess"]))


def test_capture_keeps_one_clients_messages_per_round():
    ledger = CaptureLedger(4, capture_client=1, capture_from=1)
    for round0 in range(3):
        for k in (0, 1):
            ledger.record("down", k, "model", torch.full((4,), float(round0)))
            ledger.record("up", k, "delta", torch.full((4,), float(k)))
        ledger.end_round()
    assert ledger.take(0) == {}  # before capture_from
    kept = ledger.take(1)
    assert set(kept) == {("down", "model"), ("up", "delta")} and kept[("down", "model")][0] == 1.0
    assert 1 not in ledger.kept and 2 in ledger.kept
    g, what = observed_gradient(ledger.take(2), lr=0.5, steps=2)
    assert torch.equal(g, torch.full((4,), -1.0)) and "delta" in what  # (x - (x + 1)) / (0.5 * 2)
    with pytest.raises(ConfigError, match="no broadcast model"):
        observed_gradient({("up", "z"): torch.zeros(4)}, lr=1.0, steps=1)
