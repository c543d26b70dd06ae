"""DenseNet-121, MobileNet (v1, CIFAR) and LoSAC's low-rank matrix-sensing model, plus the
closed-form parameter count of every model in fedrepro.models."""
from __future__ import annotations

import torch
from torch import nn

from fedrepro.models.cnn import cifar_cnn_params
from fedrepro.models.lstm import shakespeare_lstm_params
from fedrepro.models.resnet import resnet18_gn_params, resnet18_params, resnet56_params, with_linear_head


def densenet121(num_classes: int = 10) -> nn.Module:
    """L2GD's DenseNet-121: torchvision's densenet121 (BatchNorm, 1000 outputs) + Linear(1000, C)."""
    from torchvision.models import densenet121 as tv_densenet121  # lazy: torchvision import is slow

    return with_linear_head(tv_densenet121(weights=None, num_classes=1000), 1000, num_classes)


def densenet121_params(num_classes: int = 10, growth: int = 32, blocks=(6, 12, 24, 16), init: int = 64,
                       bn_size: int = 4) -> int:
    """7x7 stem + BN; each dense layer on c channels: BN(c), 1x1 c->4k, BN(4k), 3x3 4k->k (bias-free);
    transitions: BN(c), 1x1 c->c/2; final BN; torchvision fc(1000); linear head."""
    n, c = 7 * 7 * 3 * init + 2 * init, init
    for i, layers in enumerate(blocks):
        for _ in range(layers):
            n += 2 * c + c * bn_size * growth + 2 * bn_size * growth + 9 * bn_size * growth * growth
            c += growth
        if i < len(blocks) - 1:
            n += 2 * c + c * (c // 2)
            c //= 2
    return n + 2 * c + (c * 1000 + 1000) + (1000 * num_classes + num_classes)


# Howard et al. 2017 Table 1 depthwise-separable blocks as (out channels, stride); the stem conv
# has 32. The four stride-2 blocks take a 32x32 input to 2x2 before the global average pool.
MOBILENET_BLOCKS = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 \
    + [(1024, 2), (1024, 1)]


def _conv_bn_relu(cin: int, cout: int, k: int, stride: int, groups: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]


class MobileNet(nn.Module):
    """MobileNet v1 for 32x32 inputs (as FedML's CIFAR variant): stem 3x3 conv stride 1 (ImageNet: 2),
    13 blocks of depthwise 3x3 + pointwise 1x1 (each conv followed by BN and ReLU), global average
    pool, Linear(1024, C) straight to the classes (a 1000-way fc + head would add ~1.0e6 and miss
    L2GD's 32e5)."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        layers, cin = _conv_bn_relu(3, 32, 3, 1), 32
        for cout, stride in MOBILENET_BLOCKS:
            layers += _conv_bn_relu(cin, cin, 3, stride, groups=cin) + _conv_bn_relu(cin, cout, 1, 1)
            cin = cout
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(1024, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).mean((2, 3)))


def mobilenet(num_classes: int = 10) -> nn.Module:
    return MobileNet(num_classes)


def mobilenet_params(num_classes: int = 10) -> int:
    """Stem 3x3x3x32 + BN; per block depthwise 9*cin + BN(cin), pointwise cin*cout + BN(cout); fc."""
    n, cin = 27 * 32 + 2 * 32, 32
    for cout, _ in MOBILENET_BLOCKS:
        n += 9 * cin + 2 * cin + cin * cout + 2 * cout
        cin = cout
    return n + 1024 * num_classes + num_classes


class MatrixSensing(nn.Module):
    """LoSAC sec. V-E: one parameter X (d x d); the output for a flattened sample D_j is <X, D_j>
    as (B, 1), for the squared loss. X starts at zero (the paper gives no init; zero is the
    rank-0, deterministic start for the nuclear-norm prox path)."""

    def __init__(self, d: int):
        super().__init__()
        self.X = nn.Parameter(torch.zeros(d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1) @ self.X.reshape(-1, 1)  # row-major flattening of D_j matches X's


def matrix_sensing(d: int) -> nn.Module:
    return MatrixSensing(d)


# name -> closed-form parameter count (arguments as the factory's)
PARAMETER_COUNTS = {
    "cifar_cnn": cifar_cnn_params,
    "shakespeare_lstm": shakespeare_lstm_params,
    "resnet18_gn": resnet18_gn_params,
    "resnet18": resnet18_params,
    "resnet56": resnet56_params,
    "densenet121": densenet121_params,
    "mobilenet": mobilenet_params,
    "matrix_sensing": lambda d: d * d,
}

# models whose BatchNorm running statistics the engine must carry (not part of the flat vector)
BATCHNORM_MODELS = frozenset({"resnet18", "resnet56", "densenet121", "mobilenet"})
