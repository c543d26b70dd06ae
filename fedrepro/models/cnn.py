"""FedDyn's CIFAR-10/100 convolutional network."""
from __future__ import annotations

import torch
from torch import nn


class CifarCNN(nn.Module):
    """conv5x5(3->64)-pool2-conv5x5(64->64)-pool2-fc(1600->384)-fc(384->192)-fc(192->C), ReLU.

    Unpadded 5x5 convolutions and 2x2 max-pools take 32x32 to 28, 14, 10, 5: 64*5*5 = 1600
    features (FedDyn's code).

    FedDyn's code applies ReLU, then the pool; here the pool comes first. The two are the same
    function bit for bit (max and ReLU are both monotone, so max(relu(a), relu(b)) = relu(max(a, b)),
    and the gradient reaches the same input element: the window's first maximum where it is
    positive, nothing where it is not), and the ReLU then touches a quarter of the elements, a
    CPU step's largest elementwise passes (tests/test_model_zoo.py checks outputs and gradients
    against the authors' order, `AuthorsOrderCifarCNN`)."""

    def __init__(self, num_classes: int):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 5)
        self.conv2 = nn.Conv2d(64, 64, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.fc1 = nn.Linear(64 * 5 * 5, 384)
        self.fc2 = nn.Linear(384, 192)
        self.fc3 = nn.Linear(192, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu_(self.pool(self.conv1(x)))  # in place: the pool's backward needs its input only
        x = torch.relu_(self.pool(self.conv2(x)))
        x = torch.relu(self.fc1(x.flatten(1)))
        return self.fc3(torch.relu(self.fc2(x)))


class AuthorsOrderCifarCNN(CifarCNN):
    """The same network with FedDyn's code's order, ReLU before the pool: the reference of the
    bit-for-bit test and `make bench`'s plain PyTorch loop."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = torch.relu(self.fc1(x.flatten(1)))
        return self.fc3(torch.relu(self.fc2(x)))


def cifar_cnn(num_classes: int) -> nn.Module:
    return CifarCNN(num_classes)


def cifar_cnn_params(num_classes: int) -> int:
    """Closed-form parameter count (weights + biases of each layer)."""
    c = num_classes
    return (5 * 5 * 3 * 64 + 64) + (5 * 5 * 64 * 64 + 64) + (1600 * 384 + 384) + (384 * 192 + 192) + (192 * c + c)
