"""Heterogeneous convex test problems with a closed-form global optimum, run through the real engine."""
from __future__ import annotations

import torch
from torch import nn

from fedrepro.algorithms import Federation
from fedrepro.config import Effective
from fedrepro.engine.local import SequentialExecutor
from fedrepro.engine.loop import EvalData, RoundLoop, Schedule
from fedrepro.metrics.ledger import Ledger
from fedrepro.models.flat import FlatModel


def least_squares_problem(num_clients=10, n=40, d=5, seed=0):
    """Clients with different feature scales (so different Hessians) and different optima.

    Returns x, y, client index list and the optimum of (1/m) sum_k mean_i 0.5 (x_ki.w - y_ki)^2."""
    g = torch.Generator().manual_seed(seed)
    xs, ys = [], []
    for k in range(num_clients):
        scale = torch.linspace(0.3, 2.0, d)[torch.randperm(d, generator=g)]
        x = torch.randn(n, d, generator=g, dtype=torch.float64) * scale
        w_k = 3.0 * torch.randn(d, generator=g, dtype=torch.float64)  # each client's own optimum
        xs.append(x)
        ys.append(x @ w_k + 0.1 * torch.randn(n, generator=g, dtype=torch.float64))
    hessian = sum(x.T @ x / n for x in xs) / num_clients
    rhs = sum(x.T @ y / n for x, y in zip(xs, ys)) / num_clients
    optimum = torch.linalg.solve(hessian, rhs)
    idx = [torch.arange(k * n, (k + 1) * n) for k in range(num_clients)]
    return torch.cat(xs), torch.cat(ys), idx, optimum


def run_convex(algorithm, x, y, idx, *, rounds, local_steps, lr, batch_size=None, rate=1.0, seed=0,
               trace=None, sampling="bernoulli"):
    """Run `algorithm` through RoundLoop on the problem; returns the final server model.

    `sampling`: "bernoulli" (each client joins with probability `rate`) or "fixed" (exactly
    round(rate * N) clients a round). `trace`, a list, receives the server model after every round."""
    d = x.shape[1]
    model = FlatModel(nn.Linear(d, 1, bias=False).double(), loss="squared")
    theta0 = torch.zeros(d, dtype=torch.float64)
    sizes = torch.tensor([float(len(i)) for i in idx])
    algorithm.setup(Federation(len(idx), d, sizes), theta0)
    batch = batch_size or len(idx[0])
    executor = SequentialExecutor(model, x, y, idx, batch_size=batch, weight_decay=0.0,
                                  clip_norm=None, seed=seed)
    eff = Effective(rounds=rounds, local_epochs=1, local_steps=local_steps, max_local_steps=None,
                    eval_every=rounds, max_test_samples=None, max_train_eval_samples=None)
    loop = RoundLoop(model=model, algorithm=algorithm, executor=executor, ledger=Ledger(d),
                     client_sizes=sizes, theta0=theta0, eff=eff,
                     schedule=Schedule(lr, 1.0, batch, sampling, rate, None, seed),
                     eval_data=EvalData(x, y, x, y))
    def on_row(row):
        if trace is not None:
            trace.append(algorithm.server_model().clone())

    loop.run(0, on_row=on_row, on_checkpoint=lambda r: None, checkpoint_every=10 ** 9)
    return algorithm.server_model()
