"""FedDyn's Shakespeare next-character model."""
from __future__ import annotations

import torch
from torch import nn


class ShakespeareLSTM(nn.Module):
    """Embedding(vocab, embed) -> stacked LSTM(hidden) -> Linear(hidden, vocab) on the last step.

    nn.LSTM works under torch.func.functional_call (tests/test_model_zoo.py checks outputs and
    the gradient with respect to the flat vector), so no hand-written cell is needed."""

    def __init__(self, vocab: int = 80, embed: int = 8, hidden: int = 100, layers: int = 2):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, layers, batch_first=True)
        self.fc = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embedding(x))  # (B, T, hidden)
        return self.fc(out[:, -1])


def shakespeare_lstm(vocab: int = 80, embed: int = 8, hidden: int = 100, layers: int = 2) -> nn.Module:
    return ShakespeareLSTM(vocab, embed, hidden, layers)


def shakespeare_lstm_params(vocab: int = 80, embed: int = 8, hidden: int = 100, layers: int = 2) -> int:
    """Closed form: each LSTM layer has 4 gates, each with W_ih, W_hh and two bias vectors."""
    lstm = sum(4 * hidden * ((embed if i == 0 else hidden) + hidden) + 2 * 4 * hidden for i in range(layers))
    return vocab * embed + lstm + hidden * vocab + vocab
