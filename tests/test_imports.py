"""The import graph of fedrepro/, read with ast (nothing is imported): no cycles, and the
dependencies point one way. Function-level (lazy) imports count: a lazy import hides a cycle
from the interpreter, not from the design."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "fedrepro"


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the package (a package is its __init__)."""
    mods = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _imported(name: str, path: Path) -> set[str]:
    """The package's modules that `name` imports anywhere in its file: `import a.b`, and for
    `from a import b` a.b when b is a module, else a (relative imports resolved). Parent packages
    are not counted: Python has them loaded before any of their modules."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                         for alias in node.names)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: _imported(name, path) for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_the_graph_reader_finds_cycles_and_lazy_imports(tmp_path):
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    assert "fedrepro.runner" in GRAPH["fedrepro.__main__"]  # imported inside a function
    assert "fedrepro._compat" in GRAPH["fedrepro"]  # `from fedrepro import _compat`: a submodule
    assert "fedrepro.models.zoo" in GRAPH["fedrepro.models.flat"]  # `from fedrepro.models import zoo`
    assert "fedrepro.models" not in GRAPH["fedrepro.models.flat"]  # ... not the package that holds it
    assert "fedrepro.algorithms.base" in GRAPH["fedrepro.algorithms.fedavg"]  # from a module import names


def test_no_import_cycles_in_the_package():
    cycles = _cycles(GRAPH)
    assert not cycles, "import cycles in fedrepro/:\n" + "\n".join(
        "  " + " <-> ".join(c) for c in cycles)


def _imports_under(module: str, prefix: str) -> list[str]:
    return sorted(m for m in GRAPH[module] if m == prefix or m.startswith(prefix + "."))


@pytest.mark.parametrize("layer, forbidden", [
    ("fedrepro.algorithms", ("fedrepro.config", "fedrepro.engine")),  # algorithms know no config or engine
    ("fedrepro.engine", ("fedrepro.config",)),  # the engine gets settings, never reads the config
])
def test_lower_layers_do_not_import_upper_ones(layer, forbidden):
    bad = {m: found for m in GRAPH if m == layer or m.startswith(layer + ".")
           for found in [[x for f in forbidden for x in _imports_under(m, f)]] if found}
    assert not bad, f"{layer} imports {bad}"


@pytest.mark.parametrize("module, forbidden", [
    ("fedrepro.config", ("fedrepro.attacks",)),  # the config validates attacks; it imports none
    ("fedrepro.store", ("fedrepro.run", "fedrepro.runner")),  # persistence never executes a run
    ("fedrepro.run", ("fedrepro.reports",)),  # a run computes and stores; it draws nothing
    ("fedrepro.status", ("fedrepro.archive",)),  # archive uses status's planning, not the reverse
])
def test_module_does_not_import(module, forbidden):
    bad = [x for f in forbidden for x in _imports_under(module, f)]
    assert not bad, f"{module} imports {bad}"


def test_no_module_imports_another_modules_private_names():
    """`from a import _b` couples a module to what another keeps to itself (tests may)."""
    root = PACKAGE.parent
    offenders = []
    for path in [*PACKAGE.rglob("*.py"), *(root / "experiments").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                folder = root.joinpath(*(node.module or "").split("."))
                offenders += [f"{path.relative_to(root)}: from {node.module} import {a.name}"
                              for a in node.names if a.name.startswith("_") and not a.name.startswith("__")
                              and not (folder / f"{a.name}.py").exists()]  # a module, not a name
    assert offenders == []
