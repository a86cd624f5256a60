"""Progress bars for long steps (rounds, training epochs, generation, embedding, sampling).

One helper so every bar looks the same: it writes to stderr, disappears when done
(``leave=False``) so only the suite's bar stays, and ``TQDM_DISABLE=1`` silences them all
(the test suite sets it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")


def progress(items: Iterable[T], desc: str, total: int | None = None, unit: str = "it") -> tqdm:
    """Iterate ``items`` under a transient progress bar labelled ``desc``."""
    return tqdm(items, desc=desc, total=total, unit=unit, leave=False, dynamic_ncols=True)
