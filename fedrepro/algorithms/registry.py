"""The algorithm registry: config name -> (class, config dataclass, capabilities).

Every module of this package registers its algorithms where it defines them:

    @register("fedprox", "fen_alg1", config=FedProxConfig)
    class FedProx(FedAvg): ...

Several names may share a class and a config (FedElasticNet's Algorithm 1 is FedProx with l1 on:
`fen_alg1` differs from `fedprox` only in its YAML's values), and a name may override a
capability of its class (`per_step_rule=False`). The registry finds the algorithms itself: the
first lookup imports every module of fedrepro/algorithms (`discover`), so a new algorithm is one
module here and one YAML in conf/algorithm/ (docs/adding_an_algorithm.md), and no list of names
lives anywhere else. fedrepro.config builds its Hydra schemas (`schema/algorithm/<name>`) and its
validation from `entries()`.
"""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedrepro.algorithms.base import Algorithm, AlgorithmConfig
from fedrepro.errors import ConfigError

# The capabilities a registration may override for its names (class attributes of Algorithm).
CAPABILITIES = ("per_step_rule", "server_optimizer", "not_attackable", "full_participation", "federated")


@dataclass(frozen=True)
class Entry:
    """One registered name: its class, its config dataclass, and its capabilities (the class's,
    unless the registration overrode them for this name)."""

    name: str
    cls: type
    config: type
    overrides: tuple = ()  # ((capability, value), ...)

    def __getattr__(self, item: str) -> Any:
        if item in CAPABILITIES:
            return dict(self.overrides).get(item, getattr(self.cls, item))
        raise AttributeError(item)

    def params(self) -> dict[str, dataclasses.Field]:
        """The config's fields but `name`, each with its `param` metadata (range, choices, null, note)."""
        return {f.name: f for f in dataclasses.fields(self.config) if f.name != "name"}

    def declared(self, what: str) -> dict[str, Any]:
        """{field: its `param(<what>=...)`} for what in range, choices, null, note."""
        return {key: f.metadata[what] for key, f in self.params().items() if what in f.metadata}

    def aliases(self) -> dict[str, str]:
        """{alias: the field it names} ({"mu": "lambda2"} for FedProx; base.alias)."""
        return {key: f.metadata["alias_of"] for key, f in self.params().items() if "alias_of" in f.metadata}

    def class_params(self, params: dict) -> dict:
        """A resolved config node as the class's `from_config` takes it: each alias dropped and its
        field's value passed under the alias instead, the paper's name the class is written in
        (FedProx(mu=...), FedDyn(alpha=...))."""
        params = dict(params)
        for alias, field_name in self.aliases().items():
            params.pop(alias, None)
            params[alias] = params.pop(field_name)
        return params

    @property
    def choices(self) -> dict[str, tuple]:
        """The values each string field may take ({"transmit": ("model", "update")})."""
        return self.declared("choices")

    @property
    def ranges(self) -> dict[str, str]:
        """The range of each numeric field ({"mu": ">= 0"})."""
        return self.declared("range")


_ENTRIES: dict[str, Entry] = {}
_discovered = False


def register(*names: str, config: type, **overrides: Any):
    """Class decorator: `names` run this class, configured by `config` (a dataclass extending
    AlgorithmConfig); keyword arguments override capabilities for these names only."""
    if not names:
        raise TypeError("register needs at least one algorithm name")
    if not (dataclasses.is_dataclass(config) and issubclass(config, AlgorithmConfig)):
        raise TypeError(f"config={config!r} must be a dataclass extending AlgorithmConfig")
    unknown = sorted(set(overrides) - set(CAPABILITIES))
    if unknown:
        raise TypeError(f"register: {unknown} are no capabilities; these are: {', '.join(CAPABILITIES)}")

    def decorate(cls: type) -> type:
        if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
            raise TypeError(f"@register decorates Algorithm subclasses, not {cls!r}")
        for name in names:
            old = _ENTRIES.get(name)
            # the same class registering again (its module run as __main__, or reloaded) replaces itself
            if old is not None and old.cls.__qualname__ != cls.__qualname__:
                raise ValueError(f"algorithm name {name!r} is taken by {old.cls.__module__}.{old.cls.__qualname__}")
            _ENTRIES[name] = Entry(name, cls, config, tuple(sorted(overrides.items())))
        return cls

    return decorate


def unregister(*names: str) -> None:
    """Forget `names` (tests that register an algorithm of their own)."""
    for name in names:
        _ENTRIES.pop(name, None)


def discover() -> None:
    """Import every module of fedrepro/algorithms once, so that their `@register`s have run.
    (Lazily, not when the package is imported: `python -m fedrepro.algorithms.l2gd` then runs its
    module fresh.)"""
    global _discovered
    if _discovered:
        return
    package = __name__.rpartition(".")[0]  # fedrepro.algorithms
    for info in pkgutil.iter_modules([str(Path(__file__).resolve().parent)]):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package}.{info.name}")
    _discovered = True


def entries() -> dict[str, Entry]:
    """Every registered name -> its Entry, in registration order."""
    discover()
    return dict(_ENTRIES)


def entry(name: str) -> Entry:
    """The Entry of `name`, or a ConfigError saying how to register one."""
    found = entries().get(name)
    if found is None:
        raise ConfigError(f"algorithm {name!r} is not registered; choose one of: {', '.join(entries())} "
                          f"(a new one: @register({name!r}, config=...) in a module of fedrepro/algorithms, "
                          f"docs/adding_an_algorithm.md)")
    return found


def _plain(cfg: Any) -> dict:
    """A config node as a dict, interpolations resolved (`coin_seed: ${seed}`)."""
    if isinstance(cfg, dict):
        return dict(cfg)
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)


def build_algorithm(cfg: Any) -> Algorithm:
    """The algorithm of `cfg` (the `algorithm` node of a run's config, or a dict with `name`)."""
    params = _plain(cfg)
    found = entry(params["name"])
    if not found.federated:
        raise ConfigError(f"algorithm={found.name} is not federated: fedrepro.runner runs it "
                          f"(run_experiment), not the round loop")
    algorithm = found.cls.from_config(found.class_params(params))
    algorithm.name = found.name
    return algorithm
