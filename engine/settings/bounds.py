"""Range checks of numeric settings (tables of the engine's TOML), one message shape each.

A setting out of range raises ValueError naming `table.field`, the range and the value;
config loading turns it into the user's one-line error.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


def require_non_negative(obj: Any, table: str, names: Iterable[str], note: str = "") -> None:
    """Each field a finite number >= 0 (NaN fails too); `note` says what 0 means."""
    for name in names:
        x = getattr(obj, name)
        if not (x >= 0 and math.isfinite(x)):
            raise ValueError(f"{table}.{name} must be a number >= 0{note}, got {x}")


def require_positive(obj: Any, table: str, names: Iterable[str]) -> None:
    """Each field a finite number > 0."""
    for name in names:
        x = getattr(obj, name)
        if not (x > 0 and math.isfinite(x)):
            raise ValueError(f"{table}.{name} must be a positive number, got {x}")


def require_at_least_one(obj: Any, table: str, names: Iterable[str]) -> None:
    """Each field (a count) >= 1."""
    for name in names:
        x = getattr(obj, name)
        if x < 1:
            raise ValueError(f"{table}.{name} must be >= 1, got {x}")


#: the largest count a socket option or a queue takes (ZeroMQ's options are C ints)
MAX_COUNT = 2**31 - 1


def require_int_range(obj: Any, table: str, names: Iterable[str], lo: int, hi: int,
                      note: str = "") -> None:
    """Each field an integer in [lo, hi]: a setting beyond what the code using it can take
    (a ZeroMQ option is a C int) is a one-line error, never a hang or a traceback later."""
    for name in names:
        x = getattr(obj, name)
        if not lo <= x <= hi:
            raise ValueError(f"{table}.{name} must be an integer from {lo:,} to {hi:,}{note}, "
                             f"got {x:,}")
