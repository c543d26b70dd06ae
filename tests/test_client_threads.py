"""Clients trained at once on several threads (train.client_threads, engine/local.py): each
client's numbers are those of the one-thread sequential executor, bit for bit. Speed is
measured by `make bench`, not here."""
import pytest
import torch
from torch import nn

from conftest import torch_threads
from fedrepro.algorithms.base import LocalObjective, LocalRule
from fedrepro.config import compose_config, run_key, validate
from fedrepro.engine.local import ClientJob, SequentialExecutor
from fedrepro.errors import ConfigError
from fedrepro.models.cnn import CifarCNN
from fedrepro.models.flat import FlatModel


def small_bn_net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))


def image_executor(model: FlatModel, client_threads: int, n_clients=5, n=13):
    g = torch.Generator().manual_seed(0)
    shape = (3, 32, 32) if isinstance(model.module, CifarCNN) else (3, 8, 8)
    x = torch.randn(n_clients * n, *shape, generator=g)
    y = torch.randint(0, 3, (n_clients * n,), generator=g)
    idx = [torch.arange(k * n, (k + 1) * n) for k in range(n_clients)]
    return SequentialExecutor(model, x, y, idx, batch_size=4, weight_decay=1e-3, clip_norm=0.5, seed=3,
                              client_threads=client_threads)


def jobs_for(w0: torch.Tensor, steps=(5, 1, 7, 0, 4)):
    """Unequal step counts (a client with none), every penalty term, one client starting elsewhere."""
    g = torch.Generator().manual_seed(1)
    return [ClientJob(k, LocalObjective(anchor=w0, prox_mu=0.2, l1=0.01, linear=0.01 * torch.randn(len(w0), generator=g),
                                        start=w0 + 0.01 * torch.randn(len(w0), generator=g) if k == 2 else None), s)
            for k, s in enumerate(steps)]


@pytest.mark.parametrize("module", [lambda: CifarCNN(3), small_bn_net], ids=["cifar_cnn", "batchnorm"])
def test_clients_on_threads_match_one_thread_bit_for_bit(module):
    """Two rounds, so the second runs on the threads the first started, with the server's
    BatchNorm statistics changed in between; the CNN runs in channels-last as in a run."""
    torch.manual_seed(0)
    reference_model, threaded_model = FlatModel(module()), FlatModel(module())
    w0 = reference_model.flatten_module()
    threaded_model.buffers = reference_model.buffers.clone()
    reference, threaded = image_executor(reference_model, 1), image_executor(threaded_model, 3)
    assert threaded.threads_for(jobs_for(w0)) == 3
    for round in range(2):
        with torch_threads(1):
            a, la = reference.run(jobs_for(w0), 0.05, round)
        with torch_threads(2):
            b, lb = threaded.run(jobs_for(w0), 0.05, round)
            assert torch.get_num_threads() == 2  # restored after the round
        assert torch.equal(a, b) and torch.equal(la, lb)
        if reference_model.buffer_dim:
            assert torch.equal(reference.last_buffers, threaded.last_buffers)
            reference_model.buffers = reference.last_buffers.mean(0)
            threaded_model.buffers = threaded.last_buffers.mean(0)
        w0 = a.mean(0)


class _NoRule(LocalRule):
    def direction(self, step, block, w, g, grad_at):
        return g


def test_one_client_at_a_time_where_threads_would_change_the_numbers():
    """Dropout draws from torch's global generator and a LocalRule keeps state: one at a time;
    so is a round of one client, and a model off the CPU is never threaded."""
    torch.manual_seed(0)
    plain = FlatModel(CifarCNN(3))
    w0 = plain.flatten_module()
    ex = image_executor(plain, 4)
    assert ex.threads_for(jobs_for(w0)) == 4
    assert ex.threads_for(jobs_for(w0)[:1]) == 1
    ruled = jobs_for(w0)
    ruled[3].objective.rule = _NoRule()
    assert ex.threads_for(ruled) == 1
    dropout = FlatModel(nn.Sequential(nn.Flatten(), nn.Dropout(0.5), nn.Linear(3 * 8 * 8, 3)))
    assert image_executor(dropout, 4).threads_for(jobs_for(dropout.flatten_module())) == 1
    assert not FlatModel(nn.Sequential(nn.Flatten(), nn.Dropout(0.0), nn.Linear(3 * 8 * 8, 3))).draws_random
    assert FlatModel(nn.LSTM(4, 4, num_layers=2, dropout=0.1)).draws_random
    assert not FlatModel(nn.LSTM(4, 4, num_layers=2)).draws_random


def test_client_threads_is_checked_and_not_in_the_run_key():
    base = compose_config(["profile=smoke"])
    assert run_key(compose_config(["profile=smoke", "train.client_threads=2"])) == run_key(base)
    with pytest.raises(ConfigError, match="client_threads"):
        validate(compose_config(["profile=smoke", "train.client_threads=0"]))
    with pytest.raises(ConfigError, match="client_threads=0"):
        image_executor(FlatModel(CifarCNN(3)), 0)


def test_a_client_error_on_a_thread_is_raised_and_the_thread_count_restored():
    torch.manual_seed(0)
    model = FlatModel(CifarCNN(3))
    w0 = model.flatten_module()
    jobs = jobs_for(w0)
    jobs[2].objective.linear = torch.zeros(7)  # a penalty of the wrong size
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError, match="size"):
        image_executor(model, 2).run(jobs, 0.05, 0)
    assert torch.get_num_threads() == before
