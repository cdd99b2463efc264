"""Order types, time in force, brackets, and the rules that fill them on bars and ticks.

A working order waits at the order desk (engine/trading/orders.py) until a price fills it, its time
in force ends it, or the other leg of its bracket fills. Types: market, limit, stop,
stop-limit; a trailing stop is a stop whose price follows the best price since the entry.
Time in force: DAY (expires at the end of the exchange day it was accepted on), GTC (until
filled or cancelled), IOC (fills on the first price it meets, or is cancelled there).

Fill rules (tested in tests/engine/test_order_types.py, checked against backtrader in
tests/integration/test_peer_backtester.py):
- On bars (open, high, low): a price that gaps through the order's price fills at the open
  (a buy stop at 100 on a bar opening at 103 fills at 103; a buy limit at 100 on a bar
  opening at 97 fills at 97); a price reached inside the bar fills at the order's price.
- When a stop and a target of one bracket both lie inside one bar, the stop is assumed
  first (the bar does not say which came first: assume the worse).
- A trailing stop's price follows the best close (highest for a long, lowest for a
  short) of the bars before the one checked, as backtrader's StopTrail does: a bar's high
  may have come after its low, and a close is where the bar settled.
- A stop-limit triggers like a stop; triggered at a price within its limit it fills there,
  otherwise it rests as a limit from the next bar on (the bar does not say whether the
  price came back to the limit after the trigger).
- On ticks: the first trade that crosses the order's price fills it, at that trade's price.
- Market orders fill at the next price (or, with quotes, cross the spread:
  engine/trading/broker.py).
- An exit attached to an entry (a bracket) works from the first price after the entry's
  fill: on bars, from the bar after the entry's bar.
Prices of limit and stop orders are rounded to the instrument's tick size, a buy's down and
a sell's up for limits (never beyond what the user asked), the other way for stops.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from feeds.messages import Order


class OrderType(enum.Enum):
    MARKET = "market"
    LIMIT = "limit"
    STOP = "stop"
    STOP_LIMIT = "stop-limit"


class TimeInForce(enum.Enum):
    DAY = "day"
    GTC = "gtc"
    IOC = "ioc"


class OrderState(enum.Enum):
    """Every state an order passes through; each change is journaled by the daemon."""

    ACCEPTED = "accepted"
    #: still working, its price changed (a trailing stop that moved): a restart resumes it
    AMENDED = "amended"
    FILLED = "filled"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    REJECTED = "rejected"


#: reasons of the exits a bracket attaches to an entry (closing orders: never refused)
EXIT_REASONS = ("stop-loss", "take-profit", "trailing-stop")


@dataclass(slots=True)
class WorkingOrder:
    """An order waiting at the desk for a price. `limit`/`stop` NaN where the type has
    none; `group` > 0 ties the legs of one bracket (one fill cancels the others)."""

    order: Order
    sym: int
    type: OrderType
    limit: float = math.nan
    stop: float = math.nan
    tif: TimeInForce = TimeInForce.GTC
    #: DAY: the data time (ns) the order expires at (the exchange day's end); 0: never
    expires_ns: int = 0
    group: int = 0
    #: trailing stop: the fraction below (long) or above (short) the best price
    trail: float = 0.0
    #: the best price seen since the entry (trailing stops)
    best: float = math.nan
    #: a stop-limit whose stop was reached (it rests as a limit)
    triggered: bool = False
    #: the fill of the order's first price may not come before this data time (ns)
    active_from: int = 0

    @property
    def side(self) -> int:
        return self.order.side

    def is_stop_like(self) -> bool:
        """A stop (or a trailing stop): in a bracket it is assumed to fill first."""
        return self.type is OrderType.STOP


def round_to_tick(price: float, tick: float, up: bool) -> float:
    """`price` on the tick grid (`tick` 0: unchanged), up or down."""
    if not (tick > 0.0 and math.isfinite(price)):
        return price
    steps = price / tick
    steps = math.ceil(steps - 1e-9) if up else math.floor(steps + 1e-9)
    return round(steps * tick, 12)


def bar_fill_price(w: WorkingOrder, o: float, h: float, lo: float) -> float | None:
    """The price a bar (open, high, low) fills `w` at, or None (see the module's rules).
    Updates a stop-limit's trigger and leaves a trailing stop's price to `trail_bar`."""
    buy = w.side > 0
    match w.type:
        case OrderType.MARKET:
            return o
        case OrderType.LIMIT:
            return _limit_on_bar(buy, w.limit, o, h, lo)
        case OrderType.STOP:
            return _stop_on_bar(buy, w.stop, o, h, lo)
        case OrderType.STOP_LIMIT:
            if w.triggered:
                return _limit_on_bar(buy, w.limit, o, h, lo)
            at = _stop_on_bar(buy, w.stop, o, h, lo)
            if at is None:
                return None
            w.triggered = True
            within = at <= w.limit if buy else at >= w.limit
            return at if within else None
    raise AssertionError(f"unknown order type {w.type}")  # pragma: no cover


def _limit_on_bar(buy: bool, limit: float, o: float, h: float, lo: float) -> float | None:
    if buy:
        return o if o <= limit else (limit if lo <= limit else None)
    return o if o >= limit else (limit if h >= limit else None)


def _stop_on_bar(buy: bool, stop: float, o: float, h: float, lo: float) -> float | None:
    if buy:
        return o if o >= stop else (stop if h >= stop else None)
    return o if o <= stop else (stop if lo <= stop else None)


def tick_fill_price(w: WorkingOrder, p: float) -> float | None:
    """The price a trade at `p` fills `w` at (that trade's), or None."""
    buy = w.side > 0
    match w.type:
        case OrderType.MARKET:
            return p
        case OrderType.LIMIT:
            return p if (p <= w.limit if buy else p >= w.limit) else None
        case OrderType.STOP:
            return p if (p >= w.stop if buy else p <= w.stop) else None
        case OrderType.STOP_LIMIT:
            if not w.triggered:
                if not (p >= w.stop if buy else p <= w.stop):
                    return None
                w.triggered = True
            return p if (p <= w.limit if buy else p >= w.limit) else None
    raise AssertionError(f"unknown order type {w.type}")  # pragma: no cover


def trail(w: WorkingOrder, close: float) -> bool:
    """A trailing stop's price follows the best close seen (a trade on ticks): the highest
    for a sell stop (protecting a long), the lowest for a buy stop (protecting a short);
    it never moves back. True when the stop price moved."""
    if not w.trail:
        return False
    before = w.stop
    if w.side < 0:
        if not close <= w.best:  # NaN best: the first
            w.best = close
            w.stop = max(w.stop, close * (1.0 - w.trail))
    elif not close >= w.best:
        w.best = close
        w.stop = min(w.stop, close * (1.0 + w.trail))
    return w.stop != before


def first_of_bracket(hits: list[tuple[WorkingOrder, float]], o: float
                     ) -> tuple[WorkingOrder, float]:
    """The leg of a bracket that fills when several could in one bar: one filled at the
    open (a gap) came first; otherwise the stop is assumed first (the worse case)."""
    at_open = [h for h in hits if h[1] == o]
    if at_open:
        return at_open[0]
    stops = [h for h in hits if h[0].is_stop_like()]
    return (stops or hits)[0]
