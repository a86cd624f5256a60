"""Client groups of a ``client_sample`` run (paper 001): ``pool.define_group`` names
disjoint groups of clients that the per-client mechanisms address, and
``pool.strong_clients`` lists the clients the split flags able to fine-tune. Each group is
accounted separately (:func:`benchmark.privacy.accountants.group_epsilons`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchmark.data import STRONG
from benchmark.federation.mechanisms.entries import CLIENT_SAMPLE
from benchmark.federation.plain import plain_number
from benchmark.privacy.errors import PrivacyError

if TYPE_CHECKING:
    from benchmark.federation.pool import ClientPool


def define_group(pool: ClientPool, name: str, clients: list[int]) -> None:
    """Name a group of clients (positions in ``range(num_clients)``) that releases can
    address. Groups are disjoint and fixed once defined: each is accounted separately,
    so a client in two groups would pay twice without the ledger knowing."""
    if pool._unit != CLIENT_SAMPLE:
        raise PrivacyError("client groups exist only with privacy.unit client_sample")
    if type(name) is not str or not name or name in pool._groups:
        raise PrivacyError(f"a group needs a new, non-empty name, got {name!r}")
    chosen = [plain_number("client", c, integer=True) for c in clients]
    taken = {c for group in pool._groups.values() for c in group}
    if not chosen or len(set(chosen)) != len(chosen):
        raise PrivacyError(f"group {name!r} needs distinct clients")
    if any(not 0 <= c < len(pool._silos) or c in taken for c in chosen):
        raise PrivacyError(f"group {name!r}: clients must be unused positions < {len(pool._silos)}")

    def compute() -> None:
        pool._groups[name] = sorted(chosen)

    pool._delivered("define_group", {"name": name, "clients": chosen}, compute)


def strong_clients(pool: ClientPool) -> list[int]:
    """Positions of the clients the split flags ``strong`` (built with
    ``strong_fraction``): paper 001's clients able to fine-tune. Capability is a public,
    per-client fact the server schedules by, not private data, so reading it costs no
    privacy. Empty when the split flags none."""
    if pool._unit != CLIENT_SAMPLE:
        raise PrivacyError("strong clients exist only with privacy.unit client_sample")
    return [
        position
        for position, units in enumerate(pool._silos)
        if pool._records[units[0]][0].get(STRONG) is True
    ]


def members(pool: ClientPool, groups: list[str]) -> tuple[tuple[str, ...], list[int]]:
    """The named groups (checked: defined, each once) and their clients' positions."""
    names = tuple(groups)
    if not names or any(type(g) is not str or g not in pool._groups for g in names):
        raise PrivacyError(f"unknown client groups {list(names)}; define them first")
    if len(set(names)) != len(names):
        raise PrivacyError(f"client groups named twice: {list(names)}")
    return names, sorted(c for g in names for c in pool._groups[g])
