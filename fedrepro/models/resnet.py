"""ResNets: torchvision's ResNet-18 (GroupNorm for FedDyn, BatchNorm + linear head for L2GD)
and He et al. 2016's CIFAR ResNet-56."""
from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn


def with_linear_head(body: nn.Module, body_out: int, num_classes: int) -> nn.Module:
    """body followed by Linear(body_out, num_classes): L2GD A.2's "linear head" on ImageNet models."""
    return nn.Sequential(OrderedDict(body=body, head=nn.Linear(body_out, num_classes)))


def resnet18_gn(num_classes: int) -> nn.Module:
    """FedDyn's ResNet-18: torchvision's ImageNet resnet18 (7x7 stem, max-pool, unchanged for
    32x32 inputs) with GroupNorm(2 groups) in every norm slot and fc = Linear(512, C)."""
    from torchvision.models import resnet18 as tv_resnet18  # lazy: torchvision costs ~1 s to import

    return tv_resnet18(weights=None, num_classes=num_classes, norm_layer=lambda c: nn.GroupNorm(2, c))


def resnet18(num_classes: int = 10) -> nn.Module:
    """L2GD's ResNet-18: torchvision's resnet18 (BatchNorm, 1000 outputs) + Linear(1000, C)."""
    from torchvision.models import resnet18 as tv_resnet18

    return with_linear_head(tv_resnet18(weights=None, num_classes=1000), 1000, num_classes)


def resnet18_trunk_params() -> int:
    """torchvision ResNet-18 without fc: 7x7 stem, 4 stages of 2 basic blocks (64..512 channels),
    a 1x1 projection + norm where the width changes; every norm (BN or GN) has 2C affine params."""
    n, cin = 7 * 7 * 3 * 64 + 2 * 64, 64
    for c in (64, 128, 256, 512):
        for _ in range(2):
            n += 9 * cin * c + 9 * c * c + 2 * (2 * c)
            if cin != c:
                n += cin * c + 2 * c
            cin = c
    return n  # 11 176 512


def resnet18_gn_params(num_classes: int) -> int:
    return resnet18_trunk_params() + 512 * num_classes + num_classes


def resnet18_params(num_classes: int = 10) -> int:
    return resnet18_trunk_params() + (512 * 1000 + 1000) + (1000 * num_classes + num_classes)


class BasicBlock(nn.Module):
    """3x3-BN-ReLU-3x3-BN plus shortcut, then ReLU. Option A shortcut (He et al. 2016, CIFAR
    experiments): identity, subsampled by 2 and zero-padded with new channels where the shape
    changes, so shortcuts add no parameters."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.stride, self.extra = stride, cout - cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        short = x[:, :, :: self.stride, :: self.stride]
        if self.extra:
            short = F.pad(short, (0, 0, 0, 0, 0, self.extra))  # zero channels appended
        return F.relu(out + short)


class CifarResNet(nn.Module):
    """He et al. 2016 sec. 4.2: 3x3 conv (16) then 3 stages of n basic blocks with 16/32/64
    channels on 32/16/8 maps, global average pool, fc. Depth 6n+2 (n=9: ResNet-56)."""

    def __init__(self, n: int, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        blocks, cin = [], 16
        for i, c in enumerate((16, 32, 64)):
            for b in range(n):
                blocks.append(BasicBlock(cin, c, 2 if (i > 0 and b == 0) else 1))
                cin = c
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):  # He et al. initialize as in their 2015 paper (He init)
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(F.relu(self.bn1(self.conv1(x))))
        return self.fc(x.mean((2, 3)))


def resnet56(num_classes: int = 10) -> nn.Module:
    return CifarResNet(9, num_classes)


def resnet56_params(num_classes: int = 10, n: int = 9) -> int:
    """Stem conv + BN, per block two bias-free 3x3 convs and two BNs, option-A shortcuts free, fc."""
    total, cin = 3 * 9 * 16 + 2 * 16, 16
    for c in (16, 32, 64):
        for _ in range(n):
            total += 9 * cin * c + 9 * c * c + 2 * (2 * c)
            cin = c
    return total + 64 * num_classes + num_classes
