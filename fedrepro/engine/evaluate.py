"""Test accuracy and loss of flat parameter vectors."""
from __future__ import annotations

import torch

from fedrepro.models.flat import FlatModel


@torch.no_grad()
def evaluate(model: FlatModel, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
             batch_size: int = 10_000) -> tuple[float, float]:
    """(mean loss, accuracy) of the model `w` on (x, y)."""
    loss_sum, correct = 0.0, 0
    for start in range(0, len(y), batch_size):
        loss, right = model.loss_and_correct(w, x[start:start + batch_size], y[start:start + batch_size])
        loss_sum += float(loss)
        correct += int(right)
    n = max(len(y), 1)
    return loss_sum / n, correct / n
