"""Market-data records shared by every source: one numpy dtype, the Source protocol, skip counts.

A source yields chunks: numpy arrays of `RECORD_DTYPE`, at most `CHUNK_RECORDS` records each,
with `ts` (integer nanoseconds since the epoch, UTC) non-decreasing within and across chunks.
No per-tick Python objects are made; a consumer turns records into messages only as it needs.

Field meaning by `kind`:

- `KIND_TRADE`: f0 price, f1 size (instrument units: USD and shares, or contracts).
- `KIND_QUOTE`: f0 bid, f1 bid_size, f2 ask, f3 ask_size; an absent side has price 0, size 0.
- `KIND_BAR`:   f0 open, f1 high, f2 low, f3 close, f4 volume; `ts` is the bar's CLOSE time.

Unused fields are 0. `sym` indexes the source's `symbols` list.

Time bounds (`start`, `end`) accepted by every reader follow one rule: a record is kept when
`start <= ts < end` (end exclusive). A bare date `YYYY-MM-DD` means midnight America/New_York
of that date; see `to_ns`.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Iterator
from typing import Protocol, runtime_checkable
from zoneinfo import ZoneInfo

import numpy as np

RECORD_DTYPE = np.dtype(
    [
        ("ts", "<i8"),
        ("sym", "<i4"),
        ("kind", "u1"),
        ("f0", "<f8"),
        ("f1", "<f8"),
        ("f2", "<f8"),
        ("f3", "<f8"),
        ("f4", "<f8"),
    ]
)
KIND_TRADE = 0
KIND_QUOTE = 1
KIND_BAR = 2

CHUNK_RECORDS = 65_536
"""Most records in one chunk (about 3.4 MB of RECORD_DTYPE)."""

NEW_YORK = ZoneInfo("America/New_York")
UTC = dt.UTC
NS_PER_MS = 1_000_000
NS_PER_SECOND = 1_000_000_000
NS_PER_DAY = 86_400 * NS_PER_SECOND
MS_PER_HOUR = 3_600_000

log = logging.getLogger(__name__)

TimeLike = int | str | dt.date | np.datetime64 | None
"""Instant or date accepted as a `start`/`end` bound (see `to_ns`)."""


@runtime_checkable
class Source(Protocol):
    """A finite, time-ordered stream of market records, read lazily in chunks."""

    symbols: list[str]  # sym index -> name, known before iterating
    name: str  # human description for summaries

    def chunks(self) -> Iterator[np.ndarray]:
        """Chunks of RECORD_DTYPE, ts non-decreasing within and across chunks."""
        ...


class SkipCounter:
    """Counts malformed (or repaired) input by kind and logs the first of each kind once.

    `what` names the action in the log line ("skipped", "repaired"). A file reader that
    counts row by row passes `log_at_end=True` and calls `log_totals()` when the file is
    read: each kind is then logged once with its true count (a warning at the first row
    said "skipped 1 record(s)" for a file of thousands). `strict` (`--strict`): a skipped
    record is a one-line ValueError instead.
    """

    def __init__(self, source: str = "", what: str = "skipped", *, log_at_end: bool = False,
                 strict: bool = False) -> None:
        self.source = source
        self.what = what
        self.counts: dict[str, int] = {}
        self.samples: dict[str, str] = {}
        self.log_at_end = log_at_end
        self.strict = strict
        self._log = logging.getLogger(__name__)

    def add(self, kind: str, n: int = 1, sample: object = None) -> None:
        """Count `n` records of `kind`; the first time a kind is seen, log one warning
        (or keep its sample for `log_totals`)."""
        if n <= 0:
            return
        text = repr(sample)
        if len(text) > 200:  # a hostile sample (a 1 MB symbol) must not flood the log
            text = text[:200] + "..."
        where = f"{self.source}: " if self.source else ""
        if self.strict:
            raise ValueError(f"{where}{kind}: {text} (--strict: a skipped row is an error)")
        first = kind not in self.counts
        self.counts[kind] = self.counts.get(kind, 0) + int(n)
        if first:
            self.samples[kind] = text
            if not self.log_at_end:
                self._log.warning("%s%s %d record(s): %s, e.g. %s", where, self.what, n, kind,
                                  text)

    def log_totals(self) -> None:
        """One warning per kind with its whole count (readers with `log_at_end`)."""
        where = f"{self.source}: " if self.source else ""
        for kind, n in self.counts.items():
            self._log.warning("%s%s %d record(s): %s, e.g. %s", where, self.what, n, kind,
                              self.samples.get(kind))
        self.log_at_end = False  # logged once; later counts log as they come

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def total_except(self, *kinds: str) -> int:
        """Records counted under every kind but these (e.g. gaps count missing messages)."""
        return sum(v for k, v in self.counts.items() if k not in kinds)

    def __repr__(self) -> str:
        return f"SkipCounter({self.what}={self.counts})"


def split_chunks(records: np.ndarray, limit: int = CHUNK_RECORDS) -> Iterator[np.ndarray]:
    """Yield `records` in consecutive slices of at most `limit` records (none if empty)."""
    for lo in range(0, len(records), limit):
        yield records[lo : lo + limit]


# ---------------------------------------------------------------- time conversion

_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_INT_RE = re.compile(r"^[+-]?\d+$")


def date_ns(day: dt.date, hour: int = 0, minute: int = 0, tz: dt.tzinfo = NEW_YORK) -> int:
    """Nanoseconds since the epoch of `hour:minute` local time in `tz` on `day` (DST aware)."""
    local = dt.datetime(day.year, day.month, day.day, hour, minute, tzinfo=tz)
    return _datetime_ns(local)


def _datetime_ns(moment: dt.datetime) -> int:
    """Exact integer ns of an aware datetime (no float rounding)."""
    delta = moment - dt.datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * NS_PER_SECOND + delta.microseconds * 1000


def as_date(value: dt.date | np.datetime64 | str) -> dt.date:
    """A calendar date from a `date`, a datetime64 or a `YYYY-MM-DD` string."""
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, np.datetime64):
        return dt.date.fromisoformat(str(value.astype("datetime64[D]")))
    try:
        return dt.date.fromisoformat(str(value)[:10])
    except ValueError:
        raise ValueError(f"not a date: {value!r} (expected YYYY-MM-DD)") from None


def local_ms_to_utc_ns(day: dt.date, ms: np.ndarray, tz: dt.tzinfo = NEW_YORK) -> np.ndarray:
    """UTC ns of times given as milliseconds after local midnight of `day` in `tz`.

    DST aware: the UTC offset is looked up for every local hour the times fall in, so a day
    with a DST change converts times on either side of 02:00 correctly (a nonexistent or
    repeated local hour takes the offset before the change, as zoneinfo's fold=0 does).
    `ms` may be integer or float (fractional ms are rounded to the nearest ns).
    """
    ms = np.asarray(ms)
    if ms.dtype.kind in "iu":
        local_ns = ms.astype(np.int64) * NS_PER_MS
    else:
        local_ns = np.rint(ms.astype(np.float64) * NS_PER_MS).astype(np.int64)
    midnight = dt.datetime(day.year, day.month, day.day)
    epoch_day_ns = (midnight - dt.datetime(1970, 1, 1)).days * NS_PER_DAY
    if len(local_ns) == 0:
        return local_ns + epoch_day_ns
    hours = np.clip(local_ns // (MS_PER_HOUR * NS_PER_MS), 0, None)
    n_hours = int(hours.max()) + 1
    offsets = np.empty(n_hours, dtype=np.int64)
    for h in range(n_hours):
        off = (midnight + dt.timedelta(hours=h)).replace(tzinfo=tz).utcoffset()
        assert off is not None
        offsets[h] = int(off.total_seconds()) * NS_PER_SECOND
    return epoch_day_ns + local_ns - offsets[hours]


def ns_to_local_ms(ts: np.ndarray, tz: dt.tzinfo = NEW_YORK) -> tuple[np.ndarray, np.ndarray]:
    """(local date as datetime64[D], ms after local midnight) for UTC ns timestamps.

    Vectorised over the distinct UTC days present; DST aware.
    """
    ts = np.asarray(ts, dtype=np.int64)
    offsets = utc_offsets_ns(ts, tz)
    local = ts + offsets
    days = local // NS_PER_DAY
    return days.astype("datetime64[D]"), (local - days * NS_PER_DAY) // NS_PER_MS


def utc_offsets_ns(ts: np.ndarray, tz: dt.tzinfo = NEW_YORK) -> np.ndarray:
    """UTC offset of `tz` (ns, local - UTC) at each UTC instant, looked up per UTC hour."""
    ts = np.asarray(ts, dtype=np.int64)
    hour_ns = MS_PER_HOUR * NS_PER_MS
    hours = ts // hour_ns
    uniq, inverse = np.unique(hours, return_inverse=True)
    table = np.empty(len(uniq), dtype=np.int64)
    for i, h in enumerate(uniq.tolist()):
        moment = dt.datetime.fromtimestamp(h * 3600, tz=UTC).astimezone(tz)
        off = moment.utcoffset()
        assert off is not None
        table[i] = int(off.total_seconds()) * NS_PER_SECOND
    return table[inverse.reshape(ts.shape)]


def to_ns(value: TimeLike) -> int | None:
    """An instant as int ns since the epoch (UTC), or None.

    Accepts: None; an int (already ns); a `date` or `YYYY-MM-DD` string or datetime64[D]
    (midnight America/New_York of that date); an ISO-8601 datetime string with an offset or
    `Z` (that instant) or without one (New York local time); an aware `datetime`; a string of
    digits (ns). Anything else is a one-line ValueError.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"not a time: {value!r}")
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, np.datetime64):
        if np.datetime_data(value.dtype)[0] in ("D", "W", "M", "Y"):
            return date_ns(as_date(value))
        return int(value.astype("datetime64[ns]").astype(np.int64))
    if isinstance(value, dt.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=NEW_YORK)
        return _datetime_ns(moment)
    if isinstance(value, dt.date):
        return date_ns(value)
    if isinstance(value, str):
        return parse_date(value)
    raise ValueError(f"not a time: {value!r}")


def parse_date(text: str, end_of_day: bool = False) -> int:
    """Parse a command-line time bound to int ns since the epoch (UTC).

    `YYYY-MM-DD` means midnight America/New_York starting that date, or with `end_of_day`
    the midnight ending it (so an exclusive `end` bound includes the whole named day);
    ISO-8601 with an offset or `Z` is that instant; ISO-8601 without an offset is New York
    local time; digits are ns. `end_of_day` changes only the bare-date form.
    """
    s = text.strip()
    if _INT_RE.match(s):
        return int(s)
    try:
        if _DATE_RE.match(s):
            day = dt.date.fromisoformat(s)
            return date_ns(day + dt.timedelta(days=1) if end_of_day else day)
        moment = dt.datetime.fromisoformat(s)
    except ValueError:
        raise ValueError(
            f"cannot parse time {text!r}: expected YYYY-MM-DD, ISO-8601 or integer ns"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=NEW_YORK)
    return _datetime_ns(moment)

