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

import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from import_graph import GRAPH, IMPORTS, MODULES, ROOT, Import, cycles, imports

from benchmark import api

# package -> the top-level packages it must never import
FORBIDDEN = {
    "benchmark": {"datasets_builders", "methods", "leaderboard"},
    "datasets_builders": {"methods", "leaderboard"},
    "methods": {"datasets_builders", "leaderboard"},
}
ADAPTERS = [*sorted((ROOT / "methods").glob("*.py")), ROOT / "docs/tutorials/example_adapter.py"]


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
    assert {(i.target, i.names, i.named) for i in found} == {
        ("benchmark.split_storage", ("",), "benchmark"),
        ("benchmark.isolation.coordinator", ("",), "benchmark.isolation"),
        ("benchmark.spec", ("SpecError",), "benchmark.spec"),
        ("leaderboard.store", ("versions",), "leaderboard.store"),
        ("methods", ("",), "methods"),
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
