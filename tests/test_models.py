"""Models: parameter counts against the architecture's formula, flat-vector round trip, gradients."""
import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from fedrepro.errors import ConfigError
from fedrepro.models.flat import build_model


def mlp_params(sizes):
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


@pytest.mark.parametrize("hidden, expected", [
    ([200, 200], 199_210),  # FedDyn's MNIST model: 784-200-200-10
    ([100, 100], 89_610),   # FedDyn's EMNIST-L model
    ([200, 100], 178_110),  # the papers' text variant
    ([], 7_850),            # multinomial logistic regression
])
def test_parameter_counts(hidden, expected):
    flat, theta = build_model(OmegaConf.create({"name": "mlp" if hidden else "logistic", "hidden": hidden}),
                              (784,), 10, seed=0)
    assert flat.dim == theta.numel() == expected == mlp_params([784, *hidden, 10])
    print(f"784-{'-'.join(map(str, hidden))}-10: {flat.dim} parameters")


def test_flat_vector_round_trip_and_gradient():
    flat, theta = build_model(OmegaConf.create({"name": "mlp", "hidden": [20]}), (1, 28, 28), 10, seed=3)
    views = flat.unflatten(theta)
    for (name, p), v in zip(flat.module.named_parameters(), views.values()):
        assert torch.equal(p, v)
    assert torch.equal(torch.cat([v.reshape(-1) for v in views.values()]), theta)
    x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    w = theta.clone().requires_grad_(True)
    loss = flat.loss(w, x, y)
    (g,) = torch.autograd.grad(loss, w)
    # the same loss and gradient computed through the module's own parameters
    module_loss = F.cross_entropy(flat.module.net(x.flatten(1)), y)
    assert torch.allclose(loss, module_loss)
    params = [p.detach().clone().requires_grad_(True) for p in flat.module.parameters()]
    ref = torch.func.functional_call(flat.module, dict(zip(views, params)), (x,))
    ref_grads = torch.autograd.grad(F.cross_entropy(ref, y), params)
    assert torch.allclose(g, torch.cat([r.reshape(-1) for r in ref_grads]), atol=1e-6)


def test_initialization_is_seeded():
    cfg = OmegaConf.create({"name": "mlp", "hidden": [200, 200]})
    assert torch.equal(build_model(cfg, (784,), 10, seed=1)[1], build_model(cfg, (784,), 10, seed=1)[1])
    assert not torch.equal(build_model(cfg, (784,), 10, seed=1)[1], build_model(cfg, (784,), 10, seed=2)[1])


def test_binary_logistic_needs_two_classes():
    with pytest.raises(ConfigError, match="2-class"):
        build_model(OmegaConf.create({"name": "binary_logistic", "hidden": []}), (784,), 10, seed=0)
    flat, theta = build_model(OmegaConf.create({"name": "binary_logistic", "hidden": []}), (123,), 2, seed=0)
    assert flat.dim == 124
    loss, correct = flat.loss_and_correct(theta, torch.randn(5, 123), torch.tensor([0, 1, 1, 0, 1]))
    assert loss > 0 and 0 <= correct <= 5
