"""The trust domains are visible in the tree: what runs untrusted (benchmark/untrusted/)
imports nothing of the trusted side, not even lazily, and the runner is reachable from none
of it; the modules both sides share import neither; and the core has no import cycle."""

import ast
from pathlib import Path

import benchmark

ROOT = Path(benchmark.__file__).parent

TRUSTED = (
    "benchmark.runner",
    "benchmark.isolation.coordinator",
    "benchmark.isolation.client_process",
    "benchmark.isolation.client_shards",
    "benchmark.federation.pool",
    "benchmark.federation.mechanisms",
    "benchmark.federation.independence_check",
    "benchmark.federation.release_log",
    "benchmark.privacy.ledger",
    "benchmark.privacy.accountants",
    "benchmark.privacy.budget",
    "benchmark.evaluation",
    "leaderboard",
)
SHARED = ("benchmark.protocol", "benchmark.checkpoints")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at module level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


GRAPH = {module_name(p): imports(p) for p in ROOT.rglob("*.py")}


def under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def reachable(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in seen or name not in GRAPH:
            continue
        seen.add(name)
        todo.extend(GRAPH[name])
    return seen


def untrusted_modules() -> list[str]:
    return sorted(m for m in GRAPH if under(m, ("benchmark.untrusted",)))


def test_untrusted_code_imports_nothing_trusted():
    assert {"benchmark.untrusted.method_process", "benchmark.untrusted.client_worker"} <= set(
        untrusted_modules()
    )
    for module in [*untrusted_modules(), *(m for m in GRAPH if under(m, SHARED))]:
        wrong = sorted(name for name in GRAPH[module] if under(name, TRUSTED))
        assert not wrong, f"{module} imports trusted {wrong}"


def test_the_runner_is_reachable_from_no_untrusted_process():
    for module in untrusted_modules():
        assert "benchmark.runner" not in reachable(module), module


def test_the_runner_coordinator_and_client_handle_form_no_cycle():
    for module in ("benchmark.isolation.coordinator", "benchmark.isolation.client_process"):
        assert "benchmark.runner" not in reachable(module), module


def test_the_launcher_starts_only_untrusted_modules():
    from benchmark.isolation.launch import ROLES

    assert all(under(module, ("benchmark.untrusted",)) for module in ROLES.values())


def test_no_import_cycle_in_the_core():
    """Imports at any level (lazy and type-checking ones included) form no cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        for name in GRAPH[module]:
            if name not in GRAPH:
                continue
            if name not in index:
                visit(name)
                low[module] = min(low[module], low[name])
            elif name in stack:
                low[module] = min(low[module], index[name])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    assert not cycles
