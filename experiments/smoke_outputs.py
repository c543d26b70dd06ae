"""Render every paper target at profile=smoke from a source tree, or diff two such renderings:
the check that a refactor leaves every output unchanged.

    python -m experiments.smoke_outputs render TREE OUT   # every make target of TREE at smoke
    python -m experiments.smoke_outputs diff OLD_OUT NEW_OUT

`render` runs `make <target> PROFILE=smoke` in TREE (a checkout, e.g. a `git worktree` of the
old commit) with TREE first on PYTHONPATH, all targets over one results store (OUT/store). It
keeps each target's stdout (OUT/<target>.out), the tables and figures it wrote and the keys of
its runs. To render a new tree without training, copy the old rendering's store into the new
OUT first and pass DONE_ONLY=1 in the environment: the outputs must come out the same.

`diff` compares the two renderings file by file: tables (.md, .csv) and the printed output
with wall times masked (they differ from one run to the next), figures (.png) byte for byte,
and the sets of run keys. It prints one line per difference and exits 1 if there is any.
"""
from __future__ import annotations

import argparse
import csv
import io
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

# every make target that renders a table or figure (the Makefile's paper targets)
TARGETS = (
    ["table2", "table3", "table4", "table5", "fen-costs"] + [f"fen-fig{i}" for i in range(1, 10)]
    + [f"feddyn-table{i}" for i in (1, 2, 4, 5, 6)] + [f"feddyn-fig{i}" for i in range(1, 14)]
    + ["centralized", "losac-table2"] + [f"losac-fig{i}" for i in range(1, 8)]
    + ["l2gd-fig2", "l2gd-fig3", "l2gd-table2"] + [f"l2gd-fig{i}" for i in range(4, 12)]
    + ["compare-compression"])

# a wall time, a date or a duration: differs between two renderings of the same runs
_VOLATILE = re.compile(r"\d+(\.\d+)?\s?(s|min|h)\b|\d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT[\d:.]+")
_TIME_COLUMNS = re.compile(r"(seconds|wall|time)", re.I)


def render(tree: Path, out: Path, targets=TARGETS, venv: Path = Path(".venv")) -> None:
    """Every target in turn over one results store (OUT/store: a run two targets share is computed
    once); what each target wrote (tables, figures changed while it ran) is copied to
    OUT/<target>/, its stdout to OUT/<target>.out and the keys of its runs, from its log, to
    OUT/<target>.keys. Targets already rendered into OUT are skipped (a rendering resumes)."""
    out.mkdir(parents=True, exist_ok=True)
    store = (out / "store").resolve()
    env = {**os.environ, "PYTHONPATH": str(tree), "FEDREPRO_PROGRESS": "0", "PYTHONHASHSEED": "0",
           "FEDREPRO_RESULTS": str(store)}
    for target in targets:
        if (out / f"{target}.out").exists():
            continue
        time.sleep(1.1)  # past the mtime slack below: the previous target's last files are not this one's
        t0 = time.time()
        proc = subprocess.run(
            ["make", "-s", "-C", str(tree), "-o", f"{venv.resolve()}/.installed",  # never reinstall the venv
             target, "PROFILE=smoke", "SEEDS=1", "JOBS=1",
             f"VENV={venv.resolve()}", f"FEDREPRO_RESULTS={store}"], env=env, capture_output=True, text=True)
        for kind in ("tables", "figures"):
            for f in (store / kind).glob("*") if (store / kind).is_dir() else []:
                if f.stat().st_mtime >= t0 - 1:
                    (out / target / kind).mkdir(parents=True, exist_ok=True)
                    shutil.copy2(f, out / target / kind / f.name)
        keys = sorted(set(re.findall(r": (?:ran|reused|failed|not run) ([0-9a-f]{16}) ", proc.stderr)))
        (out / f"{target}.keys").write_text("\n".join(keys) + "\n")
        (out / f"{target}.err").write_text(proc.stderr)
        (out / f"{target}.out").write_text(proc.stdout + f"\n[exit {proc.returncode}]\n")
        print(f"{target}: exit {proc.returncode}, {len(keys)} runs, {time.time() - t0:.0f} s", flush=True)


def _masked(path: Path) -> str:
    text = path.read_text(errors="replace")
    if path.suffix == ".csv":
        rows = list(csv.reader(io.StringIO(text)))
        if rows:
            drop = {i for i, name in enumerate(rows[0]) if _TIME_COLUMNS.search(name)}
            rows = [[v for i, v in enumerate(row) if i not in drop] for row in rows]
        text = "\n".join("\x1f".join(row) for row in rows)
    text = text.replace(str(path.parent.resolve()), "<root>")
    return _VOLATILE.sub("<t>", text)


def _outputs(out: Path) -> dict[str, Path]:
    """{relative name: path} of what a rendering holds: printed output, keys, tables, figures."""
    found = {}
    for p in out.iterdir():
        if p.suffix in (".out", ".keys"):
            found[p.name] = p
    for p in out.glob("*/tables/*"):
        found[str(p.relative_to(out))] = p
    for p in out.glob("*/figures/*"):
        found[str(p.relative_to(out))] = p
    return found


def diff(old: Path, new: Path) -> int:
    a, b = _outputs(old), _outputs(new)
    problems = [f"only in {old}: {n}" for n in sorted(set(a) - set(b))]
    problems += [f"only in {new}: {n}" for n in sorted(set(b) - set(a))]
    same = 0
    for name in sorted(set(a) & set(b)):
        if a[name].suffix == ".png":
            equal = a[name].read_bytes() == b[name].read_bytes()
        else:
            equal = _masked(a[name]) == _masked(b[name])
        if equal:
            same += 1
        else:
            problems.append(f"differs: {name}")
    for line in problems:
        print(line)
    print(f"{same} of {len(set(a) | set(b))} outputs identical (wall times masked), {len(problems)} differences")
    return 1 if problems else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.smoke_outputs", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("render")
    r.add_argument("tree", type=Path)
    r.add_argument("out", type=Path)
    r.add_argument("--targets", nargs="+", default=list(TARGETS))
    r.add_argument("--venv", type=Path, default=Path(".venv"))
    d = sub.add_parser("diff")
    d.add_argument("old", type=Path)
    d.add_argument("new", type=Path)
    args = ap.parse_args(argv)
    if args.command == "render":
        render(args.tree, args.out, args.targets, args.venv)
        return 0
    return diff(args.old, args.new)


if __name__ == "__main__":
    sys.exit(main())
