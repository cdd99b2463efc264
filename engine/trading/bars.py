"""Bar building: each symbol's open OHLCV bar, and the clock of bar and day boundaries.

`OpenBars` holds the bar being built for every symbol (from ticks, one update per tick on
the engine's hot path, or from bar messages); `BarClock` says where data time crosses a bar
boundary, aligned on the exchange's local clock (a 4-hour or daily bar built from ticks
starts at New York midnight, not UTC midnight), and which exchange day a time falls in.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

import numpy as np
import numpy.typing as npt
from numba import njit

from feeds.messages import Bar
from gpu.indicators.compute import IndicatorBank

NS = 1_000_000_000
DAY_NS = 86_400 * NS
#: a daily bar closes at 16:00 New York and opened at 09:30 the same day
DAILY_OPEN_BEFORE_CLOSE_NS = (6 * 3600 + 30 * 60) * NS


def bar_open_ts(bar: Bar) -> int:
    """When a bar's open price traded (ns): a next-open fill is stamped there, not at the
    bar's close. A daily bar (one day long, stamped at its 16:00 New York close) opened at
    09:30 the same day, 6.5 h before (no DST change falls inside one session); any other
    bar at its start, `ts - duration_ns`."""
    if bar.duration_ns >= DAY_NS:
        return bar.ts - DAILY_OPEN_BEFORE_CLOSE_NS
    return bar.ts - bar.duration_ns


class OpenBars:
    """The open bar of each symbol (NaN open = no tick yet in this bar) and each symbol's
    first price (buy-and-hold's entry; NaN until the symbol's first tick or bar).

    Plain lists, not arrays: the engine's hot path stores one float per tick into them, and
    a list store is cheaper than a numpy item store from Python.
    """

    def __init__(self, n: int) -> None:
        self.o: list[float] = [math.nan] * n
        self.h: list[float] = [0.0] * n
        self.l: list[float] = [0.0] * n
        self.c: list[float] = [0.0] * n
        self.v: list[float] = [0.0] * n
        self.first_price: list[float] = [math.nan] * n

    def add_symbol(self) -> None:
        for lst, val in ((self.o, math.nan), (self.h, 0.0), (self.l, 0.0), (self.c, 0.0),
                         (self.v, 0.0), (self.first_price, math.nan)):
            lst.append(val)

    def with_ticks(self) -> list[int]:
        """Symbols whose bar has at least one tick (the bars that close at the boundary)."""
        o = self.o
        return [i for i in range(len(o)) if o[i] == o[i]]

    def set_bar(self, sym: int, bar: Bar) -> None:
        """A whole bar received from a bar file."""
        if self.first_price[sym] != self.first_price[sym]:
            self.first_price[sym] = bar.close
        self.o[sym], self.h[sym], self.l[sym] = bar.open, bar.high, bar.low
        self.c[sym], self.v[sym] = bar.close, bar.volume

    def push(self, idx: list[int], bank: IndicatorBank) -> None:
        """Feed the closing bars of `idx` (ascending, as `with_ticks` gives them) to the
        indicator bank (one batched update). The five price lists become one array in one
        call and only a part of the symbols is gathered: no Python list per column on a
        live bar close's path to its orders."""
        ohlcv = np.array((self.o, self.h, self.l, self.c, self.v), np.float64)
        if len(idx) == len(self.o):  # every symbol's bar closes: idx is 0..n-1 in order
            sym = np.arange(len(idx), dtype=np.int32)
        else:
            sym = np.asarray(idx, np.int32)
            ohlcv = ohlcv[:, sym]
        bank.update(sym, ohlcv[0], ohlcv[1], ohlcv[2], ohlcv[3], ohlcv[4])

    def reopen(self, idx: list[int]) -> None:
        """The bars of `idx` closed: the next tick opens a new one."""
        o = self.o
        for i in idx:
            o[i] = math.nan

    def last_prices(self) -> list[float]:
        """The last trade (or bar close) of each symbol; NaN where none was seen."""
        return [p if p > 0.0 else math.nan for p in self.c]


class BarClock:
    """Bar and day boundaries in data time (ns since the epoch), on the exchange's clock.

    It advances only with the messages the engine is given, which have passed validation:
    none is ahead of the stream's agreed clock by more than `max_time_lead_seconds` (a
    message further ahead is held until the stream agrees, `feeds.validation.Validator`),
    so one symbol's timestamp cannot move the boundaries of the others."""

    def __init__(self, bar_seconds: float, timezone: str) -> None:
        self.bar_ns = int(bar_seconds * NS)
        if self.bar_ns <= 0:
            raise ValueError("bar_seconds must be > 0")
        self.tz = ZoneInfo(timezone)
        #: the end of the open tick bar (ns); -1 = no tick seen yet
        self.next_boundary = -1
        #: the close time of the Bar messages being collected; -1 = none (tick data)
        self.group_ts = -1

    def start_bar(self, ts: int) -> None:
        """Data time reached `ts`: the open bar ends at the next boundary after it."""
        offset = self.utc_offset_ns(ts)
        self.next_boundary = ((ts + offset) // self.bar_ns + 1) * self.bar_ns - offset

    def utc_offset_ns(self, ts: int) -> int:
        # in the zone directly (the zone's fromutc, as astimezone): one datetime, not two
        off = datetime.fromtimestamp(ts // NS, self.tz).utcoffset()
        return int(off.total_seconds()) * NS if off is not None else 0

    def local_date(self, ts: int) -> date:
        """The exchange's date at `ts`."""
        return datetime.fromtimestamp(ts // NS, UTC).astimezone(self.tz).date()

    def local_seconds(self, ts: int) -> int:
        """Seconds since the exchange's local midnight at `ts` (the session phase's clock)."""
        local = datetime.fromtimestamp(ts / NS, UTC).astimezone(self.tz)
        return local.hour * 3600 + local.minute * 60 + local.second

    def same_day(self, a: int, b: int) -> bool:
        return self.local_date(a) == self.local_date(b)


#: why `apply_trades` stopped: every row applied, a bar boundary before the row (not
#: applied), a flagged symbol's row (applied; its rare work is due), a row of a symbol
#: the engine does not know yet (id -1; not applied: it registers the symbol first)
ROWS_DONE, ROWS_BOUNDARY, ROWS_FLAGGED, ROWS_NEW_SYMBOL = 0, 1, 2, 3


@njit(cache=True)
def apply_trades(sym: npt.NDArray[np.int64], times: npt.NDArray[np.int64],
                 prices: npt.NDArray[np.float64], sizes: npt.NDArray[np.float64],
                 start: int, boundary: int, flagged: npt.NDArray[np.int8],
                 o: npt.NDArray[np.float64], h: npt.NDArray[np.float64],
                 l: npt.NDArray[np.float64], c: npt.NDArray[np.float64],  # noqa: E741
                 v: npt.NDArray[np.float64]) -> tuple[int, int]:
    """The open bars' update for trade rows from `start` (engine symbol ids), exactly the
    engine's one-tick hot loop (`Engine.process`): it stops at a row at or past the bar
    `boundary` (before applying it: the bars close first) and after a row of a `flagged`
    symbol (its rare work is Python's), and before a row of a symbol not registered
    (-1). Returns (row, why: ROWS_*)."""
    for i in range(start, sym.shape[0]):
        if times[i] >= boundary:
            return i, ROWS_BOUNDARY
        s = sym[i]
        if s < 0:
            return i, ROWS_NEW_SYMBOL
        p = prices[i]
        if o[s] != o[s]:  # NaN: first tick of this bar
            o[s] = p
            h[s] = p
            l[s] = p
            v[s] = 0.0
        elif p > h[s]:
            h[s] = p
        elif p < l[s]:
            l[s] = p
        c[s] = p
        v[s] += sizes[i]
        if flagged[s] != 0:
            return i, ROWS_FLAGGED
    return sym.shape[0], ROWS_DONE


def warm_up() -> None:
    """Load (or compile) `apply_trades` now (as a batch's read-only columns call it), so a
    timed replay does not pay it in its first batch."""
    sym = np.zeros(1, np.int64)
    times = np.frombuffer(np.zeros(1, np.int64).tobytes(), "<i8")
    f = np.frombuffer(np.ones(1).tobytes(), "<f8")
    bars = [np.full(1, math.nan) for _ in range(5)]
    apply_trades(sym, times, f, f, 0, 1, np.zeros(1, np.int8), *bars)
