"""The algorithm interface every method of the four papers is written in.

An algorithm keeps its server and per-client state as flat tensors and answers five
questions, in the order the engine asks them each round:

0. `begin_round()`     the round index and its learning rate;
1. `broadcast()`       what the server sends to every selected client (ledger: downlink);
2. `local_objective()` the terms a client adds to its data loss in local training, and
   `local_steps()`     how many local steps it takes;
3. `upload()`          what a client sends back after local training (ledger: uplink), and
                       the client's own state update, made from what it actually sent;
4. `aggregate()`       how the server combines the uploads it received;
5. `server_model()`    the model the server holds (evaluated as "server").

With a compressor (fedrepro/compression) the engine hands `aggregate` what the server
decoded, and tells the algorithm through `sent()` when an upload arrived other than it was
returned, so client state built from the message follows what was sent (see `sent`).

Two optional extensions (LoSAC's family, docs/losac.md): a `LocalRule` in the local
objective replaces the data gradient of each local step by a stateful search direction
(SAGA / SVRG tables over fixed data blocks) and `LocalObjective.prox` follows each step by a
proximal operator; `pre_upload` / `pre_aggregate` add a first phase to a round (MimeSVRG:
full gradients at the server model go up, their mean comes back down before local training).

The engine owns client sampling, local SGD, the ledger, evaluation and checkpoints; an
algorithm never counts its own communication.

An algorithm is one module of this package (docs/adding_an_algorithm.md): its class, its
config dataclass (an `AlgorithmConfig` whose fields declare their ranges and choices with
`param`), the capabilities below as class attributes, and `@register(...)` from
fedrepro/algorithms/registry.py. Its state is declared once in `state_fields` and saved and
restored by `state_dict` / `load_state_dict` here.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from omegaconf import MISSING

GradientAt = Callable[[torch.Tensor], torch.Tensor]  # v -> data gradient of the step's batch at v


@dataclass
class Personalized:
    """What an algorithm with personalized models hands the engine's evaluation (`personalized()`)."""

    models: torch.Tensor  # (m, d): client i's own model x_i
    loss_weights: Optional[torch.Tensor] = None  # c_i of f(x) = (1/m) sum_i c_i L_i(x_i); None: all 1


@dataclass
class LocalObjective:
    """Terms added to a client's data loss L_k(w) during local training.

    Gradient seen by the local step (before clipping, as in FedDyn's code where these
    terms are part of the loss):
        grad L_k(w) + prox_mu (w - anchor) + l1 sign(w - anchor) + linear
    then, after clipping, (weight_decay + extra_decay) * w is added (FedDyn carries the
    alpha * w part of its penalty in the optimizer's weight decay).
    """

    anchor: torch.Tensor  # the point the penalties refer to: the received server model
    prox_mu: float = 0.0
    l1: float = 0.0
    linear: Optional[torch.Tensor] = None
    extra_decay: float = 0.0
    start: Optional[torch.Tensor] = None  # where local training starts (None: the anchor)
    rule: Optional["LocalRule"] = None  # stateful direction replacing the data gradient
    prox: Optional[Callable[[torch.Tensor, float], torch.Tensor]] = None  # w <- prox(w, lr) after each step

    def gradient(self, w: torch.Tensor) -> Optional[torch.Tensor]:
        """The penalty part of the gradient at w (None when there is none)."""
        g = None
        if self.prox_mu:
            g = self.prox_mu * (w - self.anchor)
        if self.l1:
            s = self.l1 * torch.sign(w - self.anchor)
            g = s if g is None else g + s
        if self.linear is not None:
            g = self.linear if g is None else g + self.linear
        return g


class LocalRule:
    """A stateful local update (SAGA / SVRG family): one instance per client and round.

    Executor contract (any executor): with `num_blocks` = M the client's data is split into
    M fixed blocks, a seeded partition per client that is the same every round (so state
    stored per block keeps referring to the same samples); each step draws one block
    uniformly from the per-(round, client) generator and that block is the step's batch.
    `num_blocks` = None keeps the usual batch schedule (block=None). Each step the executor
    computes g, the batch's data gradient at w, and uses

        direction(step, block, w, g, grad_at)     (a fresh tensor; the rule may update its state)

    in place of g; grad_at(v) is the same batch's data gradient at any v. Penalty terms,
    clipping, weight decay and `LocalObjective.prox` then apply as for a plain step.
    """

    num_blocks: Optional[int] = None

    def direction(self, step: int, block: Optional[int], w: torch.Tensor, g: torch.Tensor,
                  grad_at: GradientAt) -> torch.Tensor:
        raise NotImplementedError


def threshold(delta: torch.Tensor, epsilon: float) -> torch.Tensor:
    """FedElasticNet's sparsification of what is sent: entries with |x| <= epsilon become 0.

    epsilon = 0 returns the input untouched (bit for bit, signed zeros included)."""
    if not epsilon:
        return delta
    return torch.where(delta.abs() <= epsilon, torch.zeros_like(delta), delta)


@dataclass
class Federation:
    """What an algorithm may know about the federation."""

    num_clients: int
    dim: int
    client_sizes: torch.Tensor  # (m,) float: n_k


# -- configs ----------------------------------------------------------------------------------------

def param(default: Any = MISSING, *, range: Optional[str] = None, choices: Optional[tuple] = None,
          null: Optional[str] = None, note: Optional[str] = None):
    """A field of an algorithm's config with what `fedrepro.config.validate` checks about it:

    range    "> 0", ">= 1", or an interval "(0, 1]" (a number outside: "algorithm.mu=-1.0 is
             invalid: it must be >= 0"); every numeric field needs one, except seeds
    choices  the values a string may take ("algorithm.transmit='both' is not valid; choose one
             of: model, update")
    null     for an Optional field, what null means ("train.batch_size batches")
    note     said after the range when a value is outside it (what the number is)
    """
    meta = {k: v for k, v in (("range", range), ("choices", choices), ("null", null), ("note", note))
            if v is not None}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def alias(of: str, *, range: str):
    """A second name of field `of`: the name the algorithm's paper gives it and the one runs stored
    before `of` existed carry (FedProx's `mu` of `lambda2`). Null unless given; given, it sets `of`
    (fedrepro.config.apply_aliases; both given with different values is an error); once validated
    both hold the value. The run key hashes `of`'s value under this name, so those runs keep their
    keys. `range` is `of`'s, so a value given under the alias is refused under the name it was given."""
    return dataclasses.field(default=None, metadata={"alias_of": of, "range": range})


@dataclass
class AlgorithmConfig:
    """The base of every algorithm's config (`conf/algorithm/<name>.yaml` extends one of them)."""

    name: str = MISSING


# -- state ------------------------------------------------------------------------------------------

def _saved(value: Any) -> Any:
    """A state value as a checkpoint holds it (tensors by reference, as torch.save writes them)."""
    if isinstance(value, torch.Generator):
        return {"generator_state": value.get_state()}
    if isinstance(value, (list, tuple)):
        return type(value)(_saved(v) for v in value)
    if isinstance(value, dict):
        return {k: _saved(v) for k, v in value.items()}
    return value


def _restored(saved: Any, current: Any) -> Any:
    """`saved` as the attribute's new value: tensors copied, a generator's state set in place."""
    if isinstance(current, torch.Generator):
        current.set_state(saved["generator_state"])
        return current
    if torch.is_tensor(saved):
        return saved.clone()
    if isinstance(saved, (list, tuple)):
        olds = current if isinstance(current, (list, tuple)) and len(current) == len(saved) else [None] * len(saved)
        return type(saved)(_restored(v, o) for v, o in zip(saved, olds))
    if isinstance(saved, dict):
        olds = current if isinstance(current, dict) else {}
        return {k: _restored(v, olds.get(k)) for k, v in saved.items()}
    return saved


def _tensors(value: Any):
    if torch.is_tensor(value):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


class Algorithm:
    name = "base"
    # How "the mean of clients' models" is weighted in evaluation: FedDyn's code weights by
    # data size for FedAvg/FedProx and uniformly for FedDyn and SCAFFOLD.
    weighted_mean = True
    # Client state that `upload` moved by the message it returned: {message name: attribute
    # holding a (num_clients, d) tensor whose row k moved by that message}; `sent` reads it.
    upload_state: dict[str, str] = {}

    # -- state: the attributes a checkpoint saves, each class listing its own (a subclass adds to
    # its bases': the saved state is the union along the MRO). Tensors, lists / dicts of them,
    # numbers and torch.Generator (its state) are saved by `state_dict` and restored by
    # `load_state_dict`; an attribute that is None is not saved (FedOpt's v under SGD).
    state_fields: tuple[str, ...] = ("theta",)

    # -- capabilities (read by fedrepro.config: validation, executor, run key; `register` may
    # override them per name; registry.entry(name).<capability> gives a name's value)
    # Local steps replace the data gradient (a LocalRule) or take a prox after each step: the
    # executor `auto` resolves to sequential (config.resolved_executor), never batched.
    per_step_rule = False
    # A server optimizer on the averaged update (FedOpt: fedavgm, fedadam, ...).
    server_optimizer = False
    # None: attack=dlg can attack its uploads (one of attacks.upload.OBSERVED's messages);
    # else why not (said in the error: "attack=dlg cannot attack algorithm=X: <reason>").
    not_attackable: Optional[str] = None
    # None, or what every client taking part in every round is needed for ("every client in
    # every iteration (Algorithm 1)"): validate then refuses partial participation.
    full_participation: Optional[str] = None
    # False: not a federated algorithm (the centralized baseline): the run key leaves out the
    # federation's keys, and no round loop runs it (build_algorithm refuses it).
    federated = True

    @classmethod
    def from_config(cls, params: dict) -> "Algorithm":
        """The algorithm of a resolved config node (a dict with `name`): by default the
        constructor takes every field but `name` as a keyword."""
        return cls(**{k: v for k, v in params.items() if k != "name"})

    @classmethod
    def check_config(cls, params: dict) -> None:
        """Checks across fields that `param`'s range and choices cannot say (raise ConfigError
        naming the problem and the fix); `params` is the resolved config node."""

    @classmethod
    def state_names(cls) -> tuple[str, ...]:
        """Every class's `state_fields` along the MRO, bases first, each name once."""
        names: list[str] = []
        for klass in reversed(cls.__mro__):
            for name in klass.__dict__.get("state_fields", ()):
                if name not in names:
                    names.append(name)
        return tuple(names)

    def local_lr(self, lr: float) -> float:
        """The step size of this round's local steps, given the scheduled lr (L2GD: eta / (n (1 - p)))."""
        return lr

    def personalized(self):
        """The clients' personalized models (`Personalized`) for the evaluation's
        `personal_*` columns, or None when the algorithm has none (all but L2GD)."""
        return None

    def sent(self, k: int, name: str, message: torch.Tensor, used: torch.Tensor) -> None:
        """Client k's upload `name` reached the server as `used` (what the server decoded, or
        EF21's estimate) instead of `message`, the value `upload` returned. Client state that
        `upload` moved by the message (`upload_state`) moves by `used - message` too, so
        client and server hold the same state, built from what was sent (FIDELITY.md: the
        client's own state follows what was sent, as with the epsilon threshold). Called by
        the engine only when compression changed the message."""
        attr = self.upload_state.get(name)
        if attr is not None:
            getattr(self, attr)[k] += used - message

    def setup(self, fed: Federation, theta0: torch.Tensor) -> None:
        self.fed = fed
        self.theta = theta0.clone()
        self.round, self.lr, self.base_lr = 0, 0.0, 0.0

    def begin_round(self, t: int, lr: float, base_lr: float) -> None:
        """Round t (0-based) starts; local steps use `lr` (the undecayed rate is `base_lr`)."""
        self.round, self.lr, self.base_lr = t, lr, base_lr

    def local_steps(self, k: int, own_steps: int, equal_steps: int) -> int:
        """Local steps of client k: `own_steps` = epochs over its own data (FedAvg, FedDyn);
        `equal_steps` = the same for a client of mean size, for methods with a fixed K."""
        return own_steps

    def server_model(self) -> torch.Tensor:
        return self.theta

    def server_is_selected_mean(self) -> bool:
        """True when, its uploads arriving unaltered, the new server model is in exact arithmetic
        the selected clients' `client_weights` mean of their models (FedAvg: theta + sum_k w_k
        (w_k - theta)). Evaluation then scores that model once, as the papers' code does; the
        two computed forms differ only by float rounding."""
        return False

    def broadcast(self) -> dict[str, torch.Tensor]:
        return {"model": self.theta}

    def local_objective(self, k: int, received: dict[str, torch.Tensor]) -> LocalObjective:
        return LocalObjective(anchor=received["model"])

    def pre_upload(self, k: int, received: dict[str, torch.Tensor],
                   full_gradient: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        """Optional first phase of a round: client k's message before local training
        (ledger: uplink). `full_gradient(v)` is the mean data gradient over all of client k's
        samples at v. Empty (the default): the round has one phase."""
        return {}

    def pre_aggregate(self, selected: torch.Tensor, uploads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The server's reply to the first phase, sent to every selected client (ledger:
        downlink) and merged into what they received before local training."""
        return {}

    def upload(self, k: int, w: torch.Tensor, steps: int, received: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Client k's message after `steps` local steps ended at `w` (and its state update)."""
        raise NotImplementedError

    def aggregate(self, selected: torch.Tensor, uploads: dict[str, torch.Tensor]) -> None:
        """`uploads[name]` is (len(selected), d): the messages as the server received them."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        """{name: value} of `state_names()` (None values left out): what a checkpoint saves."""
        values = ((name, getattr(self, name)) for name in self.state_names())
        return {name: _saved(value) for name, value in values if value is not None}

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` saved (tensors copied: the checkpoint's stay untouched)."""
        missing = [n for n in self.state_names() if n not in state and getattr(self, n, None) is not None]
        if missing:
            raise KeyError(f"{type(self).__name__}'s state lacks {missing} (it holds {sorted(state)})")
        for name in self.state_names():
            if name in state:
                setattr(self, name, _restored(state[name], getattr(self, name, None)))

    def memory_bytes(self) -> int:
        """Bytes of the server and client state the algorithm holds (its state_dict's tensors)."""
        return sum(v.numel() * v.element_size() for v in _tensors(self.state_dict()))

    def client_weights(self, clients: torch.Tensor) -> torch.Tensor:
        """Averaging weights over `clients` (sum to 1) for the evaluated client means."""
        if self.weighted_mean:
            n = self.fed.client_sizes[clients]
            return n / n.sum()
        return torch.full((len(clients),), 1.0 / len(clients))
