"""Every paper target, by paper: each paper's `targets.py` lists its Targets in `TARGETS`
(fedrepro.reports.target), registered here explicitly.

A target's make name is `<paper short name>-<target name>` (fen-table2, feddyn-fig3,
losac-table2, l2gd-fig4); the baselines have theirs alone (centralized). `ALIASES` keeps the
names the README promised before (make table2 is FedElasticNet's Table 2).
"""
from __future__ import annotations

import importlib

from fedrepro.errors import ConfigError

# paper -> (short name used in make names, module holding its TARGETS)
PAPERS = {
    "fedelasticnet": ("fen", "experiments.fedelasticnet.targets"),
    "feddyn": ("feddyn", "experiments.feddyn.targets"),
    "losac": ("losac", "experiments.losac.targets"),
    "l2gd": ("l2gd", "experiments.l2gd.targets"),
    "baselines": ("", "experiments.baselines"),
}
ALIASES = {"table2": "fen-table2", "table3": "fen-table3", "table4": "fen-table4", "table5": "fen-table5",
           "compare-compression": "l2gd-compare-compression"}


def paper_of(name: str) -> str:
    """The paper of a paper name or its short name ("fen" -> "fedelasticnet")."""
    for paper, (short, _) in PAPERS.items():
        if name in (paper, short) and name:
            return paper
    raise ConfigError(f"unknown paper {name!r}; choose one of "
                      + ", ".join(f"{p} ({s})" if s else p for p, (s, _) in PAPERS.items()))


def targets(paper: str) -> dict:
    """{target name: Target} of one paper, in the paper's order."""
    module = importlib.import_module(PAPERS[paper_of(paper)][1])
    return {t.name: t for t in module.TARGETS}


def make_name(paper: str, target) -> str:
    short = PAPERS[paper_of(paper)][0]
    return f"{short}-{target.name}" if short else target.name


def all_targets() -> list[tuple[str, object]]:
    """[(make name, Target)] of every paper."""
    return [(make_name(p, t), t) for p in PAPERS for t in targets(p).values()]


def find(name: str, target: str | None = None):
    """(paper, Target) from a make name ("fen-table2", "table2") or a paper and a target name."""
    if target is not None:
        paper = paper_of(name)
        found = targets(paper)
        if target not in found:
            raise ConfigError(f"{paper} has no target {target!r}; its targets: {', '.join(found)}")
        return paper, found[target]
    name = ALIASES.get(name, name)
    for paper, (short, _) in PAPERS.items():  # only the paper the name names is imported
        if name.startswith(f"{short}-") if short else "-" not in name or paper == "baselines":
            for t in targets(paper).values():
                if make_name(paper, t) == name:
                    return paper, t
    raise ConfigError(f"unknown target {name!r}; `python -m experiments list` names them all")
