"""Deep Leakage from Gradients (DLG) as the LoSAC paper uses it (Definition 1, Sec. V-D).

An attacker who sees a model `w` and a "gradient" `g` that a client uploaded looks for dummy
data D_hat whose gradient at `w` matches `g`:

    D_hat = argmin_{D'} || grad_w f(w; D') - g ||^2,

solved by plain gradient descent on D' (the paper: 100 iterations, step eta_d = 1e-3). The
gradient through the model is taken with create_graph=True, so the matching loss can be
differentiated once more with respect to the dummy features (and the dummy labels when they
are optimized too).

What `g` is depends on the algorithm attacked:

* DSGD / MimeSVRG upload the gradient at `w` itself: g = grad f_1(w; D_1);
* FedAvg / SCAFFOLD / LoSAC upload a model after L local steps of size eta; the attacker uses
  the averaged gradient (x - x_1^+) / (eta * L) (`averaged_gradient`).

The quality of the theft is ||D_hat - D||_F after each attack iteration (`DLGResult.distances`,
filled when the true features are given). See docs/losac_prox_dlg.md for every choice made
here (labels, loss scaling, initialization).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import torch

from fedrepro.errors import ConfigError
from fedrepro.models.flat import FlatModel
from fedrepro.settings import INITS, LABEL_MODES, LOSS_SCALES


@dataclass
class DLGResult:
    """The attack's output.

    x_hat: the dummy features after the last iteration, shape (num_samples, *feature_shape).
    y_hat: the labels used at the end: the given/inferred hard labels, or the soft labels
        (probabilities for the logistic / cross-entropy losses, reals for the squared loss).
    distances: ||x_hat - target_x||_F after each iteration (empty when no target was given).
    grad_losses: the matching loss ||grad_w f(w; D_hat) - g||^2 at the iterate each step starts
        from (entry t is the loss before step t + 1).
    initial_distance: ||x_hat - target_x||_F at the initialization (None without a target).
    final_grad_loss: the matching loss at the returned iterate.
    label_mode: the label mode actually used ("known", "infer" or "soft").
    """

    x_hat: torch.Tensor
    y_hat: torch.Tensor
    distances: list[float] = field(default_factory=list)
    grad_losses: list[float] = field(default_factory=list)
    initial_distance: float | None = None
    final_grad_loss: float = math.nan
    label_mode: str = "known"


def averaged_gradient(x: torch.Tensor, x_plus: torch.Tensor, lr: float, steps: int) -> torch.Tensor:
    """(x - x_plus) / (lr * steps): the mean of the gradients a client applied over `steps`
    local steps of size `lr`, which is what the attacker treats as "the gradient" of FedAvg /
    SCAFFOLD / LoSAC uploads (LoSAC Sec. V-D)."""
    if lr <= 0 or steps <= 0:
        raise ConfigError(f"averaged_gradient needs lr > 0 and steps > 0, got lr={lr}, steps={steps}")
    return (x - x_plus) / (lr * steps)


def _output_bias(model: FlatModel, vec: torch.Tensor) -> torch.Tensor:
    """The slice of a flat vector holding the last parameter, required to be the output bias."""
    if len(model.shapes[-1]) != 1 or not model.names[-1].endswith("bias"):
        raise ConfigError("label_mode='infer' needs a model whose last parameter is the output bias "
                          f"(this one ends with {model.names[-1]!r}); pass labels= or use label_mode='soft'")
    return vec[-model.numels[-1]:]


def infer_labels(model: FlatModel, observed_grad: torch.Tensor, num_samples: int) -> torch.Tensor:
    """iDLG label inference for ONE sample from the output-bias gradient.

    logistic loss: d loss / d bias = sigmoid(z) - y, negative iff y = 1;
    cross-entropy: d loss / d bias = softmax(z) - onehot(y), negative only at the true class.
    Any positive scaling (mean / sum, averaging over local steps with a fixed label) keeps the
    sign pattern, so the inference also works on averaged updates.
    """
    if num_samples != 1:
        raise ConfigError(f"label_mode='infer' works for a single sample only (num_samples={num_samples}); "
                          "pass labels= (known labels) or use label_mode='soft'")
    gb = _output_bias(model, observed_grad.detach())
    if model.loss_kind == "logistic":
        return (gb[:1] < 0).long()
    if model.loss_kind == "cross_entropy":
        return gb.argmin().reshape(1)
    raise ConfigError(f"label_mode='infer' is defined for the logistic and cross-entropy losses, "
                      f"not {model.loss_kind!r}; pass labels=")


def _soft_labels(model: FlatModel, u: torch.Tensor) -> torch.Tensor:
    """Dummy labels from free parameters u: probabilities for classification, reals for regression."""
    if model.loss_kind == "logistic":
        return torch.sigmoid(u)
    if model.loss_kind == "cross_entropy":
        return torch.softmax(u, dim=1)
    return u


def aligned_distance(x_hat: torch.Tensor, target_x: torch.Tensor) -> float:
    """min over sample orderings of ||x_hat[perm] - target_x||_F.

    The gradient of a sum/mean loss does not depend on the order of the samples, so DLG can at
    best recover the data up to a permutation; this removes that ambiguity (brute force, n <= 8).
    """
    n = x_hat.shape[0]
    if n > 8:
        raise ConfigError(f"aligned_distance tries every ordering; n={n} samples is too many (n <= 8)")
    a = x_hat.reshape(n, -1).detach()
    b = target_x.reshape(n, -1).detach().to(a.dtype)
    cost = torch.cdist(a, b).pow(2)  # cost[i, j] = ||x_hat_i - x_j||^2
    best = min(sum(cost[i, p[i]].item() for i in range(n)) for p in itertools.permutations(range(n)))
    return math.sqrt(max(best, 0.0))


def dlg_attack(model: FlatModel, w: torch.Tensor, observed_grad: torch.Tensor, num_samples: int,
               feature_dim: int | tuple[int, ...], *, target_x: torch.Tensor | None = None,
               labels: torch.Tensor | None = None, label_mode: str = "auto", loss_scale: str = "mean",
               iterations: int = 100, lr: float = 1e-3, seed: int = 0,
               init: str | torch.Tensor = "normal") -> DLGResult:
    """Recover `num_samples` inputs from `observed_grad`, taken as the gradient at `w`.

    label_mode: "known" uses `labels` (required); "infer" reads the label of a single sample off
        the output-bias gradient (iDLG); "soft" optimizes dummy labels jointly with the features
        (sigmoid / softmax of free logits, as in the original DLG); "auto" = "known" when labels
        are given, else "infer" for one sample, else "soft".
    loss_scale: the dummy gradient is that of the batch-MEAN loss (`FlatModel.loss`, what this
        repo's clients differentiate) or of the SUM (mean * num_samples). It must match how the
        attacked client scaled its loss, else the attacker fits a wrongly scaled gradient.
    init: dummy features drawn N(0, 1) ("normal", DLG's choice), U[0, 1) ("uniform") or zeros;
        seeded by `seed` independently of the global RNG; or a tensor of the dummy data's shape
        to start from (a warm start; copied, never modified).
    """
    if label_mode not in LABEL_MODES:
        raise ConfigError(f"label_mode={label_mode!r} is unknown; choose one of {LABEL_MODES}")
    if loss_scale not in LOSS_SCALES:
        raise ConfigError(f"loss_scale={loss_scale!r} is unknown; choose one of {LOSS_SCALES}")
    if not isinstance(init, torch.Tensor) and init not in INITS:
        raise ConfigError(f"init={init!r} is unknown; choose one of {INITS}")
    if num_samples < 1 or iterations < 0 or lr <= 0:
        raise ConfigError(f"dlg_attack needs num_samples >= 1, iterations >= 0, lr > 0 "
                          f"(got {num_samples}, {iterations}, {lr})")
    if observed_grad.numel() != model.dim or w.numel() != model.dim:
        raise ConfigError(f"w and observed_grad must have the model's {model.dim} entries "
                          f"(got {w.numel()} and {observed_grad.numel()})")
    if label_mode == "auto":
        label_mode = "known" if labels is not None else ("infer" if num_samples == 1 else "soft")
    if label_mode == "known" and labels is None:
        raise ConfigError("label_mode='known' needs labels=")

    dtype = w.dtype
    feature_shape = (feature_dim,) if isinstance(feature_dim, int) else tuple(feature_dim)
    shape = (num_samples, *feature_shape)
    gen = torch.Generator().manual_seed(seed)
    if isinstance(init, torch.Tensor):
        if init.numel() != math.prod(shape):
            raise ConfigError(f"init tensor has {init.numel()} entries; the dummy data has shape {shape}")
        x_hat = init.detach().reshape(shape).to(dtype).clone()
    elif init == "normal":
        x_hat = torch.randn(shape, generator=gen, dtype=dtype)
    elif init == "uniform":
        x_hat = torch.rand(shape, generator=gen, dtype=dtype)
    else:
        x_hat = torch.zeros(shape, dtype=dtype)
    x_hat = x_hat.to(w.device).requires_grad_(True)  # the CPU generator keeps draws device-independent

    if label_mode == "soft":
        if model.loss_kind == "cross_entropy":  # one free logit per class (the output bias's size)
            u = torch.randn((num_samples, model.numels[-1]), generator=gen, dtype=dtype)
        else:  # one logit (logistic) or one real target (squared) per sample
            u = torch.randn((num_samples,), generator=gen, dtype=dtype)
        u = u.to(w.device).requires_grad_(True)
        fixed_y = None
    else:
        fixed_y = labels if label_mode == "known" else infer_labels(model, observed_grad, num_samples)
        fixed_y = fixed_y.reshape(-1).to(w.device)
        if fixed_y.numel() != num_samples:
            raise ConfigError(f"labels has {fixed_y.numel()} entries for num_samples={num_samples}")
        u = None

    g = observed_grad.detach().reshape(-1).to(dtype)
    w0 = w.detach().reshape(-1)
    scale = float(num_samples) if loss_scale == "sum" else 1.0
    # the loss runs in train mode like the client's (BatchNorm: batch statistics); its running
    # statistics go to a scratch copy so the attack never touches the server's model.buffers
    scratch = model.buffers.clone().to(w.device)
    target = None if target_x is None else target_x.detach().reshape(shape).to(device=w.device, dtype=dtype)

    def matching_loss() -> torch.Tensor:
        wr = w0.clone().requires_grad_(True)
        y = _soft_labels(model, u) if u is not None else fixed_y
        loss = model.loss(wr, x_hat, y, buffers=scratch) * scale
        (dummy_grad,) = torch.autograd.grad(loss, wr, create_graph=True)
        return (dummy_grad - g).pow(2).sum()

    result = DLGResult(x_hat=x_hat, y_hat=torch.empty(0), label_mode=label_mode)
    if target is not None:
        result.initial_distance = torch.linalg.norm((x_hat.detach() - target).reshape(-1)).item()
    variables = [x_hat] if u is None else [x_hat, u]
    for _ in range(iterations):
        d = matching_loss()
        grads = torch.autograd.grad(d, variables)
        with torch.no_grad():
            for v, gv in zip(variables, grads):
                v -= lr * gv
        result.grad_losses.append(d.item())
        if target is not None:
            result.distances.append(torch.linalg.norm((x_hat.detach() - target).reshape(-1)).item())
    result.final_grad_loss = matching_loss().item()
    result.x_hat = x_hat.detach()
    result.y_hat = (_soft_labels(model, u).detach() if u is not None else fixed_y.detach())
    return result
