"""The project's import graph, read from the source: every ``import`` statement of the four
packages, lazy ones inside functions too. Shared by the layer checks
(``tests/test_layers.py``) and the trust-domain checks (``tests/test_trust_domains.py``)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("benchmark", "datasets_builders", "leaderboard", "methods")


@dataclass(frozen=True)
class Import:
    target: str  # the module imported: the deepest one of the tree the statement names
    names: tuple[str, ...]  # what ``from target import ...`` takes ('' for ``import target``)
    line: int
    named: str  # the module the statement names: ``a`` of ``from a import b`` (runs too)


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
                yield Import(alias.name, ("",), node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[: len(package) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            submodules = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
            others = tuple(a.name for a in node.names if f"{base}.{a.name}" not in modules)
            for submodule in submodules:
                yield Import(submodule, ("",), node.lineno, base)
            if others:
                yield Import(base, others, node.lineno, base)


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
# module -> the modules of the four packages it imports (``from a import b`` runs ``a`` too)
GRAPH = {
    name: {m for i in found for m in (i.target, i.named) if m in MODULES} - {name}
    for name, found in IMPORTS.items()
}
