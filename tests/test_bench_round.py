"""The bench's reference loop (experiments/bench_round.py) does fedrepro's work: from the same start,
client data and batches it ends at the same models, with the same local steps and evaluation
volume; FedDyn's server step by hand. No timing is asserted."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from experiments.bench_round import (ReferenceLoop, RoundSetting, feddyn_server_update, fedrepro_eval_samples,
                                     fedrepro_federation, mlp_sample_flops, round_rows,
                                     rounds_markdown)
from fedrepro.data.common import DatasetTensors

# 4 clients of 50 samples, batch 20: 3 batches an epoch, the last one partial; 2 epochs
TINY = RoundSetting(clients=4, participation=0.5, batch=20, feddyn_epochs=2, fedavg_epochs=2, alpha=0.1,
                    hidden=(16,), seed=3)


@pytest.fixture(scope="module")
def data():
    g = torch.Generator().manual_seed(1)
    return DatasetTensors("mnist", torch.randn(200, 20, generator=g), torch.randint(0, 10, (200,), generator=g),
                          torch.randn(60, 20, generator=g), torch.randint(0, 10, (60,), generator=g), 10,
                          source="generated")


def _pair(algorithm, setting, data, rounds, **kw):
    _, parts, fed = fedrepro_federation(algorithm, setting, data, rounds)
    ref = ReferenceLoop(algorithm, setting, data.x_train, data.y_train, data.x_test, data.y_test, parts,
                        fed.algorithm.server_model().clone(), **kw)
    return ref, fed


@pytest.mark.parametrize("algorithm", ["fedavg", "feddyn"])
@pytest.mark.parametrize("clip", [10.0, 0.05])  # 0.05: clipping binds on every step
def test_reference_loop_computes_what_fedrepro_computes(data, algorithm, clip):
    setting = replace(TINY, clip=clip)
    ref, fed = _pair(algorithm, setting, data, 3, eval_models=3)
    w0 = ref.server.clone()
    for t in range(3):
        ref_row, fed_row = ref.run_round(t), fed.loop.run_round(t)
        assert ref_row["clients"] == fed_row["clients"]
        # (a) the same local steps per client (epochs x ceil(n_k / B)) and evaluation volume
        assert ref.round_steps == fed.loop.round_steps
        assert set(ref.round_steps.values()) == {2 * 3}
        assert ref_row["eval_samples"] == 3 * (60 + 200)
        # FedAvg's server model is its selected clients' mean: scored once (a third model for FedDyn)
        assert fedrepro_eval_samples(fed.loop) == (2 if algorithm == "fedavg" else 3) * (60 + 200)
        # the same models, to float32 rounding
        torch.testing.assert_close(ref.server, fed.algorithm.server_model(), atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(ref.client_models, fed.loop.latest, atol=1e-6, rtol=1e-5)
        for label in ("server", "all", "selected"):
            assert ref_row[f"{label}_test_acc"] == pytest.approx(fed_row[f"{label}_test_acc"], abs=1 / 60 + 1e-9)
            assert ref_row[f"{label}_test_loss"] == pytest.approx(fed_row[f"{label}_test_loss"], rel=1e-4)
            assert ref_row[f"{label}_train_loss"] == pytest.approx(fed_row[f"{label}_train_loss"], rel=1e-4)
    assert (ref.server - w0).abs().max() > 1e-3  # it trained


def test_the_papers_two_models_are_evaluated_by_default(data):
    ref, _ = _pair("fedavg", TINY, data, 1)
    row = ref.run_round(0)
    assert row["eval_samples"] == 2 * (60 + 200)
    assert {k for k in row if k.endswith("_test_acc")} == {"server_test_acc", "all_test_acc"}


def test_feddyn_quadratic_in_the_loss_is_the_same_objective_without_clipping(data):
    """The whole alpha/2 ||p - theta||^2 in the loss (instead of its ||p||^2 part in the weight
    decay, as the authors' code) gives the same steps while clipping does not bind."""
    setting = replace(TINY, clip=1e6)
    ref, fed = _pair("feddyn", setting, data, 2, quadratic_in_loss=True)
    for t in range(2):
        ref.run_round(t), fed.loop.run_round(t)
    torch.testing.assert_close(ref.server, fed.algorithm.server_model(), atol=1e-6, rtol=1e-5)


def test_feddyn_server_update_by_hand():
    """Two clients, alpha 0.5: h <- h - alpha/m sum_active (theta_k - theta); theta <- mean - h / alpha."""
    alpha, m = 0.5, 2
    h, server = torch.zeros(2), torch.tensor([1.0, 0.0])
    # round 1: client 0 alone, at [3, 2]: h = -0.25 [2, 2]; theta = [3, 2] + [1, 1]
    h, server = feddyn_server_update(h, server, torch.tensor([[3.0, 2.0]]), m, alpha)
    torch.testing.assert_close(h, torch.tensor([-0.5, -0.5]))
    torch.testing.assert_close(server, torch.tensor([4.0, 3.0]))
    # round 2: both, at [4, 5] and [6, 3]: differences [0, 2] and [2, 0]; h = [-0.5, -0.5] - 0.25 [2, 2]
    h, server = feddyn_server_update(h, server, torch.tensor([[4.0, 5.0], [6.0, 3.0]]), m, alpha)
    torch.testing.assert_close(h, torch.tensor([-1.0, -1.0]))
    torch.testing.assert_close(server, torch.tensor([5.0 + 2.0, 4.0 + 2.0]))


def test_feddyn_client_and_server_state_are_the_papers(data):
    """The reference's grad-states and h after a round: lambda_k = -alpha_k (theta_k - theta_0) for
    the active clients, h = -alpha/m sum_active (theta_k - theta_0) = (alpha_k = alpha here) mean_all lambda_k."""
    ref, _ = _pair("feddyn", TINY, data, 1)
    w0 = ref.server.clone()
    row = ref.run_round(0)
    active = sorted(ref.round_steps)
    assert row["clients"] == len(active) >= 1
    for k in range(TINY.clients):
        expected = -TINY.alpha * (ref.client_models[k] - w0) if k in active else torch.zeros_like(w0)
        torch.testing.assert_close(ref.lam[k], expected)
    torch.testing.assert_close(ref.h, ref.lam.mean(0), atol=1e-7, rtol=1e-5)
    torch.testing.assert_close(ref.server, ref.client_models[active].mean(0) - ref.h / TINY.alpha)


def test_bench_rows_and_table(data):
    before = torch.get_num_threads()
    rows = round_rows(None, 1, algorithms=("fedavg",), threads=(1,), setting=TINY, data=data, rate_seconds=0.1)
    assert torch.get_num_threads() == before
    assert [r["method"] for r in rows] == ["round_reference", "round_fedrepro"]
    ref, ours = rows
    for r in rows:
        assert r["workload"] == "mnist_fedavg_round" and r["threads"] == 1 and r["rounds"] == 1
    assert ref["local_steps_per_round"] == ref["clients_per_round"] * 6
    assert ours["speedup"] == pytest.approx(ref["seconds_per_round"] / ours["seconds_per_round"])
    assert (ref["eval_models"], ours["eval_models"]) == (2, 2)  # FedAvg: the server is the selected mean
    assert ours["eval_samples_per_round"] == 2 * (60 + 200)
    # the products floor: 2 selected clients x 50 samples x 2 epochs trained, 520 samples evaluated
    train_flops, eval_flops = mlp_sample_flops(20, TINY.hidden, 10)
    assert eval_flops == 2 * (20 * 16 + 16 * 10) and train_flops > 2 * eval_flops
    assert ours["products_seconds"] * ours["threads_matmul_gflops"] * 1e9 == pytest.approx(
        ref["clients_per_round"] * 50 * 2 * train_flops + 520 * eval_flops)
    assert ours["attainable_speedup"] == pytest.approx(ref["seconds_per_round"] / ours["products_seconds"])
    table = rounds_markdown(rows, 1)
    assert "| fedavg" in table and "reference s/round" in table


def test_cost_times_each_group_of_a_target_s_runs_and_says_why_one_is_refused(tmp_path, monkeypatch):
    """experiments/cost.py: one row per (dataset, model, clients, participation) group of the runs a
    target plans, hours = seconds a round x rounds at the profile x runs; a run the machine refuses
    is a row with the reason, not a crash (speed is not asserted)."""
    import pandas as pd

    from experiments import cost
    from fedrepro.errors import ConfigError

    assert cost.main(["feddyn-table6", "--profile", "smoke", "--rounds", "1", "--out", str(tmp_path)]) == 0
    frame = pd.read_csv(tmp_path / "cost.csv")
    assert len(frame) == 1 and frame.runs[0] == 16 and frame.rounds_a_run[0] == 3
    assert frame.hours_all_runs[0] == pytest.approx(frame.seconds_per_round[0] * 3 * 16 / 3600)

    def refuse(*args):
        raise ConfigError("needs 9 GiB of client state; 8 GiB is free")
    monkeypatch.setattr(cost, "time_run", refuse)
    assert cost.main(["feddyn-table6", "--profile", "smoke", "--out", str(tmp_path)]) == 0
    assert pd.read_csv(tmp_path / "cost.csv").refused[0] == "needs 9 GiB of client state; 8 GiB is free"


def test_cost_groups_runs_by_their_local_work_too():
    """An L2GD round (one local step or one averaging) and a FedAvg round of the same model differ
    ninefold (ResNet-56 here), local epochs fivefold: each is timed in a group of its own."""
    from experiments.cost import group_of
    from fedrepro.config import compose_config

    l2gd, fedavg, longer = (group_of(compose_config(o)) for o in
                            (["algorithm=l2gd"], ["algorithm=fedavg"], ["algorithm=fedavg", "train.local_epochs=50"]))
    assert l2gd[-1] == "1 step" and fedavg[-1] == "10 epochs" and longer[-1] == "50 epochs"
    assert l2gd[:-1] == fedavg[:-1] == longer[:-1]


def test_bench_device_names_the_choices_on_bad_input():
    """--device of `make bench` and experiments.cost: a clear error, before anything is timed."""
    from experiments.bench_round import device_name
    from fedrepro.errors import ConfigError

    assert device_name("cpu")
    with pytest.raises(ConfigError, match="choose cpu, cuda or cuda:N"):
        device_name("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="sees no CUDA GPU here"):
            device_name("cuda")
