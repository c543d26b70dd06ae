"""A clone stands alone: the papers' reference values ship in the package, and no code reaches
for the project's ../shared folder (the Makefile and .ci/run may default the data root to it)."""

from __future__ import annotations

import ast
import csv
import re
from pathlib import Path

import pytest

from fedrepro.reports import reference

ROOT = Path(__file__).resolve().parent.parent
# A path with a component named "shared": "../shared/data", Path(...) / "shared", "shared/reference".
SHARED_PATH = re.compile(r"(^|[/\\])shared($|[/\\])")


def _docstrings(tree: ast.AST) -> set[int]:
    owners = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, owners) and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}


def shared_paths_in(source: str) -> list[tuple[int, str]]:
    """(line, string) of every string constant outside docstrings that names a `shared` folder."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs and SHARED_PATH.search(node.value)]


def test_the_scan_finds_a_path_to_the_shared_folder():
    sample = ('"""Reads ../_S_/data."""\nroot = Path(here).parent / "_S_" / "reference"\n'
              'x = f"{top}/../_S_/data"\n').replace("_S_", "shar" + "ed")  # not a hit itself
    assert sorted(line for line, _ in shared_paths_in(sample)) == [2, 3]


def test_no_code_reads_the_shared_folder():
    hits = [f"{path.relative_to(ROOT)}:{line}: {text!r}"
            for top in ("fedrepro", "experiments", "tests")
            for path in sorted((ROOT / top).rglob("*.py"))
            for line, text in shared_paths_in(path.read_text())]
    assert not hits, "code that reads ../shared (use the package's data or FEDREPRO_DATA_ROOT):\n" + "\n".join(hits)


def test_the_reference_values_ship_in_the_package(monkeypatch):
    monkeypatch.delenv(reference.ENV_VAR, raising=False)
    root = reference.reference_root()
    assert root == ROOT / "fedrepro" / "reference"
    readme = (root / "README.md").read_text()
    listed = set(re.findall(r"^\| `([\w.]+\.(?:csv|md))` \|", readme, flags=re.M))
    present = {p.name for p in root.iterdir()} - {"README.md"}
    assert listed == present, "fedrepro/reference/README.md must say where every file comes from"
    for name in sorted(p for p in present if p.endswith(".csv")):
        rows = list(csv.DictReader((root / name).open(encoding="utf-8")))
        count = re.search(rf"^\| `{re.escape(name)}` \|.*\| (\d+)(?: \(.*\))? \|$", readme, flags=re.M)
        assert count and int(count.group(1)) == len(rows), f"{name}: README's row count"


def test_every_numeric_table_keeps_its_confidence_flag():
    root = reference.reference_root()
    for path in sorted(root.glob("*.csv")):
        if path.name == "claims.csv":
            continue
        rows = list(csv.DictReader(path.open(encoding="utf-8")))
        assert rows and "confidence" in rows[0], path.name
        assert {r["confidence"] for r in rows} <= {"ok", "ocr-uncertain", "unreadable"}, path.name


def test_the_override_still_wins(monkeypatch, tmp_path):
    (tmp_path / "claims.csv").write_text("claim_id\n")
    monkeypatch.setenv(reference.ENV_VAR, str(tmp_path))
    assert reference.reference_root() == tmp_path
    with pytest.raises(reference.ReferenceNotFoundError, match="fedelasticnet_table2"):
        reference.reference_path("fedelasticnet_table2")


# An absolute path into a machine's folders: a work, home, root, tmp, Users or mnt folder at the top
MACHINE_PATH = re.compile(r"(?<![\w.~])/(?:work|home|root|tmp|Users|mnt)/[\w.-]+")


def test_committed_outputs_carry_no_machine_paths():
    """Outputs are rendered from the restored archive with a relative data root (docs/sweeps.md):
    a render from a store whose runs recorded an absolute data folder once put this machine's
    paths into docs/measured/centralized.csv."""
    folder, top = "shar" + "ed", "/" + "work"  # not hits of the scans of this repository's own files
    assert MACHINE_PATH.search(f"MNIST idx files in {top}/{folder}/data/MNIST/raw")
    assert not MACHINE_PATH.search(f"MNIST idx files in ../{folder}/data/MNIST/raw")
    hits = [f"{path.relative_to(ROOT)}: {match.group(0)}"
            for path in sorted((ROOT / "docs").rglob("*")) if path.suffix in (".md", ".csv", ".json")
            for match in MACHINE_PATH.finditer(path.read_text(errors="replace"))]
    assert not hits, "absolute machine paths in committed files:\n" + "\n".join(hits[:20])
