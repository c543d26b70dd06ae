"""The batched client executor: every selected client's local steps advanced together.

For the models where that wins on a CPU (MLPs and logistic regression: a stack of Linear
layers with ReLU between them, no BatchNorm, no augmentation) one local step of all S clients
is a handful of batched matrix products over the clients' stacked flat parameters (S, d):
forward and backward are written out (ReLU MLP under cross-entropy, the logistic or the squared
loss), so a step costs the matmuls plus a few elementwise passes, with no autograd graph and
no host-device synchronization (the round's batch indices go to the device once; the losses
come back once per round).

The contract is the sequential executor's (engine/local.py), step for step:
- the same batches: each client's schedule comes from the same per-(round, client) generator
  and the same permutation per epoch (ceil(n / B) batches, the last one partial); clients with
  shorter batches carry zero-weight padding rows, clients with fewer steps stop moving
  (zero step size) after their last step;
- the same step: mean batch loss gradient, + the local objective's penalties (prox_mu,
  l1 sign, linear term), clipping of each client's global gradient norm (clip_grad_norm_'s
  rule), + (weight_decay + extra_decay) w, then w -= lr g.
Jobs whose objective has a `LocalRule` or a per-step `prox` (LoSAC's family) run through the
sequential path of the same executor. The results agree with the sequential executor to
float32 rounding (tests/test_executors.py states the tolerance).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from fedrepro.engine.fused import sgd_step
from fedrepro.engine.local import ClientJob, SequentialExecutor, schedule_rows
from fedrepro.errors import ConfigError
from fedrepro.models.flat import FlatModel
from fedrepro.seeding import generator


def linear_stack(model: FlatModel) -> list[tuple[int, int, int, int]]:
    """(weight offset, bias offset, in, out) of each Linear layer of a ReLU MLP, in order; a
    ConfigError for any other module (the batched executor's forward is written for these)."""
    linears, others = [], []
    for m in model.module.modules():
        if isinstance(m, nn.Linear):
            linears.append(m)
        elif not isinstance(m, (nn.ReLU, nn.Sequential)) and len(list(m.children())) == 0:
            others.append(type(m).__name__)
    expected = [n for i in range(len(linears)) for n in (f"net.{2 * i}.weight", f"net.{2 * i}.bias")]
    if others or model.names != expected or model.buffer_dim:
        raise ConfigError(f"the batched executor trains ReLU MLPs and logistic regression (models "
                          f"mlp, logistic, binary_logistic); this model has {others or model.names}: "
                          f"use train.executor=sequential")
    offsets = [0]
    for n in model.numels:
        offsets.append(offsets[-1] + n)
    return [(offsets[2 * i], offsets[2 * i + 1], m.in_features, m.out_features) for i, m in enumerate(linears)]


class BatchedExecutor(SequentialExecutor):
    """All selected clients' local SGD steps as batched matrix products (see the module doc)."""

    def __init__(self, model: FlatModel, x: torch.Tensor, y: torch.Tensor,
                 client_indices: list[torch.Tensor], *, batch_size: int, weight_decay: float,
                 clip_norm: float | None, seed: int, augment: str | None = None):
        if augment:
            raise ConfigError(f"the batched executor does not augment batches ({augment!r}): "
                              "use train.executor=sequential")
        super().__init__(model, x, y, client_indices, batch_size=batch_size, weight_decay=weight_decay,
                         clip_norm=clip_norm, seed=seed, augment=augment)
        self.layers = linear_stack(model)
        self.features = x.reshape(len(x), -1)
        self.loss_kind = model.loss_kind

    def run(self, jobs: list[ClientJob], lr: float, round: int):
        anchor = jobs[0].objective.anchor
        models = torch.empty(len(jobs), anchor.numel(), dtype=anchor.dtype, device=anchor.device)
        losses = torch.empty(len(jobs), dtype=torch.float64)
        plain = [i for i, j in enumerate(jobs) if j.objective.rule is None and j.objective.prox is None]
        for i in sorted(set(range(len(jobs))) - set(plain)):  # LoSAC's family: step by step
            models[i], losses[i] = self.train_client(jobs[i], lr, round)
        if len(plain) == len(jobs):
            models, loss = self.train_together(jobs, lr, round)
            losses = loss.to(torch.float64).cpu()
        elif plain:
            w, loss = self.train_together([jobs[i] for i in plain], lr, round)
            models[plain], losses[plain] = w, loss.to(torch.float64).cpu()
        self.last_buffers = None
        return models, losses

    def train_together(self, jobs: list[ClientJob], lr: float, round: int):
        """((S, d) models, (S,) mean losses) of S jobs without rules, trained side by side."""
        s, dev = len(jobs), jobs[0].objective.anchor.device
        steps = torch.tensor([j.steps for j in jobs])
        horizon = int(steps.max())
        rows = torch.full((s, horizon, self.batch_size), -1, dtype=torch.long)
        for i, job in enumerate(jobs):
            g = generator(self.seed, "batches", round, job.client, device="cpu")
            rows[i, :job.steps] = schedule_rows(self.client_indices[job.client].cpu(), self.batch_size,
                                                job.steps, g)
        rows = rows.to(dev)
        valid = rows >= 0
        weight = valid / valid.sum(2, keepdim=True).clamp(min=1)  # (S, T, B): 1 / |batch| on real rows
        rows = rows.clamp(min=0)
        moving = (torch.arange(horizon, device=dev)[None, :] < steps.to(dev)[:, None])  # (S, T)

        objs = [j.objective for j in jobs]
        w = torch.stack([(o.anchor if o.start is None else o.start) for o in objs])
        linear = torch.stack([o.linear for o in objs]) if any(o.linear is not None for o in objs) else None
        if linear is not None and any(o.linear is None for o in objs):
            raise ConfigError("jobs of one round mix local objectives with and without a linear term")
        per_client = lambda values: torch.tensor(values, dtype=w.dtype, device=dev)  # noqa: E731
        mu, l1 = per_client([o.prox_mu for o in objs]), per_client([o.l1 for o in objs])
        decay = per_client([self.weight_decay + o.extra_decay for o in objs])
        anchors = torch.stack([o.anchor for o in objs]) if bool(mu.any() or l1.any()) else None
        coefs = (lr * moving).to(w.dtype).T.contiguous()  # (T, S): 0 for clients past their last step
        total = torch.zeros(s, dtype=w.dtype, device=dev)
        grad = torch.empty_like(w)
        for t in range(horizon):
            total += self._data_gradient(w, grad, rows[:, t], weight[:, t])
            sgd_step(w, grad, coefs[t], decay=decay, mu=mu, l1=l1, anchors=anchors, linear=linear,
                     clip=self.clip_norm)
        mean_loss = total / steps.to(dev, w.dtype).clamp(min=1)
        mean_loss = torch.where(torch.isfinite(mean_loss), mean_loss, torch.full_like(mean_loss, math.nan))
        return w, mean_loss

    def _data_gradient(self, w: torch.Tensor, grad: torch.Tensor, rows: torch.Tensor,
                       weight: torch.Tensor) -> torch.Tensor:
        """Writes every client's mean batch-loss gradient at w (S, d) into `grad`; returns the
        (S,) batch losses of the clients (0 for clients past their last step's rows)."""
        s, b = rows.shape
        x = self.features.index_select(0, rows.reshape(-1)).view(s, b, -1)
        y = self.y.index_select(0, rows.reshape(-1)).view(s, b)
        hs, last = [x], len(self.layers) - 1
        for i, (wo, bo, fan_in, fan_out) in enumerate(self.layers):
            weight_i = w[:, wo:bo].view(s, fan_out, fan_in)
            z = torch.baddbmm(w[:, bo:bo + fan_out].unsqueeze(1), hs[-1], weight_i.transpose(1, 2))
            hs.append(z if i == last else z.relu_())
        out = hs.pop()
        loss, dz = self._loss_and_dz(out, y, weight)
        for i in range(last, -1, -1):
            wo, bo, fan_in, fan_out = self.layers[i]
            h = hs[i]
            torch.bmm(dz.transpose(1, 2), h, out=grad[:, wo:bo].view(s, fan_out, fan_in))
            torch.sum(dz, 1, out=grad[:, bo:bo + fan_out])
            if i:
                dz = torch.ops.aten.threshold_backward(torch.bmm(dz, w[:, wo:bo].view(s, fan_out, fan_in)), h, 0)
        return loss

    def _loss_and_dz(self, out: torch.Tensor, y: torch.Tensor, weight: torch.Tensor):
        """(S,) weighted batch losses and d loss / d out, for the model's loss."""
        if self.loss_kind == "cross_entropy":
            logp = out.log_softmax(2)
            nll = -logp.gather(2, y.unsqueeze(2)).squeeze(2)
            dz = logp.exp_()
            dz.scatter_add_(2, y.unsqueeze(2), torch.full_like(nll, -1.0).unsqueeze(2))
        elif self.loss_kind == "logistic":
            z = out.squeeze(2)
            yf = y.to(z.dtype)
            nll = F.binary_cross_entropy_with_logits(z, yf, reduction="none")
            dz = (torch.sigmoid(z) - yf).unsqueeze(2)
        else:  # squared: 0.5 (f(x) - y)^2
            r = out.squeeze(2) - y.to(out.dtype)
            nll, dz = 0.5 * r * r, r.unsqueeze(2)
        return (nll * weight).sum(1), dz.mul_(weight.unsqueeze(2))
