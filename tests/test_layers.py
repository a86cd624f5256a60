"""The packages' layers point down only, the modules import no cycle, and adapters see the
core through one module.

- The core (``benchmark``, its CLI included) imports none of the builders, the methods or
  the leaderboard; the builders and the methods import neither each other nor the
  leaderboard. The layers above add their commands to the core's ``fedsynth`` group through
  entry points (``benchmark/cli/main.py``).
- No module of the four packages reaches itself again through its imports.
- Method adapters (``methods/``, the tutorial's example) import from the core only
  ``benchmark.api``, and every name that module offers is one an adapter uses.

Read from the source (every ``import`` statement, lazy ones inside functions too), so a new
upward import or cycle fails here rather than in a reviewer's head. The one sanctioned way
down to up is by name: the registry imports built-in methods and sources when a run names
them (``benchmark/registry.py``), as it imports a third party's plugin."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmark import api

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("benchmark", "datasets_builders", "leaderboard", "methods")
# package -> the top-level packages it must never import
FORBIDDEN = {
    "benchmark": {"datasets_builders", "methods", "leaderboard"},
    "datasets_builders": {"methods", "leaderboard"},
    "methods": {"datasets_builders", "leaderboard"},
}
ADAPTERS = [*sorted((ROOT / "methods").glob("*.py")), ROOT / "docs/tutorials/example_adapter.py"]


@dataclass(frozen=True)
class Import:
    target: str  # the module imported: the deepest one of the tree the statement names
    names: tuple[str, ...]  # what ``from target import ...`` takes ('' for ``import target``)
    line: int


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}


def imports(path: Path, modules: set[str], module: str | None = None) -> Iterator[Import]:
    """Every import statement in ``path`` (nested ones too), relative ones resolved against
    its ``module`` name; ``from a import b`` names module ``a.b`` when that is in ``modules``."""
    module = module or module_name(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, ("",), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[: len(package) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            submodules = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
            others = tuple(a.name for a in node.names if f"{base}.{a.name}" not in modules)
            for submodule in submodules:
                yield Import(submodule, ("",), node.lineno)
            if others:
                yield Import(base, others, node.lineno)


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative): each is a set of modules that import one another round a loop."""
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
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(component)
    return found


MODULES = project_modules()
IMPORTS = {name: list(imports(path, set(MODULES))) for name, path in MODULES.items()}
# module -> the modules of the four packages it imports
GRAPH = {
    name: {i.target for i in found if i.target in MODULES} - {name}
    for name, found in IMPORTS.items()
}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_layer_imports_only_the_layers_below_it(package):
    bad = [
        f"{MODULES[name].relative_to(ROOT)}:{i.line} imports {i.target}"
        for name, found in IMPORTS.items()
        if name.split(".")[0] == package
        for i in found
        if i.target.split(".")[0] in FORBIDDEN[package]
    ]
    assert bad == []


def test_no_module_imports_itself_round_a_cycle():
    found = cycles(GRAPH)
    assert [sorted(c) for c in found] == []


def test_the_checks_see_lazy_relative_and_submodule_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "from benchmark import split_storage\n"
        "from . import coordinator\n"
        "from ..spec import SpecError\n"
        "def f():\n    from leaderboard.store import versions\n    import methods\n"
    )
    found = imports(module, set(MODULES), module="benchmark.isolation.m")
    assert {(i.target, i.names) for i in found} == {
        ("benchmark.split_storage", ("",)),
        ("benchmark.isolation.coordinator", ("",)),
        ("benchmark.spec", ("SpecError",)),
        ("leaderboard.store", ("versions",)),
        ("methods", ("",)),
    }


def test_the_cycle_finder_finds_loops_and_only_loops():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert sorted(sorted(c) for c in cycles(graph)) == [["a", "b", "c"], ["d", "e"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def adapter_imports() -> Iterator[tuple[Path, Import]]:
    for path in ADAPTERS:
        for found in imports(path, set(MODULES)):
            yield path, found


def test_adapters_import_the_core_only_through_its_api():
    bad = [
        f"{path.relative_to(ROOT)}:{i.line} imports {i.target}"
        for path, i in adapter_imports()
        if i.target.split(".")[0] == "benchmark" and i.target != "benchmark.api"
    ]
    assert bad == []
    unknown = [
        f"{path.relative_to(ROOT)}:{i.line} imports {name} from benchmark.api"
        for path, i in adapter_imports()
        if i.target == "benchmark.api"
        for name in i.names
        if name not in api.__all__
    ]
    assert unknown == []


def test_the_api_offers_only_what_adapters_use():
    used = {name for _, i in adapter_imports() if i.target == "benchmark.api" for name in i.names}
    assert sorted(set(api.__all__) - used) == []


def test_every_api_name_loads_from_its_home_module():
    for name in api.__all__:
        assert getattr(api, name) is getattr(importlib.import_module(api.HOME[name]), name)
    with pytest.raises(AttributeError, match="adapters may import"):
        api.split_storage  # noqa: B018


def test_the_api_and_the_method_registry_load_no_model_code():
    """``import methods`` (what ``fedsynth methods list`` does) and an adapter that needs only
    the contract stay free of torch: the API loads each name's module on first use."""
    probe = (
        "import sys, methods\n"
        "from benchmark.api import METHODS, Artifact, Method\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
