"""The compiled bar close (engine/trading/compiled_close.py) against the general path: the
same orders, fills, equity curve, indicators, signals and stats over the real LEAN tick
files, over seeded synthetic markets and over generated streams (symbols first seen
mid-stream, flat prices, long-only and long/short), and the same journal rows from the
live daemon's own step. The general path runs for a subclass of SmaCross (only SmaCross
itself is covered: a subclass may change its signals)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import math
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
import zmq.asyncio
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.settings.config import BrokerConfig, EngineConfig
from engine.trading.core import Engine
from engine.trading.replay import replay
from feeds.lean import LeanSource
from feeds.messages import Message, Quote, Trade
from feeds.synthetic import SyntheticMarket
from strategies.sma_cross import SmaCross
from tests.helpers import bar_messages, trade_messages

TICKS = "lean_ticks_2013-10/equity/usa/tick"
FillModel = Literal["next-tick", "signal-close"]


class GeneralSmaCross(SmaCross):
    """SmaCross through the general path (the compiled close covers SmaCross itself)."""


def _twins(fast: int, slow: int, long_only: bool) -> tuple[SmaCross, SmaCross]:
    return SmaCross(fast, slow, long_only), GeneralSmaCross(fast, slow, long_only)


def _same_engines(a: Engine, b: Engine) -> None:
    """Everything a bar close leaves behind, equal (NaN equal to NaN)."""
    assert a.broker.orders == b.broker.orders
    assert a.broker.fills == b.broker.fills
    assert a.equity_curve == b.equity_curve
    assert dataclasses.asdict(a.stats) == dataclasses.asdict(b.stats)
    assert [dataclasses.astuple(x) for x in a.broker.accounts] == \
        [dataclasses.astuple(x) for x in b.broker.accounts]
    for x, y in ((a.bank._state, b.bank._state), (a.bank.values, b.bank.values),
                 (a.bank.bars_seen, b.bank.bars_seen), (a.bank._stamp, b.bank._stamp)):
        np.testing.assert_array_equal(x, y)
    assert a.bank._generation == b.bank._generation
    sa, sb = a.strategy, b.strategy
    assert isinstance(sa, SmaCross) and isinstance(sb, SmaCross)
    assert sa.signal.dtype == sb.signal.dtype == np.int8
    np.testing.assert_array_equal(sa.signal, sb.signal)
    np.testing.assert_array_equal(a.decisions.signal, b.decisions.signal)
    assert a.decisions.intended == b.decisions.intended
    assert a.intent_mismatches() == []


@pytest.mark.parametrize(("cfg", "fast", "slow", "long_only"), [
    (EngineConfig(), 10, 50, False),
    (EngineConfig(bar_seconds=7, broker=BrokerConfig(sizing="fixed", quantity=10.0,
                                                     fill="signal-close")), 5, 10, True),
    (EngineConfig(bar_seconds=30, session="10:00,15:00,15:50"), 5, 25, False),
])
def test_real_lean_ticks_give_the_same_trading_on_both_paths(
        shared_data: Path, cfg: EngineConfig, fast: int, slow: int, long_only: bool) -> None:
    """A day of SPY and BAC trades (batched frames, as the replay sends them): next-tick
    and signal-close fills, a session schedule (its STOP closes take the general path
    between compiled ones)."""
    factory = functools.partial(LeanSource, shared_data / TICKS, symbols=["SPY", "BAC"],
                                start="2013-10-08", end="2013-10-09")
    compiled, general = _twins(fast, slow, long_only)
    a = replay(factory, compiled, cfg).engine
    b = replay(factory, general, cfg).engine
    assert a.compiled_closes > 100 and b.compiled_closes == 0
    assert len(a.broker.fills) > 5
    _same_engines(a, b)


def _run(engine: Engine, msgs: list[Message], chunk: int) -> None:
    async def go() -> None:
        for i in range(0, len(msgs), chunk):
            await engine.process(msgs[i:i + chunk])
        await engine.finish()

    asyncio.run(go())


@pytest.mark.parametrize(("seed", "bars"), [(1, False), (2, False), (3, True)])
def test_seeded_synthetic_markets_give_the_same_trading(seed: int, bars: bool) -> None:
    """The synthetic market's trades with a quote after every seventh (or as one-minute
    Bar messages: a bar feed's closes) through two engines, in steps of a few messages."""
    src = SyntheticMarket(n_symbols=7, n_ticks=40_000, seed=seed)
    msgs = bar_messages(src) if bars else _with_quotes(src)
    cfg = EngineConfig(bar_seconds=20, broker=BrokerConfig(sizing="fixed", quantity=3.0))
    compiled, general = _twins(5, 10, seed == 2)
    a = Engine(list(src.symbols), compiled, cfg)
    b = Engine(list(src.symbols), general, cfg)
    _run(a, msgs, 3)
    _run(b, msgs, 3)
    assert a.compiled_closes > 50 and b.compiled_closes == 0
    _same_engines(a, b)


def _with_quotes(src: SyntheticMarket) -> list[Message]:
    out: list[Message] = []
    for i, t in enumerate(trade_messages(src)):
        out.append(t)
        if i % 7 == 3:
            out.append(Quote(t.seq, t.ts, t.symbol, t.price * 0.999, 100.0,
                             t.price * 1.001, 100.0))
    return out


@st.composite
def _streams(draw: st.DrawFn) -> tuple[list[Trade], bool, FillModel, int]:
    """Trades of up to 5 symbols (each first seen anywhere in the stream), prices on a
    coarse grid (equal averages happen), gaps of up to three bars."""
    n = draw(st.integers(20, 400))
    n_sym = draw(st.integers(1, 5))
    ts = 1_700_000_000 * 10**9
    out = []
    for k in range(n):
        ts += draw(st.integers(0, 25)) * 10**9
        sym = draw(st.integers(0, n_sym - 1))
        price = 100.0 + draw(st.integers(-20, 20)) * 0.5
        out.append(Trade(k + 1, ts, f"S{sym}", price, float(draw(st.integers(1, 9)))))
    fill: FillModel = draw(st.sampled_from(["next-tick", "signal-close"]))
    return out, draw(st.booleans()), fill, draw(st.integers(1, 8))


@settings(max_examples=60, deadline=None)
@given(_streams())
def test_generated_streams_give_the_same_trading(case: tuple[list[Trade], bool, FillModel, int]
                                                 ) -> None:
    trades, long_only, fill, chunk = case
    msgs: list[Message] = list(trades)
    cfg = EngineConfig(bar_seconds=10, broker=BrokerConfig(fill=fill))
    compiled, general = _twins(5, 10, long_only)
    a, b = Engine([], compiled, cfg), Engine([], general, cfg)  # every symbol registered live
    _run(a, msgs, chunk)
    _run(b, msgs, chunk)
    assert b.compiled_closes == 0
    _same_engines(a, b)


def test_uncovered_strategies_take_the_general_path() -> None:
    """Averages computed from bars (EMA, windows the bank lacks) are not covered."""
    for strategy, covered in ((SmaCross(5, 10), True), (SmaCross(12, 26, kind="ema"), False),
                              (SmaCross(7, 30), False), (GeneralSmaCross(5, 10), False)):
        assert Engine(["A"], strategy).compiled_close_covers() is covered


def test_the_daemon_journals_the_same_rows_on_both_paths() -> None:
    """The live daemon's own step (validation, engine, risk gate, journal, publish on a real
    orders socket) over the synthetic market's frames: the same journal either way."""
    from benchmarks.tick_path import frames_of

    _, pairs = frames_of(30_000, 6)
    frames = [list(p) for p in pairs]
    exports = [_daemon_journal(frames, s) for s in _twins(5, 10, False)]
    a, b = exports
    assert len(a["orders"]) > 50 and len(a["fills"]) > 50
    for key in ("orders", "fills", "positions", "cash", "risk_events", "streams", "equity",
                "order_states", "snapshot"):
        assert a[key] == b[key], key


def _daemon_journal(frames: list[list[bytes]], strategy: SmaCross) -> dict[str, Any]:
    from engine.live.daemon import Daemon, open_sockets
    from engine.live.journal import Journal
    from tests.live_procs import endpoints

    cfg = EngineConfig(broker=BrokerConfig(sizing="fixed", quantity=10.0))
    with tempfile.TemporaryDirectory(prefix="compiled-close-") as tmp:
        ctx = zmq.asyncio.Context()
        journal = Journal(Path(tmp) / "j.db")
        ticks_ep, orders_ep = endpoints()
        sub, out = open_sockets(ctx, ticks_ep, orders_ep, cfg, [b""], None)
        d = Daemon(cfg=cfg, strategy=strategy, journal=journal, state=journal.load(),
                   sub=sub, out=out, device="cpu", status_file=None, max_seconds=0.0,
                   ticks=ticks_ep)

        async def go() -> None:
            for i in range(0, len(frames), 2):
                await d._step(frames[i:i + 2], time.perf_counter(), False)

        try:
            asyncio.run(go())
            assert (d.engine.compiled_closes > 0) is (type(strategy) is SmaCross)
            assert d.orders_out == len(d.engine.broker.orders) > 0
            exported = journal.export()
            exported["equity"] = [dataclasses.astuple(p) for p in d.engine.equity_curve]
            assert not math.isnan(d.engine.broker.equity())
        finally:
            d.close()
            sub.close()
            out.close()
            journal.close()
            ctx.destroy(linger=0)
    return exported
