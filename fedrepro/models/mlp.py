"""Fully connected networks and logistic regression."""
from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """in -> hidden... -> classes with ReLU (FedDyn's MNIST model: 784-200-200-10)."""

    def __init__(self, in_dim: int, hidden: list[int], num_classes: int):
        super().__init__()
        layers: list[nn.Module] = []
        width = in_dim
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.flatten(1))


def logistic(in_dim: int, num_classes: int) -> nn.Module:
    """Multinomial logistic regression: one linear layer under softmax cross-entropy."""
    return MLP(in_dim, [], num_classes)


def binary_logistic(in_dim: int) -> nn.Module:
    """Binary logistic regression: one logit, trained with the logistic (BCE) loss."""
    return MLP(in_dim, [], 1)
