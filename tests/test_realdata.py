"""Real-data tier: runs when FEDREPRO_DATA_ROOT is set (CI: ../shared/data); fails if the files are missing."""
import os

import pytest

from fedrepro.config import compose_config
from fedrepro.runner import run_experiment

DATA = os.environ.get("FEDREPRO_DATA_ROOT")
pytestmark = pytest.mark.skipif(not DATA, reason="FEDREPRO_DATA_ROOT is not set: real-data tier off")

# Threshold stated in advance: FedAvg, real MNIST, IID, 10 % Bernoulli participation, 10 rounds of
# one local epoch (12 steps of batch 50), lr 0.1. Measured 0.888 (seed 0); asserted > 0.85.
THRESHOLD = 0.85


def test_fedavg_on_real_mnist_clears_the_threshold(tmp_path):
    cfg = compose_config(["dataset=mnist", f"data_root={DATA}", "algorithm=fedavg", "participation=p10",
                          "profile=quick", "profile.max_rounds=10", "profile.min_eval_every=10",
                          f"results_root={tmp_path}", "logger.progress=false"])
    r = run_experiment(cfg, quiet=True)
    assert r.summary["status"] == "finished"
    assert "MNIST" in r.summary["data_source"]
    assert r.summary["final"]["all_test_acc"] > THRESHOLD, r.summary["final"]


def test_emnist_letters_a_to_j():
    import numpy as np

    from fedrepro.data.loaders import load_dataset

    d = load_dataset("emnist_l", DATA, download=False)
    assert d.x_train.shape == (48_000, 784) and d.x_test.shape == (8_000, 784) and d.num_classes == 10
    assert np.array_equal(np.bincount(d.y_train.numpy()), [4_800] * 10)
    assert np.array_equal(np.bincount(d.y_test.numpy()), [800] * 10)
    assert abs(float(d.x_train.mean())) < 1e-4 and abs(float(d.x_train.std()) - 1) < 1e-3  # subset-normalized


def test_shakespeare_smoke_run_on_the_natural_split(tmp_path):
    """The issue's acceptance command, at smoke: 100 roles, the LSTM, FedAvg."""
    cfg = compose_config(["dataset=shakespeare", "split=natural", "model=lstm", "algorithm=fedavg",
                          "profile=smoke", f"data_root={DATA}", f"results_root={tmp_path}", "logger.progress=false"])
    r = run_experiment(cfg, quiet=True)
    assert r.summary["status"] == "finished" and r.summary["dim"] == 133_520
    assert "TFF" in r.summary["data_source"]
