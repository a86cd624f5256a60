"""The trust domains are visible in the tree: what runs untrusted (benchmark/untrusted/)
imports nothing of the trusted side, not even lazily, and the runner is reachable from none
of it; and the modules both sides share import neither. (No import cycle anywhere:
``tests/test_layers.py``, on the same graph.)"""

from import_graph import GRAPH

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
