"""Timestamps of market-data files as int ns since the epoch, UTC: epoch numbers of any unit
and ISO-8601 text with or without an offset.

Epoch numbers. `unit` "s", "ms", "us" or "ns" when the user says (`--ts-unit`); otherwise
each value's magnitude says it, for times between 1973 and 2262 (the int64 ns range):

    seconds       1e8  <= |v| < 1e11     (1973-03-03 .. )
    milliseconds  1e11 <= |v| < 1e14
    microseconds  1e14 <= |v| < 1e17
    nanoseconds   1e17 <= |v|            (also |v| < 1e8: the engine's own unit, and what
                                          the readers always read; any unit puts such a
                                          value in 1970-1973, so no real data is misread)

The bands do not overlap for real dates: an epoch-second file of 2024 (1.7e9) can no longer
load as 1970. A file's unit is fixed by its first epoch value (`EpochUnit`); a later value of
another magnitude is a mixed file and counted as `mixed_ts_unit` (an error under --strict),
not silently read in another unit. Fractional epoch values ("1704205800.25") are exact
(decimal arithmetic, no float rounding).

ISO-8601. With an offset or Z: that instant. Without one (naive): local time in `tz`
(`--tz America/New_York`, DST aware); naive without a `tz` is `NaiveTimeError`, a one-line
error saying to give --tz, because guessing UTC or New York silently shifts every fill.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal, InvalidOperation
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np

NS_PER_UNIT = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
UNITS = tuple(NS_PER_UNIT)
#: the lower edge of each unit's band of magnitudes (see the module docstring)
_BAND_FLOOR = (("ns", 10**17), ("us", 10**14), ("ms", 10**11), ("s", 10**8))
_INT64_MAX = np.iinfo(np.int64).max

_ISO_RE = re.compile(
    r"^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2})?)"  # date and time
    r"(?:[.,](\d{1,9}))?"  # fraction of a second, up to ns
    r"\s*(Z|z|[+-]\d{2}(?::?\d{2})?)?$"  # offset
)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_NUMBER_RE = re.compile(r"^[+-]?\d+(\.\d*)?$")


class NaiveTimeError(ValueError):
    """An ISO time without a UTC offset and no --tz to read it in."""


def zone(tz: str | None) -> dt.tzinfo | None:
    """The time zone named `tz` (IANA, e.g. America/New_York); a one-line ValueError for
    an unknown name."""
    if tz is None:
        return None
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"--tz {tz!r}: not a time zone name (e.g. America/New_York, "
                         f"Europe/London, UTC)") from None


def check_unit(unit: str | None) -> str | None:
    if unit is not None and unit not in NS_PER_UNIT:
        raise ValueError(f"--ts-unit {unit!r}: expected one of {', '.join(UNITS)}")
    return unit


def unit_of(value: int) -> str:
    """The unit an epoch value's magnitude implies (module docstring)."""
    v = abs(int(value))
    for unit, floor in _BAND_FLOOR:
        if v >= floor:
            return unit
    return "ns"


def units_of(values: np.ndarray) -> np.ndarray:
    """`unit_of` of every value, as indices into UNITS (0 s, 1 ms, 2 us, 3 ns)."""
    v = np.abs(np.asarray(values, np.int64))
    out = np.full(v.shape, 3, np.int8)  # ns, also below 1e8
    out[(v >= 10**8) & (v < 10**11)] = 0
    out[(v >= 10**11) & (v < 10**14)] = 1
    out[(v >= 10**14) & (v < 10**17)] = 2
    return out


class EpochUnit:
    """The unit of one file's epoch numbers: given, or fixed by the first value read."""

    def __init__(self, unit: str | None = None) -> None:
        self.given = check_unit(unit) is not None
        self.unit: str | None = unit

    def to_ns(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ns, ok): `ok` False where a value is of another magnitude than the file's unit
        (detected units only) or overflows int64 ns."""
        values = np.asarray(values, np.int64)
        ok = np.ones(values.shape, bool)
        if values.size == 0:
            return values.copy(), ok
        if self.unit is None:
            self.unit = unit_of(int(values[0]))
        if not self.given:
            ok &= units_of(values) == UNITS.index(self.unit)
        scale = NS_PER_UNIT[self.unit]
        ok &= np.abs(values) <= _INT64_MAX // scale
        return np.where(ok, values, 0) * scale, ok

    def text_to_ns(self, text: str) -> int:
        """One epoch value written as text (integer or decimal fraction), exactly; a
        ValueError for another magnitude than the file's or an overflow."""
        try:
            number = Decimal(text)
        except InvalidOperation:
            raise ValueError(f"not a number: {text!r}") from None
        whole = int(number)
        unit = self.unit if self.unit is not None else unit_of(whole)
        if not self.given and self.unit is not None and unit_of(whole) != self.unit:
            raise MixedUnitError(f"{text}: a {unit_of(whole)} value in a file of {self.unit}")
        self.unit = unit
        ns = int(number * NS_PER_UNIT[unit])
        if abs(ns) > _INT64_MAX:
            raise ValueError(f"{text}: outside the int64 ns range")
        return ns


class MixedUnitError(ValueError):
    """An epoch value whose magnitude is not the file's unit."""


def is_number(text: str) -> bool:
    return bool(_NUMBER_RE.match(text))


def parse_iso_ns(text: str, tz: dt.tzinfo | None = None) -> int:
    """ns since the epoch of an ISO-8601 time (up to 9 fractional digits): its offset or Z,
    else local time in `tz`; `NaiveTimeError` without both, ValueError for anything else."""
    m = _ISO_RE.match(text.strip())
    if not m:
        raise ValueError(f"not an ISO-8601 time: {text!r}")
    base, fraction, offset = m.groups()
    if offset is None:
        if tz is None:
            raise NaiveTimeError(f"time {text.strip()!r} has no UTC offset: give --tz (e.g. "
                                 f"--tz America/New_York) to say where it was taken")
        moment = dt.datetime.fromisoformat(base.replace(" ", "T")).replace(tzinfo=tz)
    else:
        if offset in ("Z", "z"):
            offset = "+00:00"
        elif len(offset) == 3:
            offset += ":00"
        moment = dt.datetime.fromisoformat(base.replace(" ", "T") + offset)
    delta = moment - _EPOCH
    ns = (delta.days * 86_400 + delta.seconds) * 1_000_000_000
    if fraction:
        ns += int(fraction.ljust(9, "0"))
    return ns
