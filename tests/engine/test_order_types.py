"""Order types, time in force and brackets: the fill rules of engine/trading/order_types.py.

Each rule is checked on hand-made bars or trades whose answer follows from the rule as
written (a gap fills at the open, a stop before a target inside one bar, the first trade
that crosses), through the real desk and broker, and through the engine for brackets.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.settings.config import BrokerConfig, EngineConfig, InstrumentConfig
from engine.trading.broker import PaperBroker
from engine.trading.core import Engine, EngineHooks
from engine.trading.order_types import OrderState, OrderType, TimeInForce
from engine.trading.orders import OrderDesk, OrderHooks, StateChange
from engine.trading.stats import EngineStats
from feeds.messages import Bar, Trade
from strategies.base import OrderRequest

NS = 1_000_000_000
DAY_NS = 86_400 * NS


def _journaled(journal: Any, orders: bool = True) -> EngineHooks:
    """The daemon's wiring of a journal: orders, fills and order states recorded."""
    return EngineHooks(OrderHooks(
        on_order=journal.record_order if orders else None,
        on_fill=lambda f: None if journal.record_fill(f) else None,
        on_state=journal.record_order_state))


def _desk(day_end: Callable[[int], int] | None = None, tick_sizes: dict[str, float] | None = None
          ) -> tuple[OrderDesk, list[StateChange]]:
    broker = PaperBroker(["A"], sizing="fixed", quantity=10.0, commission=0.0,
                         allow_short=True, cash=100_000.0)
    states: list[StateChange] = []
    desk = OrderDesk(broker, 1, "next-open", EngineStats(), tick_sizes=tick_sizes,
                     day_end=day_end or (lambda ts: 0),  # 0: no day end (the desk's default)
                     hooks=OrderHooks(on_state=states.append))
    return desk, states


def _fills(desk: OrderDesk) -> list[tuple[int, float, float]]:
    return [(f.side, f.quantity, f.price) for f in desk.broker.fills]


# ---------------------------------------------------------------------- bars
@pytest.mark.parametrize(("type_", "side", "limit", "stop", "bar", "want"), [
    # a price that gaps through fills at the open
    (OrderType.STOP, 1, math.nan, 100.0, (103.0, 105.0, 102.0), 103.0),
    (OrderType.STOP, -1, math.nan, 100.0, (97.0, 98.0, 95.0), 97.0),
    (OrderType.LIMIT, 1, 100.0, math.nan, (97.0, 99.0, 96.0), 97.0),
    (OrderType.LIMIT, -1, 100.0, math.nan, (104.0, 106.0, 103.0), 104.0),
    # reached inside the bar: at the order's price
    (OrderType.STOP, 1, math.nan, 100.0, (98.0, 101.0, 97.0), 100.0),
    (OrderType.LIMIT, 1, 100.0, math.nan, (102.0, 103.0, 99.5), 100.0),
    (OrderType.LIMIT, -1, 100.0, math.nan, (98.0, 100.5, 97.0), 100.0),
    # not reached
    (OrderType.STOP, 1, math.nan, 100.0, (98.0, 99.9, 97.0), None),
    (OrderType.LIMIT, 1, 100.0, math.nan, (101.0, 103.0, 100.1), None),
    # stop-limit: triggered inside its limit fills at the trigger, beyond it waits
    (OrderType.STOP_LIMIT, 1, 101.0, 100.0, (98.0, 102.0, 97.0), 100.0),
    (OrderType.STOP_LIMIT, 1, 101.0, 100.0, (100.5, 102.0, 100.2), 100.5),
    (OrderType.STOP_LIMIT, 1, 101.0, 100.0, (103.0, 104.0, 102.0), None),
])
def test_bar_fill_rules(type_: OrderType, side: int, limit: float, stop: float,
                        bar: tuple[float, float, float], want: float | None) -> None:
    desk, states = _desk()
    desk.broker.mark(0, 100.0)
    assert desk.submit(0, side, 10.0, type_, 1, limit=limit, stop=stop) is not None
    desk.on_bar(0, *bar, bar[0], ts=2)
    if want is None:
        assert desk.broker.fills == [] and desk.has_working[0]
    else:
        assert _fills(desk) == [(side, 10.0, want)]
        assert [s.state for s in states] == [OrderState.ACCEPTED, OrderState.FILLED]
        assert not desk.has_working[0]


def test_a_triggered_stop_limit_rests_as_a_limit() -> None:
    desk, _ = _desk()
    desk.submit(0, 1, 10.0, OrderType.STOP_LIMIT, 1, limit=101.0, stop=100.0)
    desk.on_bar(0, 103.0, 104.0, 102.0, 103.0, ts=2)  # gaps beyond the limit: triggered, waits
    desk.on_bar(0, 102.0, 102.5, 100.8, 101.0, ts=3)  # back to the limit
    assert _fills(desk) == [(1, 10.0, 101.0)]


# ---------------------------------------------------------------------- ticks
def test_ticks_fill_at_the_first_trade_that_crosses() -> None:
    desk, _ = _desk()
    desk.submit(0, -1, 10.0, OrderType.STOP, 1, stop=99.0)
    desk.submit(0, 1, 5.0, OrderType.LIMIT, 1, limit=98.5)
    for ts, p in enumerate([100.0, 99.5, 99.01, 98.7, 98.2, 97.0], start=2):
        desk.on_tick(0, p, ts)
    assert _fills(desk) == [(-1, 10.0, 98.7), (1, 5.0, 98.2)]


# ---------------------------------------------------------------------- time in force
def test_day_orders_expire_at_the_day_end_gtc_stays_ioc_meets_one_price() -> None:
    desk, states = _desk(day_end=lambda ts: ts + 100)
    day = desk.submit(0, 1, 10.0, OrderType.LIMIT, 0, limit=90.0, tif=TimeInForce.DAY)
    gtc = desk.submit(0, 1, 10.0, OrderType.LIMIT, 0, limit=90.0)
    ioc = desk.submit(0, 1, 10.0, OrderType.LIMIT, 0, limit=95.0, tif=TimeInForce.IOC)
    assert day and gtc and ioc
    desk.on_tick(0, 96.0, 50)   # IOC met a price and did not fill: cancelled
    desk.on_tick(0, 95.5, 150)  # the day ended: the DAY order expires
    desk.on_tick(0, 89.0, 200)  # only GTC is left to fill
    by_id: dict[int, list[OrderState]] = {}
    for s in states:
        by_id.setdefault(s.order_id, []).append(s.state)
    assert by_id[day.order.order_id] == [OrderState.ACCEPTED, OrderState.EXPIRED]
    assert by_id[ioc.order.order_id] == [OrderState.ACCEPTED, OrderState.CANCELLED]
    assert by_id[gtc.order.order_id] == [OrderState.ACCEPTED, OrderState.FILLED]
    assert _fills(desk) == [(1, 10.0, 89.0)]


def test_malformed_orders_are_rejected() -> None:
    desk, states = _desk()
    assert desk.submit(0, 1, 10.0, OrderType.LIMIT, 0) is None  # no limit price
    assert desk.submit(0, 1, 0.0, OrderType.STOP, 0, stop=5.0) is None
    assert [s.state for s in states] == [OrderState.REJECTED] * 2


def test_prices_round_to_the_tick_never_beyond_the_order() -> None:
    desk, _ = _desk(tick_sizes={"A": 0.25})
    buy = desk.submit(0, 1, 1.0, OrderType.LIMIT, 0, limit=100.13)
    sell = desk.submit(0, -1, 1.0, OrderType.LIMIT, 0, limit=100.13)
    stop = desk.submit(0, 1, 1.0, OrderType.STOP, 0, stop=100.13)
    assert buy and sell and stop
    assert (buy.limit, sell.limit, stop.stop) == (100.0, 100.25, 100.25)


# ---------------------------------------------------------------------- brackets
class Long:
    """Long from the first bar on, never leaves (the exits close)."""

    name = "long"
    long_only = True
    enter_on_from_zero = True

    def reset(self, symbols: list[str]) -> None:
        pass

    async def target_signals(self, features: np.ndarray, closed: np.ndarray) -> np.ndarray:
        return np.ones(closed.size, np.int8)


def _bars(ohlc: Sequence[Sequence[float]]) -> list[Bar]:
    t0 = datetime(2024, 1, 2, 21, 0, tzinfo=UTC)
    return [Bar(k + 1, int((t0 + timedelta(days=k)).timestamp()) * NS, "A", o, h, lo, c,
                1e6, DAY_NS) for k, (o, h, lo, c) in enumerate(ohlc)]


def _replay(ohlc: Sequence[Sequence[float]], fill: str = "next-open",
            **broker: float) -> Engine:
    cfg = EngineConfig(broker=BrokerConfig(fill=fill, sizing="fixed",  # type: ignore[arg-type]
                                           quantity=10.0, commission=0.0,
                                           **broker))  # type: ignore[arg-type]
    eng = Engine(["A"], Long(), cfg)

    async def go() -> None:
        await eng.process(_bars(ohlc))
        await eng.finish()

    asyncio.run(go())
    return eng


def _exits(eng: Engine) -> list[tuple[str, float]]:
    reasons = {o.order_id: o.reason for o in eng.broker.orders}
    return [(reasons[f.order_id], f.price) for f in eng.broker.fills if f.side < 0]


def test_stop_first_when_stop_and_target_lie_in_one_bar() -> None:
    eng = _replay([(100, 101, 99, 100), (100, 102, 99, 100), (100, 111, 94, 100)],
                  stop_loss=0.05, take_profit=0.10)
    assert _exits(eng) == [("stop-loss", 95.0)]
    assert eng.intent_mismatches() == []


def test_a_gap_through_the_stop_fills_at_the_open_and_cancels_the_target() -> None:
    states: list[StateChange] = []
    ohlc = [(100, 101, 99, 100), (100, 102, 99, 100), (90, 92, 89, 91), (91, 150, 90, 140)]
    cfg = EngineConfig(broker=BrokerConfig(fill="next-open", sizing="fixed", quantity=10.0,
                                           commission=0.0, stop_loss=0.05, take_profit=0.1))
    eng = Engine(["A"], Long(), cfg, hooks=EngineHooks(OrderHooks(on_state=states.append)))

    async def go() -> None:
        await eng.process(_bars(ohlc))
        await eng.finish()

    asyncio.run(go())
    assert _exits(eng) == [("stop-loss", 90.0)]
    by_reason = {s.reason: s.state for s in states if s.state is not OrderState.ACCEPTED}
    assert by_reason == {"stop-loss": OrderState.FILLED, "take-profit": OrderState.CANCELLED}
    # the signal stays long: the position stays closed until the signal changes
    assert eng.broker.accounts[0].position == 0.0 and len(eng.broker.fills) == 2


def test_take_profit_fills_at_its_price_inside_the_bar() -> None:
    eng = _replay([(100, 101, 99, 100), (100, 102, 99, 100), (104, 112, 103, 106)],
                  stop_loss=0.05, take_profit=0.10)
    assert _exits(eng) == [("take-profit", pytest.approx(110.0))]


def test_exits_work_from_the_bar_after_the_entry() -> None:
    """The entry fills at bar 2's open; bar 2's own low (below the stop) does not count."""
    eng = _replay([(100, 101, 99, 100), (100, 101, 90, 100), (100, 101, 99, 100)],
                  stop_loss=0.05)
    assert _exits(eng) == [("close", 100.0)]  # only the end of data's close


def test_trailing_stop_follows_the_closes_of_earlier_bars() -> None:
    """Entry 100; closes 109, 118 move the stop to 106.2 (10% under 118; the high of 120
    does not count); bar 4 falls to 105 through it: filled at 106.2."""
    eng = _replay([(100, 100, 100, 100), (100, 101, 99, 100), (104, 110, 103, 109),
                   (112, 120, 111, 118), (115, 116, 105, 106)], trailing_stop=0.10)
    assert _exits(eng) == [("trailing-stop", pytest.approx(106.2))]


def test_a_signal_close_cancels_the_bracket() -> None:
    class LongThenFlat(Long):
        k = 0

        async def target_signals(self, features: np.ndarray, closed: np.ndarray
                                 ) -> np.ndarray:
            self.k += 1
            return np.full(closed.size, 1 if self.k < 3 else 0, np.int8)

    cfg = EngineConfig(broker=BrokerConfig(fill="next-open", sizing="fixed", quantity=10.0,
                                           commission=0.0, stop_loss=0.05))
    eng = Engine(["A"], LongThenFlat(), cfg)

    async def go() -> None:
        await eng.process(_bars([(100, 101, 99, 100)] * 3 + [(100, 100, 80, 90)] * 2))
        await eng.finish()

    asyncio.run(go())
    assert _exits(eng) == [("close", 100.0)]  # at bar 4's open; its low is not a stop
    assert not eng.orders.has_working[0]


def test_brackets_on_ticks_fill_at_the_first_trade_through() -> None:
    cfg = EngineConfig(bar_seconds=60, broker=BrokerConfig(
        fill="next-tick", sizing="fixed", quantity=10.0, commission=0.0, stop_loss=0.02))
    eng = Engine(["A"], Long(), cfg)
    prices = [100.0] * 5 + [100.5, 99.0, 98.1, 97.9, 97.0] + [97.0] * 3
    trades = [Trade(i + 1, (1_700_000_000 + 20 * i) * NS, "A", p, 1.0)
              for i, p in enumerate(prices)]

    async def go() -> None:
        await eng.process(trades)
        await eng.finish()

    asyncio.run(go())
    entry = next(f for f in eng.broker.fills if f.side > 0)
    assert entry.price == 100.0
    assert _exits(eng) == [("stop-loss", 97.9)]  # the first trade at or below 98


def test_futures_contracts_carry_their_multiplier_through_a_stop() -> None:
    cfg = EngineConfig(broker=BrokerConfig(fill="next-open", sizing="fixed", quantity=1.0,
                                           commission=0.0, stop_loss=0.01, cash=1e6),
                       instruments={"A": InstrumentConfig(multiplier=50.0)})
    eng = Engine(["A"], Long(), cfg)

    async def go() -> None:
        await eng.process(_bars([(4000, 4001, 3999, 4000)] * 2 + [(3990, 3995, 3900, 3950)]))
        await eng.finish()

    asyncio.run(go())
    assert eng.broker.equity() - 1e6 == pytest.approx((3960.0 - 4000.0) * 50.0)


# ---------------------------------------------------------------------- journaling
def test_order_states_are_journaled_restored_and_exported(tmp_path: Path) -> None:
    """A run stopped while its bracket works: a fresh engine rebuilt from the journal
    (fills, orders, order states) fills the stop where an unbroken run does; `journal`'s
    export lists every state change."""
    from engine.live.journal import Journal

    ohlc = [(100, 101, 99, 100), (100, 102, 99, 100), (101, 103, 100, 102),
            (100, 101, 90, 95), (95, 96, 94, 95)]
    cfg = EngineConfig(broker=BrokerConfig(fill="next-open", sizing="fixed", quantity=10.0,
                                           commission=0.0, stop_loss=0.05, take_profit=0.2))
    unbroken = _replay(ohlc, stop_loss=0.05, take_profit=0.2)

    journal = Journal(tmp_path / "j.sqlite")
    first = Engine(["A"], Long(), cfg, hooks=_journaled(journal))
    bars = _bars(ohlc)
    asyncio.run(first.process(bars[:3]))  # stopped before the stop's bar
    journal.close()

    journal = Journal(tmp_path / "j.sqlite")
    state = journal.load()
    second = Engine(["A"], Long(), cfg, hooks=_journaled(journal, orders=False))
    second.restore(state.orders, state.fills)
    assert second.orders.restore_working(
        [StateChange.from_row(r) for r in journal.order_states()]) == 2

    async def go() -> None:
        await second.process(bars[3:])
        await second.finish()

    asyncio.run(go())
    assert _exits(second) == _exits(unbroken) == [("stop-loss", 95.0)]
    exported = journal.export()["order_states"]
    journal.close()
    assert [(s["reason"], s["state"]) for s in exported] == [
        ("stop-loss", "accepted"), ("take-profit", "accepted"),
        ("stop-loss", "filled"), ("take-profit", "cancelled")]
    assert exported[0]["stop_price"] == pytest.approx(95.0) and exported[1]["limit_price"] \
        == pytest.approx(120.0)


# ---------------------------------------------------------------------- a strategy's orders
class _Orders:
    """Signals 0; on the first bar close places a GTC buy limit at 95, a DAY buy stop at
    200 and an IOC sell limit at 500."""

    name = "orders"
    long_only = False
    enter_on_from_zero = True

    def __init__(self) -> None:
        self.placed = False

    def reset(self, symbols: list[str]) -> None:
        pass

    async def target_signals(self, features: np.ndarray, closed: np.ndarray) -> np.ndarray:
        return np.zeros(closed.size, np.int8)

    def orders(self) -> list[OrderRequest]:
        if self.placed:
            return []
        self.placed = True
        return [OrderRequest(0, 1, 5.0, "limit", limit=95.0),
                OrderRequest(0, 1, 5.0, "stop", stop=200.0, tif="day"),
                OrderRequest(0, -1, 5.0, "limit", limit=500.0, tif="ioc")]


def test_a_strategy_places_limit_stop_and_ioc_orders() -> None:
    cfg = EngineConfig(broker=BrokerConfig(fill="next-open", sizing="fixed", quantity=1.0,
                                           commission=0.0))
    states: list[StateChange] = []
    eng = Engine(["A"], _Orders(), cfg, hooks=EngineHooks(OrderHooks(on_state=states.append)))

    async def go() -> None:
        await eng.process(_bars([(100, 101, 99, 100), (99, 100, 96, 97), (97, 98, 94, 96),
                                 (96, 99, 95, 98)]))
        await eng.finish()

    asyncio.run(go())
    reasons = {o.order_id: o.reason for o in eng.broker.orders}
    fills = [(reasons[f.order_id], f.side * f.quantity, f.price) for f in eng.broker.fills]
    assert fills == [("order", 5.0, 95.0), ("close", -5.0, 98.0)]  # held until the end
    final = {s.order_id: s.state for s in states}
    assert sorted(v.value for v in final.values()) == ["cancelled", "expired", "filled"]
    assert eng.intent_mismatches() == []


def test_a_trailing_stop_resumes_from_its_journaled_price(tmp_path: Path) -> None:
    """Closes 109 and 118 move the stop (journaled as amended); a restart before the fall
    trails from 106.2, as the unbroken run does, not from the entry's 90."""
    from engine.live.journal import Journal

    ohlc = [(100, 100, 100, 100), (100, 101, 99, 100), (104, 110, 103, 109),
            (112, 120, 111, 118), (115, 116, 105, 106)]
    cfg = EngineConfig(broker=BrokerConfig(fill="next-open", sizing="fixed", quantity=10.0,
                                           commission=0.0, trailing_stop=0.10))
    unbroken = _replay(ohlc, trailing_stop=0.10)
    journal = Journal(tmp_path / "j.sqlite")
    first = Engine(["A"], Long(), cfg, hooks=_journaled(journal))
    bars = _bars(ohlc)
    asyncio.run(first.process(bars[:4]))
    state = journal.load()
    second = Engine(["A"], Long(), cfg)
    second.restore(state.orders, state.fills)
    changes = [StateChange.from_row(r) for r in journal.order_states()]
    assert [c.state for c in changes] == [OrderState.ACCEPTED] + [OrderState.AMENDED] * 2
    assert changes[-1].stop == pytest.approx(106.2)
    assert second.orders.restore_working(changes) == 1

    async def go() -> None:
        await second.process(bars[4:])
        await second.finish()

    asyncio.run(go())
    journal.close()
    assert _exits(second) == _exits(unbroken) == [("trailing-stop", pytest.approx(106.2))]
