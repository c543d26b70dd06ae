"""The batched client executor: every selected client's local steps advanced together.

For the models where that wins on a CPU (MLPs and logistic regression: a stack of Linear
layers with ReLU between them, no BatchNorm, no augmentation) one local step of all S clients
is a handful of batched matrix products over the clients' stacked flat parameters (S, d):
forward and backward are written out (ReLU MLP under cross-entropy, the logistic or the squared
loss), so a step costs the matmuls plus a few elementwise passes, with no autograd graph and
no host-device synchronization (the round's batch indices go to the device once; the losses
come back once per round).

Two ways to apply the step after the data gradient:
- the scaled path (`_train_scaled`; CPU, float32, objectives without anchor terms: FedAvg,
  FedDyn, SCAFFOLD without its prox): the update happens inside the weight-gradient products,
  weight decay is a per-client scale, clipping is settled by a cheap upper bound of the gradient
  norm; a step touches the parameters about as often as its matrix products alone do;
- otherwise the data gradient is formed and `fused.sgd_step` applies penalties, clipping, decay
  and the update (a numba kernel of two passes on the CPU).

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

Under a mixed `precision` (train.precision, engine/precision.py) the data gradient's forward and
written-out backward run inside Fabric's autocast context, as autograd's would in the sequential
executor: the matrix products in bfloat16 / float16, cross-entropy and the logistic loss in
float32 (autocast's float32 losses), each client's gradient landing in the float32 `grad` and
the step (`sgd_step`) in float32. The scaled path serves 32-true only (its update inside the
float32 products is the step itself).
"""
from __future__ import annotations

import contextlib
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedrepro.engine.fused import add_layer_bound, norm_with_one, sgd_stepper
from fedrepro.engine.local import ClientJob, SequentialExecutor, schedule_rows
from fedrepro.engine.precision import DEFAULT_PRECISION, autocast, is_mixed
from fedrepro.errors import ConfigError
from fedrepro.models.flat import FlatModel
from fedrepro.seeding import generator

# the scaled path folds sigma back into the weights when a client's scale falls below this
_RESCALE_BELOW = 0.25

# At one CPU thread a round's clients train in blocks whose parameters fit in about this much
# cache, each block through all its steps before the next: a step's products read each client's
# weights once, so with all clients side by side (100 MNIST MLPs: 80 MB) every step streams them
# from memory. Measured (docs/performance.md), two 1-thread processes at once, as runs go here:
# 100 clients at batch 10, FedDyn 2.0x and FedProx 1.2-1.6x faster in blocks of 2, at batch 50
# 1.1x; `make bench`'s batch-50 FedAvg step alone at one thread even. At two threads blocks lost
# (0.78-0.89x at 10 clients, blocks of 5): small products split badly over threads.
BLOCK_BYTES = 2 << 20


def client_block(dim: int, itemsize: int, device, threads: int) -> int | None:
    """Clients trained side by side (None: all of a round's): at one CPU thread as many as keep
    their parameters within BLOCK_BYTES (2 MNIST MLPs), otherwise all. Each client's products and
    step are its own, so a block changes no number."""
    if torch.device(device).type != "cpu" or threads > 1:
        return None
    return max(1, BLOCK_BYTES // (dim * itemsize))


def _scales(coefs: torch.Tensor, decay: torch.Tensor):
    """The scaled path's per-client scales for a round of steps with step sizes `coefs` (T, S):
    (sigma during each step (T, S), -coef / sigma after each step (T, S), {step: the factor folding
    the scale back into the weights after it (S,)}, sigma at the end (S,)), in float64. Weight
    decay makes sigma <- (1 - coef decay) sigma; a client's scale is folded back (reset to 1)
    once it falls below _RESCALE_BELOW."""
    keep = (1.0 - coefs.to(torch.float64) * decay.to(torch.float64)).numpy()
    coef = coefs.to(torch.float64).numpy()
    sigma = np.ones(keep.shape[1])
    during, step, folds = np.empty_like(keep), np.empty_like(keep), {}
    for t in range(len(keep)):
        during[t] = sigma
        sigma = sigma * keep[t]
        step[t] = -coef[t] / sigma
        low = sigma < _RESCALE_BELOW
        if low.any():
            folds[t] = torch.from_numpy(np.where(low, sigma, 1.0))
            sigma = np.where(low, 1.0, sigma)
    return torch.from_numpy(during), torch.from_numpy(step), folds, torch.from_numpy(sigma)


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

    mixed = False  # a mixed train.precision (set by __init__)
    client_block: int | None = None  # clients side by side; None: `client_block` at the running threads

    def __init__(self, model: FlatModel, x: torch.Tensor, y: torch.Tensor,
                 client_indices: list[torch.Tensor], *, batch_size: int, weight_decay: float,
                 clip_norm: float | None, seed: int, augment: str | None = None,
                 precision: str = DEFAULT_PRECISION):
        if augment:
            raise ConfigError(f"the batched executor does not augment batches ({augment!r}): "
                              "use train.executor=sequential")
        super().__init__(model, x, y, client_indices, batch_size=batch_size, weight_decay=weight_decay,
                         clip_norm=clip_norm, seed=seed, augment=augment, precision=precision)
        self.mixed = is_mixed(precision)
        self.itemsize = next(model.module.parameters()).element_size()
        self.layers = linear_stack(model)
        self.features = x.reshape(len(x), -1)
        self.loss_kind = model.loss_kind
        self._x_norms: torch.Tensor | None = None  # ||x_i||, computed on first use
        # a step's rows: B, or the largest client's data where B exceeds it (full-batch steps: their
        # padding to B = 1e6 once cost GBs). The federation's, not the block's: the products' inner
        # dimension then does not depend on the clients beside one, nor do its numbers, bit for bit
        self.batch_width = min(batch_size, max(len(i) for i in client_indices))

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
        """((S, d) models, (S,) mean losses) of S jobs without rules, trained side by side, in blocks
        of `client_block` clients, each block through all its steps before the next."""
        block = self.block_size(len(jobs))
        if block >= len(jobs):
            return self._train_block(jobs, lr, round)
        parts = [self._train_block(jobs[i:i + block], lr, round) for i in range(0, len(jobs), block)]
        return torch.cat([w for w, _ in parts]), torch.cat([loss for _, loss in parts])

    def block_size(self, clients: int) -> int:
        """Clients of a round of `clients` trained side by side: `client_block` where set, else the
        module's rule at the threads running now."""
        return self.client_block or client_block(self.model.dim, self.itemsize, self.features.device,
                                                 torch.get_num_threads()) or clients

    def _train_block(self, jobs: list[ClientJob], lr: float, round: int):
        s, dev = len(jobs), jobs[0].objective.anchor.device
        steps = torch.tensor([j.steps for j in jobs])
        horizon = int(steps.max())
        width = self.batch_width
        rows = torch.full((s, horizon, width), -1, dtype=torch.long)
        for i, job in enumerate(jobs):
            g = generator(self.seed, "batches", round, job.client, device="cpu")
            client_rows = schedule_rows(self.client_indices[job.client].cpu(), self.batch_size, job.steps, g)
            rows[i, :job.steps, :client_rows.shape[1]] = client_rows
        rows = rows.to(dev)
        valid = rows >= 0
        weight = valid / valid.sum(2, keepdim=True).clamp(min=1)  # (S, T, B): 1 / |batch| on real rows
        rows = rows.clamp(min=0)
        moving = (torch.arange(horizon, device=dev)[None, :] < steps.to(dev)[:, None])  # (S, T)

        objs = [j.objective for j in jobs]
        starts = [o.anchor if o.start is None else o.start for o in objs]
        if any(o.linear is not None for o in objs) and any(o.linear is None for o in objs):
            raise ConfigError("jobs of one round mix local objectives with and without a linear term")
        linears = [o.linear for o in objs] if objs[0].linear is not None else None
        dtype = starts[0].dtype
        per_client = lambda values: torch.tensor(values, dtype=dtype, device=dev)  # noqa: E731
        mu, l1 = per_client([o.prox_mu for o in objs]), per_client([o.l1 for o in objs])
        decay = per_client([self.weight_decay + o.extra_decay for o in objs])
        coefs = (lr * moving).to(dtype).T.contiguous()  # (T, S): 0 for clients past their last step
        if not (self.mixed or bool(mu.any() or l1.any())) and self._scaled_path_serves(starts[0], coefs, decay):
            w, total = self._train_scaled(starts, linears, rows, weight, coefs, decay)
        else:
            w = torch.stack(starts)
            linear = torch.stack(linears) if linears is not None else None
            anchors = torch.stack([o.anchor for o in objs]) if bool(mu.any() or l1.any()) else None
            total = torch.zeros(s, dtype=dtype, device=dev)
            grad = torch.empty_like(w)
            # views and per-step slices made once a block: at batch 10 a step's Python and small
            # calls cost about as much as its products (docs/performance.md)
            layers = self._layer_views(w, grad)
            rows_t = rows.transpose(0, 1).reshape(horizon, s * width)
            y_t = self.y.index_select(0, rows_t.view(-1)).view(horizon, s, width).unbind(0)
            weight_t = weight.transpose(0, 1).contiguous().unbind(0)
            step = sgd_stepper(w, grad, coefs, decay=decay, mu=mu, l1=l1, anchors=anchors, linear=linear,
                               clip=self.clip_norm)
            for t, rows_now in enumerate(rows_t.unbind(0)):
                total += self._data_gradient(layers, rows_now, y_t[t], weight_t[t])
                step(t)
        mean_loss = total / steps.to(dev, dtype).clamp(min=1)
        mean_loss = torch.where(torch.isfinite(mean_loss), mean_loss, torch.full_like(mean_loss, math.nan))
        return w, mean_loss

    # -- the scaled path: the update inside the weight-gradient products -----------------------

    @staticmethod
    def _scaled_path_serves(w: torch.Tensor, coefs: torch.Tensor, decay: torch.Tensor) -> bool:
        """The scaled path: on the CPU in float32 (its clipping bound is read on the host every step,
        free there, a synchronization on a GPU), for decay factors 1 - lr decay above 1/2 (the
        per-client scale stays well conditioned)."""
        return (w.device.type == "cpu" and w.dtype == torch.float32 and len(coefs) > 0
                and float((coefs * decay).max()) < 0.5)

    def _row_norms(self) -> torch.Tensor:
        """sqrt(||x_i||^2 + 1) of every training sample: the first layer's inputs (and the bias's 1)
        in the clipping bound."""
        if self._x_norms is None:
            self._x_norms = norm_with_one(torch.linalg.vector_norm(self.features, dim=1))
        return self._x_norms

    def _train_scaled(self, starts: list[torch.Tensor], linears: list[torch.Tensor] | None, rows: torch.Tensor,
                      weight: torch.Tensor, coefs: torch.Tensor, decay: torch.Tensor):
        """The round's steps for objectives without anchor terms (FedAvg, FedDyn, SCAFFOLD without
        its prox), with the update inside the weight-gradient products, so that a step touches the
        (S, d) parameters about as often as its matrix products alone do (`make bench`'s
        products_only row); per-step, data gradient + `sgd_step` read and wrote them five more times:

        - each layer's weights are one contiguous (S, out, in) tensor V = W / sigma (its biases
          b / sigma), sigma a scale per client: weight decay W <- (1 - lr decay) W becomes
          sigma <- (1 - lr decay) sigma (`_scales`, for the whole round at once);
        - while an upper bound of each client's gradient norm (per layer sum_b ||dz_b|| ||h_b||,
          Cauchy-Schwarz, plus ||linear||) stays below the clip, clip_grad_norm_'s factor is
          exactly 1 and V <- V - (lr / sigma) dz^T h is one baddbmm_ into V; a step where it does
          not hold forms the gradient for its exact norm (`_exact_scale`);
        - a linear term (FedDyn, SCAFFOLD) is one pass V <- V - (lr / sigma) linear.
        The same step as `sgd_step` to float32 rounding (tests/test_batched_scaled.py).
        Returns ((S, d) models, (S,) summed batch losses)."""
        s, horizon, b = rows.shape
        layers, clip, dtype = self.layers, self.clip_norm, starts[0].dtype
        last = len(layers) - 1
        # layer by layer, clients stacked: (S, out, in) weights and (S, out) biases, both / sigma
        V = [torch.stack([st[wo:bo].view(fo, fi) for st in starts]) for wo, bo, fi, fo in layers]
        bias = [torch.stack([st[bo:bo + fo] for st in starts]) for wo, bo, fi, fo in layers]
        if linears is not None:
            lin_w = [torch.stack([v[wo:bo].view(fo, fi) for v in linears]) for wo, bo, fi, fo in layers]
            lin_b = [torch.stack([v[bo:bo + fo] for v in linears]) for wo, bo, fi, fo in layers]
            lin_sq = sum(v.square().sum((1, 2)) + u.square().sum(1) for v, u in zip(lin_w, lin_b))
            lin_norm = lin_sq.sqrt().double().numpy()  # added to the bound on the host
        # the round's per-step values, gathered once and split into per-step views (a step's Python
        # costs about as much as its small kernels, so each call saved counts: docs/performance.md)
        rows_t = rows.transpose(0, 1).reshape(horizon, s * b)
        y_t, weight_t = self.y[rows_t].view(horizon, s, b), weight.transpose(0, 1).contiguous()
        x_norms_t = self._row_norms()[rows_t].view(horizon, s, b).unbind(0) if clip is not None else None
        sig_t, step_t, fold_t, sigma_end = _scales(coefs, decay)
        sig32 = sig_t.to(dtype).view(horizon, s, 1, 1).unbind(0)
        step32 = step_t.to(dtype).view(horizon, s, 1, 1).unbind(0)
        cross_entropy = self.loss_kind == "cross_entropy"
        if cross_entropy:  # labels as gather / scatter indices, the batch weights over (S, classes, B)
            y_idx, w_cb = y_t.unsqueeze(2).unbind(0), weight_t.unsqueeze(2).unbind(0)
            nll = torch.empty(horizon, s, 1, b, dtype=dtype)  # -log p(label), summed after the loop
            minus_one = torch.full((s, 1, b), -1.0, dtype=dtype)
        acc = np.zeros(s)  # the clipping bound's square, per client
        x_buf = torch.empty(s * b, self.features.shape[1], dtype=dtype)
        x = x_buf.view(s, b, -1)
        Vt, bias_b = [v.transpose(1, 2) for v in V], [u.unsqueeze(1) for u in bias]  # views: see the updates
        total = torch.zeros(s, dtype=dtype)
        for t, rows_now in enumerate(rows_t.unbind(0)):
            torch.index_select(self.features, 0, rows_now, out=x_buf)
            sig = sig32[t]
            hs = [x]
            for i in range(last + 1):  # z = sigma (h V^T + b / sigma); `bias` holds b / sigma
                z = torch.baddbmm(bias_b[i], hs[i], Vt[i]).mul_(sig)
                hs.append(z if i == last else z.relu_())
            out = hs.pop()
            if cross_entropy:  # _loss_and_dz's cross-entropy, its loss read after the loop
                logp = out.transpose(1, 2).contiguous().log_softmax(1)  # (S, C, B)
                torch.gather(logp, 1, y_idx[t], out=nll[t])
                dz = logp.exp_().scatter_add_(1, y_idx[t], minus_one).mul_(w_cb[t]).transpose(1, 2)
            else:
                loss, dz = self._loss_and_dz(out, y_t[t], weight_t[t])
                total += loss
            dzs = [dz]  # d loss / d z, last layer first, all at the weights before this step
            for i in range(last, 0, -1):
                dzs.append(torch.ops.aten.threshold_backward(torch.bmm(dzs[-1], V[i]).mul_(sig), hs[i], 0))
            dzs.reverse()
            dbs = [d.sum(1) for d in dzs]
            col = step32[t]  # -lr / sigma after the step, times clip_grad_norm_'s factor where it is not 1
            if clip is not None:
                # layer i's [weight | bias] gradient is dz^T [h | 1]: its norm is at most
                # sum_b ||dz_b|| sqrt(||h_b||^2 + 1); the global norm at most the root of their squares' sum
                acc[:] = 0.0
                add_layer_bound(acc, dzs[0], h_norms=x_norms_t[t])
                for i in range(1, last + 1):
                    add_layer_bound(acc, dzs[i], hs[i])
                bound = np.sqrt(acc) if linears is None else np.sqrt(acc) + lin_norm
                # margin: far above float32 rounding of either norm
                if not float(bound.max()) * (1 + 1e-3) + 1e-5 < clip:
                    scale = self._exact_scale(dzs, dbs, hs, *((lin_w, lin_b) if linears is not None else ()))
                    col = (step_t[t] * scale.to(torch.float64)).to(dtype).view(s, 1, 1)
            col_b = col.view(s, 1)
            for i in range(last + 1):  # V <- V - (lr / sigma) (linear + dz^T h), the data part in the product
                if linears is not None:
                    V[i].addcmul_(lin_w[i], col)
                V[i].baddbmm_(torch.mul(dzs[i], col).transpose(1, 2), hs[i])
                bias[i].addcmul_(dbs[i] if linears is None else dbs[i] + lin_b[i], col_b)
            if t in fold_t:  # fold those clients' scale back in before their V grows large
                for v in V + bias:
                    v.mul_(fold_t[t].to(dtype).view(-1, *[1] * (v.dim() - 1)))
        if cross_entropy:
            # each client's steps summed in order along its row (cumsum; a sum's vectorized order
            # changes with the padded steps of longer clients beside it), so that a client's numbers
            # do not depend on the clients beside it, bit for bit
            total -= (nll.view(horizon, s, b) * weight_t).sum(2).t().cumsum(1)[:, -1]
        w = torch.empty(s, self.model.dim, dtype=dtype)
        sig = sigma_end.to(dtype)
        for i, (wo, bo, fi, fo) in enumerate(layers):
            torch.mul(V[i], sig.view(s, 1, 1), out=w[:, wo:bo].view(s, fo, fi))
            torch.mul(bias[i], sig.view(s, 1), out=w[:, bo:bo + fo])
        return w, total

    def _exact_scale(self, dzs, dbs, hs, lin_w=None, lin_b=None) -> torch.Tensor:
        """clip_grad_norm_'s factor of each client from its whole gradient, formed here: the scaled
        path's steps where the bound does not settle it. (The update itself stays the bound path's,
        so that no client's numbers depend on the others it is trained beside.)"""
        norm2 = torch.zeros(dzs[0].shape[0], dtype=dzs[0].dtype)
        for i in range(len(dzs)):
            g, g_b = torch.bmm(dzs[i].transpose(1, 2), hs[i]), dbs[i]
            if lin_w is not None:
                g += lin_w[i]
                g_b = g_b + lin_b[i]
            norm2 += g.square().sum((1, 2)) + g_b.square().sum(1)
        return torch.clamp(self.clip_norm / (norm2.sqrt() + 1e-6), max=1.0)

    def _layer_views(self, w: torch.Tensor, grad: torch.Tensor) -> list[tuple]:
        """Per layer, views of the (S, d) parameters and gradient: (weights (S, out, in), their
        transpose, biases (S, 1, out), weight gradient (S, out, in), bias gradient (S, out))."""
        s, views = w.shape[0], []
        for wo, bo, fan_in, fan_out in self.layers:
            weight = w[:, wo:bo].view(s, fan_out, fan_in)
            views.append((weight, weight.transpose(1, 2), w[:, bo:bo + fan_out].unsqueeze(1),
                          grad[:, wo:bo].view(s, fan_out, fan_in), grad[:, bo:bo + fan_out]))
        return views

    def _data_gradient(self, layers: list[tuple], rows: torch.Tensor, y: torch.Tensor,
                       weight: torch.Tensor) -> torch.Tensor:
        """Writes every client's mean batch-loss gradient into the gradient views of `layers`
        (`_layer_views`) at the parameters they view, for the batch rows (S * B,), labels (S, B)
        and row weights (S, B); returns the (S,) batch losses of the clients (0 for clients past
        their last step's rows). Under a mixed precision the products run in autocast's low
        precision and are copied into the float32 gradient (no `out=`: their outputs are
        low-precision too)."""
        with autocast(self.precision, rows.device) if self.mixed else contextlib.nullcontext():
            s, b = y.shape
            hs, last = [self.features.index_select(0, rows).view(s, b, -1)], len(layers) - 1
            for i, (_, transposed, bias, _, _) in enumerate(layers):
                z = torch.baddbmm(bias, hs[-1], transposed)
                hs.append(z if i == last else z.relu_())
            out = hs.pop()
            loss, dz = self._loss_and_dz(out, y, weight)
            for i in range(last, -1, -1):
                weight_i, _, _, g_w, g_b = layers[i]
                h = hs[i]
                if self.mixed:
                    g_w.copy_(torch.bmm(dz.transpose(1, 2), h))
                    g_b.copy_(dz.sum(1))
                else:
                    torch.bmm(dz.transpose(1, 2), h, out=g_w)
                    torch.sum(dz, 1, out=g_b)
                if i:
                    back = torch.bmm(dz, weight_i)
                    dz = torch.ops.aten.threshold_backward(back, h.to(back.dtype), 0)
            return loss

    def _loss_and_dz(self, out: torch.Tensor, y: torch.Tensor, weight: torch.Tensor):
        """(S,) weighted batch losses and d loss / d out, for the model's loss."""
        if self.loss_kind != "squared" and self.mixed:
            out = out.float()  # autocast runs cross_entropy and the logistic loss in float32
        if self.loss_kind == "cross_entropy":
            # over the classes as the middle dimension: log_softmax along a short last one is
            # ~30x slower on the CPU (measured 160 vs 5 us at 10 clients, batch 50, 10 classes)
            logp = out.transpose(1, 2).contiguous().log_softmax(1)  # (S, C, B)
            nll = -logp.gather(1, y.unsqueeze(1)).squeeze(1)
            dz = logp.exp_()
            dz.scatter_add_(1, y.unsqueeze(1), torch.full_like(nll, -1.0).unsqueeze(1))
            return (nll * weight).sum(1), dz.mul_(weight.unsqueeze(1)).transpose(1, 2)
        elif self.loss_kind == "logistic":
            z = out.squeeze(2)
            yf = y.to(z.dtype)
            nll = F.binary_cross_entropy_with_logits(z, yf, reduction="none")
            dz = (torch.sigmoid(z) - yf).unsqueeze(2)
        else:  # squared: 0.5 (f(x) - y)^2
            r = out.squeeze(2) - y.to(out.dtype)
            nll, dz = 0.5 * r * r, r.unsqueeze(2)
        return (nll * weight).sum(1), dz.mul_(weight.unsqueeze(2))
