"""The event-driven engine: one asyncio loop, one consumer of market data.

The same `Engine` runs the live daemon and the replay backtester; only the source of
messages and nothing of the clock differ: time is the data's time, never the wall clock,
so a replay is deterministic.

Per message the hot path does the least it can: validation (in the subscriber), a per-symbol
bar update, and a pending-order check. Work per bar (indicators, strategy, trading-phase
decisions, orders) happens when data time crosses a bar boundary, for all symbols at once,
so a GPU strategy gets one batched launch per boundary.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np

from engine.broker import PaperBroker
from engine.config import EngineConfig
from engine.errors import StrategyError
from engine.phases import Action, Phase, SessionSchedule, phase_action, transition
from feeds.messages import Bar, Fill, Heartbeat, Message, Order, Quote, Side, Trade
from feeds.validation import Validator
from gpu.indicators import IndicatorBank
from gpu.terminals import N_TERMINALS
from strategies.base import Strategy

log = logging.getLogger(__name__)

NS = 1_000_000_000
OPTION_VALUES_KEPT = 100_000


@dataclass
class EngineStats:
    """What the engine has handled. `trades` and `quotes` count market-data messages by kind
    (`market_data` both); `bars` counts closed bars, built from ticks or received."""

    trades: int = 0
    quotes: int = 0
    bars: int = 0
    bar_events: int = 0
    orders: int = 0
    fills: int = 0
    heartbeats: int = 0
    option_values: int = 0

    @property
    def market_data(self) -> int:
        return self.trades + self.quotes


@dataclass
class EquityPoint:
    """The account after one bar event: equity, gross exposure, and buy-and-hold's equity."""

    ts: int
    equity: float
    #: sum over symbols of |position| x last price (dollars at risk)
    gross: float = 0.0
    #: equity of buying every symbol all-in at its first price and holding it
    buy_hold: float = math.nan


@dataclass
class Engine:
    """Consumes validated messages; keeps bars, indicators, signals, orders and the broker."""

    symbols: list[str]
    strategy: Strategy
    config: EngineConfig = field(default_factory=EngineConfig)
    option_book: Any = None
    #: called with every order and fill (the live daemon journals and publishes them)
    on_order: Callable[[Order], None] | None = None
    on_fill: Callable[[Fill], None] | None = None
    #: pre-trade risk check (sym, side, quantity, reason, price, ts) -> allowed; the live
    #: daemon's limits (engine/risk.py). None: every order goes to the broker
    risk_check: Callable[[int, int, float, str, float, int], bool] | None = None

    def __post_init__(self) -> None:
        cfg = self.config
        b = cfg.broker
        self.schedule = SessionSchedule.parse(cfg.session, cfg.timezone)
        self.tz = ZoneInfo(cfg.timezone)
        self.broker = PaperBroker(
            list(self.symbols), cash_per_symbol=b.cash_per_symbol, commission=b.commission,
            slippage_bps=b.slippage_bps, sizing=b.sizing, quantity=b.quantity,
            allow_short=not self.strategy.long_only, short_margin=b.short_margin,
        )
        self.stats = EngineStats()
        self.sym_index: dict[str, int] = {s: i for i, s in enumerate(self.symbols)}
        n = len(self.symbols)
        self.bar_ns = int(cfg.bar_seconds * NS)
        if self.bar_ns <= 0:
            raise ValueError("bar_seconds must be > 0")
        # the open bar of each symbol (NaN open = no tick yet in this bar)
        self._o: list[float] = [math.nan] * n
        self._h: list[float] = [0.0] * n
        self._l: list[float] = [0.0] * n
        self._c: list[float] = [0.0] * n
        self._v: list[float] = [0.0] * n
        self._first_price: list[float] = [math.nan] * n
        self._pending: list[list[Order]] = [[] for _ in range(n)]
        self._has_pending = [False] * n
        # per symbol: does a tick need more than the bar update? (see _on_flagged_tick)
        self._flagged = [True] * n
        self._signal = np.zeros(n, np.int8)
        self._intended = [0] * n  # sign of the position once pending orders fill
        self.bank = IndicatorBank(max(n, 16))  # spare rows for symbols first seen live
        self._next_boundary = -1  # ns; -1 = no tick seen yet
        self._bar_group_ts = -1  # ts of the Bar messages being collected
        self._now = 0
        self.equity_curve: list[EquityPoint] = []
        self.finished = False
        self._fill_on_close = b.fill in ("signal-close", "bar-close")
        self._underlying = [False] * n
        if self.option_book is not None:
            for s in self.option_book.underlyings:
                if s in self.sym_index:
                    self._underlying[self.sym_index[s]] = True
        # newest theoretical values (bounded: a replay may produce tens of millions);
        # the live daemon publishes and clears them after every batch
        self.option_values: deque[Message] = deque(maxlen=OPTION_VALUES_KEPT)
        self.strategy.reset(list(self.symbols))

    # ------------------------------------------------------------------ registration
    def _register(self, symbol: str) -> int:
        """A symbol first seen live gets its own account and indicator state."""
        i = self.broker.add_symbol(symbol)
        self.symbols.append(symbol)
        self.sym_index[symbol] = i
        for lst, val in ((self._o, math.nan), (self._h, 0.0), (self._l, 0.0), (self._c, 0.0),
                         (self._v, 0.0),
                         (self._first_price, math.nan)):
            lst.append(val)
        self._pending.append([])
        self._has_pending.append(False)
        self._flagged.append(True)
        self._intended.append(0)
        self._underlying.append(
            self.option_book is not None and symbol in self.option_book.underlyings
        )
        self._signal = np.concatenate([self._signal, np.zeros(1, np.int8)])
        if len(self.symbols) > self.bank.n_symbols:
            self.bank = self.bank.grown(2 * self.bank.n_symbols)
        return i

    # ------------------------------------------------------------------ hot path
    async def process(self, msgs: Sequence[Message]) -> None:
        """Apply a batch of validated messages in order.

        The trade branch is the hot path (one pass per tick): locals only, one dict lookup,
        list stores for the open bar, one flag test for rare per-symbol work (a pending
        order to fill, an option group to reprice).
        """
        sym_index = self.sym_index
        o, h, l, c, v = self._o, self._h, self._l, self._c, self._v
        flagged = self._flagged
        boundary = self._next_boundary
        n_trades = 0
        for msg in msgs:
            if type(msg) is Trade:
                ts = msg.ts
                if ts >= boundary:
                    await self._cross_boundary(ts)
                    boundary = self._next_boundary
                sym = sym_index.get(msg.symbol)
                if sym is None:
                    sym = self._register(msg.symbol)
                    o, h, l, c, v = self._o, self._h, self._l, self._c, self._v
                    flagged = self._flagged
                p = msg.price
                n_trades += 1
                if o[sym] != o[sym]:  # NaN: first tick of this bar
                    o[sym] = h[sym] = l[sym] = p
                    v[sym] = 0.0
                elif p > h[sym]:
                    h[sym] = p
                elif p < l[sym]:
                    l[sym] = p
                c[sym] = p
                v[sym] += msg.size
                if flagged[sym]:
                    self._on_flagged_tick(sym, msg)
            else:
                self.stats.trades += n_trades
                n_trades = 0
                await self._on_other(msg)
                boundary = self._next_boundary
        self.stats.trades += n_trades
        if msgs:
            self._now = max(self._now, msgs[-1].ts)
        self.poll_options()

    async def consume(self, frames_batch: Sequence[Any], validator: Validator) -> None:
        """Validate and apply a received batch (bad input counted and dropped): the one
        validation path, `Validator.validate_many`, then `process` (the replay's and the
        daemon's hot path)."""
        await self.process(validator.validate_many(frames_batch))

    def poll_options(self) -> bool:
        """Collect finished option repricings (never blocks); True while any is in flight."""
        if self.option_book is None:
            return False
        ready = self.option_book.poll()
        if ready:
            self.stats.option_values = self.option_book.values_published
            self.option_values.extend(ready)
        return bool(self.option_book.in_flight)

    def _on_flagged_tick(self, sym: int, msg: Trade) -> None:
        """Rare per-tick work: first trade of a symbol, pending orders, option groups."""
        p = msg.price
        if self._underlying[sym]:  # every tick of an underlying: keep this path short
            self.option_book.on_underlying_tick(msg.symbol, p, msg.ts)
            if not self._has_pending[sym] and self._first_price[sym] == self._first_price[sym]:
                return
        if self._first_price[sym] != self._first_price[sym]:
            self._first_price[sym] = p
        if self._has_pending[sym]:
            self._fill_pending(sym, p, msg.ts)
        self._refresh_flag(sym)

    def _refresh_flag(self, sym: int) -> None:
        self._flagged[sym] = (self._first_price[sym] != self._first_price[sym]
                              or self._has_pending[sym] or self._underlying[sym])

    async def _on_other(self, msg: Message) -> None:
        t = type(msg)
        if t is Bar:
            await self._on_bar_message(msg)  # type: ignore[arg-type]
        elif t is Quote:
            self.stats.quotes += 1
            self._now = msg.ts
        elif t is Heartbeat:
            self.stats.heartbeats += 1
            if msg.final:  # type: ignore[union-attr]
                await self.finish()
        # orders, fills and option values from elsewhere are not market data: ignored

    async def _on_bar_message(self, bar: Bar) -> None:
        """Bars from bar files: all bars with one close time form one bar event."""
        if self._bar_group_ts >= 0 and bar.ts > self._bar_group_ts:
            await self._close_bars(self._bar_group_ts)
            self._new_day_check(self._bar_group_ts, bar.ts)
        sym = self.sym_index.get(bar.symbol)
        if sym is None:
            sym = self._register(bar.symbol)
        self._bar_group_ts = bar.ts
        self._now = bar.ts
        if self._first_price[sym] != self._first_price[sym]:
            self._first_price[sym] = bar.close
        self._o[sym], self._h[sym], self._l[sym] = bar.open, bar.high, bar.low
        self._c[sym], self._v[sym] = bar.close, bar.volume
        if self._has_pending[sym]:  # next-open: orders of the last bar fill at this open
            self._fill_pending(sym, bar.open, bar.ts)

    async def _cross_boundary(self, ts: int) -> None:
        if self._next_boundary >= 0:
            await self._close_bars(self._next_boundary)
            self._new_day_check(self._next_boundary - 1, ts)
        # bars are aligned on the exchange's local clock (a 4-hour or daily bar built from
        # ticks starts at New York midnight, not UTC midnight)
        offset = self._utc_offset_ns(ts)
        self._next_boundary = ((ts + offset) // self.bar_ns + 1) * self.bar_ns - offset

    def _utc_offset_ns(self, ts: int) -> int:
        off = datetime.fromtimestamp(ts // NS, UTC).astimezone(self.tz).utcoffset()
        return int(off.total_seconds()) * NS if off is not None else 0

    def local_date(self, ts: int) -> Any:
        """The exchange's date at `ts` (ns since the epoch)."""
        return datetime.fromtimestamp(ts // NS, UTC).astimezone(self.tz).date()

    def _new_day_check(self, last_ts: int, next_ts: int) -> None:
        """A new session day starts flat: apply the STOP that the data skipped.

        With a session schedule, a day whose data ends before its STOP phase (no bar after
        t3) would carry its position into the next day's WAIT, where the strategy's signal
        keeps moving while the position stays, and a TRADE bar could then find a position
        whose previous signal is flat (an impossible state). Clearing at the day boundary
        keeps every day inside the phase table. The orders fill like any STOP order: at the
        last price of the day (signal-close) or at the next day's first price (next-open or
        next-tick).
        """
        if self.schedule.always_trade or self.local_date(last_ts) == self.local_date(next_ts):
            return
        self._decide([], self._signal, Phase.STOP, last_ts)

    # ------------------------------------------------------------------ per bar
    def phase_at(self, ts: int) -> Phase:
        if self.schedule.always_trade:
            return Phase.TRADE
        local = datetime.fromtimestamp(ts / NS, UTC).astimezone(self.tz)
        return self.schedule.phase_at(local.hour * 3600 + local.minute * 60 + local.second)

    async def _close_bars(self, bar_ts: int, phase: Phase | None = None) -> None:
        o = self._o
        idx = [i for i in range(len(o)) if o[i] == o[i]]
        if phase is None:
            phase = self.phase_at(bar_ts - 1)  # the bar's last instant decides its phase
        if idx:
            sel = np.asarray(idx, np.int32)
            self.bank.update(
                sel,
                np.asarray([o[i] for i in idx]), np.asarray([self._h[i] for i in idx]),
                np.asarray([self._l[i] for i in idx]), np.asarray([self._c[i] for i in idx]),
                np.asarray([self._v[i] for i in idx]),
            )
            for i in idx:
                self.broker.mark(i, self._c[i])
            self.stats.bars += len(idx)
        self.stats.bar_events += 1
        closed = np.zeros(len(o), np.bool_)
        closed[idx] = True
        if phase is not Phase.STOP:
            try:
                signals = await self.strategy.target_signals(self.bank.values[: len(o)],
                                                             closed)
                signals = np.asarray(signals)
                if signals.shape != (len(o),):
                    raise ValueError(f"returned signals of shape {signals.shape}, "
                                     f"expected ({len(o)},)")
            except Exception as exc:
                when = datetime.fromtimestamp(bar_ts // NS, UTC).astimezone(self.tz)
                raise StrategyError(
                    f"strategy {self.strategy.name!r} failed at the bar closing "
                    f"{when.isoformat()}: {type(exc).__name__}: {exc}") from exc
        else:
            signals = self._signal
        self._decide(idx, signals, phase, bar_ts)
        for i in idx:
            o[i] = math.nan
        self.equity_curve.append(self._equity_point(bar_ts))

    def _equity_point(self, ts: int) -> EquityPoint:
        b = self.broker
        gross = 0.0
        bh = 0.0
        cash0, fee = b.cash_per_symbol, b.commission
        for i, acct in enumerate(b.accounts):
            p = self._c[i]
            if acct.position != 0.0:
                gross += abs(acct.position) * acct.last_price
            first = self._first_price[i]
            if first == first and p > 0.0:
                shares = max(0, math.floor((cash0 - fee) / first))
                bh += cash0 - (shares * first + fee) + shares * p if shares else cash0
            else:
                bh += cash0
        return EquityPoint(ts, b.equity(), gross, bh)

    def _decide(self, idx: list[int], signals: np.ndarray, phase: Phase, ts: int) -> None:
        strategy = self.strategy
        long_only = strategy.long_only
        for i in idx:
            new = int(signals[i])
            if long_only and new < 0:
                new = 0
            prev = int(self._signal[i])
            has_position = self._intended[i] != 0
            action = phase_action(phase, has_position, transition(prev, new),
                                  strategy.enter_on_from_zero)
            self._signal[i] = new
            if action is Action.NONE:
                continue
            # the intent is set before the order: `_order` and `_execute` set it back when
            # nothing can be bought, so intent and the broker's position agree after a bar
            if action is Action.CLEAR or action is Action.SWITCH:
                side = -self._intended[i]
                self._intended[i] = 0
                self._order(i, side, "close", ts)
            if action is Action.ENTER or action is Action.SWITCH:
                side = 1 if new > 0 else -1
                self._intended[i] = side
                self._order(i, side, "enter", ts)
        if phase is Phase.STOP:
            for i in range(len(self._intended)):
                if self._intended[i] != 0 and i not in idx:
                    side = -self._intended[i]
                    self._intended[i] = 0
                    self._order(i, side, "close", ts)

    def _order(self, sym: int, side: int, reason: str, ts: int) -> None:
        if side == 0:
            return
        price = self._c[sym]  # the last trade (or bar close) seen
        if reason == "close":
            qty = abs(self.broker.accounts[sym].position)
            for pend in self._pending[sym]:  # an entry still pending is closed too
                if pend.reason == "enter":
                    qty += pend.quantity
        else:
            qty = self.broker.entry_quantity(sym, side, price)
        if qty <= 0 or (self.risk_check is not None
                        and not self.risk_check(sym, side, qty, reason, price, ts)):
            if reason == "enter":
                self._intended[sym] = self._held_sign(sym)
            return
        order = self.broker.new_order(ts, sym, side, qty, reason)
        self.stats.orders += 1
        if self.on_order is not None:
            self.on_order(order)
        if self._fill_on_close:
            self._execute(order, sym, price, ts)
        else:
            self._pending[sym].append(order)
            self._has_pending[sym] = True
            self._flagged[sym] = True

    @property
    def fill_model(self) -> str:
        """The fill model in force: signal-close, next-open (bar data) or next-tick."""
        if self._fill_on_close:
            return "signal-close"
        return "next-open" if self._bar_group_ts >= 0 else "next-tick"

    def _fill_pending(self, sym: int, price: float, ts: int) -> None:
        pending = self._pending[sym]
        self._pending[sym] = []
        self._has_pending[sym] = False
        self._refresh_flag(sym)
        for order in pending:
            self._execute(order, sym, price, ts)

    def _execute(self, order: Order, sym: int, price: float, ts: int) -> None:
        fill = self.broker.execute(order, sym, price, ts)
        if fill is None:
            if order.reason == "enter":
                self._intended[sym] = self._held_sign(sym)
            return
        self.stats.fills += 1
        if self.on_fill is not None:
            self.on_fill(fill)

    def _held_sign(self, sym: int) -> int:
        pos = self.broker.accounts[sym].position
        return 0 if pos == 0 else (1 if pos > 0 else -1)

    def intent_mismatches(self) -> list[str]:
        """Symbols whose intended position disagrees with the broker's position and the
        pending orders (empty in a consistent engine; tests check it after every bar)."""
        bad = []
        for i, s in enumerate(self.symbols):
            pos = self.broker.accounts[i].position
            pos += sum(o.side * o.quantity for o in self._pending[i] if o.reason == "enter")
            if any(o.reason == "close" for o in self._pending[i]):
                pos = sum(o.side * o.quantity for o in self._pending[i] if o.reason == "enter")
            sign = 0 if pos == 0 else (1 if pos > 0 else -1)
            if sign != self._intended[i]:
                bad.append(f"{s}: intended {self._intended[i]}, position+pending {pos}")
        return bad

    # ------------------------------------------------------------------ end
    async def finish(self) -> None:
        """End of data: close the last bar, then STOP liquidates whatever is held."""
        if self.finished:
            return
        if self._bar_group_ts >= 0:
            await self._close_bars(self._bar_group_ts)
            end_ts = self._bar_group_ts
        elif self._next_boundary >= 0:
            await self._close_bars(self._next_boundary)
            end_ts = self._next_boundary
        else:
            end_ts = self._now
        # STOP after the last bar: clear everything at the last known price
        self._decide([], self._signal, Phase.STOP, end_ts)
        for sym in range(len(self._pending)):
            if self._has_pending[sym]:
                self._fill_pending(sym, self._c[sym], end_ts)
        for i, p in enumerate(self._c):
            if p > 0.0:
                self.broker.mark(i, p)
        if self.equity_curve and self.equity_curve[-1].ts == end_ts:
            self.equity_curve[-1] = self._equity_point(end_ts)
        else:
            self.equity_curve.append(self._equity_point(end_ts))
        if self.option_book is not None:
            ready = await self.option_book.drain()
            self.stats.option_values = self.option_book.values_published
            self.option_values.extend(ready)
        self.finished = True

    def flatten(self) -> None:
        """Close every position now, as a STOP would (the risk kill switch, an operator)."""
        self._decide([], self._signal, Phase.STOP, self._now)

    # ------------------------------------------------------------------ restart
    def restore(self, orders: list[Order], fills: list[Fill]) -> None:
        """Rebuild cash and positions from journaled fills (the daemon's restart)."""
        for f in fills:
            sym = self.sym_index.get(f.symbol)
            if sym is None:
                sym = self._register(f.symbol)
            acct = self.broker.accounts[sym]
            acct.cash -= f.side * f.quantity * f.price + f.commission
            acct.position += f.side * f.quantity
            acct.last_price = f.price
            acct.commission_paid += f.commission
            acct.trades += 1
            self.broker.fills.append(f)
        self.broker.orders.extend(orders)
        self.broker._order_id = max((o.order_id for o in orders), default=0)
        for i, acct in enumerate(self.broker.accounts):
            sign = 0 if acct.position == 0 else (1 if acct.position > 0 else -1)
            self._intended[i] = sign
            self._signal[i] = sign  # the signal that led to the position held

    # ------------------------------------------------------------------ views
    def first_prices(self) -> list[float]:
        return list(self._first_price)

    def last_prices(self) -> list[float]:
        return [p if p > 0.0 else math.nan for p in self._c]

    def feature_row(self, symbol: str) -> np.ndarray:
        return self.bank.values[self.sym_index[symbol]].copy()


assert N_TERMINALS == 31
_ = Side
