"""Attacking what one client sends during a run: `attack=dlg` (docs/losac_prox_dlg.md, section 3).

The attacker sees the messages of client `attack.client` in the first round >= `attack.round`
in which that client takes part (what crosses the network: the compressed message when a
compressor is on), knows the model it started that round from, its local step size and step
count, and its labels (label_mode=known), and runs DLG (`dlg_attack`) against the gradient the
upload gives away (`observed_gradient`). Training is never touched: the run's numbers and its
key are the same with and without the attack, except that `attack=dlg` gets a run folder of its
own (its key includes the attack settings) holding

    attack.json        what was attacked, the distances, the status (ok / not attacked / failed)
    attack_curve.csv   ||D_hat - D||_F and the matching loss after each DLG iteration

LoSAC Figure 6 (experiments/losac/fig6.py) drives the same pieces over its in-process runs.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import pandas as pd
import torch
from omegaconf import DictConfig

from fedrepro import store
from fedrepro.attacks.dlg import averaged_gradient, dlg_attack
from fedrepro.errors import ConfigError
from fedrepro.metrics.ledger import Ledger

# Algorithms that upload none of these say why in `not_attackable` (fedrepro/algorithms/base.py),
# and config refuses them.
# The upload the attacker matches, in order of preference: a gradient at the broadcast model
# as it is (DSGD; MimeSVRG's first phase), else the averaged local step (FedAvg family).
OBSERVED = ("gradient", "full_gradient", "delta", "model")


class CaptureMixin:
    """A Ledger that also keeps client `capture_client`'s messages (both directions) of every
    round from `capture_from` (0-based) on, until `take` hands them out."""

    def __init__(self, *args, capture_client: int, capture_from: int, **kw):
        super().__init__(*args, **kw)
        self.capture_client, self.capture_from = capture_client, capture_from
        self.kept: dict[int, dict[tuple[str, str], torch.Tensor]] = {}

    def record(self, direction, client, name, tensor, wire=None):
        if client == self.capture_client and self.rounds_closed >= self.capture_from:
            self.kept.setdefault(self.rounds_closed, {})[(direction, name)] = tensor.detach().clone()
        super().record(direction, client, name, tensor, wire=wire)

    def take(self, round0: int) -> dict[tuple[str, str], torch.Tensor]:
        """The messages of round `round0` (0-based; empty when the client was not in it); older
        rounds are dropped."""
        kept = self.kept.pop(round0, {})
        self.kept = {r: m for r, m in self.kept.items() if r > round0}
        return kept

    def stop(self) -> None:
        self.capture_from, self.kept = float("inf"), {}


class CaptureLedger(CaptureMixin, Ledger):
    pass


def capturing(ledger_class: type) -> type:
    """`ledger_class` with CaptureMixin in front (a figure's own Ledger subclass keeps working)."""
    if issubclass(ledger_class, CaptureMixin):
        return ledger_class
    if ledger_class is Ledger:
        return CaptureLedger
    return type(f"Capture{ledger_class.__name__}", (CaptureMixin, ledger_class), {})


def observed_gradient(kept: dict, lr: float, steps: int) -> tuple[torch.Tensor, str]:
    """What the attacker matches, and a word on it: the uploaded gradient as it is, else the
    averaged gradient (x - x^+) / (lr L) of the uploaded update or model."""
    up = {name for (direction, name) in kept if direction == "up"}
    if "gradient" in up:
        return kept[("up", "gradient")], "uploaded gradient"
    if "full_gradient" in up:
        return kept[("up", "full_gradient")], "uploaded full gradient (first phase)"
    if ("down", "model") not in kept or not up & {"delta", "model"}:
        raise ConfigError(f"the attacked client uploaded {sorted(up)} with no broadcast model to anchor it; "
                          f"the attack needs one of {OBSERVED} (and the model for delta / model)")
    x = kept[("down", "model")]
    x_plus = x + kept[("up", "delta")] if "delta" in up else kept[("up", "model")]
    what = "delta" if "delta" in up else "model"
    return averaged_gradient(x, x_plus, lr, steps), f"averaged gradient (x - x^+)/(lr L) of the uploaded {what}"


def attack_client(fed, client: int, kept: dict, lr: float, steps: int, attack: DictConfig,
                  seed: int) -> tuple[dict, pd.DataFrame]:
    """DLG on client `client`'s captured messages of one round; a summary and the curve."""
    g, what = observed_gradient(kept, lr, steps)
    x = kept[("down", "model")] if ("down", "model") in kept else fed.algorithm.server_model()
    idx = fed.client_indices[client]
    x1, y1 = fed.data.x_train[idx.cpu()], fed.data.y_train[idx.cpu()]
    dtype = getattr(torch, attack.dtype)
    result = dlg_attack(fed.model, x.to(dtype), g.to(dtype), len(idx), tuple(x1.shape[1:]),
                        target_x=x1.to(x.device, dtype), labels=y1.to(x.device), label_mode=attack.label_mode,
                        loss_scale=attack.loss_scale, iterations=attack.iterations, lr=attack.lr,
                        seed=seed, init=attack.init)
    true_grad = fed.loop.executor.full_gradient(client, x)
    summary = {"observed": what, "samples": len(idx), "features": int(x1[0].numel()),
               "initial_distance": result.initial_distance,
               "final_distance": result.distances[-1] if result.distances else result.initial_distance,
               "final_grad_loss": result.final_grad_loss, "label_mode": result.label_mode,
               "upload_vs_gradient": float((g.to(true_grad.dtype) - true_grad).norm() / true_grad.norm()),
               "lr": lr, "local_steps": steps}
    curve = pd.DataFrame({"iteration": range(len(result.distances) + 1),
                          "distance": [result.initial_distance, *result.distances],
                          "grad_loss": [*result.grad_losses, result.final_grad_loss]})
    return summary, curve


class UploadAttack:
    """`cfg.attack` during one run: which ledger captures, when to attack, what is written."""

    def __init__(self, cfg: DictConfig, folder: Path, rounds: int):
        self.cfg, self.folder, self.attack = cfg, Path(folder), cfg.attack
        self.client = int(self.attack.client)
        self.first = min(int(self.attack.round), rounds)  # a profile may cap the rounds (as Fig. 6)
        self.done = self._previous() is not None

    @property
    def path(self) -> Path:
        return self.folder / "attack.json"

    def _previous(self) -> Optional[dict]:
        try:
            return json.loads(self.path.read_text()) if self.path.exists() else None
        except json.JSONDecodeError:
            return None  # damaged: attacked again if the run still reaches the round

    def ledger_class(self, base: type) -> type:
        return capturing(base)

    def ledger_kw(self) -> dict:
        return {"capture_client": self.client, "capture_from": self.first - 1}

    def after_round(self, fed, row: dict) -> None:
        """Called with each logged row: attacks once the client has uploaded in a round >= first."""
        ledger, round0 = fed.loop.ledger, row["round"] - 1
        if self.done:
            ledger.stop()
            return
        if round0 < self.first - 1:
            return
        kept = ledger.take(round0)
        if not any(direction == "up" for direction, _ in kept):
            return  # not sampled this round: the next round it takes part in
        t0 = time.perf_counter()
        head = self._head(row["round"])
        loop = fed.loop
        try:
            summary, curve = attack_client(fed, self.client, kept, loop.round_lr,
                                           loop.round_steps[self.client], self.attack, self.cfg.seed)
        except ConfigError as exc:  # e.g. label_mode=infer on a client with several samples
            self._write({**head, "status": "failed", "reason": str(exc)})
        else:
            store.write_text(self.folder / "attack_curve.csv", curve.to_csv(index=False))
            self._write({**head, "status": "ok", "reason": "", **summary,
                         "seconds": round(time.perf_counter() - t0, 3)})
        self.done = True
        ledger.stop()

    def finish(self, status: str, error: Optional[str]) -> dict:
        """At the end of the run: the attack's record (written now if the round never came)."""
        if not self.done:
            why = (f"the run {status} before client {self.client} uploaded in a round >= {self.first}"
                   + (f" ({error})" if error else "; the client was not sampled: choose another "
                      "attack.client or attack.round, or participation=p100"))
            self._write({**self._head(None), "status": "not attacked", "reason": why})
        record = self._previous() or {}
        keep = ("status", "reason", "round", "client", "initial_distance", "final_distance", "observed")
        return {k: record.get(k) for k in keep}

    def _head(self, round_: Optional[int]) -> dict:
        a = self.attack
        return {"attack": a.name, "client": self.client, "requested_round": int(a.round), "round": round_,
                "iterations": int(a.iterations), "eta_d": float(a.lr), "init": a.init,
                "loss_scale": a.loss_scale, "dtype": a.dtype}

    def _write(self, record: dict) -> None:
        store.write_json(self.path, record)


def upload_attack(cfg: DictConfig, folder: Path, rounds: int) -> Optional[UploadAttack]:
    """The run's attack, or None for attack=none."""
    return None if cfg.attack.name == "none" else UploadAttack(cfg, folder, rounds)
