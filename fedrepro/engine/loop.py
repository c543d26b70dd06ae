"""The federated round loop.

One round: sample clients, broadcast (downlink through the ledger), local training by the
executor, uploads (uplink through the ledger), server aggregation, and every
`eval_every` rounds an evaluation of three models: the server model, the mean of every
client's latest model (never-sampled clients still hold the initial model, as FedDyn
reports) and the mean of this round's selected clients' models. Where the algorithm's server
model is that mean in exact arithmetic (FedAvg, `Algorithm.server_is_selected_mean`) and the
uploads arrived unaltered, the server model is scored once for both, as the papers' code does.

An algorithm with a first phase (`pre_upload`, MimeSVRG) gets it between the broadcast and
local training: each selected client's message goes up (ledger: uplink), the server's reply
goes down to each of them (ledger: downlink) and joins what they received.

Every message goes through the channel (fedrepro/compression): a broadcast is compressed
once and the same bits reach every selected client, who use what they decoded; each upload
is compressed per client, the server aggregates what it decoded (EF21: its estimate g_k)
and the algorithm hears of the difference through `Algorithm.sent`. The ledger records the
values that crossed the network with their wire bits. Without a compressor (the default
channel) the messages pass untouched, exactly as before compression existed.

Two algorithm hooks whose defaults change nothing (algorithms/base.py): `local_lr(lr)` gives the step size of the round's local steps (L2GD: eta / (n (1 - p))), and
`personalized()` returns the clients' personalized models (algorithms.base.Personalized), which
every evaluation then scores on each client's own data (`personal_*` columns, docs/l2gd.md).

`precision` (train.precision): the executor's forward passes run under its autocast context
(engine/precision.py) and so do the evaluation's here.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from fedrepro.algorithms.base import Algorithm
from fedrepro.compression.channel import Channel, Sent
from fedrepro.engine.evaluate import evaluate_many, personalized_metrics
from fedrepro.engine.local import ClientJob
from fedrepro.engine.precision import DEFAULT_PRECISION, autocast
from fedrepro.engine.sampling import sample_clients
from fedrepro.errors import DivergenceError
from fedrepro.metrics.ledger import Ledger
from fedrepro.models.flat import FlatModel
from fedrepro.settings import Effective


@dataclass
class EvalData:
    x_test: torch.Tensor
    y_test: torch.Tensor
    x_train: torch.Tensor  # the training-loss subset
    y_train: torch.Tensor

    def to(self, device) -> "EvalData":
        return EvalData(*(v.to(device) for v in (self.x_test, self.y_test, self.x_train, self.y_train)))


@dataclass
class Schedule:
    """What the server decides each round (the round count lives in Effective)."""

    lr: float
    lr_decay: float
    batch_size: int
    participation_mode: str
    participation_rate: float
    cohort_size: Optional[int]
    seed: int


# a checkpoint slower than this to write is spaced to at least this ratio times its cost (RoundLoop.run)
SLOW_CHECKPOINT_S = 1.0
CHECKPOINT_COST_RATIO = 10.0


class RoundLoop:
    precision: str = DEFAULT_PRECISION  # train.precision (set by __init__)

    def __init__(self, *, model: FlatModel, algorithm: Algorithm, executor, ledger: Ledger,
                 client_sizes: torch.Tensor, theta0: torch.Tensor, eff: Effective,
                 schedule: Schedule, eval_data: EvalData, channel: Optional[Channel] = None,
                 precision: str = DEFAULT_PRECISION):
        self.model, self.algorithm, self.executor, self.ledger = model, algorithm, executor, ledger
        self.precision = precision
        self.channel = channel if channel is not None else Channel()
        self.client_sizes = client_sizes
        self.eff, self.schedule, self.eval_data = eff, schedule, eval_data
        self.num_clients = len(client_sizes)
        # Every client's latest local model; the initial model until a client is sampled.
        self.latest = theta0.expand(self.num_clients, -1).clone()
        self.uploads_altered = False

    # -- state for checkpoints ------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"algorithm": self.algorithm.state_dict(), "latest": self.latest,
                "ledger": self.ledger.state_dict(), "buffers": self.model.buffers.clone(),
                "channel": self.channel.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.algorithm.load_state_dict(state["algorithm"])
        self.latest = state["latest"].clone()
        self.ledger.load_state_dict(state["ledger"])
        self.model.buffers = state.get("buffers", self.model.buffers).clone()
        self.channel.load_state_dict(state.get("channel", {}))

    # -- messages -----------------------------------------------------------------------------
    def _record(self, direction: str, k: int, name: str, sent: Sent) -> None:
        if sent.compressed is None:
            self.ledger.record(direction, k, name, sent.message)
        else:
            self.ledger.record(direction, k, name, sent.message, wire=sent.compressed)

    def send_down(self, t: int, selected: torch.Tensor, messages: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The server's `messages` to every selected client: what the clients decoded."""
        sent = {name: self.channel.broadcast(t, name, m) for name, m in messages.items()}
        for k in selected.tolist():
            for name, s in sent.items():
                self._record("down", k, name, s)
        return {name: s.used for name, s in sent.items()}

    def send_up(self, t: int, k: int, message: dict[str, torch.Tensor],
                into: dict[str, list[torch.Tensor]]) -> None:
        """Client k's `message`: recorded, appended to `into` as the server decoded it."""
        for name, x in message.items():
            s = self.channel.upload(t, k, name, x)
            self._record("up", k, name, s)
            if s.used is not x:
                self.uploads_altered = True
                self.algorithm.sent(k, name, x, s.used)
            into.setdefault(name, []).append(s.used)

    # -- one round --------------------------------------------------------------------------
    def run_round(self, t: int) -> dict:
        """Round t (0-based); returns the row logged for round t + 1."""
        s, alg = self.schedule, self.algorithm
        selected = sample_clients(s.participation_mode, s.participation_rate, s.cohort_size,
                                  self.num_clients, s.seed, t)
        lr = s.lr * s.lr_decay ** t
        alg.begin_round(t, lr, s.lr)
        received = self.send_down(t, selected, alg.broadcast())
        received = self.first_phase(t, selected, received)
        equal_steps = self.eff.steps_for(math.ceil(float(self.client_sizes.mean())), s.batch_size)
        jobs = []
        for k in selected.tolist():
            own_steps = self.eff.steps_for(int(self.client_sizes[k]), s.batch_size)
            jobs.append(ClientJob(k, alg.local_objective(k, received), alg.local_steps(k, own_steps, equal_steps)))
        # what each client trained with this round (an attacker's side knowledge, attacks/upload.py)
        self.round_lr, self.round_steps = alg.local_lr(lr), {job.client: job.steps for job in jobs}
        models, losses = self.executor.run(jobs, self.round_lr, t)
        if not torch.isfinite(losses).all() or not torch.isfinite(models).all():
            raise DivergenceError(
                f"local training diverged in round {t + 1} (non-finite loss or model): "
                f"lower train.lr (now {s.lr}) or keep train.clip_norm set", round=t + 1)
        messages: dict[str, list[torch.Tensor]] = {}
        self.uploads_altered = False  # send_up sets it when the channel changes an upload
        for i, job in enumerate(jobs):
            self.send_up(t, job.client, alg.upload(job.client, models[i], job.steps, received), messages)
        alg.aggregate(selected, {name: torch.stack(v) for name, v in messages.items()})
        self.latest[selected] = models
        if self.model.buffer_dim:  # BatchNorm statistics: data-weighted mean of the participants'
            weights = self.client_sizes[selected].to(models)
            self.model.buffers = (weights / weights.sum()) @ self.executor.last_buffers
        row = {"round": t + 1, "clients": len(selected), "lr": lr, "local_loss": float(losses.mean())}
        row.update(self.ledger.end_round())
        if (t + 1) % self.eff.eval_every == 0 or t + 1 == self.eff.rounds:
            row.update(self.evaluate(t + 1, selected, models))
        return row

    def first_phase(self, t: int, selected: torch.Tensor, received: dict) -> dict:
        """Two-phase rounds: messages before local training (none for one-phase algorithms)."""
        alg, sent = self.algorithm, {}
        for k in selected.tolist():
            full_gradient = (lambda w, k=k: self.executor.full_gradient(k, w))
            self.send_up(t, k, alg.pre_upload(k, received, full_gradient), sent)
        if not sent:
            return received
        reply = alg.pre_aggregate(selected, {name: torch.stack(v) for name, v in sent.items()})
        return {**received, **self.send_down(t, selected, reply)}

    # -- evaluation -------------------------------------------------------------------------
    def evaluate(self, round: int, selected: Optional[torch.Tensor] = None,
                 models: Optional[torch.Tensor] = None) -> dict:
        alg, d = self.algorithm, self.eval_data
        everyone = torch.arange(self.num_clients)
        candidates = {
            "server": alg.server_model(),
            "all": alg.client_weights(everyone).to(self.latest) @ self.latest,
        }
        if selected is not None and alg.server_is_selected_mean() and not self.uploads_altered:
            candidates["selected"] = candidates["server"]  # the same model up to float rounding
        elif selected is not None:
            candidates["selected"] = alg.client_weights(selected).to(models) @ models
        # models equal element for element are scored once (at 100 % participation "all" is "selected");
        # the distinct ones together (evaluate_many: the numbers of scoring each alone, bit for bit)
        distinct: list[torch.Tensor] = []
        which = {}
        for label, w in candidates.items():
            which[label] = next((j for j, v in enumerate(distinct) if torch.equal(v, w)), len(distinct))
            if which[label] == len(distinct):
                distinct.append(w)
        self.scored_models = len(distinct)
        with autocast(self.precision, d.x_test.device):
            test = evaluate_many(self.model, distinct, d.x_test, d.y_test)
            train = evaluate_many(self.model, distinct, d.x_train, d.y_train)
        row = {}
        for label, j in which.items():
            row.update({f"{label}_test_acc": test[j][1], f"{label}_test_loss": test[j][0],
                        f"{label}_train_loss": train[j][0]})
        personalized = alg.personalized()
        if personalized is not None:
            ex = self.executor
            with autocast(self.precision, d.x_test.device):
                personal = personalized_metrics(
                    self.model, personalized, ex.x, ex.y, ex.client_indices, d.x_test, d.y_test,
                    weight_decay=ex.weight_decay, max_train_samples=self.eff.max_train_eval_samples,
                    seed=self.schedule.seed)
            row.update(personal)
        if not math.isfinite(row["server_test_loss"]):
            raise DivergenceError(f"the server model's test loss is not finite in round {round}: "
                                  "the run diverged; lower train.lr", round=round)
        return row

    def run(self, start_round: int, on_row: Callable[[dict], None],
            on_checkpoint: Callable[[int], None], checkpoint_every: int,
            checkpoint_minutes: Optional[float] = None) -> None:
        """Rounds start_round.. ; a checkpoint every `checkpoint_every` rounds and whenever
        `checkpoint_minutes` have passed since the last one (never after the last round). A
        checkpoint that took over SLOW_CHECKPOINT_S to write is followed by the next round-count
        one only after CHECKPOINT_COST_RATIO times as long, so that writing keeps under about a
        tenth of a run: 1 000 clients' states are GBs (SCAFFOLD's 1 000-device MNIST run spent a
        quarter of its time writing them every 10 rounds)."""
        last, cost = time.monotonic(), 0.0
        for t in range(start_round, self.eff.rounds):
            row = self.run_round(t)
            on_row(row)
            since = time.monotonic() - last
            spaced = cost < SLOW_CHECKPOINT_S or since >= CHECKPOINT_COST_RATIO * cost
            due = ((t + 1) % checkpoint_every == 0 and spaced) or (
                checkpoint_minutes is not None and since >= 60 * checkpoint_minutes)
            if due and t + 1 < self.eff.rounds:
                start = time.monotonic()
                on_checkpoint(t + 1)
                last = time.monotonic()
                cost = last - start
