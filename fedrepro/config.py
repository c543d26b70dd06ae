"""Structured configs: the schema behind `conf/`, its validation, and the run's identity.

Hydra composes `conf/config.yaml` with one choice per config group; every group's YAML
extends a dataclass stored as `schema/<group>/<name>`, so a misspelled key fails at
start ("Key 'mux' not in 'FedProxConfig'") and an unknown choice lists the valid ones.
The algorithms' dataclasses live beside their algorithms (fedrepro/algorithms/, one module
each): the registry (fedrepro/algorithms/registry.py) gives their schemas, the ranges and
choices of their fields, and their capabilities; this module names no algorithm.
`validate` then checks values (every number finite and in its range, enumerations) and
raises ConfigError naming the valid values. `run_key` hashes what determines a run's
result (not where it is logged).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Optional

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import MISSING, DictConfig, OmegaConf

from fedrepro.algorithms import registry
from fedrepro.algorithms.base import AlgorithmConfig
from fedrepro.engine.precision import DEFAULT_PRECISION, PRECISIONS, UNSUPPORTED_PRECISIONS
from fedrepro.errors import ConfigError
from fedrepro.settings import INITS, LABEL_MODES, LOSS_SCALES, Effective


def _older(given: Any, default: Any) -> Any:
    """`${fedrepro.older:${.device},cpu}`, the default of a field with an older name: the older
    name's value where one was given (not null), else `default`."""
    return default if given is None else given


OmegaConf.register_new_resolver("fedrepro.older", _older, replace=True)


@dataclass
class DatasetConfig:
    name: str = MISSING
    download: bool = True  # try torchvision's download when files are missing


@dataclass
class ShakespeareConfig(DatasetConfig):
    """FedDyn's Shakespeare: 100 speaking roles with > 2000 train / 400 test samples, each
    a seeded contiguous crop of 2000 / 400 (docs/datasets/shakespeare.md)."""

    name: str = "shakespeare"
    source: str = "tff"  # tff (TFF's h5 files) | leaf (LEAF's json)
    num_clients: int = 100
    train_per_client: int = 2000
    test_per_client: int = 400
    seq_len: int = 80
    seed: int = 0  # role selection and crops


@dataclass
class BinaryViewConfig(DatasetConfig):
    """HAR / ESR: `binary` is LoSAC's two-class view of the DLG study."""

    binary: bool = False
    seed: int = 0  # ESR's stratified 9 200 / 2 300 split (unused by HAR)


@dataclass
class LibsvmConfig(DatasetConfig):
    require_test: bool = False  # False: without the .t file, test on the training set (said in the source)


@dataclass
class SyntheticFedDynConfig(DatasetConfig):
    """FedDyn App. A.1.1's multiclass logistic data (docs/datasets/synthetic.md)."""

    name: str = "synthetic_feddyn"
    heterogeneity: str = "homogeneous"  # homogeneous | type1 | type2 | type3
    num_devices: int = 20
    samples_per_device: int = 200
    num_features: int = 30
    num_classes: int = 5
    gamma1: float = 1.0
    gamma2: float = 1.0
    gamma3: float = 1.0
    test_per_device: int = 200  # 0: test on the training set (FedDyn's code)
    min_samples: int = 10  # smallest device (A.1.1's batch size)
    seed: int = 0


@dataclass
class LowRankConfig(DatasetConfig):
    """LoSAC V-E's matrix sensing: y = <X_G, D> + noise, X_G = diag(I_rank, 0)."""

    name: str = "lowrank"
    d: int = 64
    rank: int = 8
    num_clients: int = 100
    samples_per_client: int = 100
    test_samples: int = 2000
    mean: float = 0.1
    noise: float = 0.1
    seed: int = 0


@dataclass
class SplitConfig:
    kind: str = "iid"  # iid | dirichlet | shards | mixed | natural (the dataset's own clients)
    alpha: float = 0.3  # Dirichlet concentration
    balance: str = "balanced"  # balanced | lognormal
    sigma: float = 0.0  # lognormal client-size spread (FedDyn's unbalanced_sgm)
    shards_per_client: int = 2
    sorted_fraction: float = 0.0  # LoSAC's c: share of the data sorted by label


@dataclass
class ModelConfig:
    name: str = MISSING  # one of CHOICES["model.name"] (docs/models.md)
    hidden: list[int] = field(default_factory=list)


@dataclass
class ParticipationConfig:
    mode: str = "bernoulli"  # bernoulli (FedDyn's act_prob) | fixed (cohort of fixed size)
    rate: float = 0.1  # bernoulli: each client's probability; fixed: cohort = round(rate * m)
    cohort_size: Optional[int] = None  # fixed mode: explicit cohort size (overrides rate)


# The compressors of fedrepro/compression (compressors.KINDS holds the same tuple, tested).
COMPRESSOR_CHOICES = ("none", "natural", "qsgd", "terngrad", "bernoulli", "topk", "randk", "threshold", "sign")
FEEDBACK_CHOICES = ("none", "ef", "ef21")


@dataclass
class CompressorConfig:
    """What crosses the network (docs/compression.md). `name` is the uplink compressor (what
    `compressor=<preset>` picks), `downlink` the broadcast's; the parameters serve both."""

    name: str = "none"  # uplink: none | natural | qsgd | terngrad | bernoulli | topk | randk | threshold | sign
    downlink: str = "none"  # broadcasts: same choices
    levels: int = 256  # qsgd: s, the number of levels of |x_i| / ||x||_2
    k: Optional[int] = None  # topk / randk: coordinates kept (null: k_fraction of d)
    k_fraction: float = 0.01  # topk / randk: k = ceil(k_fraction * d) when k is null
    keep_prob: float = 0.5  # bernoulli: q, the probability of keeping (values scaled by 1/q)
    bernoulli_draw: str = "vector"  # vector (one draw per message, the L2GD authors' framework) | coordinate
    epsilon: float = 1.0e-3  # threshold: entries |x_i| <= epsilon are sent as 0
    error_feedback: str = "none"  # uplink: none | ef | ef21 (= the L2GD paper's shifted differences, 7.2)
    downlink_error_feedback: str = "none"  # none | ef | ef21 (ef21 needs full participation)


@dataclass
class ProfileConfig:
    """Caps applied on top of the paper setting in `train` (null = keep the paper's value)."""

    name: str = MISSING
    max_rounds: Optional[int] = None
    max_local_epochs: Optional[int] = None
    max_local_steps: Optional[int] = None
    max_test_samples: Optional[int] = None
    max_train_eval_samples: Optional[int] = None
    min_eval_every: Optional[int] = None


@dataclass
class LoggerConfig:
    """Where a run is reported; never in the run key (`_NOT_IN_KEY`): W&B's fields change no result."""

    name: str = "csv"  # csv | wandb (CSV is always written)
    wandb_project: str = "fedrepro"
    wandb_mode: str = "offline"  # offline | online | disabled
    # W&B's group: a target's name; null: the sweep folder's name in a multirun, else no group
    group: Optional[str] = None
    paper: Optional[str] = None  # the paper a target reproduces: a W&B tag (beside profile, dataset, split)
    progress: bool = True


@dataclass
class AttackConfig:
    """An attack on one client's upload during the run (fedrepro/attacks/upload.py). The defaults
    are LoSAC Sec. V-D's DLG: client 1's round-5 upload, 100 GD steps of eta_d = 1e-3."""

    name: str = "none"  # none | dlg
    client: int = 0  # the attacked client's index (0-based)
    round: int = 5  # 1-based; the client's first upload in this round or later is attacked
    iterations: int = 100
    lr: float = 1.0e-3  # eta_d, the attacker's gradient-descent step
    label_mode: str = "known"  # known | infer (iDLG, one sample) | soft | auto (dlg_attack)
    loss_scale: str = "mean"  # the dummy loss: batch mean (what our clients use) | sum
    init: str = "normal"  # the dummy data's start: normal | uniform | zeros (seeded by `seed`)
    dtype: str = "float64"  # float64: the distance moves by ~1e-6 of itself at the paper's eta_d


@dataclass
class TrainConfig:
    """Local training and the round loop (defaults: FedDyn's MNIST, 10 % participation)."""

    num_clients: int = 100
    rounds: int = 100
    local_epochs: int = 10
    local_steps: Optional[int] = None  # a fixed number of local steps instead of epochs
    batch_size: int = 50
    lr: float = 0.1
    lr_decay: float = 0.998  # lr in round t = lr * lr_decay ** t
    weight_decay: float = 1e-4
    clip_norm: Optional[float] = 10.0  # gradient clipping by global norm (null = off)
    eval_every: int = 1
    checkpoint_every: int = 10
    # also checkpoint once this much training time has passed since the last one, so a run of
    # slow rounds (Shakespeare at 100 %: minutes each) loses little when its session ends
    checkpoint_minutes: Optional[float] = 10.0
    # auto: batched for the models it serves (MLP, logistic regression, no augmentation) under
    # algorithms without per-step rules, sequential otherwise (`resolved_executor`)
    executor: str = "auto"  # auto | sequential | batched (fedrepro/engine/batched.py)
    # clients the sequential executor trains at once on the CPU, one torch thread each (null:
    # torch's thread count); each client's numbers are the one-thread ones whatever this is, so
    # it is not in the run key (engine/local.py)
    client_threads: Optional[int] = None
    # Lightning's knobs, passed to Fabric (run.py); what this machine cannot run is refused at
    # start (`check_machine`). Each of the first two has an older name (`TRAIN_ALIASES`): unset,
    # the field takes the older name's value (the `${fedrepro.older:...}` default), set to
    # another value it is refused; the run key hashes the accelerator under `device` (every run
    # stored before holds device: cpu) and leaves devices / processes out.
    accelerator: str = "${fedrepro.older:${.device},cpu}"  # cpu | cuda | gpu | mps | auto (Fabric's names)
    # processes (cpu) or GPUs (cuda) the round's clients are sharded across (engine/sharded.py):
    # the same numbers as one, so not in the run key
    devices: int = "${fedrepro.older:${.processes},1}"  # type: ignore[assignment]
    # 32-true | bf16-mixed | 16-mixed (CUDA): mixed runs the forward passes under autocast
    # (engine/precision.py); in the run key unless 32-true
    precision: str = DEFAULT_PRECISION
    device: Optional[str] = None  # train.accelerator's older name (null: not given)
    processes: Optional[int] = None  # train.devices' older name (null: not given)


@dataclass
class MetricsConfig:
    entropy: str = "pooled"  # pooled (FedElasticNet's reading) | per_client
    bin_width: float = 0.01
    lossless: str = "zstd"  # each message's bytes after a real coder: zstd | lzma | none (off)


@dataclass
class Config:
    dataset: DatasetConfig = MISSING
    split: SplitConfig = MISSING
    model: ModelConfig = MISSING
    algorithm: AlgorithmConfig = MISSING
    participation: ParticipationConfig = MISSING
    compressor: CompressorConfig = MISSING
    attack: AttackConfig = MISSING
    profile: ProfileConfig = MISSING
    logger: LoggerConfig = MISSING
    train: TrainConfig = field(default_factory=TrainConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    seed: int = 0
    data_root: str = "data"
    results_root: str = "results"
    # A paper setting's values per algorithm ({"fen_alg1": {"lambda2": 1.0e-6}}), set by its
    # conf/experiment/ file; each algorithm YAML reads its own (${oc.select:per_algorithm.<name>.<key>,
    # default}). Not in the run key: what it sets is.
    per_algorithm: dict[str, Any] = field(default_factory=dict)


# The schemas of every group but `algorithm`, whose schemas are the registered algorithms' configs
# (`schemas()`: `schema/algorithm/<name>` for every registered name).
SCHEMAS: dict[str, dict[str, type]] = {
    "dataset": {"dataset": DatasetConfig, "shakespeare": ShakespeareConfig, "binary_view": BinaryViewConfig,
                "libsvm": LibsvmConfig, "synthetic_feddyn": SyntheticFedDynConfig, "lowrank": LowRankConfig},
    "split": {"split": SplitConfig},
    "model": {"model": ModelConfig},
    "participation": {"participation": ParticipationConfig},
    "compressor": {"compressor": CompressorConfig},
    "attack": {"attack": AttackConfig},
    "profile": {"profile": ProfileConfig},
    "logger": {"logger": LoggerConfig},
}


def schemas() -> dict[str, dict[str, type]]:
    """SCHEMAS with the `algorithm` group: each registered name's config dataclass."""
    algorithms = {name: e.config for name, e in registry.entries().items()}
    return {**SCHEMAS, "algorithm": algorithms}


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    for group, named in schemas().items():
        for name, node in named.items():
            cs.store(group=f"schema/{group}", name=name, node=node)


# Lightning Fabric's accelerator names (gpu: CUDA, else Apple's MPS; auto: the best one here).
ACCELERATORS = ("cpu", "cuda", "gpu", "mps", "auto")
# train fields with an older name (older -> field): the older name still sets the field (the
# field's default is `${fedrepro.older:...}`), both set to different values are refused, and
# the run key hashes the value under the name it had when the stored runs were made
# (`identity`): `device`; devices / processes are not in the key.
TRAIN_ALIASES = {"device": "accelerator", "processes": "devices"}

# Values that are free text in YAML but must come from a fixed set.
CHOICES = {
    "split.kind": ("iid", "dirichlet", "shards", "mixed", "natural"),
    "split.balance": ("balanced", "lognormal"),
    "model.name": ("mlp", "logistic", "binary_logistic", "cnn_cifar", "lstm", "resnet18_gn", "resnet18",
                   "resnet56", "densenet121", "mobilenet", "matrix"),
    "participation.mode": ("bernoulli", "fixed"),
    "compressor.name": COMPRESSOR_CHOICES,
    "compressor.downlink": COMPRESSOR_CHOICES,
    "compressor.error_feedback": FEEDBACK_CHOICES,
    "compressor.downlink_error_feedback": FEEDBACK_CHOICES,
    "compressor.bernoulli_draw": ("vector", "coordinate"),
    "attack.name": ("none", "dlg"),
    "attack.label_mode": LABEL_MODES,
    "attack.loss_scale": LOSS_SCALES,
    "attack.init": INITS,
    "attack.dtype": ("float64", "float32"),
    "logger.name": ("csv", "wandb"),
    "logger.wandb_mode": ("offline", "online", "disabled"),
    "train.executor": ("auto", "sequential", "batched"),
    "train.accelerator": ACCELERATORS,
    "train.precision": PRECISIONS,
    "metrics.entropy": ("pooled", "per_client"),
    "metrics.lossless": ("zstd", "lzma", "none"),
}


# The allowed range of every numeric key: "> 0", ">= 1", or an interval "(0, 1]". Keys a
# config lacks (another dataset's) are skipped; null passes where the schema allows it
# (NULL_MEANS says what it means). Keys left out (seed, dataset.mean) take any finite value.
# Counts are ints, so ">= 1" is their "> 0". The algorithm's keys are declared on its config's
# fields (`param(range=..., null=..., note=...)`, fedrepro/algorithms/base.py): `algorithm_rules`.
RANGES: dict[str, str] = {
    "train.num_clients": ">= 1", "train.rounds": ">= 1", "train.local_epochs": ">= 0",
    "train.local_steps": ">= 1", "train.batch_size": ">= 1", "train.lr": "> 0",
    "train.lr_decay": "(0, 1]", "train.weight_decay": ">= 0", "train.clip_norm": "> 0",
    "train.eval_every": ">= 1", "train.checkpoint_every": ">= 1", "train.checkpoint_minutes": "> 0",
    "train.devices": ">= 1", "train.processes": ">= 1", "train.client_threads": ">= 1",
    "metrics.bin_width": "> 0",
    "participation.rate": "(0, 1]", "participation.cohort_size": ">= 1",
    "split.alpha": "> 0", "split.sigma": ">= 0", "split.shards_per_client": ">= 1",
    "split.sorted_fraction": "[0, 1]",
    "compressor.levels": ">= 1", "compressor.k": ">= 1", "compressor.k_fraction": "(0, 1]",
    "compressor.keep_prob": "(0, 1]", "compressor.epsilon": ">= 0",
    **{f"profile.{key}": ">= 1" for key in ("max_rounds", "max_local_epochs", "max_local_steps",
                                            "max_test_samples", "max_train_eval_samples", "min_eval_every")},
    "attack.client": ">= 0", "attack.round": ">= 1", "attack.iterations": ">= 0", "attack.lr": "> 0",
    # dataset generators' options (fedrepro/data/synthetic.py, shakespeare.py); seeds feed numpy's
    # default_rng, which refuses negative ones
    **{f"dataset.{key}": ">= 1" for key in (
        "num_clients", "train_per_client", "test_per_client", "seq_len", "num_devices",
        "samples_per_device", "num_features", "min_samples", "d", "rank", "samples_per_client",
        "test_samples")},
    "dataset.num_classes": ">= 2", "dataset.test_per_device": ">= 0", "dataset.seed": ">= 0",
    **{f"dataset.{key}": ">= 0" for key in ("gamma1", "gamma2", "gamma3", "noise")},
}
# What null means for the optional keys (inf would work for some caps, but null is the way to say it).
NULL_MEANS = {
    "train.local_steps": "local_epochs instead", "train.clip_norm": "no clipping",
    "train.checkpoint_minutes": "no timed checkpoints", "participation.cohort_size": "from rate",
    "train.processes": "not given: train.devices decides",
    "train.client_threads": "torch's thread count",
    "compressor.k": "from k_fraction",
    **{f"profile.{key}": "no cap" for key in ("max_rounds", "max_local_epochs", "max_local_steps",
                                              "max_test_samples", "max_train_eval_samples", "min_eval_every")},
}
_ABSENT = object()


def _get(cfg: DictConfig, dotted: str) -> Any:
    return OmegaConf.select(cfg, dotted)


def _admits(spec: str, value: float) -> bool:
    if spec.startswith(">="):
        return value >= float(spec[2:])
    if spec.startswith(">"):
        return value > float(spec[1:])
    lo, hi = (float(x) for x in spec[1:-1].split(","))
    return (lo <= value if spec[0] == "[" else lo < value) and (value <= hi if spec[-1] == "]" else value < hi)


def algorithm_rules(name: str) -> tuple[dict[str, str], dict[str, str], dict[str, tuple], dict[str, str]]:
    """The ranges, null meanings, choices and notes of algorithm `name`'s keys ("algorithm.mu": ...),
    from its config's fields (`param`). Empty for a name nothing registered."""
    found = registry.entries().get(name)
    if found is None:
        return {}, {}, {}, {}
    return tuple({f"algorithm.{key}": value for key, value in found.declared(what).items()}
                 for what in ("range", "null", "choices", "note"))


def _allowed(key: str, finite: bool = False, cfg: Optional[DictConfig] = None) -> str:
    """What `key` may be, as the error message says it (`cfg` names the algorithm of algorithm.* keys)."""
    ranges, nulls, notes = RANGES, NULL_MEANS, {}
    if cfg is not None and key.startswith("algorithm."):
        ranges, nulls, _, notes = algorithm_rules(_get(cfg, "algorithm.name"))
    spec = ranges.get(key)
    text = "a finite number" if finite else ""
    if spec is not None:
        text = f"{text} {'in ' if spec[0] in '([' else ''}{spec}".strip()
    if key in nulls:
        text += f", or null ({nulls[key]})"
    if key in notes:
        text += f": {notes[key]}"
    return text


def _leaves(node: Any, prefix: str = ""):
    """(dotted key, value) of every scalar of a resolved config, list items as key[i]."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, f"{prefix}[{i}]")
    else:
        yield prefix, node


def _check_finite(cfg: DictConfig) -> None:
    # Everywhere, not only the keys of RANGES: nan passes every comparison unnoticed (nan <= 0
    # is False) and would surface only as a diverged round.
    for key, value in _leaves(OmegaConf.to_container(cfg, resolve=True)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{key}={value} is invalid: it must be {_allowed(key, finite=True, cfg=cfg)}")


def _check_ranges(cfg: DictConfig) -> None:
    for key, spec in {**RANGES, **algorithm_rules(cfg.algorithm.name)[0]}.items():
        value = OmegaConf.select(cfg, key, default=_ABSENT)
        if value is _ABSENT or value is None:  # not this config's key, or null where the schema allows it
            continue
        if not _admits(spec, value):
            raise ConfigError(f"{key}={value} is invalid: it must be {_allowed(key, cfg=cfg)}")


def _validate_algorithm(cfg: DictConfig) -> None:
    """The algorithm's own rules: registered, its node holds its config's keys, its fields' choices,
    and its `check_config`."""
    name = cfg.algorithm.name
    found = registry.entry(name)
    keys, declared = set(cfg.algorithm), {f.name for f in dataclasses.fields(found.config)}
    if keys != declared:
        raise ConfigError(f"algorithm={name}: its YAML holds the keys {sorted(keys)}, its config "
                          f"{found.config.__name__} declares {sorted(declared)}: let the YAML extend "
                          f"/schema/algorithm/{name}@_here_")
    for key, allowed in algorithm_rules(name)[2].items():
        value = _get(cfg, key)
        if value is not None and value not in allowed:
            raise ConfigError(f"{key}={value!r} is not valid; choose one of: {', '.join(allowed)}")
    found.cls.check_config(OmegaConf.to_container(cfg.algorithm, resolve=True))


def apply_aliases(cfg: DictConfig) -> None:
    """Give each algorithm field the value set under its alias (`algorithm.mu=0.01` on FedProx sets
    `lambda2`; base.alias). Only a field nothing set yet takes it: one still holding its YAML's
    interpolation (`${oc.select:per_algorithm...}`): so an alias and its field both set can be told
    from an alias set over a default, and refused (by validate and run_key) when they disagree.
    compose_config and validate call this: `cfg.algorithm.lambda2` is the value the run uses."""
    node = cfg.algorithm
    for alias, field_name in registry.entry(node.name).aliases().items():
        if node[alias] is not None and OmegaConf.is_interpolation(node, field_name):
            node[field_name] = node[alias]


def _check_aliases(cfg: DictConfig) -> None:
    """A value given under an alias is checked under that name (the one typed), and must agree with
    its field's."""
    node = cfg.algorithm
    for alias, field_name in registry.entry(node.name).aliases().items():
        value = node[alias]
        if value is None:
            continue
        key, spec = f"algorithm.{alias}", registry.entry(node.name).ranges[alias]
        finite = math.isfinite(value)
        if not (finite and _admits(spec, value)):
            raise ConfigError(f"{key}={value} is invalid: it must be {_allowed(key, finite=not finite, cfg=cfg)}")
        if node[field_name] != value:
            raise ConfigError(_disagree(node.name, alias, value, field_name, node[field_name]))


def _disagree(name: str, alias: str, value: Any, field_name: str, field_value: Any) -> str:
    return (f"algorithm.{alias}={value} and algorithm.{field_name}={field_value} disagree: {alias} is "
            f"{name}'s other name of {field_name}; set only algorithm.{field_name}")


def _check_train_aliases(cfg: DictConfig) -> None:
    """train.device / train.processes (TRAIN_ALIASES): checked under the name typed, and refused
    when they disagree with train.accelerator / train.devices."""
    t = cfg.train
    for alias, field_name in TRAIN_ALIASES.items():
        value = t[alias]
        if value is None:
            continue
        key = f"train.{alias}"
        if field_name == "accelerator" and value not in ACCELERATORS:
            raise ConfigError(f"{key}={value!r} is not valid; choose one of: {', '.join(ACCELERATORS)}")
        if key in RANGES and not _admits(RANGES[key], value):
            raise ConfigError(f"{key}={value} is invalid: it must be {_allowed(key)}")
        if t[field_name] != value:
            raise ConfigError(_train_disagree(alias, value, field_name, t[field_name]))


def _train_disagree(alias: str, value: Any, field_name: str, field_value: Any) -> str:
    return (f"train.{alias}={value} and train.{field_name}={field_value} disagree: {alias} is the older "
            f"name of {field_name}; set only train.{field_name}")


def _check_precision(cfg: DictConfig) -> None:
    """Fabric's precision names this suite does not run, with the reason (unknown names: CHOICES)."""
    value = cfg.train.precision
    if value in UNSUPPORTED_PRECISIONS:
        raise ConfigError(f"train.precision={value} is not supported here: {UNSUPPORTED_PRECISIONS[value]}; "
                          f"choose one of: {', '.join(PRECISIONS)}")


def check_machine(cfg: DictConfig) -> None:
    """Refuse, before any training, the Lightning knobs this machine cannot run: an accelerator it
    lacks, more GPUs than it has, a precision its accelerator does not do (16-mixed off CUDA:
    Fabric would quietly run bf16-mixed on the CPU; bf16-mixed on a GPU without bfloat16).
    The runner asks it before a run that is not finished gets a folder; run.py again right
    before building Fabric."""
    import torch

    t = cfg.train
    name, devices, precision = t.accelerator, t.devices, t.precision

    def typed(field_name: str, alias: str) -> str:  # the name the value was given under
        given = t.get(alias) is not None and OmegaConf.is_interpolation(t, field_name)
        return f"train.{alias if given else field_name}={t[field_name]}"

    cuda = torch.cuda.is_available()
    mps = bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()
    asked, fix = typed("accelerator", "device"), "use train.accelerator=cpu"
    if name == "cuda" and not cuda:
        raise ConfigError(f"{asked} needs a CUDA GPU and this machine has none "
                          f"(torch.cuda.is_available() is False, torch {torch.__version__}): {fix}")
    if name == "gpu" and not (cuda or mps):
        raise ConfigError(f"{asked} needs a CUDA or MPS GPU and this machine has neither "
                          f"(torch.cuda.is_available() and torch.backends.mps.is_available() are False): {fix}")
    if name == "mps" and not mps:
        raise ConfigError(f"{asked} needs Apple's MPS backend, not available here "
                          f"(torch.backends.mps.is_available() is False): {fix}")
    # what Fabric runs `gpu` and `auto` on (its connector's order: MPS before CUDA)
    kind = {"gpu": "mps" if mps else "cuda", "auto": "mps" if mps else "cuda" if cuda else "cpu"}.get(name, name)
    if kind == "cuda" and devices > torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise ConfigError(f"{typed('devices', 'processes')} asks for {devices} CUDA GPUs and this machine has "
                          f"{count}: set train.devices={count} or less")
    if kind == "mps" and devices > 1:
        raise ConfigError(f"{typed('devices', 'processes')} on MPS: Apple's MPS backend is one device; "
                          f"set train.devices=1")
    if precision == "16-mixed" and kind != "cuda":
        raise ConfigError(f"train.precision=16-mixed needs a CUDA GPU (float16 autocast), and the run is "
                          f"on {kind} ({asked}): use train.precision=bf16-mixed or 32-true")
    if precision == "bf16-mixed" and kind == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"train.precision=bf16-mixed: this GPU ({torch.cuda.get_device_name()}) has no "
                          f"bfloat16 support (torch.cuda.is_bf16_supported() is False): use "
                          f"train.precision=16-mixed or 32-true")
    if precision == "bf16-mixed" and kind == "mps":
        raise ConfigError(f"train.precision=bf16-mixed is not run on MPS here (train.accelerator={name}): "
                          f"use train.precision=32-true")


def validate(cfg: DictConfig) -> None:
    """Raise ConfigError for the first invalid value, naming the valid ones: non-finite numbers
    anywhere, then choices, then the checks with a specific hint, then RANGES for the rest. What
    this machine cannot run is `check_machine`'s, asked only where a run is about to be computed
    (a finished run made on a GPU still reads back here)."""
    apply_aliases(cfg)
    _check_aliases(cfg)
    _check_train_aliases(cfg)
    _check_precision(cfg)
    _check_finite(cfg)
    for key, allowed in CHOICES.items():
        value = _get(cfg, key)
        if value not in allowed:
            raise ConfigError(f"{key}={value!r} is not valid; choose one of: {', '.join(allowed)}")
    if cfg.train.local_steps is None and cfg.train.local_epochs == 0:
        raise ConfigError("train.local_epochs=0 with train.local_steps=null trains nothing: set one of them > 0")
    rate = cfg.participation.rate
    if not 0 < rate <= 1:
        raise ConfigError(f"participation.rate={rate} is outside (0, 1]: use e.g. 0.1 for 10 % of the clients")
    size = cfg.participation.cohort_size
    if size is not None and not 1 <= size <= cfg.train.num_clients:
        raise ConfigError(f"participation.cohort_size={size} must be between 1 and train.num_clients={cfg.train.num_clients}")
    if cfg.split.kind == "dirichlet" and cfg.split.alpha <= 0:
        raise ConfigError(f"split.alpha={cfg.split.alpha} is invalid: the Dirichlet concentration must be > 0")
    if cfg.model.name == "mlp" and not cfg.model.hidden:
        raise ConfigError("model.name=mlp needs model.hidden, e.g. [200, 200]")
    if any(h <= 0 for h in cfg.model.hidden):
        raise ConfigError(f"model.hidden={list(cfg.model.hidden)} must hold positive layer widths")
    _validate_algorithm(cfg)
    _validate_compressor(cfg)
    needs = registry.entry(cfg.algorithm.name).full_participation
    if needs and not _everyone_takes_part(cfg):
        raise ConfigError(f"algorithm={cfg.algorithm.name} needs {needs}: use participation=p100")
    _validate_attack(cfg)
    _check_ranges(cfg)
    if cfg.train.executor == "batched" and cfg.model.name not in BATCHED_MODELS:
        raise ConfigError(f"train.executor=batched trains {', '.join(BATCHED_MODELS)} models, not "
                          f"model={cfg.model.name}: use train.executor=auto (it picks sequential here)")
    # valid: both names now hold the value, so a stored config.yaml answers under either (Table 5 reads
    # FedProx's `mu`; runs stored before lambda2 existed have only that)
    for alias, field_name in registry.entry(cfg.algorithm.name).aliases().items():
        cfg.algorithm[alias] = cfg.algorithm[field_name]


def _everyone_takes_part(cfg: DictConfig) -> bool:
    p, m = cfg.participation, cfg.train.num_clients
    if p.mode == "bernoulli":
        return p.rate == 1.0
    return (p.cohort_size if p.cohort_size is not None else max(1, int(p.rate * m + 0.5))) == m


def _validate_attack(cfg: DictConfig) -> None:
    a = cfg.attack
    if a.name == "none":
        return
    reason = registry.entry(cfg.algorithm.name).not_attackable
    if reason:
        raise ConfigError(f"attack={a.name} cannot attack algorithm={cfg.algorithm.name}: {reason}; use attack=none")
    if cfg.compressor.error_feedback == "ef21" and cfg.compressor.name != "none":
        raise ConfigError(f"attack={a.name} with compressor.error_feedback=ef21: the wire carries increments "
                          "of an estimate, not an update the attacker can read; use error_feedback=ef or none")
    if not 0 <= a.client < cfg.train.num_clients:
        raise ConfigError(f"attack.client={a.client} must be a client index in [0, {cfg.train.num_clients})")
    if a.round < 1 or a.iterations < 0 or a.lr <= 0:
        raise ConfigError(f"attack.round={a.round} must be >= 1, attack.iterations={a.iterations} >= 0 "
                          f"and attack.lr={a.lr} > 0")


def _validate_compressor(cfg: DictConfig) -> None:
    c = cfg.compressor
    if c.levels < 1:
        raise ConfigError(f"compressor.levels={c.levels} is invalid: qsgd needs s >= 1 levels")
    if c.k is not None and c.k < 1:
        raise ConfigError(f"compressor.k={c.k} is invalid: keep k >= 1 coordinates (or k=null and k_fraction)")
    if not 0 < c.k_fraction <= 1:
        raise ConfigError(f"compressor.k_fraction={c.k_fraction} must be in (0, 1]")
    if not 0 < c.keep_prob <= 1:
        raise ConfigError(f"compressor.keep_prob={c.keep_prob} must be in (0, 1]")
    if c.epsilon < 0:
        raise ConfigError(f"compressor.epsilon={c.epsilon} must be >= 0")
    if c.downlink_error_feedback == "ef21" and c.downlink != "none":
        if not _everyone_takes_part(cfg):
            raise ConfigError("compressor.downlink_error_feedback=ef21 needs every client to hear every "
                              "broadcast (the clients keep the server's estimate): use participation=p100, "
                              "or downlink_error_feedback=ef / none")


def effective(cfg: DictConfig) -> Effective:
    p, t = cfg.profile, cfg.train

    def cap(value, limit):
        return value if limit is None else min(value, limit)

    return Effective(
        rounds=cap(t.rounds, p.max_rounds),
        local_epochs=cap(t.local_epochs, p.max_local_epochs),
        local_steps=t.local_steps,
        max_local_steps=p.max_local_steps,
        eval_every=max(t.eval_every, p.min_eval_every or 1),
        max_test_samples=p.max_test_samples,
        max_train_eval_samples=p.max_train_eval_samples,
    )


# Keys that say where or how a run is reported, not what it computes.
_NOT_IN_KEY = ("logger", "data_root", "results_root")


# What an algorithm that is not federated (the centralized baseline) never reads: the federation.
_NOT_IN_UNFEDERATED = ("split", "participation", "compressor")
_TRAIN_NOT_IN_UNFEDERATED = ("num_clients", "rounds", "local_epochs", "local_steps", "lr_decay", "eval_every")


def _hashed_under_alias(cfg: DictConfig, algorithm: dict) -> None:
    """An aliased field is hashed under its alias (FedProx's lambda2 as `mu`, FedDyn's as `alpha`):
    the name those runs were stored under before the field had its FedElasticNet name, so their run
    keys stay. Archived configs from before hold only the alias."""
    found = registry.entries().get(algorithm.get("name"))
    for alias, field_name in (found.aliases() if found else {}).items():
        given = algorithm.pop(alias, None)
        if field_name not in algorithm:  # stored before the field was named so
            algorithm[alias] = given
            continue
        if given is not None and OmegaConf.is_interpolation(cfg.algorithm, field_name):
            algorithm[field_name] = given  # not applied yet (apply_aliases): the alias sets the field
        value = algorithm.pop(field_name)
        if given is not None and given != value:
            raise ConfigError(_disagree(algorithm["name"], alias, given, field_name, value))
        algorithm[alias] = value


def _train_hashed_under_older_names(train: dict) -> None:
    """Lightning's knobs in the key as every stored run has them: the accelerator under `device`
    (its name then; archived runs hold only `device: cpu`), devices / processes not at all (sharding
    gives the same numbers, tested), precision only when not 32-true (a mixed precision changes the
    numbers), client_threads not at all (the same numbers, tested). An older name that disagrees
    with its field is refused."""
    for alias, field_name in TRAIN_ALIASES.items():
        given, value = train.pop(alias, None), train.pop(field_name, None)
        if value is None:  # stored before the field existed
            value = given
        elif given is not None and given != value:
            raise ConfigError(_train_disagree(alias, given, field_name, value))
        if field_name == "accelerator" and value is not None:
            train["device"] = value
    if train.get("precision", DEFAULT_PRECISION) == DEFAULT_PRECISION:
        train.pop("precision", None)
    train.pop("client_threads", None)  # how many clients train at once: the same numbers


def identity(cfg: DictConfig) -> dict:
    data = OmegaConf.to_container(cfg, resolve=True)
    for key in _NOT_IN_KEY:
        data.pop(key, None)
    data.pop("per_algorithm", None)  # what it sets is in `algorithm` and `train`
    _hashed_under_alias(cfg, data["algorithm"])
    for when in ("checkpoint_every", "checkpoint_minutes"):  # when to save, not what is computed
        data["train"].pop(when, None)
    _train_hashed_under_older_names(data["train"])
    # how the clients are computed, not what: the batched executor agrees with the sequential one
    # to float rounding only, so it is keyed (as resolved: auto's sequential runs keep the keys
    # they had before auto existed)
    data["train"]["executor"] = resolved_executor(cfg)
    # Keys added with compression leave the key of a run that does not use them as it was:
    # nothing compressed in either direction -> the compressor's parameters change nothing;
    # the default lossless coder only adds columns.
    comp = data.get("compressor")
    if isinstance(comp, dict) and comp.get("name") == "none" and comp.get("downlink", "none") == "none":
        data["compressor"] = {"name": "none"}
    if data.get("attack", {}).get("name") == "none":  # no attack: the key as before attacks existed
        data.pop("attack")
    if isinstance(data.get("metrics"), dict) and data["metrics"].get("lossless") == MetricsConfig.lossless:
        data["metrics"].pop("lossless")
    if not registry.entry(data["algorithm"]["name"]).federated:
        for key in _NOT_IN_UNFEDERATED:
            data.pop(key, None)
        for key in _TRAIN_NOT_IN_UNFEDERATED:
            data["train"].pop(key, None)
    return data


# The models the batched executor trains (fedrepro/engine/batched.py). The algorithms whose local
# steps it leaves to the sequential executor (a LocalRule or a prox after every step) say so
# themselves (`per_step_rule`).
BATCHED_MODELS = ("mlp", "logistic", "binary_logistic")
AUGMENTED_DATASETS = ("cifar10", "cifar100")


def resolved_executor(cfg: DictConfig) -> str:
    """train.executor with `auto` decided: batched where it serves the run, else sequential."""
    choice = cfg.train.executor
    algorithm = registry.entry(cfg.algorithm.name)
    servable = (cfg.model.name in BATCHED_MODELS and not algorithm.per_step_rule
                and cfg.dataset.name not in AUGMENTED_DATASETS and algorithm.federated)
    if choice == "auto":
        return "batched" if servable else "sequential"
    return choice


def run_key(cfg: DictConfig) -> str:
    """A short stable hash of everything that determines the run's numbers."""
    blob = json.dumps(identity(cfg), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def compose_config(overrides: list[str] = ()) -> DictConfig:
    """The config `python -m fedrepro <overrides>` would run (for tables and tests)."""
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose(config_name="config", overrides=list(overrides))
    apply_aliases(cfg)
    return cfg
