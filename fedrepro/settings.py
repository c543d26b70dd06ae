"""Settings shared across layers, with no dependencies of their own: `config` validates and builds
them, the engine, the algorithms and the attacks read them, and none of those imports `config`
(or `config` an attack) to get them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# Algorithm keys that only some algorithms have (config checks them when present).
ALGORITHM_CHOICES = {
    "transmit": ("model", "update"),
    "server": ("act", "all"),
    "scaling": ("consistent", "literal"),  # LoSAC / FedSaga (docs/losac.md)
    "prox": ("none", "l1", "nuclear"),  # the proximal operators of fedrepro/algorithms/prox.py
    "weighting": ("uniform", "data"),  # L2GD's f_i (docs/l2gd.md)
}

# dlg_attack's options (fedrepro/attacks/dlg.py), also attack.label_mode / loss_scale / init.
LABEL_MODES = ("auto", "known", "infer", "soft")
LOSS_SCALES = ("mean", "sum")
INITS = ("normal", "uniform", "zeros")

# Algorithms whose uploads give the attacker no gradient at a model it saw (the reason names
# what they send instead); every other algorithm uploads one of attacks.upload.OBSERVED's messages.
NOT_ATTACKABLE = {
    "centralized": "there is no federation and nothing is uploaded",
    "l2gd": "clients upload personalized models x_i that no broadcast model anchors",
    "fedsplit": "clients upload their splitting variables z_i, not models or gradients",
}


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
