"""The run archive: finished runs' small files, kept in the repository, so that a table can be
filled over several machines or sessions without training its runs again.

    python -m experiments archive TARGET [options]          # a target's finished runs -> archive
    python -m fedrepro.archive save --keys KEY [KEY ...]
    python -m fedrepro.archive restore                      # archive -> results/runs/

`make archive TARGET=...` and `make restore` run them. The archive (`docs/measured/runs/<key>/`)
holds what a table or figure reads from a run: config.yaml, summary.json, metrics.csv,
partition.json (and attack.json / attack_curve.csv where the run has them), about 120 KB a
Shakespeare run, with this machine's paths made relative to the repository; checkpoints (54 MB
for FedProx's 100 Shakespeare clients, 108 MB for SCAFFOLD's) and model.pt stay out. A restored
run is reused by every target like any finished run (`run_experiment` reads only its summary),
so `--done-only` renders and the claims see it.

`restore` checks each archived run before it copies it: its summary says finished or diverged,
and its config.yaml still hashes to its folder's name under this code (`config.run_key`). A run
archived before a change of the config schema or of the key (so the current code would compute
a different run) is skipped with that reason instead of being passed off as the new one. A run
that the results store already holds finished is left as it is.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fedrepro import store
from fedrepro.errors import DataError
from fedrepro.store import ARCHIVE

KEPT = ("config.yaml", "metrics.csv", "partition.json", "attack.json", "attack_curve.csv",
        "summary.json")  # summary last: it is what marks a run done


def _copy_run(src: Path, dest: Path, rewrite=lambda text: text) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for name in KEPT:
        if (src / name).exists():
            store.write_text(dest / name, rewrite((src / name).read_text()))


def save(results_root: str | Path, keys: list[str], archive: Path = ARCHIVE) -> tuple[list[str], list[str]]:
    """Copy the finished runs among `keys` into the archive: (saved keys, 'key: why not' lines)."""
    saved, skipped = [], []
    for key in keys:
        folder = store.run_dir(results_root, key)
        if store.done_summary(folder) is None:
            skipped.append(f"{key}: not finished in {folder}")
            continue
        _copy_run(folder, archive / key, _portable(folder))
        saved.append(key)
    return saved, skipped


def _portable(folder: Path):
    """A rewrite of the run's files without this machine's absolute paths: the data folder
    relative to the working directory (the repository root: `../shared/data` here), a results
    store outside it (a scratch folder, another machine's) as `results`, where `restore` puts
    the run by default, the working directory left out. Neither folder is in the run key, so the
    archived run keeps its key."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(folder / "config.yaml")
    data_root, results_root = str(cfg.get("data_root") or ""), str(cfg.get("results_root") or "")
    pairs = [(str(Path.cwd()) + os.sep, "")]
    if data_root:
        absolute = Path(data_root).resolve()
        pairs.insert(0, (str(absolute), os.path.relpath(absolute)))
    if os.path.isabs(results_root) and not Path(results_root).resolve().is_relative_to(Path.cwd()):
        pairs.insert(0, (f"results_root: {results_root}\n", "results_root: results\n"))

    def rewrite(text: str) -> str:
        for old, new in pairs:
            text = text.replace(old, new)
        return text
    return rewrite


def archived_key(folder: Path) -> str | None:
    """The key the current code gives the archived run's config (None: unreadable config)."""
    from omegaconf import OmegaConf

    from fedrepro.config import run_key

    try:
        return run_key(OmegaConf.load(folder / "config.yaml"))
    except Exception:  # noqa: BLE001  (any unreadable or outdated config: not restorable)
        return None


class ArchiveNotFoundError(DataError, FileNotFoundError):
    """The archive folder is not there (a wrong --archive, or nothing saved yet)."""


def restore(results_root: str | Path, archive: Path = ARCHIVE) -> tuple[list[str], list[str]]:
    """Copy archived runs into the results store: (restored keys, 'key: why not' lines)."""
    if not archive.is_dir():
        raise ArchiveNotFoundError(f"no run archive at {archive} (give its folder with --archive; "
                                   "`save` creates it)")
    restored, skipped = [], []
    folders = sorted(p for p in archive.iterdir() if p.is_dir())
    for src in folders:
        key = src.name
        dest = store.run_dir(results_root, key)
        if store.done_summary(dest) is not None:
            continue
        if store.done_summary(src) is None:
            skipped.append(f"{key}: its archived summary.json is missing or not finished")
            continue
        now = archived_key(src)
        if now is None:
            skipped.append(f"{key}: its config.yaml cannot be read as a config of this code; run it again")
            continue
        if now != key:
            skipped.append(f"{key}: its config.yaml hashes to {now} under this code (archived under "
                           "another config schema); run it again")
            continue
        _copy_run(src, dest)
        store.clear_checkpoints(dest)  # an interrupted attempt's checkpoint is obsolete now
        restored.append(key)
    return restored, skipped


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fedrepro.archive", description=__doc__.splitlines()[0])
    ap.add_argument("--results-root", default=os.environ.get("FEDREPRO_RESULTS", "results"))
    ap.add_argument("--archive", type=Path, default=ARCHIVE)
    sub = ap.add_subparsers(dest="command", required=True)
    sv = sub.add_parser("save", help="archive finished runs by key (a target's: python -m experiments archive)")
    sv.add_argument("--keys", nargs="+", required=True)
    sub.add_parser("restore", help="copy the archived runs into the results store")
    args = ap.parse_args(argv)
    if args.command == "restore":
        try:
            done, skipped = restore(args.results_root, args.archive)
        except ArchiveNotFoundError as err:  # any other FileNotFoundError is a bug: traceback
            ap.error(str(err))
        print(f"restored {len(done)} archived runs into {Path(args.results_root) / 'runs'}")
    else:
        done, skipped = save(args.results_root, args.keys, args.archive)
        print(f"archived {len(done)} finished runs in {args.archive}")
    for line in skipped:
        print(f"  skipped {line}")
    return 0


if __name__ == "__main__":
    from fedrepro.reports.cli import run_target

    sys.exit(run_target(main))
