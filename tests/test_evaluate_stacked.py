"""Stacked evaluation (fedrepro/engine/evaluate.py, `evaluate_many`): several models scored
together give exactly the numbers of scoring each alone with `evaluate`, bit for bit."""
import pytest
import torch

from conftest import torch_threads
from fedrepro.engine import evaluate as ev
from fedrepro.engine.evaluate import evaluate, evaluate_many
from fedrepro.models.cnn import CifarCNN
from fedrepro.models.flat import FlatModel
from fedrepro.models.mlp import MLP


def models_and_data(hidden, classes, loss, k=3, n=2_345, features=784, seed=0):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = FlatModel(MLP(features, hidden, classes), loss=loss)
    w0 = model.flatten_module()
    ws = [w0 + 0.05 * torch.randn(model.dim, generator=g) for _ in range(k)]
    # MNIST-like inputs: mostly zeros, the rest in (0, 1]
    x = torch.rand(n, 1, 28, 28, generator=g) * (torch.rand(n, 1, 28, 28, generator=g) < 0.2)
    x = x.reshape(n, 1, 28, 28) if features == 784 else torch.randn(n, features, generator=g)
    y = torch.randint(0, max(classes, 2), (n,), generator=g)
    if loss == "squared":
        y = torch.randn(n, generator=g)
    return model, ws, x, y


@pytest.mark.parametrize("hidden,classes,loss", [([200, 200], 10, "cross_entropy"), ([], 10, "cross_entropy"),
                                                 ([], 1, "logistic"), ([32], 1, "squared")])
@pytest.mark.parametrize("batch", [10_000, 1_000, 7])  # one batch; batches with a partial last one
@pytest.mark.parametrize("threads", [1, 2])
def test_stacked_evaluation_is_each_model_alone_bit_for_bit(hidden, classes, loss, batch, threads):
    model, ws, x, y = models_and_data(hidden, classes, loss, n=2_345 if batch != 7 else 60)
    with torch_threads(threads):
        alone = [evaluate(model, w, x, y, batch_size=batch) for w in ws]
        together = evaluate_many(model, ws, x, y, batch_size=batch)
    assert together == alone  # floats compared exactly


def test_the_stacked_product_is_used_and_checked(monkeypatch):
    """The shared first-layer product runs (no silent fall-back here, at one thread), and where it
    would differ from a model alone the models are scored one at a time. At two threads some CPUs
    split the wider stacked product differently from the single one (one machine's did, on this
    shape; another's did not): the check then falls back, which the second half tests, at the
    first half's thread count, so that it reads the check made there on any CPU."""
    model, ws, x, y = models_and_data([50], 10, "cross_entropy", n=500)
    with torch_threads(1):
        alone = [evaluate(model, w, x, y) for w in ws]
        ev._EXACT.clear()
        assert evaluate_many(model, ws, x, y) == alone
    assert ev._EXACT and all(ev._EXACT.values())
    calls = []
    monkeypatch.setattr(ev, "evaluate", lambda *a, **k: calls.append(1) or alone[len(calls) - 1])
    monkeypatch.setattr(ev, "_EXACT", {key: False for key in ev._EXACT})
    with torch_threads(1):
        assert ev.evaluate_many(model, ws, x, y) == alone
    assert len(calls) == len(ws)


def test_models_that_are_not_linear_stacks_are_scored_one_at_a_time():
    torch.manual_seed(0)
    model = FlatModel(CifarCNN(10))
    w0 = model.flatten_module()
    ws = [w0, w0 * 0.9]
    x, y = torch.randn(20, 3, 32, 32), torch.randint(0, 10, (20,))
    assert evaluate_many(model, ws, x, y) == [evaluate(model, w, x, y) for w in ws]


def test_round_loop_scores_distinct_models_once(monkeypatch):
    """The loop's evaluation row is the one of evaluating each candidate alone; equal candidates
    are scored once (the stacked call sees only distinct models)."""
    from fedrepro.engine import loop

    model, ws, x, y = models_and_data([16], 10, "cross_entropy", k=2, n=300)
    seen = []
    original = loop.evaluate_many

    def spy(m, models, xs, ys):
        seen.append(len(models))
        return original(m, models, xs, ys)

    monkeypatch.setattr(loop, "evaluate_many", spy)

    class Alg:
        def server_model(self):
            return ws[0]

        def client_weights(self, clients):
            return torch.full((len(clients),), 1.0 / len(clients))

        def personalized(self):
            return None

        def server_is_selected_mean(self):
            return False

    rl = loop.RoundLoop.__new__(loop.RoundLoop)
    rl.uploads_altered = False
    rl.algorithm, rl.model, rl.num_clients = Alg(), model, 2
    rl.latest = torch.stack([ws[1], ws[1]])
    rl.eval_data = loop.EvalData(x[:100], y[:100], x[100:], y[100:])
    row = rl.evaluate(1, torch.tensor([0, 1]), torch.stack([ws[1], ws[1]]))
    assert seen == [2, 2]  # server and all; "selected" equals "all"
    for label, w in (("server", ws[0]), ("all", ws[1]), ("selected", ws[1])):
        test_loss, test_acc = evaluate(model, w, x[:100], y[:100])
        assert row[f"{label}_test_acc"] == test_acc and row[f"{label}_test_loss"] == test_loss
        assert row[f"{label}_train_loss"] == evaluate(model, w, x[100:], y[100:])[0]
