"""Plain arguments: what the pool accepts as a number or a flag from server code.

The exact type is checked, not ``isinstance``: a subclass of ``float`` can override
``__mul__`` or ``__float__`` and record σ = 4.3 while the noise it scales is zero.
"""

from __future__ import annotations

import numpy as np

from benchmark.privacy.errors import PrivacyError

_NUMPY_INTEGERS = frozenset(
    {np.byte, np.ubyte, np.short, np.ushort, np.intc, np.uintc, np.int_, np.uint}
    | {np.longlong, np.ulonglong}
)
_NUMPY_FLOATS = frozenset({np.half, np.single, np.double, np.longdouble})


def plain_number(name: str, value: object, *, integer: bool = False) -> int | float:
    """``value`` as a builtin ``int`` (or ``float``), or a :class:`PrivacyError` naming it.

    Only ``int``, ``float`` and numpy's own scalar types pass (``bool`` does not), and the
    conversion uses their own arithmetic.
    """
    kind = type(value)
    if kind is int or kind in _NUMPY_INTEGERS:
        return int(value)  # type: ignore[call-overload]
    if not integer and (kind is float or kind in _NUMPY_FLOATS):
        return float(value)  # type: ignore[arg-type]
    wanted = "an int" if integer else "an int or a float"
    raise PrivacyError(f"{name} must be {wanted} (a plain number), got {kind.__name__}")


def plain_flag(name: str, value: object) -> bool:
    """``value`` if it is exactly a ``bool``: an object whose truth changes between reads
    could run one path in the pool and another in the check."""
    if type(value) is not bool:
        raise PrivacyError(f"{name} must be True or False, got {type(value).__name__}")
    return value
