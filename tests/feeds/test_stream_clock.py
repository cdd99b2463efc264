"""The stream's clock moves only by time the stream agrees on: one symbol's timestamp far
ahead is held (counted), never the clock of the others; real jumps (a new day, a symbol
that trades on alone, the stream's end) are agreed and delivered in order."""

from __future__ import annotations

import asyncio

from engine.settings.config import EngineConfig
from engine.trading.core import Engine
from feeds.messages import Bar, Heartbeat, Message, Quote, Trade, encode, topic_for
from feeds.synthetic import SyntheticMarket
from feeds.validation import ValidationLimits, Validator
from strategies.sma_cross import SmaCross
from tests.helpers import trade_messages

NS = 1_000_000_000
DAY = 86_400 * NS
T0 = 1_700_000_000 * NS


def _frames(msgs: list[Message]) -> list[tuple[bytes, bytes]]:
    return [(topic_for(m), encode(m)) for m in msgs]


def _orders_with_hostile(hostile: list[Message] | None) -> tuple[list[tuple], Validator]:
    """The synthetic market through Engine.consume (bars, signals, orders), with hostile
    messages after a third of it; its orders, and the validator."""
    trades = trade_messages(SyntheticMarket(n_symbols=3, n_ticks=6_000, seed=5))
    frames = _frames(trades)  # type: ignore[arg-type]
    if hostile:
        k = len(frames) // 3
        frames[k:k] = _frames(hostile)
    cfg = EngineConfig(bar_seconds=60)
    v = Validator(cfg.validation)
    eng = Engine(sorted({t.symbol for t in trades}), SmaCross(5, 10), cfg)

    async def go() -> None:
        for i in range(0, len(frames), 500):
            await eng.consume(frames[i:i + 500], v)

    asyncio.run(go())
    return [(o.ts, o.symbol, o.side, o.quantity) for o in eng.broker.fills], v


def test_one_trade_of_a_new_symbol_29_days_ahead_stops_no_trading() -> None:
    """Before: the clock (and the bar clock after it) jumped 29 days; no bar closed again,
    so no later order (the control's fills after the hostile tick were all lost)."""
    control, _ = _orders_with_hostile(None)
    trades = trade_messages(SyntheticMarket(n_symbols=3, n_ticks=6_000, seed=5))
    ahead = trades[len(trades) // 3].ts + 29 * DAY
    hostile = [Trade(1, ahead, "ZZZ", 50.0, 1.0)]
    got, v = _orders_with_hostile(hostile)  # type: ignore[arg-type]
    assert len(control) >= 10
    assert got == control
    assert v.held_ahead == 1 and v.held == 1
    assert v.clock is not None and v.clock < ahead - 28 * DAY


def test_quotes_bars_and_heartbeats_far_ahead_do_not_move_the_clock() -> None:
    v = Validator()
    base: list[Message] = [Trade(1, T0, "A", 10.0, 1.0), Trade(1, T0 + NS, "B", 20.0, 1.0)]
    far = T0 + 20 * DAY
    hostile: list[Message] = [
        Quote(1, far, "A", 9.9, 1.0, 10.1, 1.0),
        Bar(1, far, "A", 10.0, 10.0, 10.0, 10.0, 1.0, 60 * NS),
        Heartbeat(1, far, "", False, 0),
    ]
    after: list[Message] = [Trade(2, T0 + 2 * NS, "A", 10.0, 1.0),
                            Trade(2, T0 + 3 * NS, "B", 20.0, 1.0)]
    out = v.validate_many(_frames(base + hostile + after))
    assert out == base + after
    assert v.clock == T0 + 3 * NS
    assert v.held == 2 and v.skipped.counts == {"time_ahead": 1}  # the heartbeat


def test_a_new_day_is_agreed_by_the_second_symbol_and_kept_in_order() -> None:
    """Daily bars: each day is a jump beyond the lead; the first symbol's bar waits for
    the second's, then both arrive in time order (nothing lost, nothing reordered)."""
    msgs: list[Message] = []
    for d in range(10):
        for i, s in enumerate(("AAA", "BBB", "CCC")):
            msgs.append(Bar(d + 1, T0 + d * DAY, s, 10.0 + i, 10.5 + i, 9.5 + i, 10.0 + i,
                            100.0, DAY))
    v = Validator()
    out = [m for f in _frames(msgs) for m in v.validate_many((f,))]
    assert out == msgs
    # per new day: the first symbol's bar held, the second's held and agreeing at once
    assert v.skipped.counts == {} and v.held == 0 and v.held_ahead == 2 * 9


def test_a_symbol_that_trades_on_alone_is_agreed_by_its_run() -> None:
    """Two symbols, then only A, a day apart each: A's run of held trades is agreed."""
    lim = ValidationLimits(time_lead_run=4)
    v = Validator(lim)
    msgs: list[Message] = [Trade(1, T0, "A", 10.0, 1.0), Trade(1, T0, "B", 10.0, 1.0)]
    msgs += [Trade(s, T0 + (s - 1) * DAY, "A", 10.0, 1.0) for s in range(2, 12)]
    out = [m for f in _frames(msgs) for m in v.validate_many((f,))]
    assert out[:2] == msgs[:2]
    assert out == msgs[:len(out)] and len(out) >= len(msgs) - lim.time_lead_run
    assert v.held == len(msgs) - len(out)
    # the stream's final heartbeat releases its tail
    out += v.validate_many(_frames([Heartbeat(1, msgs[-1].ts, "", True, 0)]))
    assert [m for m in out if isinstance(m, Trade)] == msgs and v.held == 0


def test_a_stream_of_one_symbol_is_its_own_clock() -> None:
    v = Validator()
    msgs = [Trade(s, T0 + (s - 1) * 3 * DAY, "A", 10.0, 1.0) for s in range(1, 6)]
    assert v.validate_many(_frames(msgs)) == msgs  # type: ignore[arg-type]
    assert v.held_ahead == 0


def test_held_messages_are_bounded_and_dropped_ones_counted() -> None:
    v = Validator(ValidationLimits(max_held_messages=5))
    msgs: list[Message] = [Trade(1, T0, "A", 10.0, 1.0), Trade(1, T0, "B", 10.0, 1.0)]
    for i in range(20):  # one symbol far ahead (never agreed by another), A between
        msgs.append(Trade(i + 1, T0 + 5 * DAY + i * NS, "Z", 10.0, 1.0))
        msgs.append(Trade(i + 2, T0 + (i + 1) * NS, "A", 10.0, 1.0))
    out = v.validate_many(_frames(msgs))
    assert [m.symbol for m in out] == ["A", "B"] + ["A"] * 20  # the clock never moved
    assert v.held == 5 and v.skipped.counts == {"time_ahead": 15}
