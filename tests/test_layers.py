"""The packages' layers point down only: the core (``benchmark``, less its CLI, which is
the application on top of everything) imports none of the builders, the methods or the
leaderboard; the builders and the methods import neither each other nor the leaderboard.
Read from the source (every ``import`` statement, lazy ones inside functions too), so a
new upward import fails here rather than in a reviewer's head. The one sanctioned way down
to up is by name: the registry imports built-in methods and sources when a run names them
(``benchmark/registry.py``), as it imports a third party's plugin."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# package -> the top-level packages it must never import
FORBIDDEN = {
    "benchmark": {"datasets_builders", "methods", "leaderboard"},
    "datasets_builders": {"methods", "leaderboard"},
    "methods": {"datasets_builders", "leaderboard"},
}
APPLICATION = ROOT / "benchmark" / "cli"


def imported_packages(path: Path) -> set[str]:
    """The top-level package of every absolute import in ``path``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def layer_violations(package: str) -> list[str]:
    bad = []
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no modules under {package}/"
    for path in files:
        if path.is_relative_to(APPLICATION):
            continue
        for target in sorted(imported_packages(path) & FORBIDDEN[package]):
            bad.append(f"{path.relative_to(ROOT)} imports {target}")
    return bad


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_layer_imports_only_the_layers_below_it(package):
    assert layer_violations(package) == []


def test_the_check_sees_lazy_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from leaderboard.store import versions\n    import methods\n")
    assert imported_packages(module) == {"leaderboard", "methods"}
