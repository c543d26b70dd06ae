"""Settings shared across layers, with no dependencies of their own: `config` validates and builds
them, the engine and the attacks read them, and none of those imports `config` (or `config` an
attack) to get them. What concerns one algorithm (its parameters' choices and ranges, whether
DLG can attack it) is declared in its own module (fedrepro/algorithms/registry.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# dlg_attack's options (fedrepro/attacks/dlg.py), also attack.label_mode / loss_scale / init.
LABEL_MODES = ("auto", "known", "infer", "soft")
LOSS_SCALES = ("mean", "sum")
INITS = ("normal", "uniform", "zeros")


@dataclass(frozen=True)
class Effective:
    """The settings a run really uses: `train` with the profile's caps applied (config.effective)."""

    rounds: int
    local_epochs: int
    local_steps: Optional[int]  # fixed steps per round (None: local_epochs over the client's data)
    max_local_steps: Optional[int]  # the profile's cap on steps per round, in either mode
    eval_every: int
    max_test_samples: Optional[int]
    max_train_eval_samples: Optional[int]

    def steps_for(self, num_samples: int, batch_size: int) -> int:
        """Local steps of a client holding `num_samples` (FedDyn: ceil(n / B) per epoch)."""
        steps = self.local_steps if self.local_steps is not None else (
            self.local_epochs * -(-num_samples // batch_size))
        return steps if self.max_local_steps is None else min(steps, self.max_local_steps)
