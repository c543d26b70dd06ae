"""Writes conf/experiment/{feddyn,losac,l2gd}/*.yaml from those papers' settings modules.

    python -m experiments.experiment_configs            # (re)write the files
    python -m experiments.experiment_configs --check    # exit 1 if a file differs from what it would write
    python -m experiments.experiment_configs --verify   # also compose each file with each of its
                                                        # algorithms: the run key of the settings' cell

FedElasticNet's files (conf/experiment/fen/) are hand-kept, and its settings are read from them
(experiments/fedelasticnet/common.py). The other papers' settings are Python (recipes that compute
values), so their experiment files are derived from them here: one paper setting is the overrides
its settings module gives each algorithm of a table; what all share becomes the file's body, the
algorithm.* keys go to per_algorithm.<algorithm> (read by conf/algorithm/<algorithm>.yaml), and a
train key that differs by algorithm (FedDyn's local epochs) reads per_algorithm.<algorithm>.train.
tests/test_experiment_configs.py checks the files are what this writes and that they compose the
settings' runs.
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from fedrepro.config import CONF_DIR

EXPERIMENTS = CONF_DIR / "experiment"
GROUPS = ("dataset", "model", "split", "participation", "compressor", "algorithm")  # picked in `defaults`
SPLIT_NAMES = {"iid": "iid", "dirichlet0.6": "dir0.6", "dirichlet0.3": "dir0.3", "natural": "natural"}
PARTICIPATION_NAMES = {1.0: "p100", 0.1: "p10", 0.01: "p1"}


@dataclass(frozen=True)
class Setting:
    """One paper setting: its file name under conf/experiment/, what it is (the file's comment), and
    the overrides its settings module gives each algorithm (algorithm name -> overrides)."""

    name: str
    about: list[str]
    runs: dict[str, list[str]]


# ---------------------------------------------------------------------------------------------
# The settings of each paper's tables


def feddyn_settings() -> list[Setting]:
    """Every (setting, dataset, split) row of FedDyn Tables 1, 2, 4, 5 and 6, the four algorithms each."""
    from experiments.feddyn import settings
    from experiments.feddyn.common import RUN_COLS, load_table

    out: dict[str, Setting] = {}
    for number in (1, 2, 4, 5, 6):
        for _, r in load_table(number).drop_duplicates(RUN_COLS).iterrows():
            args = (r["dataset_key"], r["split_key"], r["participation"], int(r["num_devices"]), r["balance"])
            if r["dataset_key"] == "synthetic":
                words = r["setting"].split()  # "Homogeneous", "Type 1 Heterogeneous"
                name = "synthetic_" + ("homogeneous" if len(words) == 1 else f"type{words[1]}")
            else:
                name = "_".join([r["dataset_key"], SPLIT_NAMES[r["split_key"]], PARTICIPATION_NAMES[r["participation"]]])
                name += "_unbalanced" if r["balance"] == "unbalanced" else ""
                name += f"_{int(r['num_devices'])}clients" if int(r["num_devices"]) != 100 else ""
            about = [f"FedDyn Table {number} ({r['setting']}): {r['dataset_key']}, split {r['split_key'] or 'natural'}, "
                     f"{100 * r['participation']:g} % of {int(r['num_devices'])} devices, {r['balance']} (App. A.2)."]
            if name in out:
                out[name].about.append(about[0])
                continue
            runs = {alg: settings.run_overrides(*args, alg, r["setting"]) for alg in settings.ALGORITHMS}
            recipe = settings.recipe(r["dataset_key"], r["participation"], r["split_key"], *args[3:])
            about += [f"Assumed: {a}." for a in recipe.assumed]
            out[name] = Setting(f"feddyn/{name}", about, runs)
    return list(out.values())


def losac_settings() -> list[Setting]:
    """LoSAC Table II: one file per (dataset, M) with T = 5, the paper's default; Table II's columns
    are T = 2, 4, 6 (`train.local_steps=2`)."""
    from experiments.losac import settings

    out = []
    for dataset, recipe in settings.TABLE2.items():
        for m in settings.MS:
            runs = {method: recipe.overrides(method, m, 5) for method in settings.METHODS}
            about = [f"LoSAC Table II: {dataset}, non-IID (sorted by label), S = {recipe.cohort} of N = "
                     f"{recipe.num_clients}, M = {m} blocks (SCAFFOLD: batches of ceil(n_i / M)); T = 5 local "
                     "steps (the paper's default); Table II's columns: train.local_steps=2|4|6.",
                     *(f"Assumed: {a}." for a in [*settings.TABLE2_ASSUMED, *recipe.assumed])]
            out.append(Setting(f"losac/{dataset}_noniid_m{m}", about, runs))
    return out


def l2gd_settings(data_root: str | None = None) -> list[Setting]:
    """Figures 2-3 (l2-regularized logistic regression, a1a / a2a: eta from the data, so only the
    datasets here) and the CIFAR-10 models of Table 2 and Figures 4-11 (profile=paper's values)."""
    from experiments.l2gd import settings

    out = []
    for dataset, eta in logistic_etas(data_root).items():
        runs = {"l2gd": settings.logistic_overrides(dataset, "none", settings.P_FOR_LAMBDA, settings.LAMBDA_FOR_P, eta)}
        about = [f"L2GD Figures 2-3: {dataset}, {settings.NUM_WORKERS} workers, {settings.ITERATIONS} iterations; "
                 f"p = {settings.P_FOR_LAMBDA} and lambda = {settings.LAMBDA_FOR_P} are the sweeps' fixed values "
                 "(sweep algorithm.p or algorithm.lam); Fig. 3: compressor=natural.",
                 *(f"Assumed: {a}." for a in settings.LOGISTIC_ASSUMED)]
        out.append(Setting(f"l2gd/{dataset}", about, runs))
    for recipe in (settings.RESNET18, settings.DENSENET, settings.MOBILENET, settings.RESNET56):
        series = {"l2gd": "l2gd", "fedavg": "fedavg", "fedadam": "fedopt"}
        runs = {alg: recipe.overrides(key, "paper") for alg, key in series.items()}
        about = [f"L2GD Sec. 7.2 ({recipe.model}): CIFAR-10, {recipe.num_clients} clients, Dirichlet {recipe.alpha}, "
                 "profile=paper's batch and rounds; the compressor is the series' (Table 2: algorithm=l2gd "
                 "compressor=natural, algorithm=fedavg compressor=natural_shifted).",
                 f"Assumed: {settings.l2gd_assumed(recipe)}.", *(f"Assumed: {a}." for a in settings.CIFAR_ASSUMED)]
        out.append(Setting(f"l2gd/cifar10_{recipe.model}_{recipe.num_clients}clients", about, runs))
    return out


def logistic_etas(data_root: str | None) -> dict[str, float]:
    """{dataset: the sweeps' eta} for the logistic datasets whose files are here."""
    from experiments.l2gd import logistic, settings
    from fedrepro.data.loaders import default_data_root, unavailable

    root = data_root or default_data_root()
    return {d: logistic.constants(d, root)["eta"] for d in settings.LOGISTIC_DATASETS if unavailable(d, root) is None}


def all_settings(data_root: str | None = None) -> list[Setting]:
    return [*feddyn_settings(), *losac_settings(), *l2gd_settings(data_root)]


# ---------------------------------------------------------------------------------------------
# Overrides -> an experiment file


def parse_value(text: str) -> Any:
    """An override's value as Hydra reads it (the cases the settings modules write)."""
    if text in ("null", "None"):
        return None
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if text.startswith("[") and text.endswith("]"):
        return [parse_value(x.strip()) for x in text[1:-1].split(",") if x.strip()]
    return text


def yaml_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:  # 1e-05 -> 1.0e-05 (a float in any YAML)
            text = text.replace("e", ".0e", 1)
        return text
    if isinstance(value, list):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    return str(value)


def split_overrides(overrides: list[str]) -> tuple[dict[str, str], dict[str, Any]]:
    """({group: choice}, {dotted key: value}) of one run's overrides."""
    choices, keys = {}, {}
    for item in overrides:
        key, _, value = item.partition("=")
        if key in GROUPS:
            choices[key] = value
        elif "." in key:
            keys[key] = parse_value(value)
        else:
            raise ValueError(f"override {item!r}: neither a group choice ({', '.join(GROUPS)}) nor a dotted key")
    return choices, keys


def _canonical(algorithm: str, key: str) -> str:
    """An algorithm key under the name its YAML reads (an alias -> its field: FedDyn's alpha -> lambda2)."""
    from fedrepro.algorithms import registry

    return registry.entry(algorithm).aliases().get(key, key)


def experiment_yaml(setting: Setting, train_defaults: dict[str, Any]) -> str:
    """The text of `setting`'s experiment file (`train_defaults`: conf/config.yaml's train values, what
    an algorithm gets for a train key its overrides do not set)."""
    parsed = {alg: split_overrides(ovs) for alg, ovs in setting.runs.items()}
    names = {alg: c.get("algorithm", alg) for alg, (c, _) in parsed.items()}
    choices: dict[str, str] = {}
    for group in GROUPS:
        picked = {c.get(group) for c, _ in parsed.values()}
        if group == "algorithm":
            if len(parsed) == 1:  # a one-algorithm setting picks it
                choices[group] = picked.pop()
            continue
        if len(picked) > 1:
            raise ValueError(f"{setting.name}: {group} differs by algorithm ({sorted(map(str, picked))})")
        if picked != {None}:
            choices[group] = picked.pop()
    body: dict[str, dict[str, Any]] = {}
    per_algorithm: dict[str, dict[str, Any]] = {names[a]: {} for a in parsed}
    all_keys = list(dict.fromkeys(k for _, keys in parsed.values() for k in keys))
    for key in all_keys:
        group, _, rest = key.partition(".")
        if group == "algorithm":
            for alg, (_, keys) in parsed.items():
                if key in keys:
                    per_algorithm[names[alg]][_canonical(names[alg], rest)] = keys[key]
            continue
        values = {alg: keys.get(key, train_defaults.get(rest) if group == "train" else None)
                  for alg, (_, keys) in parsed.items()}
        if len({repr(v) for v in values.values()}) == 1 and all(key in keys for _, keys in parsed.values()):
            body.setdefault(group, {})[rest] = next(iter(values.values()))
            continue
        if group != "train":
            raise ValueError(f"{setting.name}: {key} differs by algorithm, and only algorithm.* and train.* may")
        default = Counter(repr(v) for v in values.values()).most_common(1)[0][0]
        default_value = next(v for v in values.values() if repr(v) == default)
        body.setdefault(group, {})[rest] = (f"${{oc.select:per_algorithm.${{algorithm.name}}.train.{rest},"
                                           f"{yaml_value(default_value)}}}")
        for alg, value in values.items():
            if repr(value) != default:
                per_algorithm[names[alg]].setdefault("train", {})[rest] = value
    lines = ["# @package _global_", *(f"# {line}" for line in _wrap(setting.about)),
             f"# Written by `python -m experiments.experiment_configs` from experiments/"
             f"{setting.name.split('/')[0]}/settings.py;",
             "# change the settings there and run it again (tests/test_experiment_configs.py checks both agree).",
             "defaults:", *(f"  - override /{g}: {c}" for g, c in choices.items())]
    for group, values in body.items():
        lines.append(f"{group}:")
        lines += [f"  {k}: {yaml_value(v)}" for k, v in values.items()]
    per_algorithm = {a: v for a, v in per_algorithm.items() if v}
    if per_algorithm:
        lines.append("per_algorithm:  # read by conf/algorithm/<name>.yaml; train: the train keys that differ by algorithm")
        for alg, values in per_algorithm.items():
            lines.append(f"  {alg}: {{{_flow(values)}}}")
    return "\n".join(lines) + "\n"


def _flow(values: dict) -> str:
    return ", ".join(f"{k}: {{{_flow(v)}}}" if isinstance(v, dict) else f"{k}: {yaml_value(v)}"
                     for k, v in values.items())


def _wrap(paragraphs: list[str], width: int = 98) -> list[str]:
    import textwrap

    return [line for p in paragraphs for line in textwrap.wrap(p, width, subsequent_indent="  ")]


def train_defaults() -> dict[str, Any]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(CONF_DIR / "config.yaml"))["train"]


def expected_files(settings: list[Setting]) -> dict[Path, str]:
    defaults = train_defaults()
    return {EXPERIMENTS / f"{s.name}.yaml": experiment_yaml(s, defaults) for s in settings}


def verify(settings: list[Setting], say: Callable[[str], None] = print) -> int:
    """Compose each file with each of its algorithms; count those whose run key is not the settings'."""
    from fedrepro.config import compose_config, run_key

    wrong = 0
    for s in settings:
        for alg, overrides in s.runs.items():
            name = split_overrides(overrides)[0].get("algorithm", alg)
            extra = [o for o in overrides if o.split("=")[0] == "compressor"]  # the series', not the setting's
            ours = run_key(compose_config([f"+experiment={s.name}", f"algorithm={name}", *extra]))
            if ours != run_key(compose_config(overrides)):
                wrong += 1
                say(f"{s.name} algorithm={name}: not the settings' run ({' '.join(overrides)})")
    return wrong


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare the files with what would be written")
    ap.add_argument("--verify", action="store_true", help="also compose every file with each of its algorithms")
    ap.add_argument("--data-root", default=None, help="where a1a / a2a are (L2GD's eta comes from the data)")
    args = ap.parse_args(argv)
    settings = all_settings(args.data_root)
    files = expected_files(settings)
    stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
    if args.check:
        for p in stale:
            print(f"differs from its settings: {p.relative_to(CONF_DIR.parent)}")
    else:
        for p in stale:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(files[p])
        print(f"{len(files)} experiment files, {len(stale)} written")
    wrong = verify(settings) if args.verify else 0
    return 1 if (args.check and stale) or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
