"""Proximal operators (LoSAC Sec. III-C / V-E) and the DLG attack (Definition 1 / Sec. V-D)."""
import numpy as np
import pytest
import torch

from fedrepro.algorithms.prox import PROX_KINDS, make_prox, singular_value_threshold, soft_threshold
from fedrepro.attacks.dlg import (aligned_distance, averaged_gradient, dlg_attack, infer_labels)
from fedrepro.errors import ConfigError
from fedrepro.models.flat import FlatModel
from fedrepro.models.mlp import MLP, binary_logistic


# ---------------------------------------------------------------- soft thresholding

def test_soft_threshold_closed_form_and_ties():
    gen = torch.Generator().manual_seed(0)
    for tau in (0.0, 0.1, 0.5, 2.0):
        x = torch.randn(200, generator=gen)
        out = soft_threshold(x, tau)
        expected = np.sign(x.numpy()) * np.maximum(np.abs(x.numpy()) - tau, 0.0)
        np.testing.assert_allclose(out.numpy(), expected, atol=1e-7)
    # ties |x| = tau go exactly to zero; |x| < tau too; the rest shrink by tau toward 0
    x = torch.tensor([-1.0, -0.5, 0.0, 0.5, 1.0, 0.25, -3.0])
    out = soft_threshold(x, 0.5)
    assert torch.equal(out.abs(), torch.tensor([0.5, 0.0, 0.0, 0.0, 0.5, 0.0, 2.5]))
    assert out[0] < 0 and out[4] > 0 and out[6] < 0
    # tau = 0 is the identity
    x = torch.randn(50, generator=gen)
    assert torch.equal(soft_threshold(x, 0.0), x)
    with pytest.raises(ConfigError):
        soft_threshold(x, -0.1)


def test_soft_threshold_is_the_l1_prox():
    """It minimizes h(z) = 0.5 ||z - x||^2 + tau ||z||_1 better than random perturbations of it."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(30, dtype=torch.float64, generator=gen)
    tau = 0.4

    def h(z):
        return 0.5 * (z - x).pow(2).sum() + tau * z.abs().sum()

    z_star = soft_threshold(x, tau)
    best = h(z_star).item()
    for scale in (1e-3, 1e-2, 1e-1, 1.0):
        pert = z_star + scale * torch.randn(500, 30, dtype=torch.float64, generator=gen)
        values = 0.5 * (pert - x).pow(2).sum(1) + tau * pert.abs().sum(1)
        assert values.min().item() > best
    # coordinate-wise sparse perturbations (moving a zero entry off zero) also lose
    for i in range(30):
        for step in (-1e-3, 1e-3):
            z = z_star.clone()
            z[i] += step
            assert h(z).item() >= best - 1e-12


# ---------------------------------------------------------------- singular value thresholding

@pytest.mark.parametrize("rows,cols", [(6, 6), (8, 5), (4, 9)])
def test_svt_matches_numpy(rows, cols):
    rng = np.random.default_rng(rows * 10 + cols)
    a = rng.standard_normal((rows, cols))
    u, s, vt = np.linalg.svd(a, full_matrices=False)
    for tau in (0.3, float(np.median(s)), float(s.max()) + 1.0):
        expected = (u * np.maximum(s - tau, 0.0)) @ vt
        flat = singular_value_threshold(torch.from_numpy(a.reshape(-1)), tau, (rows, cols))
        assert flat.shape == (rows * cols,)  # flat in, flat out
        np.testing.assert_allclose(flat.numpy().reshape(rows, cols), expected, atol=1e-10)
        mat = singular_value_threshold(torch.from_numpy(a), tau, (rows, cols))
        assert mat.shape == (rows, cols)  # 2-D in, 2-D out
        np.testing.assert_allclose(mat.numpy(), expected, atol=1e-10)
        rank = np.linalg.matrix_rank(mat.numpy(), tol=1e-8)
        assert rank == int((s > tau).sum())
    # tau = 0 is the identity (float32)
    x32 = torch.from_numpy(a.astype(np.float32))
    np.testing.assert_allclose(singular_value_threshold(x32, 0.0, (rows, cols)).numpy(), a, atol=1e-5)


def test_svt_is_the_nuclear_prox_and_checks_shape():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(5, 4, dtype=torch.float64, generator=gen)
    tau = 0.7

    def h(z):
        return 0.5 * (z - x).pow(2).sum() + tau * torch.linalg.matrix_norm(z, ord="nuc")

    z_star = singular_value_threshold(x, tau, (5, 4))
    best = h(z_star).item()
    for scale in (1e-3, 1e-2, 1e-1):
        for _ in range(100):
            assert h(z_star + scale * torch.randn(5, 4, dtype=torch.float64, generator=gen)).item() > best
    with pytest.raises(ConfigError):
        singular_value_threshold(torch.randn(21), 0.1, (5, 4))


# ---------------------------------------------------------------- make_prox

def test_make_prox_scaling_identity_and_errors():
    assert PROX_KINDS == ("none", "l1", "nuclear")
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(20, dtype=torch.float64, generator=gen)
    none = make_prox("none", 5.0)
    assert none(w, 0.1) is w
    l1 = make_prox("l1", 2.0)
    assert torch.equal(l1(w, 0.25), soft_threshold(w, 0.5))  # tau = lr * weight
    nuc = make_prox("nuclear", 3.0, (4, 5))
    out = nuc(w, 0.1)
    assert out.shape == w.shape
    assert torch.allclose(out, singular_value_threshold(w, 0.3, (4, 5)))
    assert torch.allclose(make_prox("l1", 0.0)(w, 1.0), w)
    with pytest.raises(ConfigError, match="nuclear"):
        make_prox("group_lasso", 1.0)
    with pytest.raises(ConfigError):
        make_prox("nuclear", 1.0)  # no shape


# ---------------------------------------------------------------- DLG helpers

def _grad(model, w, x, y):
    wr = w.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(model.loss(wr, x, y), wr)
    return g


def _local_gd(model, w, x, y, lr, steps):
    """A client's local update: `steps` full-batch gradient steps from w (FedAvg with M = 1)."""
    z = w.clone()
    for _ in range(steps):
        z = z - lr * _grad(model, z, x, y)
    return z


def test_averaged_gradient_of_one_step_is_the_gradient():
    model = FlatModel(binary_logistic(5), loss="logistic")
    gen = torch.Generator().manual_seed(4)
    w, x, y = torch.randn(6, generator=gen), torch.randn(3, 5, generator=gen), torch.tensor([0, 1, 1])
    g = _grad(model, w, x, y)
    assert torch.allclose(averaged_gradient(w, _local_gd(model, w, x, y, 0.1, 1), 0.1, 1), g, atol=1e-6)
    with pytest.raises(ConfigError):
        averaged_gradient(w, w, 0.0, 1)


def test_label_inference_and_loss_scaling():
    gen = torch.Generator().manual_seed(5)
    logit = FlatModel(binary_logistic(6), loss="logistic")
    w = torch.randn(logit.dim, generator=gen)
    x = torch.randn(1, 6, generator=gen)
    for label in (0, 1):
        assert infer_labels(logit, _grad(logit, w, x, torch.tensor([label])), 1).item() == label
    torch.manual_seed(0)
    mlp = FlatModel(MLP(6, [8], 4))
    wm = mlp.flatten_module()
    for label in range(4):
        assert infer_labels(mlp, _grad(mlp, wm, x, torch.tensor([label])), 1).item() == label
    with pytest.raises(ConfigError):
        infer_labels(logit, _grad(logit, w, x, torch.tensor([1])), 2)
    # loss_scale: starting AT the true data, only the matching scaling gives zero matching loss
    x3, y3 = torch.randn(3, 6, generator=gen), torch.tensor([0, 1, 1])
    g_sum = 3 * _grad(logit, w, x3, y3)  # a client that differentiates the summed loss
    kw = dict(target_x=x3, labels=y3, iterations=0, init=x3)
    assert dlg_attack(logit, w, g_sum, 3, 6, loss_scale="sum", **kw).final_grad_loss < 1e-10
    assert dlg_attack(logit, w, g_sum, 3, 6, loss_scale="mean", **kw).final_grad_loss > 1e-3
    soft = dlg_attack(logit, w, g_sum, 3, 6, label_mode="soft", iterations=3, lr=1e-2)
    assert soft.label_mode == "soft" and soft.y_hat.shape == (3,) and ((soft.y_hat > 0) & (soft.y_hat < 1)).all()


# ---------------------------------------------------------------- DLG attacks

@pytest.mark.parametrize("data_seed", [100, 105])  # true labels 0 and 1 respectively
def test_dlg_recovers_one_sample_from_a_dsgd_gradient(data_seed):
    """Uncompressed DSGD upload (w, grad f(w; x, y)) of binary logistic regression, one sample:
    plain GD on the dummy features (lr 0.1, 1000 iterations; the paper's lr 1e-3 x 100 only
    starts the descent) recovers x to ||x_hat - x|| < 1e-3, with the label read off the bias
    gradient (iDLG). The sample is one the model misclassifies, so the gradient is not tiny
    (the matching loss's curvature scales with the squared residual sigmoid(z) - y)."""
    model = FlatModel(binary_logistic(10), loss="logistic")
    gen = torch.Generator().manual_seed(data_seed)
    w = 0.5 * torch.randn(model.dim, generator=gen)
    x = torch.randn(1, 10, generator=gen)
    y = (model.logits(w, x)[:, 0] <= 0).long()
    g = _grad(model, w, x, y)

    paper = dlg_attack(model, w, g, 1, 10, target_x=x, iterations=100, lr=1e-3, seed=data_seed)
    assert len(paper.distances) == 100 and paper.distances[-1] < paper.initial_distance

    res = dlg_attack(model, w, g, 1, 10, target_x=x, iterations=1000, lr=0.1, seed=data_seed)
    assert res.label_mode == "infer" and torch.equal(res.y_hat, y)
    assert res.initial_distance > 1.0
    assert res.distances[-1] < 1e-3
    assert torch.linalg.norm(res.x_hat - x).item() < 1e-3
    assert res.final_grad_loss < 1e-8


def _two_sample_mlp():
    torch.manual_seed(1)
    model = FlatModel(MLP(4, [16], 2))
    gen = torch.Generator().manual_seed(1001)
    return model, model.flatten_module(), torch.randn(2, 4, generator=gen), torch.tensor([0, 1])


def test_dlg_fails_on_an_averaged_multi_step_update_but_not_on_the_gradient():
    """The paper's defense claim in a setting where DLG CAN succeed: a 4-16-2 MLP, two samples,
    labels known to the attacker, same attack (GD lr 1.0, 1500 iterations, same dummy init).
    From the DSGD gradient the data come back (< 1e-3); from the FedAvg-style averaged update
    (x - x+) / (eta L) after L = 10 local steps of eta = 0.5 they do not (distance > 1, about
    the initial distance's half, also after the best re-ordering of the samples)."""
    model, w, x, y = _two_sample_mlp()
    kw = dict(target_x=x, labels=y, iterations=1500, lr=1.0, seed=1)
    leak = dlg_attack(model, w, _grad(model, w, x, y), 2, 4, **kw)
    assert leak.distances[-1] < 1e-3

    g_avg = averaged_gradient(w, _local_gd(model, w, x, y, 0.5, 10), 0.5, 10)
    safe = dlg_attack(model, w, g_avg, 2, 4, **kw)
    assert min(safe.distances) > 1.0
    assert aligned_distance(safe.x_hat, x) > 1.0
    assert safe.final_grad_loss > 1e-3  # no dummy data at w reproduces the averaged update


def test_averaging_protects_only_through_model_drift():
    """Caveats the docs spell out. (1) With tiny local steps (eta = 1e-4, the paper's MNIST/HAR
    step) the averaged update is the gradient at x up to O(eta L), and DLG leaks as from DSGD.
    (2) For ONE sample of binary logistic regression every local gradient is r_t [x, 1], so the
    averaged update is still proportional to [x, 1]: DLG's matching stalls, but the ratio of
    weight to bias entries gives x exactly."""
    model, w, x, y = _two_sample_mlp()
    g_tiny = averaged_gradient(w, _local_gd(model, w, x, y, 1e-4, 10), 1e-4, 10)
    tiny = dlg_attack(model, w, g_tiny, 2, 4, target_x=x, labels=y, iterations=1500, lr=1.0, seed=1)
    assert tiny.distances[-1] < 1e-2

    logit = FlatModel(binary_logistic(10), loss="logistic")
    gen = torch.Generator().manual_seed(102)
    w1 = 0.5 * torch.randn(logit.dim, generator=gen)
    x1 = torch.randn(1, 10, generator=gen)
    y1 = (logit.logits(w1, x1)[:, 0] <= 0).long()
    g_avg = averaged_gradient(w1, _local_gd(logit, w1, x1, y1, 0.5, 10), 0.5, 10)
    stalled = dlg_attack(logit, w1, g_avg, 1, 10, target_x=x1, iterations=1000, lr=0.1, seed=102)
    assert torch.equal(stalled.y_hat, y1)  # the bias sign survives averaging
    assert stalled.distances[-1] > 1.0
    ratio = g_avg[:10] / g_avg[10]
    assert torch.linalg.norm(ratio - x1[0]).item() < 1e-4
