"""The model zoo: parameter counts against closed forms, shapes, gradients, flat-vector round trip."""
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedrepro.models import cnn, lstm, resnet, zoo
from fedrepro.models.flat import FlatModel


def n_params(module):
    return sum(p.numel() for p in module.parameters())


def images(b=2):
    return torch.randn(b, 3, 32, 32)


# name, factory arguments, input, output shape; batches of 2 at 32x32 keep the big models cheap
CASES = [
    pytest.param("cifar_cnn", (10,), images, (2, 10), id="cifar_cnn-10"),
    pytest.param("cifar_cnn", (100,), images, (2, 100), id="cifar_cnn-100"),
    pytest.param("shakespeare_lstm", (), lambda: torch.randint(0, 80, (2, 20)), (2, 80), id="shakespeare_lstm"),
    pytest.param("resnet18_gn", (10,), images, (2, 10), id="resnet18_gn"),
    pytest.param("resnet18", (10,), images, (2, 10), id="resnet18"),
    pytest.param("resnet56", (10,), images, (2, 10), id="resnet56"),
    pytest.param("densenet121", (10,), images, (2, 10), id="densenet121", marks=pytest.mark.slow),  # the slowest
    pytest.param("mobilenet", (10,), images, (2, 10), id="mobilenet"),
    pytest.param("matrix_sensing", (8,), lambda: torch.randn(2, 64), (2, 1), id="matrix_sensing"),
]
FACTORIES = {"cifar_cnn": cnn.cifar_cnn, "shakespeare_lstm": lstm.shakespeare_lstm, "resnet18_gn": resnet.resnet18_gn,
             "resnet18": resnet.resnet18, "resnet56": resnet.resnet56, "densenet121": zoo.densenet121,
             "mobilenet": zoo.mobilenet, "matrix_sensing": zoo.matrix_sensing}


@pytest.mark.parametrize("name, args, make_input, out_shape", CASES)
def test_model(name, args, make_input, out_shape):
    t0 = time.perf_counter()
    torch.manual_seed(0)
    module = FACTORIES[name](*args)
    count = n_params(module)
    print(f"\n{name}{args}: {count:,} parameters")
    assert count == zoo.PARAMETER_COUNTS[name](*args)

    # forward (train mode: BN uses batch statistics) and finite gradients for every parameter
    x = make_input()
    out = module(x)
    assert out.shape == out_shape
    (out - torch.randn_like(out)).pow(2).mean().backward()
    for pname, p in module.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname

    # flat-vector round trip; eval mode so BN uses (unchanged) running statistics on both sides
    module.eval()
    flat = FlatModel(module)
    w = flat.flatten_module()
    assert w.shape == (count,) == (flat.dim,)
    views = flat.unflatten(w)
    for pname, p in module.named_parameters():
        assert torch.equal(views[pname], p), pname
    with torch.no_grad():
        # float rounding only: the views of one flat buffer can take another convolution kernel
        # (alignment), and 56 layers compound it (ResNet-56: up to 9e-5 on logits of size ~450,
        # 2e-7 relative); two of its conv weights swapped move them by 44
        torch.testing.assert_close(flat.logits(w, x), module(x), rtol=1e-4, atol=1e-4)
    print(f"  {time.perf_counter() - t0:.2f} s")


def test_known_torchvision_totals():
    from torchvision.models import densenet121, resnet18

    assert n_params(resnet18(weights=None)) == 11_689_512 == resnet.resnet18_trunk_params() + 512 * 1000 + 1000
    assert n_params(densenet121(weights=None)) == 7_978_856 == zoo.densenet121_params(10) - (1000 * 10 + 10)
    # GroupNorm and BatchNorm both carry 2C affine parameters: equal counts at equal heads
    assert resnet.resnet18_gn_params(1000) == 11_689_512
    assert zoo.PARAMETER_COUNTS["cifar_cnn"](10) == 797_962
    assert zoo.PARAMETER_COUNTS["resnet56"](10) == 853_018       # He et al.: 0.85M
    assert zoo.PARAMETER_COUNTS["mobilenet"](10) == 3_217_226     # L2GD Table 2: 32e5
    assert zoo.PARAMETER_COUNTS["densenet121"](10) == 7_988_866   # L2GD Table 2: 79e5


def test_architecture_details():
    gn = resnet.resnet18_gn(10)
    norms = [m for m in gn.modules() if isinstance(m, (nn.GroupNorm, nn.BatchNorm2d))]
    assert len(norms) == 20 and all(isinstance(m, nn.GroupNorm) and m.num_groups == 2 for m in norms)
    assert gn.fc.in_features == 512 and gn.fc.out_features == 10

    r56 = resnet.resnet56(10)  # 55 convs + fc = 56 layers; option A: no 1x1 projection convs
    convs = [m for m in r56.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 55 and all(c.kernel_size == (3, 3) for c in convs)

    mob = zoo.mobilenet(10)  # Howard et al.: 28 layers counting depthwise and pointwise separately
    convs = [m for m in mob.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 27 and sum(c.groups > 1 for c in convs) == 13
    assert [c.out_channels for c in convs if c.kernel_size == (1, 1)][-1] == 1024

    for name in ("resnet18", "resnet56", "densenet121", "mobilenet"):
        assert name in zoo.BATCHNORM_MODELS
    for module in (cnn.cifar_cnn(10), lstm.shakespeare_lstm(), gn, zoo.matrix_sensing(4)):
        assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules())


def test_lstm_under_functional_call():
    """nn.LSTM keeps a cached list of its weights; check functional_call really substitutes the
    flat vector's views: equal outputs, outputs that follow w, and the module's own gradient."""
    torch.manual_seed(1)
    module = lstm.shakespeare_lstm()
    x, y = torch.randint(0, 80, (4, 12)), torch.randint(0, 80, (4,))
    ref_params = [p.detach().clone().requires_grad_(True) for p in module.parameters()]
    ref_loss = F.cross_entropy(torch.func.functional_call(module, dict(zip(dict(module.named_parameters()),
                                                                                ref_params)), (x,)), y)
    ref_grad = torch.cat([g.reshape(-1) for g in torch.autograd.grad(ref_loss, ref_params)])
    expected = module(x).detach()

    flat = FlatModel(module)
    w = flat.flatten_module().requires_grad_(True)
    torch.testing.assert_close(flat.logits(w, x), expected)
    loss = flat.loss(w, x, y)
    (g,) = torch.autograd.grad(loss, w)
    torch.testing.assert_close(loss, ref_loss)
    torch.testing.assert_close(g, ref_grad)
    lstm_part = slice(80 * 8, flat.dim - (100 * 80 + 80))  # every LSTM weight gets gradient
    assert (g[lstm_part] != 0).float().mean() > 0.99
    shifted = flat.logits(w.detach() + 0.05, x)
    assert not torch.allclose(shifted, expected)  # the module's stored weights are not used


def test_matrix_sensing():
    d = 5
    module = zoo.matrix_sensing(d)
    assert torch.equal(module.X, torch.zeros(d, d))  # documented zero init
    D, X = torch.randn(3, d, d), torch.randn(d, d)
    flat = FlatModel(module, loss="squared")
    out = flat.logits(X.reshape(-1), D.reshape(3, -1))
    torch.testing.assert_close(out, (D * X).sum((1, 2)).unsqueeze(1))  # <X, D_j> = tr(X^T D_j)
    y = torch.randn(3)
    w = X.reshape(-1).clone().requires_grad_(True)
    (g,) = torch.autograd.grad(flat.loss(w, D.reshape(3, -1), y), w)
    resid = (D * X).sum((1, 2)) - y  # d/dX of mean 0.5 (<X,D_j> - y_j)^2
    torch.testing.assert_close(g.view(d, d), (resid[:, None, None] * D).mean(0))


def test_cifar_cnn_pools_before_relu_bit_for_bit():
    """CifarCNN pools before its ReLU, FedDyn's code after: the same outputs and gradients bit for
    bit, in both memory layouts; and the two orders agree on windows with ties, zeros and all-negative
    values, where a difference would show."""
    torch.manual_seed(3)
    ours, authors = cnn.CifarCNN(10), cnn.AuthorsOrderCifarCNN(10)
    authors.load_state_dict(ours.state_dict())
    x, y = torch.randn(6, 3, 32, 32), torch.randint(0, 10, (6,))
    for layout in (torch.contiguous_format, torch.channels_last):
        xl = x.contiguous(memory_format=layout)
        outs, grads = [], []
        for module in (ours, authors):
            module.zero_grad()
            out = module(xl)
            F.cross_entropy(out, y).backward()
            outs.append(out.detach())
            grads.append([p.grad.clone() for p in module.parameters()])
        assert torch.equal(outs[0], outs[1])
        assert all(torch.equal(a, b) for a, b in zip(*grads))

    pool = nn.MaxPool2d(2, 2)
    a = torch.tensor([[[[1.0, 1.0, -2.0, -3.0], [0.5, -1.0, -1.0, -2.0],
                        [0.0, 0.0, 2.0, -1.0], [-1.0, 0.0, 2.0, 2.0]]]])
    results = []
    for order in ("pool first", "relu first"):
        v = a.clone().requires_grad_(True)
        out = torch.relu(pool(v)) if order == "pool first" else pool(torch.relu(v))
        out.backward(torch.arange(1.0, 5.0).view(1, 1, 2, 2))
        results.append((out.detach(), v.grad))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])
