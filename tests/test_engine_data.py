"""The engine's data-facing parts: natural splits, BatchNorm statistics, per-batch augmentation."""
import pytest
import torch
from torch import nn

from fedrepro.algorithms import Federation
from fedrepro.algorithms.fedavg import FedAvg
from fedrepro.config import Effective, compose_config
from fedrepro.engine.local import SequentialExecutor
from fedrepro.engine.loop import EvalData, RoundLoop, Schedule
from fedrepro.errors import ConfigError
from fedrepro.metrics.ledger import Ledger
from fedrepro.models.flat import FlatModel
from fedrepro.runner import run_experiment


def _bn_loop(rate=1.0):
    """Three clients whose features have different means: their BatchNorm statistics differ."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 3))
    model = FlatModel(module)
    g = torch.Generator().manual_seed(1)
    sizes = [20, 40, 60]
    x = torch.cat([torch.randn(n, 4, generator=g) + 3.0 * k for k, n in enumerate(sizes)])
    y = torch.randint(0, 3, (len(x),), generator=g)
    starts = torch.tensor([0, *sizes]).cumsum(0)
    idx = [torch.arange(int(starts[k]), int(starts[k + 1])) for k in range(3)]
    theta0 = model.flatten_module()
    alg = FedAvg()
    client_sizes = torch.tensor(sizes, dtype=torch.float32)
    alg.setup(Federation(3, model.dim, client_sizes), theta0)
    executor = SequentialExecutor(model, x, y, idx, batch_size=10, weight_decay=0.0, clip_norm=None, seed=0)
    eff = Effective(rounds=2, local_epochs=1, local_steps=3, max_local_steps=None, eval_every=1,
                    max_test_samples=None, max_train_eval_samples=None)
    loop = RoundLoop(model=model, algorithm=alg, executor=executor, ledger=Ledger(model.dim),
                     client_sizes=client_sizes, theta0=theta0, eff=eff,
                     schedule=Schedule(0.05, 1.0, 10, "bernoulli", rate, None, 0), eval_data=EvalData(x, y, x, y))
    return model, executor, loop, client_sizes


def test_batchnorm_statistics_are_the_participants_data_weighted_mean():
    model, executor, loop, sizes = _bn_loop()
    before = model.buffers.clone()
    loop.run_round(0)
    per_client = executor.last_buffers
    assert per_client.shape == (3, model.buffer_dim) and model.buffer_dim == 12  # mean + var of 6
    assert not torch.allclose(per_client[0], per_client[2])  # different data, different statistics
    expected = (sizes / sizes.sum()) @ per_client
    assert torch.allclose(model.buffers, expected) and not torch.allclose(model.buffers, before)
    # the statistics travel with checkpoints
    state = loop.state_dict()
    model.buffers = torch.zeros_like(model.buffers)
    loop.load_state_dict(state)
    assert torch.allclose(model.buffers, expected)


def test_evaluation_uses_the_server_statistics_in_eval_mode():
    model, _, loop, _ = _bn_loop()
    loop.run_round(0)
    w = loop.algorithm.server_model()
    x = torch.randn(5, 4)
    expected = model.module.eval()
    for name, value in zip(model.buffer_names, model.buffers.split(model.buffer_numels)):
        dict(model.module.named_buffers())[name].copy_(value.view_as(dict(model.module.named_buffers())[name]))
    out = torch.func.functional_call(expected, model.unflatten(w), (x,))
    assert torch.allclose(model.logits(w, x), out, atol=1e-6)


def test_augmentation_is_applied_per_batch_and_seeded(monkeypatch):
    calls = []

    def fake_augment(kind, x, g):
        calls.append((kind, torch.randint(0, 10 ** 6, (1,), generator=g).item()))
        return x

    monkeypatch.setattr("fedrepro.engine.local.augment_batch", fake_augment)
    model, _, loop, _ = _bn_loop()
    loop.executor.augment = "cifar"
    loop.run_round(0)
    first = list(calls)
    assert len(first) == 9 and {k for k, _ in first} == {"cifar"}  # 3 clients x 3 steps
    calls.clear()
    model, _, loop, _ = _bn_loop()
    loop.executor.augment = "cifar"
    loop.run_round(0)
    assert calls == first  # the same draws: a resumed round repeats its augmentation exactly


def test_natural_split_uses_the_generators_devices(results):
    cfg = compose_config(["dataset=synthetic_feddyn", "dataset.heterogeneity=type3", "split=natural",
                          "model=logistic", "train.num_clients=20", "profile=smoke", f"results_root={results}",
                          "logger.progress=false"])
    r = run_experiment(cfg, quiet=True)
    assert r.summary["status"] == "finished"
    import json
    part = json.loads((r.folder / "partition.json").read_text())
    from fedrepro.data.loaders import dataset_for
    data = dataset_for(cfg)
    assert part["sizes"] == [len(c) for c in data.natural_clients] and len(set(part["sizes"])) > 1


@pytest.mark.parametrize("overrides, wording", [
    (["dataset=synthetic_feddyn", "train.num_clients=100"], "train.num_clients=20"),
    (["dataset=mnist_5k"], "has no clients of its own"),
])
def test_natural_split_errors_name_the_fix(results, overrides, wording):
    cfg = compose_config([*overrides, "split=natural", "model=logistic", "profile=smoke",
                          f"results_root={results}", "logger.progress=false"])
    with pytest.raises(ConfigError, match=wording):
        run_experiment(cfg, quiet=True)
