"""Every paper target from one command line.

    python -m experiments list                              # every target, one line each
    python -m experiments fen table2 [options]              # a paper (or its short name) and a target
    python -m experiments fen-table2 [options]              # the same by its make name
    python -m experiments status fen-table2 [options]       # its runs: done, running, failed, missing
    python -m experiments archive fen-table2 [options]      # its finished runs into the run archive

Options (every target): --profile, --seeds, --jobs, --launcher, --results-root, --data-root,
--datasets, --splits, --done-only (fedrepro.reports.cli.table_parser), and the target's own.
The make targets call these (make table2, make feddyn-fig3, make status TARGET=table2).
"""
from __future__ import annotations

import sys
from pathlib import Path

import fedrepro  # noqa: F401  (the torchvision shim before anything imports torchvision)
from experiments import registry
from fedrepro.reports import target as targets
from fedrepro.reports.cli import run_target, table_parser

COMMANDS = ("list", "status", "archive")


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the words before the first option, the rest)."""
    for i, a in enumerate(argv):
        if a.startswith("-"):
            return argv[:i], argv[i:]
    return argv, []


def parser_for(paper: str, target, prog: str):
    ap = table_parser(target.title)
    ap.prog = prog
    if hasattr(target, "add_options"):
        target.add_options(ap)
    return ap


def list_targets() -> int:
    for name, t in registry.all_targets():
        alias = [a for a, full in registry.ALIASES.items() if full == name]
        print(f"{name:28s} {t.title}" + (f" (also: {', '.join(alias)})" if alias else ""))
    return 0


def status(paper: str, target, options) -> int:
    from fedrepro.status import report

    runs = targets.plan(target, options)
    rows = [run_status(r, options) for r in runs]
    name = registry.make_name(paper, target)
    print(report(rows, f"{name} (profile {options.profile}, seeds {options.seeds}, {options.results_root})"))
    why = getattr(target, "trains_outside_store", None)
    if why:
        print(f"note: {name} has no run in the results store: {why}")
    elif not rows:
        print("note: this target plans no run through the results store here: its datasets may not be in "
              f"--data-root {options.data_root} (default $FEDREPRO_DATA_ROOT), or the target's --datasets "
              "leaves them out")
    return 0


def run_status(run: dict, options) -> dict:
    """A planned run's status row; where it is not finished here but the same run made on another
    accelerator is (a GPU machine's, which the target's table reads), that run's, named so."""
    from fedrepro.config import compose_config, run_key
    from fedrepro.reports.grid import finished_twin
    from fedrepro.status import run_state

    state = run_state(options.results_root, run["key"], options.archive)
    if state["state"] != "done":
        twin = finished_twin(compose_config(run["overrides"]))
        if twin is not None:
            key = run_key(twin)
            state = run_state(options.results_root, key, options.archive)
            state["detail"] += f" (made with train.accelerator={twin.train.accelerator}; its key here: {run['key']})"
            return {**state, "label": run["label"], "key": key}
    return {**state, "label": run["label"], "key": run["key"]}


def archive(paper: str, target, options) -> int:
    from fedrepro.archive import save

    keys = [run_status(r, options)["key"] for r in targets.plan(target, options)]
    done, skipped = save(options.results_root, keys, options.archive)
    print(f"archived {len(done)} finished runs of {registry.make_name(paper, target)} in {options.archive}")
    for line in skipped:
        print(f"  skipped {line}")
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    words, rest = _split(argv)
    if not words or words[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if words else 2
    command = words[0] if words[0] in COMMANDS else "run"
    if command == "list":
        return list_targets()
    names = words[1:] if command != "run" else words
    if not 1 <= len(names) <= 2:
        raise SystemExit(f"python -m experiments {' '.join(words)}: give a target's make name "
                         "(fen-table2) or a paper and a target (fen table2); `list` names them")
    paper, target = registry.find(*names)
    ap = parser_for(paper, target, f"python -m experiments {' '.join(words)}")
    if command != "run":
        from fedrepro.store import ARCHIVE

        ap.add_argument("--archive", type=Path, default=ARCHIVE, help="the run archive (docs/measured/runs)")
    options = ap.parse_args(rest)
    # W&B's group and paper tag of the target's runs (logger.* is not in the run key)
    options.group, options.paper = registry.make_name(paper, target), paper if paper != "baselines" else None
    if command == "status":
        return status(paper, target, options)
    if command == "archive":
        return archive(paper, target, options)
    return targets.run(target, options)


if __name__ == "__main__":
    sys.exit(run_target(main))
