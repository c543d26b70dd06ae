"""A model seen as a function of one flat float vector.

Every algorithm does arithmetic on (d,) and (clients, d) tensors; the module is only used
through `torch.func.functional_call` with views into the flat vector, so the gradient of
the loss with respect to the flat vector comes out flat as well.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from fedrepro.errors import ConfigError
from fedrepro.models.mlp import MLP, binary_logistic, logistic


class FlatModel:
    LOSSES = ("cross_entropy", "logistic", "squared")

    def __init__(self, module: nn.Module, loss: str = "cross_entropy"):
        if loss not in self.LOSSES:
            raise ValueError(f"loss={loss!r}; choose one of {self.LOSSES}")
        self.module = module
        # cross_entropy: softmax over classes; logistic: one logit, labels 0/1;
        # squared: least squares 0.5 (f(x) - y)^2 on one output (convex test problems)
        self.loss_kind = loss
        params = dict(module.named_parameters())
        self.names = list(params)
        self.shapes = [p.shape for p in params.values()]
        self.numels = [p.numel() for p in params.values()]
        self.dim = sum(self.numels)
        for p in module.parameters():
            p.requires_grad_(False)  # gradients flow to the flat vector only

    def flatten_module(self) -> torch.Tensor:
        """The module's current (initialized) parameters as one vector."""
        return torch.cat([p.detach().reshape(-1) for p in self.module.parameters()]).clone()

    def unflatten(self, w: torch.Tensor) -> dict[str, torch.Tensor]:
        return {n: v.view(s) for n, v, s in zip(self.names, w.split(self.numels), self.shapes)}

    def logits(self, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.module, self.unflatten(w), (x,))

    def loss(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean loss over the batch (FedDyn's code: sum-reduced loss / batch size)."""
        return self.output_loss(self.logits(w, x), y)

    def output_loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The batch-mean loss of the module's outputs `out` (also used by the centralized baseline)."""
        if self.loss_kind == "logistic":
            return F.binary_cross_entropy_with_logits(out.squeeze(1), y.float())
        if self.loss_kind == "squared":
            return 0.5 * (out.squeeze(1) - y).pow(2).mean()
        return F.cross_entropy(out, y)

    def loss_and_correct(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor):
        """(summed loss, number correct) over a batch, for evaluation."""
        out = self.logits(w, x)
        if self.loss_kind == "logistic":
            logit = out.squeeze(1)
            loss = F.binary_cross_entropy_with_logits(logit, y.float(), reduction="sum")
            correct = ((logit > 0).long() == y).sum()
        elif self.loss_kind == "squared":
            loss = 0.5 * (out.squeeze(1) - y).pow(2).sum()
            correct = torch.zeros((), dtype=torch.long)  # accuracy is meaningless for regression
        else:
            loss = F.cross_entropy(out, y, reduction="sum")
            correct = (out.argmax(1) == y).sum()
        return loss, correct


def build_model(cfg, in_shape: tuple[int, ...], num_classes: int, seed: int) -> tuple[FlatModel, torch.Tensor]:
    """The model named by `cfg` (a ModelConfig) and its seeded initial flat vector."""
    in_dim = math.prod(in_shape)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        if cfg.name == "mlp":
            module, loss = MLP(in_dim, list(cfg.hidden), num_classes), "cross_entropy"
        elif cfg.name == "logistic":
            module, loss = logistic(in_dim, num_classes), "cross_entropy"
        elif cfg.name == "binary_logistic":
            if num_classes != 2:
                raise ConfigError(f"model=binary_logistic needs a 2-class dataset; this one has {num_classes} classes")
            module, loss = binary_logistic(in_dim), "logistic"
        else:
            raise ConfigError(f"model.name={cfg.name!r} is unknown; choose one of: mlp, logistic, binary_logistic")
        flat = FlatModel(module, loss=loss)
        return flat, flat.flatten_module()
