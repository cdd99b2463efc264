"""The event-driven engine: one asyncio loop, one consumer of market data.

The same `Engine` runs the live daemon and the replay backtester; only the source of
messages and nothing of the clock differ: time is the data's time, never the wall clock,
so a replay is deterministic.

Per message the hot path does the least it can: validation (in the subscriber), a per-symbol
bar update, and a pending-order check. Work per bar (indicators, strategy, trading-phase
decisions, orders) happens when data time crosses a bar boundary, for all symbols at once,
so a GPU strategy gets one batched launch per boundary. The engine composes the parts that
hold each idea: `bars` (open bars and the bar clock), `decisions` (signals -> phase table ->
intended positions), `orders` (pending orders and fills) and `stats` (counts, equity curve).
"""

from __future__ import annotations

import logging
import math
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, Protocol, cast
from zoneinfo import ZoneInfo

import numpy as np

from engine.errors import StrategyError
from engine.options.protocol import OptionPricing, SpotSink
from engine.phases import Phase, SessionSchedule
from engine.settings.config import EngineConfig
from engine.trading.bars import (
    ROWS_BOUNDARY,
    ROWS_FLAGGED,
    ROWS_NEW_SYMBOL,
    BarClock,
    OpenBars,
    apply_trades,
    bar_open_ts,
)
from engine.trading.book import BarHistory, EngineBook
from engine.trading.broker import PaperBroker
from engine.trading.compiled_close import sma_cross_close
from engine.trading.decisions import Decisions
from engine.trading.order_types import OrderType, TimeInForce
from engine.trading.orders import Bracket, OrderDesk, OrderHooks, sign
from engine.trading.sizing import TargetWeight, make_sizing
from engine.trading.stats import EngineStats, EquityPoint, equity_point
from feeds.messages import Bar, Fill, Heartbeat, Message, Order, Quote, Trade, TradeBatch
from feeds.trade_batch import batch_columns
from feeds.validation import Validator
from gpu.indicators.compute import IndicatorBank
from strategies.base import (
    BookAware,
    OrderingStrategy,
    OrderRequest,
    OverlappedStrategy,
    Strategy,
    WeightStrategy,
)
from strategies.sma_cross import SmaCross

__all__ = ["Engine", "EngineStats", "EquityPoint"]

log = logging.getLogger(__name__)

NS = 1_000_000_000
OPTION_VALUES_KEPT = 100_000
#: what a symbol's tick needs beyond the bar update (Engine._flagged)
NOT_FLAGGED, FLAGGED, SPOT_ONLY = 0, 1, 2


class SessionHook(Protocol):
    """Work at a session boundary (`Engine.session_hook`): between the last bar of one
    exchange day and the first data of the next, no bar close in flight."""

    async def new_session(self, engine: Engine, last_ts: int, next_ts: int) -> None: ...


@dataclass(frozen=True, slots=True)
class EngineHooks:
    """What the engine calls outside itself, given at construction (the typed object of the
    engine's wiring): the order desk's hooks (the live daemon's journal, publisher and
    pre-trade risk gate) and the work at each change of exchange day (`session`: after
    the old day's STOP; re-evolution swaps the traded rule there, engine/live/
    reevolution.py). None: nothing is called."""

    orders: OrderHooks = OrderHooks()
    session: SessionHook | None = None


@dataclass
class OverlappedClose:
    """A bar close whose strategy evaluation is still running (`Engine.settle` ends it):
    what its decisions need from the close, and each symbol's first price after it, in the
    order they arrived (where a waiting close would have filled pending orders)."""

    bar_ts: int
    idx: list[int]
    phase: Phase
    n: int
    #: every symbol's last price at the close: the orders' reference prices and marks
    closes: list[float]
    #: every symbol's first price at the close (the equity point's buy-and-hold)
    first_prices: list[float]
    first_after: dict[int, tuple[float, int]] = field(default_factory=dict)


def _no_option_tick(symbol: str, spot: float, ts: int) -> None:
    """The option hook of an engine without an option book (never called: no symbol is
    SPOT_ONLY there)."""


@dataclass
class Engine:
    """Consumes validated messages; keeps bars, indicators, signals, orders and the broker."""

    symbols: list[str]
    strategy: Strategy
    config: EngineConfig = field(default_factory=EngineConfig)
    #: the option groups' pricing (`engine.options`), in this process or a worker's
    option_book: OptionPricing | None = None
    #: what the engine calls outside itself (EngineHooks): given here, never assigned later
    hooks: EngineHooks = field(default_factory=lambda: EngineHooks())
    #: the live daemon takes a bar close's equity point after it has published the close's
    #: orders (off their latency): the close's prices wait until `take_equity_point`, which
    #: everything that may change the broker calls first
    defer_equity: bool = False
    #: a covered bar close (engine/trading/compiled_close.py) runs compiled; False: every
    #: close takes the general path (the tests compare the two)
    compiled_close: bool = True

    def __post_init__(self) -> None:
        cfg = self.config
        #: called at every change of exchange day in the data, after the old day's STOP
        self.session_hook = self.hooks.session
        b = cfg.broker
        n = len(self.symbols)
        self.clock = BarClock(cfg.bar_seconds, cfg.timezone)
        self.bars = OpenBars(n)
        self.history = self._bar_history(n)
        self.broker = self._make_broker()
        #: what the strategy may see of its book (strategies.base.BookView)
        self.book = EngineBook(self.broker, self.history)
        self.decisions = Decisions(SessionSchedule.parse(cfg.session, cfg.timezone), n,
                                   self.broker)
        if isinstance(self.strategy, WeightStrategy):  # entries take |weight| x equity
            self.decisions.weighted = True
            self.broker.sizer = TargetWeight(lambda: self.decisions.weights)
        self.stats = EngineStats()
        self.orders = OrderDesk(
            self.broker, n, b.fill, self.stats,
            Bracket(b.stop_loss, b.take_profit, b.trailing_stop),
            {s: i.tick_size for s, i in cfg.instruments.items() if i.tick_size},
            self._day_end, self.hooks.orders, self._entry_void)
        self.sym_index: dict[str, int] = {s: i for i, s in enumerate(self.symbols)}
        # per symbol: does a tick need more than the bar update? NOT_FLAGGED: no; SPOT_ONLY:
        # only its option groups' spot (the option book's hook, called from the hot loop
        # itself: an underlying ticks on every trade of a one-symbol feed); FLAGGED: the
        # rare per-tick work of _on_flagged_tick
        self._flagged = [FLAGGED] * n
        self._underlying = [False] * n
        #: the one way a spot reaches the option book: the hot loop, the rare path, the
        #: validator's tap and each batch's newest all hand their spots to this
        self._option_spot: SpotSink = _no_option_tick
        if self.option_book is not None:
            self._option_spot = self.option_book.on_spot
            for s in self.option_book.underlyings:
                if s in self.sym_index:
                    self._underlying[self.sym_index[s]] = True
        # Spots from validation (an option book with `tap_every` > 0, the GPU worker's,
        # once `take_spots_from` tapped the validator): every tap_every-th accepted trade
        # of an underlying goes to the book as the validator accepts it, while the batch
        # is still being received, and each underlying's newest of the batch right after
        # validation (`validated`); the hot loop does nothing for an underlying then.
        # Otherwise every underlying tick goes to the book from the hot loop, which feeds
        # the worker only while a batch is applied.
        self._tap_every = self.option_book.tap_every if self.option_book is not None else 0
        self._tapped_by: Validator | None = None
        self.bank = IndicatorBank(max(n, 16))  # spare rows for symbols first seen live
        self._now = 0
        self.equity_curve: list[EquityPoint] = []
        self._equity_due: tuple[int, list[float], list[float]] | None = None
        self.finished = False
        # newest theoretical values (bounded: a replay may produce tens of millions);
        # the live daemon publishes and clears them after every batch
        self.option_values: deque[Message] = deque(maxlen=OPTION_VALUES_KEPT)
        self.strategy.reset(list(self.symbols))
        if isinstance(self.strategy, BookAware):
            self.strategy.see_book(self.book)
        self._places_orders = isinstance(self.strategy, OrderingStrategy)
        #: the bar close whose signals are still being evaluated (overlapped decisions)
        self.overlapped: OverlappedClose | None = None
        # the orders' reference prices while an overlapped close places its orders
        self._order_prices: list[float] | None = None
        # `overlaps`'s answer for the strategy it was asked about (the daemon may wrap it)
        self._overlap_known: tuple[Strategy, bool] | None = None
        # `compiled_close_covers`'s answer for the strategy it was asked about
        self._compiled_known: tuple[Strategy, bool] | None = None
        #: bar closes the compiled path made (not a reported number: the tests' witness)
        self.compiled_closes = 0
        # the symbols whose signal a compiled close changed (room for every symbol)
        self._changed = array("q", bytes(8 * n))
        #: warm-up (`warm_until`): bars whose data all lie before this time (ns) only feed
        #: the indicators; -1 = none
        self.warmup_end = -1

    def _bar_history(self, n: int) -> BarHistory | None:
        """Each symbol's last bars, kept only when read: by a strategy that asks for
        `history_bars`, or by volatility-target sizing (engine/trading/book.py)."""
        b = self.config.broker
        length = int(getattr(self.strategy, "history_bars", 0) or 0)
        if b.sizing == "volatility-target":
            length = max(length, b.volatility_lookback + 1)
        return BarHistory(n, length) if length > 0 else None

    def _make_broker(self) -> PaperBroker:
        """The one account, its sizing model and its instruments' multipliers."""
        b = self.config.broker
        history = self.history
        sizer = make_sizing(b.sizing, quantity=b.quantity, fraction=b.fraction,
                            volatility_target=b.volatility_target,
                            volatility_lookback=b.volatility_lookback,
                            bars_per_year=b.bars_per_year,
                            closes=None if history is None else history.closes)
        return PaperBroker(
            list(self.symbols), cash_per_symbol=b.cash_per_symbol, commission=b.commission,
            slippage_bps=b.slippage_bps, sizing=b.sizing, quantity=b.quantity,
            allow_short=not self.strategy.long_only, short_margin=b.short_margin,
            cash=b.cash, max_leverage=b.max_leverage, interest_rate=b.interest_rate,
            borrow_rate=b.borrow_rate, sizer=sizer,
            multipliers={s: i.multiplier for s, i in self.config.instruments.items()},
        )

    def _day_end(self, ts: int) -> int:
        """The data time (ns) the exchange day of `ts` ends at (a DAY order expires)."""
        from datetime import datetime as dt
        from datetime import time, timedelta

        day = self.clock.local_date(ts) + timedelta(days=1)
        return int(dt.combine(day, time(), self.clock.tz).timestamp()) * NS

    def warm_until(self, ts: int) -> None:
        """Warm up on the data before `ts` (ns) without trading: its bars feed the indicator
        bank and nothing else. The strategy is not asked, no order is placed, no equity
        point taken and buy-and-hold starts at the first price at or after `ts`, so the
        strategy meets its first bar at `ts` with warm indicators and signal 0, as the GP
        evaluator starts a window inside its panel. A tick bar that spans `ts` is cut
        there, so no data at or after `ts` reaches the warm-up."""
        self.warmup_end = ts

    @property
    def tz(self) -> ZoneInfo:
        return self.clock.tz

    # ------------------------------------------------------------------ registration
    def register(self, symbol: str) -> int:
        """A symbol first seen live gets its own account and indicator state."""
        self.take_equity_point()  # the close's prices are of the symbols before it
        i = self.broker.add_symbol(symbol)
        self.symbols.append(symbol)
        self.sym_index[symbol] = i
        self.bars.add_symbol()
        self.orders.add_symbol()
        self.decisions.add_symbol()
        if self.history is not None:
            self.history.ensure(len(self.symbols))
        self._flagged.append(FLAGGED)
        self._underlying.append(
            self.option_book is not None and symbol in self.option_book.underlyings
        )
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
        bars = self.bars
        o, h, l, c, v = bars.o, bars.h, bars.l, bars.c, bars.v
        flagged = self._flagged
        if self.option_book is not None:
            self.option_book.begin_batch()
        option_tick = self._option_spot
        clock = self.clock
        boundary = clock.next_boundary
        n_trades = 0
        for msg in msgs:
            if type(msg) is Trade:
                ts = msg.ts
                if ts >= boundary:
                    await self._cross_boundary(ts)
                    boundary = clock.next_boundary
                sym = sym_index.get(msg.symbol)
                if sym is None:
                    sym = self.register(msg.symbol)
                    o, h, l, c, v = bars.o, bars.h, bars.l, bars.c, bars.v
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
                f = flagged[sym]
                if f:
                    if f == SPOT_ONLY:  # an option underlying with nothing else to do
                        option_tick(msg.symbol, p, msg.ts)
                    else:
                        self._on_flagged_tick(sym, msg)
            else:
                self.stats.trades += n_trades
                n_trades = 0
                if type(msg) is TradeBatch:
                    await self._apply_batch(msg, option_tick)
                else:
                    await self._on_other(msg)
                boundary = clock.next_boundary
        self.stats.trades += n_trades
        if msgs:
            self._now = max(self._now, msgs[-1].ts)
        if self.overlapped is not None:  # the batch's state is whole when it is applied
            await self.settle()
        self.poll_options()

    async def _apply_batch(self, batch: TradeBatch,
                           option_tick: Callable[[str, float, int], None]) -> None:
        """A validated batch of trades (feeds/trade_batch.py): the bar updates in compiled
        code (`engine.trading.bars.apply_trades`), Python only where the one-tick loop does more
        than the update: a bar boundary, a flagged symbol's tick. The same bars, orders and
        fills as its rows sent one per message (tested over the real tick files)."""
        cols = batch_columns(batch)
        assert not isinstance(cols, str), "the validator passes well-formed batches only"
        # a symbol not registered yet is registered at its first row, as the one-tick loop
        # does (-1 until then: the compiled loop stops there)
        ids = np.array([self.sym_index.get(s, -1) for s in batch.symbols], np.int64)
        sym = ids[cols.sym]
        bars, clock, n = self.bars, self.clock, sym.shape[0]
        lists = (bars.o, bars.h, bars.l, bars.c, bars.v)
        i = 0
        while i < n:
            arrays = [np.array(x, np.float64) for x in lists]
            flagged = np.array(self._flagged, np.int8)
            i, why = apply_trades(sym, cols.times, cols.prices, cols.sizes, i,
                                  clock.next_boundary, flagged, *arrays)
            for x, a in zip(lists, arrays, strict=True):
                x[:] = a.tolist()  # in place: the one-tick loop holds these lists
            if why == ROWS_BOUNDARY:
                await self._cross_boundary(int(cols.times[i]))
            elif why == ROWS_NEW_SYMBOL:
                ids[cols.sym[i]] = self.register(batch.symbols[cols.sym[i]])
                sym = ids[cols.sym]
            elif why == ROWS_FLAGGED:
                s, p, ts = int(sym[i]), float(cols.prices[i]), int(cols.times[i])
                if self._flagged[s] == SPOT_ONLY:
                    option_tick(self.symbols[s], p, ts)
                else:
                    self._on_flagged_tick(s, Trade(int(cols.seqs[i]), ts, self.symbols[s], p,
                                                   float(cols.sizes[i])))
                i += 1
        self.stats.trades += n

    def take_spots_from(self, validator: Validator) -> None:
        """Where the option book takes spots from validation (`tap_every` > 0): tap this
        validator (once; the one the engine's batches go through), and leave the hot loop
        nothing to do for an underlying. Call `validated` after every batch it validated."""
        if self.option_book is None or not self._tap_every or validator is self._tapped_by:
            return
        validator.tap_trades(self.option_book.underlyings, self._tap_every,
                             self._option_spot)
        self._tapped_by = validator
        for sym, underlying in enumerate(self._underlying):
            if underlying:
                self.refresh_flag(sym)

    def validated(self, validator: Validator) -> None:
        """A batch was validated by the tapped validator: each underlying's newest spot
        that the tap did not hand out goes to the book now (the newest is always priced;
        every earlier request was older, so the book sees spots in data order)."""
        if validator is self._tapped_by:
            tick = self._option_spot
            for m in validator.untapped_newest():
                tick(m.symbol, m.price, m.ts)

    async def consume(self, frames_batch: Iterable[Any], validator: Validator) -> None:
        """Validate and apply a received batch (bad input counted and dropped): the one
        validation path, `Validator.validate_many`, then `process` (the replay's and the
        daemon's hot path). With an option book that takes spots from validation
        (`tap_every`), the validator hands them out as it accepts them; given a lazy drain
        (`Subscriber.lazy_batch`), while the batch is still being received."""
        self.take_spots_from(validator)
        msgs = validator.validate_many(frames_batch)
        self.validated(validator)
        await self.process(msgs)

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
        """Rare per-tick work: first trade of a symbol, pending orders, and then the option
        groups of an underlying (whose other ticks go straight to the book: SPOT_ONLY)."""
        if self._equity_due is not None:  # a fill or a first price may follow
            self.take_equity_point()
        p = msg.price
        first = self.bars.first_price
        has_pending = self.orders.has_pending
        if self._underlying[sym] and self._tapped_by is None:  # else: from validation
            self._option_spot(msg.symbol, p, msg.ts)
        if first[sym] != first[sym]:
            first[sym] = p
        overlapped = self.overlapped
        if overlapped is not None:  # its fills wait for the signals (`settle`)
            if sym not in overlapped.first_after:
                overlapped.first_after[sym] = (p, msg.ts)
        else:
            if self.orders.has_working[sym]:  # before the pending: see `_bar_orders`
                self.orders.on_tick(sym, p, msg.ts)
            if has_pending[sym]:
                self.orders.fill_pending(sym, p, msg.ts)
        self.refresh_flag(sym)

    def refresh_flag(self, sym: int) -> None:
        """Whether a tick of `sym` needs `_on_flagged_tick` (first price, pending orders,
        an option group's underlying)."""
        first = self.bars.first_price[sym]
        overlapped = self.overlapped
        if (first != first or self.orders.has_pending[sym] or self.orders.has_working[sym]
                or (overlapped is not None and sym not in overlapped.first_after)):
            self._flagged[sym] = FLAGGED
        elif self._underlying[sym] and self._tapped_by is None:
            self._flagged[sym] = SPOT_ONLY
        else:  # nothing, or its spots come from validation (`take_spots_from`)
            self._flagged[sym] = NOT_FLAGGED

    async def _on_other(self, msg: Message) -> None:
        if self._equity_due is not None:  # a quote, a bar or the end of data
            self.take_equity_point()
        t = type(msg)
        if t is Bar:
            await self._on_bar_message(msg)  # type: ignore[arg-type]
        elif t is Quote:
            self.stats.quotes += 1
            self._now = msg.ts
            self.broker.quote(msg.symbol, msg.bid, msg.ask)  # type: ignore[union-attr]
        elif t is Heartbeat:
            self.stats.heartbeats += 1
            if msg.final:  # type: ignore[union-attr]
                await self.finish()
        # orders, fills and option values from elsewhere are not market data: ignored

    async def _on_bar_message(self, bar: Bar) -> None:
        """Bars from bar files: all bars with one close time form one bar event."""
        clock = self.clock
        if clock.group_ts >= 0 and bar.ts > clock.group_ts:
            await self._close_bars(clock.group_ts)
            await self._new_day_check(clock.group_ts, bar.ts)
        sym = self.sym_index.get(bar.symbol)
        if sym is None:
            sym = self.register(bar.symbol)
        clock.group_ts = bar.ts
        self._now = bar.ts
        self.bars.set_bar(sym, bar)
        overlapped = self.overlapped
        if overlapped is not None:  # next-open, once the signals are in (`settle`)
            if sym not in overlapped.first_after:
                overlapped.first_after[sym] = (bar.open, bar_open_ts(bar))
        elif self.orders.has_working[sym] or self.orders.has_pending[sym]:
            self._bar_orders(sym, bar)

    def _bar_orders(self, sym: int, bar: Bar) -> None:
        """A bar of a symbol with orders: working orders first (an exit attached at this
        open's fill works from the next bar), then pending ones at the open."""
        if self._equity_due is not None:  # the close this very bar message made
            self.take_equity_point()
        if self.orders.has_working[sym]:
            self.orders.on_bar(sym, bar.open, bar.high, bar.low, bar.close, bar.ts)
        if self.orders.has_pending[sym]:  # next-open: orders of the last bar fill at this open
            # stamped when the open traded, not at this bar's close (issue 25)
            self.orders.fill_pending(sym, bar.open, bar_open_ts(bar))
            self.refresh_flag(sym)

    async def _cross_boundary(self, ts: int) -> None:
        clock = self.clock
        if clock.next_boundary >= 0:
            await self._close_bars(clock.next_boundary)
            await self._new_day_check(clock.next_boundary - 1, ts)
        clock.start_bar(ts)
        if ts < self.warmup_end < clock.next_boundary:  # the last warm-up bar ends there
            clock.next_boundary = self.warmup_end

    def local_date(self, ts: int) -> date:
        """The exchange's date at `ts` (ns since the epoch)."""
        return self.clock.local_date(ts)

    async def _new_day_check(self, last_ts: int, next_ts: int) -> None:
        """A new session day starts flat: apply the STOP that the data skipped.

        With a session schedule, a day whose data ends before its STOP phase (no bar after
        t3) would carry its position into the next day's WAIT, where the strategy's signal
        keeps moving while the position stays, and a TRADE bar could then find a position
        whose previous signal is flat (an impossible state). Clearing at the day boundary
        keeps every day inside the phase table. The orders fill like any STOP order: at the
        last price of the day (signal-close) or at the next day's first price (next-open or
        next-tick).
        """
        always = self.decisions.schedule.always_trade
        hook = self.session_hook
        if (always and hook is None) or self.clock.same_day(last_ts, next_ts):
            return
        self.take_equity_point()  # the day's STOP and the session hook may trade
        await self.settle()
        if not always:
            self.decisions.clear_all(last_ts, self._place)
        if hook is not None:
            await hook.new_session(self, last_ts, next_ts)

    # ------------------------------------------------------------------ per bar
    def phase_at(self, ts: int) -> Phase:
        return self.decisions.phase_at(self.clock.local_seconds, ts)

    async def _close_bars(self, bar_ts: int, phase: Phase | None = None) -> None:
        """A bar boundary: indicators, marks, the strategy, decisions and the equity point.

        Overlapped (`overlaps`), the strategy's evaluation is only started here and the
        decisions wait for `settle`: the batch's next ticks are applied meanwhile."""
        if self._equity_due is not None:
            self.take_equity_point()
        if self.overlapped is not None:
            await self.settle()
        bars = self.bars
        idx = bars.with_ticks()
        # a tick bar's data end before its boundary; a bar message's at its own time
        if (bar_ts - 1 if self.clock.group_ts < 0 else bar_ts) < self.warmup_end:
            self._warm_bars(idx)
            return
        if phase is None:  # the bar's last instant decides its phase
            phase = (Phase.TRADE if self.decisions.schedule.always_trade
                     else self.phase_at(bar_ts - 1))
        if idx and phase is not Phase.STOP and self.compiled_close_covers():
            self._close_compiled(idx, bar_ts, phase)
            return
        if idx:
            bars.push(idx, self.bank)
            accounts, c = self.broker.accounts, bars.c
            for i in idx:  # the broker's marks (`PaperBroker.mark`, inlined: per symbol)
                accounts[i].last_price = c[i]
            self.stats.bars += len(idx)
            if self.history is not None:
                self.history.push(idx, bars.o, bars.h, bars.l, c, bars.v)
        if self.broker.accrues:
            self.broker.accrue(self.local_date(bar_ts - 1))
        self.stats.bar_events += 1
        n = len(bars.o)
        closed = np.zeros(n, np.bool_)
        closed[idx] = True
        decisions = self.decisions
        strategy = self.strategy
        features = self.bank.values[:n]
        if phase is not Phase.STOP and self.overlaps(strategy):
            decisions.begin_signals(cast(OverlappedStrategy, strategy), features, closed,
                                    self._bar_time(bar_ts))
            self.overlapped = OverlappedClose(bar_ts, idx, phase, n, list(bars.c),
                                              list(bars.first_price))
            self.stats.overlapped_bar_events += 1
            bars.reopen(idx)
            # every symbol's first price after the close is noted (`_on_flagged_tick`); in
            # place, as the hot loop holds the list
            self._flagged[:] = [FLAGGED] * len(self._flagged)
            return
        if phase is not Phase.STOP:
            signals = await decisions.signals_of(strategy, features, closed,
                                                 self._bar_time(bar_ts))
        else:
            signals = decisions.signal
        decisions.decide(strategy, idx, signals, phase, bar_ts, self._place)
        if decisions.weights is not None and phase is Phase.TRADE:
            self._rebalance(idx, bar_ts)
        if self._places_orders:
            self._strategy_orders(bar_ts)
        self._reopen(idx, bar_ts)

    def _reopen(self, idx: list[int], bar_ts: int) -> None:
        """The end of a bar close: the closed bars reopen, the equity point is taken (or
        left due until `take_equity_point`)."""
        bars = self.bars
        bars.reopen(idx)
        if self.defer_equity:  # the broker stays as it is until `take_equity_point`
            self._equity_due = (bar_ts, list(bars.c), list(bars.first_price))
        else:
            self.equity_curve.append(equity_point(self.broker, bars.c, bars.first_price,
                                                  bar_ts))

    def compiled_close_covers(self) -> bool:
        """Whether a bar close (outside STOP) takes the compiled path: the configurations
        engine/trading/compiled_close.py covers, and `compiled_close` on."""
        strategy = self.strategy
        known = self._compiled_known
        if known is not None and known[0] is strategy:
            return known[1]
        covers = (self.compiled_close and type(strategy) is SmaCross
                  and cast(SmaCross, strategy).from_bank and self.history is None
                  and not self.decisions.weighted and not self._places_orders
                  and not self.overlaps(strategy) and self.bank.device == "cpu")
        self._compiled_known = (strategy, covers)
        return covers

    def _close_compiled(self, idx: list[int], bar_ts: int, phase: Phase) -> None:
        """`_close_bars` of a covered strategy, its bars closing (`idx`, not empty): the
        indicators and every signal in one compiled call, then Python for the symbols whose
        signal changed only. The same state, orders and fills as the general path."""
        bars, bank, decisions = self.bars, self.bank, self.decisions
        strategy = cast(SmaCross, self.strategy)
        n = len(bars.o)
        strategy.grow(n)
        if len(self._changed) < n:  # symbols registered since the last close
            self._changed = array("q", bytes(8 * n))
        state, values, seen, stamp = bank.compiled_arrays()
        # one flat buffer of the five lists: an array.array is built and handed to compiled
        # code for a fraction of what numpy's conversion of lists costs at a cold close
        code, m, active = sma_cross_close(
            array("d", bars.o + bars.h + bars.l + bars.c + bars.v), n, state, values, seen,
            stamp, bank.next_generation(), strategy.fast_col, strategy.slow_col,
            strategy.long_only, strategy.signal, decisions.signal, self._changed)
        if code:
            bank.raise_update_error(code, idx, [bars.c[i] for i in idx],
                                    [bars.v[i] for i in idx], m)
        accounts, closes = self.broker.accounts, bars.c
        for i in idx:  # the broker's marks (`PaperBroker.mark`, inlined: per symbol)
            accounts[i].last_price = closes[i]
        self.stats.bars += len(idx)
        if self.broker.accrues:
            self.broker.accrue(self.local_date(bar_ts - 1))
        self.stats.bar_events += 1
        self.compiled_closes += 1
        if m:
            decisions.decide(strategy, self._changed[:m].tolist(), strategy.signal, phase,
                             bar_ts, self._place, active=active)
        elif decisions.account is not None:  # what `decide` does where nothing changed
            decisions.account.active_signals = max(1, active)
        self._reopen(idx, bar_ts)

    def take_equity_point(self) -> None:
        """The deferred equity point of the last bar close (`defer_equity`), if still due:
        marked at the close's prices on the broker as the close left it, so the point is
        the one `_close_bars` would have taken (called before anything changes the broker:
        a fill, a quote, a new symbol, the next close, a flatten, a day's STOP)."""
        due = self._equity_due
        if due is not None:
            self._equity_due = None
            self.equity_curve.append(equity_point(self.broker, due[1], due[2], due[0]))

    def _warm_bars(self, idx: list[int]) -> None:
        """A warm-up bar close (`warm_until`): indicators only; the first prices seen are
        forgotten, so buy-and-hold buys at the first price of the trading period."""
        bars = self.bars
        if idx:
            bars.push(idx, self.bank)
            self.stats.warmup_bars += len(idx)
            if self.history is not None:  # a strategy's own averages warm up too
                self.history.push(idx, bars.o, bars.h, bars.l, bars.c, bars.v)
        self.stats.warmup_bar_events += 1
        bars.reopen(idx)
        first = bars.first_price
        for i in idx:
            first[i] = math.nan
            self.refresh_flag(i)  # a tick's first price is noted on the rare path

    def _bar_time(self, bar_ts: int) -> Callable[[], datetime]:
        """The bar's close in the exchange's time, for an error message (called only then)."""
        return lambda: datetime.fromtimestamp(bar_ts // NS, UTC).astimezone(self.tz)

    def overlaps(self, strategy: Strategy) -> bool:
        """Whether a bar close's evaluation by `strategy` overlaps the ticks after it: one
        that can (`OverlappedStrategy`), and asynchronous or told to always. Any fill model:
        signal-close orders fill at the close's prices when the close settles."""
        known = self._overlap_known
        if known is not None and known[0] is strategy:  # a protocol check costs microseconds
            return known[1]
        mode = self.config.overlap_decisions
        # attached exits fill on the bars after the close, which an overlapped close holds
        # back: a bracket waits for the signals instead
        overlap = (mode != "never" and not self.orders.bracket and not self.decisions.weighted
                   and isinstance(strategy, OverlappedStrategy)
                   and (mode == "always" or bool(strategy.asynchronous)))
        self._overlap_known = (strategy, overlap)
        return overlap

    async def settle(self) -> None:
        """End an overlapped bar close: wait for its signals, decide and place its orders at
        the close's prices, then fill at each symbol's first price after the close (in the
        order they came) what a waiting close would have filled there."""
        pending = self.overlapped
        if pending is None:
            return
        self.overlapped = None
        strategy = cast(OverlappedStrategy, self.strategy)
        signals = await self.decisions.end_signals(strategy, pending.n,
                                                   self._bar_time(pending.bar_ts))
        self._order_prices = pending.closes
        try:
            self.decisions.decide(strategy, pending.idx, signals, pending.phase,
                                  pending.bar_ts, self._place)
        finally:
            self._order_prices = None
        # after signal-close fills, as a waiting close; marked at the close's prices
        self.equity_curve.append(equity_point(self.broker, pending.closes,
                                              pending.first_prices, pending.bar_ts))
        orders = self.orders
        for sym, (price, ts) in pending.first_after.items():
            if orders.has_pending[sym]:
                orders.fill_pending(sym, price, ts)
                self.refresh_flag(sym)
        # a symbol with no price since the close stays FLAGGED: its next tick takes the
        # rare path once, which refreshes its flag (cheaper than refreshing every symbol)

    def _place(self, sym: int, side: int, reason: str, ts: int) -> None:
        """A decision's order, at the last trade (or bar close) seen."""
        prices = self.bars.c if self._order_prices is None else self._order_prices
        if (self.orders.place(sym, side, reason, prices[sym], ts)
                or self.orders.has_working[sym]):
            self._flagged[sym] = FLAGGED  # the next tick fills it (or an attached exit)

    def _rebalance(self, idx: list[int], ts: int) -> None:
        """Trade each held position of a weight strategy towards weight x equity at this
        close's price, where the difference is at least `min_trade` x equity (the phase
        table decided entries and exits before; strategies.base says how they combine)."""
        weights, intended = self.decisions.weights, self.decisions.intended
        assert weights is not None
        b, c, orders = self.broker, self.bars.c, self.orders
        equity = b.equity()
        least = max(self.config.broker.min_trade * equity, 1e-9)
        for i in idx:
            side, a = intended[i], b.accounts[i]
            unit = c[i] * a.multiplier
            if (side == 0 or side * weights[i] <= 0 or a.position * side <= 0
                    or orders.has_pending[i] or not unit > 0):
                continue
            target = side * math.floor(abs(weights[i]) * equity / unit)
            delta = target - a.position
            if target == 0 or abs(delta) * unit < least:
                continue  # no churn on tiny drifts; a weight near 0 is left to the table
            if orders.rebalance(i, 1 if delta > 0 else -1, abs(delta), c[i], ts):
                self._flagged[i] = FLAGGED

    def _strategy_orders(self, ts: int) -> None:
        """The orders the strategy places itself (strategies.base.OrderingStrategy), working
        at the desk from the next price on."""
        try:
            requests = cast(OrderingStrategy, self.strategy).orders()
        except Exception as exc:
            raise StrategyError(f"strategy {self.strategy.name!r} failed placing orders: "
                                f"{type(exc).__name__}: {exc}") from exc
        n = len(self.symbols)
        for r in requests:
            if not (isinstance(r, OrderRequest) and 0 <= r.sym < n):
                raise StrategyError(f"strategy {self.strategy.name!r} placed {r!r}: expected "
                                    f"an OrderRequest of a symbol 0..{n - 1}")
            if self.orders.submit(r.sym, r.side, r.quantity, OrderType(r.type), ts,
                                  limit=r.limit, stop=r.stop,
                                  tif=TimeInForce(r.tif)) is not None:
                self._flagged[r.sym] = FLAGGED

    def _entry_void(self, sym: int) -> None:
        """An entry came to nothing: intend what is held, so intent and position agree."""
        self.decisions.intended[sym] = self.orders.held_sign(sym)

    @property
    def fill_model(self) -> str:
        """The fill model in force: signal-close, next-open (bar data) or next-tick."""
        if self.orders.fill_on_close:
            return "signal-close"
        return "next-open" if self.clock.group_ts >= 0 else "next-tick"

    def intent_mismatches(self) -> list[str]:
        """Symbols whose intended position disagrees with the broker's position and the
        pending orders (empty in a consistent engine; tests check it after every bar)."""
        bad = []
        intended = self.decisions.intended
        for i, s in enumerate(self.symbols):
            pos = self.orders.position_after_pending(i)
            if sign(pos) != intended[i]:
                bad.append(f"{s}: intended {intended[i]}, position+pending {pos}")
        return bad

    # ------------------------------------------------------------------ end
    async def finish(self) -> None:
        """End of data: close the last bar, then STOP liquidates whatever is held."""
        if self.finished:
            return
        clock = self.clock
        if clock.group_ts >= 0:
            await self._close_bars(clock.group_ts)
            end_ts = clock.group_ts
        elif clock.next_boundary >= 0:
            await self._close_bars(clock.next_boundary)
            end_ts = clock.next_boundary
        else:
            end_ts = self._now
        await self.settle()
        self.take_equity_point()  # the last close's point, replaced by the liquidation's
        # STOP after the last bar: clear everything at the last known price
        self.decisions.clear_all(end_ts, self._place)
        c = self.bars.c
        for sym in range(len(self.orders.pending)):
            if self.orders.has_pending[sym]:
                self.orders.fill_pending(sym, c[sym], end_ts)
                self.refresh_flag(sym)
        for i, p in enumerate(c):
            if p > 0.0:
                self.broker.mark(i, p)
        # the strategy's positions were sold: buy-and-hold pays its exit costs too
        point = equity_point(self.broker, self.bars.c, self.bars.first_price, end_ts,
                             liquidate=True)
        if self.equity_curve and self.equity_curve[-1].ts == end_ts:
            self.equity_curve[-1] = point
        else:
            self.equity_curve.append(point)
        if self.option_book is not None:
            ready = await self.option_book.drain()
            self.stats.option_values = self.option_book.values_published
            self.option_values.extend(ready)
        self.finished = True

    def close_positions(self, ts: int) -> EquityPoint:
        """Sell everything at each symbol's last price now, as the end of data does (a
        walk-forward fold's end, engine/live/reevolution.py), pending orders included; the
        equity point after it, with buy-and-hold sold too, replaces the bar's."""
        self.take_equity_point()
        self.decisions.clear_all(ts, self._place)
        c = self.bars.c
        for sym in range(len(self.orders.pending)):
            if self.orders.has_pending[sym]:
                self.orders.fill_pending(sym, c[sym], ts)
                self.refresh_flag(sym)
        point = equity_point(self.broker, c, self.bars.first_price, ts, liquidate=True)
        if self.equity_curve and self.equity_curve[-1].ts == ts:
            self.equity_curve[-1] = point
        else:
            self.equity_curve.append(point)
        return point

    def flatten(self) -> None:
        """Close every position now, as a STOP would (the risk kill switch, an operator).
        Called between batches, where no bar close is overlapped (`process` settles)."""
        assert self.overlapped is None, "flatten inside a batch"
        self.take_equity_point()
        self.decisions.clear_all(self._now, self._place)

    # ------------------------------------------------------------------ restart
    def restore(self, orders: list[Order], fills: list[Fill]) -> None:
        """Rebuild cash and positions from journaled fills (the daemon's restart)."""
        for f in fills:
            sym = self.sym_index.get(f.symbol)
            if sym is None:
                sym = self.register(f.symbol)
            self.broker.accounts[sym].book_fill(f)
            self.broker.fills.append(f)
        self.broker.orders.extend(orders)
        self.broker._order_id = max((o.order_id for o in orders), default=0)
        for i in range(len(self.broker.accounts)):
            self.decisions.hold(i, self.orders.held_sign(i))

    # ------------------------------------------------------------------ views
    def first_prices(self) -> list[float]:
        return list(self.bars.first_price)

    def last_prices(self) -> list[float]:
        return self.bars.last_prices()

    def feature_row(self, symbol: str) -> np.ndarray:
        return self.bank.values[self.sym_index[symbol]].copy()
