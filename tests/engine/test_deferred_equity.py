"""The live daemon's deferred equity point (`Engine.defer_equity`): a bar close's point is
taken after the close's orders are published, and must be exactly the point the engine
takes at the close itself (the reference: the same engine with `defer_equity` off), over
seeded streams with fills on the next tick or at the close, quotes, symbols first seen
mid-stream, a session schedule's STOP (10:05 in a stream of 09:30 to 10:10) and the risk
kill switch's flatten."""

from __future__ import annotations

import asyncio
import random

import pytest

from engine.live.risk_gate import RiskGate
from engine.settings.config import BrokerConfig, EngineConfig
from engine.settings.risk import RiskLimits
from engine.trading.core import Engine, EngineHooks
from engine.trading.orders import OrderHooks
from feeds.messages import Fill, Message, Order, Quote
from feeds.synthetic import SyntheticMarket
from strategies.sma_cross import SmaCross
from tests.helpers import bar_messages, trade_messages


def _stream(seed: int, n_symbols: int, n_ticks: int) -> list[Message]:
    """Trades of the synthetic market with a quote after every seventh trade."""
    out: list[Message] = []
    for i, t in enumerate(trade_messages(SyntheticMarket(n_symbols=n_symbols,
                                                         n_ticks=n_ticks, seed=seed))):
        out.append(t)
        if i % 7 == 3:
            out.append(Quote(t.seq, t.ts, t.symbol, t.price * 0.999, 100.0,
                             t.price * 1.001, 100.0))
    return out


def _run(msgs: list[Message], cfg: EngineConfig, defer: bool, seed: int,
         max_daily_loss: float) -> tuple[Engine, list[Order], list[Fill]]:
    orders: list[Order] = []
    fills: list[Fill] = []
    # symbols first seen mid-stream: the engine starts knowing none of them
    gate = RiskGate(RiskLimits(max_daily_loss=max_daily_loss))
    eng = Engine([], SmaCross(3, 6), cfg, defer_equity=defer, hooks=EngineHooks(OrderHooks(
        on_order=orders.append, on_fill=fills.append, risk_check=gate.check)))
    gate.watch(eng)
    rng = random.Random(seed)  # the same batches for both runs

    async def go() -> None:
        i = 0
        while i < len(msgs):
            n = rng.choice((1, 2, 3, 17, 64, 500))
            await eng.process(msgs[i:i + n])
            if gate.after_batch():
                eng.flatten()
            if defer:  # as the daemon: after the batch's commit and publish
                eng.take_equity_point()
            i += n
        await eng.finish()

    asyncio.run(go())
    return eng, orders, fills


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("fill", ["next-tick", "signal-close"])
@pytest.mark.parametrize("session", ["", "09:35,09:50,10:05"])
def test_deferred_point_is_the_close_point(seed: int, fill: str, session: str) -> None:
    cfg = EngineConfig(bar_seconds=20.0, session=session,
                       broker=BrokerConfig(sizing="fixed", quantity=50.0, commission=1.0,
                                           fill=fill))  # type: ignore[arg-type]
    msgs = _stream(seed, 5, 6_000)
    loss = 0.0 if seed != 3 else 50.0  # seed 3: the kill switch trips and flattens
    ref, ref_orders, ref_fills = _run(msgs, cfg, False, seed, loss)
    got, got_orders, got_fills = _run(msgs, cfg, True, seed, loss)
    assert len(ref.equity_curve) > 50 and ref_orders and ref_fills  # the run traded
    assert got.equity_curve == ref.equity_curve
    assert got_orders == ref_orders and got_fills == ref_fills
    assert got._equity_due is None


def test_point_waits_until_taken() -> None:
    """With the flag on, a close leaves its point due (off the orders' critical work) unless
    the same batch's next tick needed the broker, and `take_equity_point` appends it once."""
    cfg = EngineConfig(bar_seconds=60.0, broker=BrokerConfig(sizing="fixed", quantity=5.0))
    trades = trade_messages(SyntheticMarket(n_symbols=2, n_ticks=400, seed=4))
    eng = Engine([], SmaCross(3, 6), cfg, defer_equity=True)
    left_due = 0

    async def go() -> None:
        nonlocal left_due
        for t in trades:
            before, points = eng.stats.bar_events, len(eng.equity_curve)
            await eng.process([t])
            if eng.stats.bar_events > before:
                left_due += eng._equity_due is not None
                eng.take_equity_point()
                eng.take_equity_point()
                assert len(eng.equity_curve) == points + 1

    asyncio.run(go())
    assert eng.stats.bar_events > 3 and left_due > 0


@pytest.mark.parametrize("seed", [5, 6])
def test_deferred_point_is_the_close_point_on_a_bar_feed(seed: int) -> None:
    """Bar messages: the orders of one bar event fill at the next bar's open, in the
    message path (`_on_other`), so the point must be taken before that fill."""
    cfg = EngineConfig(bar_seconds=60.0, broker=BrokerConfig(sizing="fixed", quantity=50.0,
                                                             commission=1.0))
    msgs = bar_messages(SyntheticMarket(n_symbols=4, n_ticks=40_000, seed=seed))
    ref, ref_orders, ref_fills = _run(msgs, cfg, False, seed, 0.0)
    got, got_orders, got_fills = _run(msgs, cfg, True, seed, 0.0)
    assert len(ref.equity_curve) > 50 and ref_fills and ref.fill_model == "next-open"
    assert got.equity_curve == ref.equity_curve
    assert got_orders == ref_orders and got_fills == ref_fills
