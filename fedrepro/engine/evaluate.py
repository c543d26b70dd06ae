"""Test accuracy and loss of flat parameter vectors; personalized evaluation (L2GD).

`evaluate_many` scores several models on the same samples with exactly `evaluate`'s numbers
for each: for MLPs on the CPU, each batch's first-layer products of all models are one matrix
product over their weights side by side, so the batch is read and packed once instead of once
per model (the first layer is ~80 % of an MNIST MLP's evaluation). For these widths MKL sums
each output column in the same order whatever the product's width, so every model's outputs
are those of its own forward bit for bit; not for narrow outputs (logistic regression's 10 or
1 columns, which are scored one at a time), hence a check on the first batch of each shape in
each process against each model's own forward, and one model at a time wherever it fails.
Under a mixed train.precision (the round loop evaluates inside autocast, engine/precision.py) the
models are scored one at a time: the check holds for float32 products only.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
import torch.nn.functional as F

from fedrepro.algorithms.base import Personalized
from fedrepro.errors import ConfigError
from fedrepro.models.flat import FlatModel
from fedrepro.seeding import generator


@torch.no_grad()
def evaluate(model: FlatModel, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
             batch_size: Optional[int] = None) -> tuple[float, float]:
    """(mean loss, accuracy) of the model `w` on (x, y), in batches of `batch_size` (default:
    the model's, FlatModel.eval_batch_on)."""
    if batch_size is None:
        batch_size = model.eval_batch_on(x.device)
    if batch_size < 1:
        raise ValueError(f"evaluate: batch_size={batch_size}; it must be a positive number of samples")
    loss_sum, correct = 0.0, 0
    for start in range(0, len(y), batch_size):
        loss, right = model.loss_and_correct(w, x[start:start + batch_size], y[start:start + batch_size])
        loss_sum += float(loss)
        correct += int(right)
    n = max(len(y), 1)
    return loss_sum / n, correct / n


@torch.inference_mode()
def evaluate_many(model: FlatModel, ws: Sequence[torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                  batch_size: Optional[int] = None) -> list[tuple[float, float]]:
    """[evaluate(model, w, x, y, batch_size) for w in ws], the same numbers bit for bit, with the
    first-layer products of the linear stacks shared (see the module doc)."""
    if batch_size is None:
        batch_size = model.eval_batch_on(x.device)
    layers = _stackable_layers(model, ws, x)
    # narrow first layers (logistic regression) gain nothing, and MKL sums them differently by width
    if layers is None or len(ws) < 2 or layers[0][3] < 32:
        return [evaluate(model, w, x, y, batch_size) for w in ws]
    if batch_size < 1:
        raise ValueError(f"evaluate: batch_size={batch_size}; it must be a positive number of samples")
    k = len(ws)
    wo, bo, fan_in, fan_out = layers[0]
    first_w = torch.stack([w[wo:bo] for w in ws]).view(k * fan_out, fan_in)  # the models side by side
    first_b = torch.stack([w[bo:bo + fan_out] for w in ws]).view(-1)
    loss_sum, correct = [0.0] * k, [0] * k
    for start in range(0, len(y), batch_size):
        xb, yb = x[start:start + batch_size], y[start:start + batch_size]
        h = F.linear(xb.flatten(1), first_w, first_b)  # (batch, k * fan_out): model j in column block j
        if len(layers) > 1:
            h.relu_()
        outs = []
        for j, w in enumerate(ws):
            # contiguous, as F.linear gives it alone: MKL sums narrow layers differently on a strided input
            out = h[:, j * fan_out:(j + 1) * fan_out].contiguous()
            for i in range(1, len(layers)):
                lo, hi, f_in, f_out = layers[i]
                out = F.linear(out, w[lo:hi].view(f_out, f_in), w[hi:hi + f_out])
                if i < len(layers) - 1:
                    out.relu_()
            outs.append(out)
        if not _stacking_exact(model, ws, xb, outs):
            return [evaluate(model, w, x, y, batch_size) for w in ws]
        for j, out in enumerate(outs):
            loss, right = model.output_loss_and_correct(out, yb)
            loss_sum[j] += float(loss)
            correct[j] += int(right)
    n = max(len(y), 1)
    return [(loss_sum[j] / n, correct[j] / n) for j in range(k)]


def _stackable_layers(model: FlatModel, ws, x: torch.Tensor):
    """The Linear layers of a ReLU stack evaluated on the CPU in float32 (not under autocast), else None."""
    from fedrepro.engine.batched import linear_stack

    if x.device.type != "cpu" or x.dtype != torch.float32 or any(w.dtype != torch.float32 for w in ws):
        return None
    if torch.is_autocast_enabled(x.device.type):
        return None
    try:
        return linear_stack(model)
    except ConfigError:
        return None


_EXACT: dict[tuple, bool] = {}  # (batch rows, models, sizes, threads) -> stacked outputs == each alone


def _stacking_exact(model: FlatModel, ws, xb: torch.Tensor, outs: list[torch.Tensor]) -> bool:
    """Whether the stacked forward gave each model's outputs exactly as its own forward does, checked
    on the first batch of each shape this process sees (one extra forward per shape)."""
    key = (len(xb), len(ws), tuple(model.numels), torch.get_num_threads())
    if key not in _EXACT:
        _EXACT[key] = all(torch.equal(out, model.logits(w, xb)) for out, w in zip(outs, ws))
    return _EXACT[key]


@torch.no_grad()
def personalized_metrics(model: FlatModel, p: Personalized, x: torch.Tensor, y: torch.Tensor,
                         client_indices: list[torch.Tensor], x_test: torch.Tensor, y_test: torch.Tensor, *,
                         weight_decay: float = 0.0, max_train_samples: Optional[int] = None,
                         seed: int = 0) -> dict[str, float]:
    """Every client's model on its own data (docs/l2gd.md, "Metrics").

    personal_loss       f(x) = (1/m) sum_i [c_i L_i(x_i) + weight_decay/2 ||x_i||^2], L_i the mean loss
                        over client i's training samples (the function whose gradient its local step
                        follows; with `max_train_samples` a seeded subset of ceil(cap n_i / N) of them)
    personal_train_acc  mean over clients of x_i's accuracy on its training samples
    personal_test_acc   mean over clients of x_i's accuracy on its own test distribution: the test set
    personal_test_loss  reweighted to client i's training label proportions, sum_c pi_i(c) acc_i(c) over
                        the classes the test set holds (no dataset here has a per-client test split);
                        regression: the whole test set, and no accuracies
    """
    m = len(client_indices)
    total = sum(len(i) for i in client_indices)
    regression = model.loss_kind == "squared"
    if not regression:
        classes = torch.unique(y_test)
        by_class = [torch.nonzero(y_test == c).flatten() for c in classes]
    f = train_acc = test_acc = test_loss = 0.0
    for i, idx in enumerate(client_indices):
        w = p.models[i]
        rows = idx
        if max_train_samples is not None:
            keep = min(len(idx), math.ceil(max_train_samples * len(idx) / total))
            if keep < len(idx):
                pick = torch.randperm(len(idx), generator=generator(seed, "personal-train-subset", i))[:keep]
                rows = idx[pick.to(idx.device)]
        loss_i, acc_i = evaluate(model, w, x[rows], y[rows])
        c_i = 1.0 if p.loss_weights is None else float(p.loss_weights[i])
        f += c_i * loss_i + (0.5 * weight_decay * float(w.double().pow(2).sum()) if weight_decay else 0.0)
        train_acc += acc_i
        if regression:
            test_loss += evaluate(model, w, x_test, y_test)[0]
            continue
        counts = torch.stack([(y[idx] == c).sum() for c in classes]).double()
        if counts.sum() == 0:  # none of its classes in the test set: the whole test set
            counts = torch.tensor([float(len(b)) for b in by_class], dtype=torch.float64)
        share = counts / counts.sum()
        for s, rows_c in zip(share.tolist(), by_class):
            if s > 0:
                loss_c, acc_c = evaluate(model, w, x_test[rows_c], y_test[rows_c])
                test_loss += s * loss_c
                test_acc += s * acc_c
    row = {"personal_loss": f / m, "personal_test_loss": test_loss / m}
    if not regression:
        row.update({"personal_train_acc": train_acc / m, "personal_test_acc": test_acc / m})
    return row
