"""Snapshots in process: an engine stopped anywhere, encoded as the journal stores it,
restored, then fed the rest of the stream, orders exactly as one that never stopped; a cold
restart keeps its positions through the indicators' warm-up."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from engine.live import snapshot_format
from engine.live.snapshot import WarmupGuard, capture, restore
from engine.settings.config import EngineConfig
from engine.trading.core import Engine, EngineHooks
from engine.trading.orders import OrderHooks
from feeds.messages import Fill, Order, Trade
from feeds.synthetic import SyntheticMarket
from feeds.validation import Validator
from strategies.sma_cross import SmaCross
from tests.helpers import trade_messages

TRADES = trade_messages(SyntheticMarket(n_symbols=4, n_ticks=12_000, seed=21))


def _engine(symbols: list[str], orders: list[Order], fills: list[Fill]) -> Engine:
    return Engine(symbols, SmaCross(5, 10), EngineConfig(bar_seconds=60.0),
                  hooks=EngineHooks(OrderHooks(on_order=orders.append, on_fill=fills.append)))


async def _feed(eng: Engine, v: Validator, trades: list[Trade]) -> None:
    from feeds.messages import encode, topic_for

    for i in range(0, len(trades), 97):  # odd batch sizes: cuts fall inside bars
        frames = [(topic_for(t), encode(t)) for t in trades[i:i + 97]]
        await eng.consume(frames, v)


@pytest.mark.parametrize("cut", [1_003, 5_555, 11_111])
def test_restored_snapshot_trades_exactly_like_the_uninterrupted_engine(cut: int) -> None:
    ref_orders: list[Order] = []
    ref_fills: list[Fill] = []
    ref = _engine([], ref_orders, ref_fills)
    asyncio.run(_feed(ref, Validator(), TRADES))
    assert len(ref_fills) > 20

    orders: list[Order] = []
    fills: list[Fill] = []
    first = _engine([], orders, fills)
    v1 = Validator()
    asyncio.run(_feed(first, v1, TRADES[:cut]))
    # as the journal stores it
    state = snapshot_format.decode(snapshot_format.encode(capture(first, v1, {})))
    second = _engine(list(state["symbols"]), orders, fills)
    v2 = Validator()
    journal_fills = [Fill(f.seq, f.ts, f.symbol, f.order_id, f.side, f.quantity, f.price,
                          f.commission, fill_id=i + 1) for i, f in enumerate(fills)]
    restore(second, v2, state, list(orders), journal_fills, len(fills), len(orders))
    asyncio.run(_feed(second, v2, TRADES[cut:]))
    assert orders == ref_orders
    assert [(f.order_id, f.ts, f.price, f.quantity) for f in fills] == [
        (f.order_id, f.ts, f.price, f.quantity) for f in ref_fills]
    assert second.broker.equity() == ref.broker.equity()
    assert v2.skipped.counts == {}


def _cold_restart(guard: bool) -> tuple[Engine, list[Order]]:
    """A restart without a snapshot: a long position in the first symbol, cold indicators."""
    orders: list[Order] = []
    sym = TRADES[0].symbol
    eng = _engine([sym], orders, [])
    held = Fill(1, TRADES[0].ts, sym, 1, 1, 50.0, TRADES[0].price, 1.0, fill_id=1)
    eng.restore([Order(1, held.ts, sym, 1, 1, 50.0, "enter")], [held])
    if guard:
        eng.strategy = WarmupGuard(eng.strategy, eng.decisions.signal.copy())
    asyncio.run(_feed(eng, Validator(), [t for t in TRADES if t.symbol == sym][:3_000]))
    return eng, orders


def test_cold_restart_does_not_read_warm_up_as_flatten() -> None:
    raw, raw_orders = _cold_restart(guard=False)
    # the defect the guard fixes: the first bar's warming signal 0 closes the position
    assert raw_orders and raw_orders[0].reason == "close"
    first_bar_close = raw_orders[0].ts

    eng, orders = _cold_restart(guard=True)
    guard = eng.strategy
    assert isinstance(guard, WarmupGuard) and guard.held_bars >= 9  # sma10: 9 bars warming
    assert not orders or orders[0].ts > first_bar_close
    assert not guard.held.any()  # released once the strategy spoke for itself
    # and then the strategy rules again: the guarded engine's later orders are the ones
    # of a warm SMA crossover (its position follows the signal)
    pos = eng.broker.accounts[0].position
    sig = int(eng.decisions.signal[0])
    assert (pos > 0) == (sig > 0) or eng.orders.has_pending[0]


def _flat_layout(state: dict) -> dict:
    """A snapshot as the engine wrote it before it was split into parts: one flat table of
    engine attributes, and the validator's symbol tables apart."""
    from engine.live.snapshot import _FLAT_NAMES

    eng = state["engine"]
    flat = {name: eng[part][f] for name, (part, f) in _FLAT_NAMES.items()}
    stats = Engine([], SmaCross(5, 10)).stats
    for f, val in eng["stats"].items():
        setattr(stats, f, val)
    flat.update(eng[""], stats=stats)
    val = dict(state["validator"])
    sym = val.pop("_sym")
    earliest = Validator()._earliest
    val["_band"] = {s: st[0] for s, st in sym.items()}
    val["last_price"] = {s: st[1] for s, st in sym.items() if st[1] > 0.0}
    val["last_ts"] = {s: st[3] for s, st in sym.items() if st[3] != earliest}
    return {**state, "engine": flat, "validator": val}


def test_a_snapshot_of_the_flat_engine_layout_restores_the_same_trading() -> None:
    """A journal written before the engine's split restores into the split engine."""
    ref_orders: list[Order] = []
    ref = _engine([], ref_orders, [])
    asyncio.run(_feed(ref, Validator(), TRADES))
    orders: list[Order] = []
    fills: list[Fill] = []
    first = _engine([], orders, fills)
    v1 = Validator()
    asyncio.run(_feed(first, v1, TRADES[:5_555]))
    state = _flat_layout(snapshot_format.decode(snapshot_format.encode(capture(first, v1, {}))))
    assert "_o" in state["engine"] and "_band" in state["validator"]
    second = _engine(list(state["symbols"]), orders, fills)
    v2 = Validator()
    journal_fills = [Fill(f.seq, f.ts, f.symbol, f.order_id, f.side, f.quantity, f.price,
                          f.commission, fill_id=i + 1) for i, f in enumerate(fills)]
    restore(second, v2, state, list(orders), journal_fills, len(fills), len(orders))
    assert v2.last_price == v1.last_price and v2.last_ts == v1.last_ts
    assert second.stats == first.stats
    asyncio.run(_feed(second, v2, TRADES[5_555:]))
    assert orders == ref_orders
    assert second.broker.equity() == ref.broker.equity()


def test_a_restart_without_a_snapshot_keeps_the_days_loss_baseline(tmp_path: Path) -> None:
    """The daily-loss kill switch counts from the day's starting equity. A daemon that dies
    before its first snapshot used to restart with the baseline of the restart's equity,
    forgetting the loss made before; the baseline is now journaled with every batch."""
    import time

    import zmq.asyncio

    from engine.live.daemon import Daemon, open_sockets
    from engine.live.journal import Journal
    from engine.settings.live import LiveOptions
    from engine.settings.risk import RiskLimits
    from feeds.messages import encode, topic_for
    from tests.live_procs import endpoints

    cfg = EngineConfig(bar_seconds=60.0, risk=RiskLimits(max_daily_loss=1e9),
                       # no snapshot is taken, no input logged: the cold restart
                       live=LiveOptions(snapshot_every_bars=10**9, log_input=False))
    frames = [(topic_for(m), encode(m)) for m in TRADES[:3_000]]
    ctx = zmq.asyncio.Context()

    def daemon(journal: Journal) -> Daemon:
        ticks, orders = endpoints()
        sub, out = open_sockets(ctx, ticks, orders, cfg, [b"T."], None)
        return Daemon(cfg=cfg, strategy=SmaCross(5, 10), journal=journal, state=journal.load(),
                      sub=sub, out=out, device="cpu", status_file=None, max_seconds=0.0,
                      ticks=ticks)

    journal = Journal(tmp_path / "j.db")
    first = daemon(journal)
    asyncio.run(first._step(frames, time.perf_counter(), False))
    baseline = first.risk.day_baseline
    assert baseline is not None and first.engine.broker.fills  # it traded
    _close(first)
    journal.close()

    journal = Journal(tmp_path / "j.db")
    assert journal.load().snapshot is None
    second = daemon(journal)
    assert second.restored == "cold"
    assert second.risk.day_baseline == baseline  # not None, not the restart's equity
    _close(second)
    journal.close()
    ctx.term()


def _close(daemon: Any) -> None:
    daemon.close()
    daemon.sub.socket.close(0)
    daemon.out.socket.close(0)


def test_restore_flags_underlyings_for_this_runs_option_book() -> None:
    """A snapshot taken without option groups (its tick flags say a symbol needs nothing)
    restored into an engine whose option book prices that symbol: the flags are derived
    again, so every later tick of the underlying still reaches the book."""

    from engine.options.book import open_option_book
    from engine.options.group import OptionGroupConfig
    from engine.trading.core import SPOT_ONLY

    sym = TRADES[0].symbol
    mine = [t for t in TRADES if t.symbol == sym]
    first = _engine([], [], [])
    v1 = Validator()
    asyncio.run(_feed(first, v1, mine[:500]))
    state = snapshot_format.decode(snapshot_format.encode(capture(first, v1, {})))
    group = OptionGroupConfig(underlying=sym, strikes=(mine[0].price,), expiries=(30,),
                              rights=("C",), style="european", vol=0.2, rate=0.01,
                              grid="seed")
    book = open_option_book([group], device="cpu", dispatch="inline")
    try:
        second = Engine(list(state["symbols"]), SmaCross(5, 10),
                        EngineConfig(bar_seconds=60.0), option_book=book)
        restore(second, Validator(), state, [], [], 0, 0)
        assert second._flagged[second.sym_index[sym]] == SPOT_ONLY
        asked = book.summary()["ticks"]
        asyncio.run(_feed(second, Validator(), mine[500:600]))
        assert book.summary()["ticks"] - asked == 100  # type: ignore[operator]  # every later tick of the underlying
    finally:
        book.close()
