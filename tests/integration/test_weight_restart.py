"""A weight strategy's live daemon restarted cold (fills in the journal, no snapshot):
the warm-up guard keeps it a weight strategy (issue 29), holds each restored position at
its current weight while the indicators warm (no flatten, no resize), and the strategy's
weights size its entries again once they are warm. Real ZeroMQ sockets, a real journal."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
import zmq.asyncio

from engine.live.daemon import Daemon, open_sockets
from engine.live.journal import Journal
from engine.live.snapshot import WarmupGuard, WeightWarmupGuard
from engine.settings.config import EngineConfig
from engine.settings.live import LiveOptions
from feeds.messages import encode, topic_for
from feeds.synthetic import SyntheticMarket
from gpu.indicators.catalogue import TERMINAL_INDEX
from strategies.base import WeightStrategy
from tests.helpers import trade_messages
from tests.live_procs import endpoints

TRADES = trade_messages(SyntheticMarket(n_symbols=3, n_ticks=6_000, seed=21))
WEIGHT = 0.3  # three symbols: 0.9 of equity, under the gross-exposure cap


class SmaWeights:
    """WEIGHT long where SMA(5) > SMA(10), short where below; 0 while either warms."""

    name = "sma-weights"
    long_only = False
    enter_on_from_zero = True

    def reset(self, symbols: list[str]) -> None:
        pass

    async def target_signals(self, features: np.ndarray, closed: np.ndarray) -> np.ndarray:
        raise AssertionError("a weight strategy is asked for weights, also when guarded")

    async def target_weights(self, features: np.ndarray, closed: np.ndarray) -> np.ndarray:
        diff = (features[:, TERMINAL_INDEX["sma5"]].astype(np.float64)
                - features[:, TERMINAL_INDEX["sma10"]].astype(np.float64))
        return np.where(np.isnan(diff), 0.0, WEIGHT * np.sign(diff))


def _daemon(ctx: zmq.asyncio.Context, journal: Journal, cfg: EngineConfig) -> Daemon:
    ticks, orders = endpoints()
    sub, out = open_sockets(ctx, ticks, orders, cfg, [b""], None)
    return Daemon(cfg=cfg, strategy=SmaWeights(), journal=journal, state=journal.load(),
                  sub=sub, out=out, device="cpu", status_file=None, max_seconds=0.0,
                  ticks=ticks)


def _close(d: Daemon) -> None:
    d.close()
    d.sub.socket.close(0)
    d.out.socket.close(0)


def test_a_cold_restart_keeps_a_weight_strategy_trading_by_weights(tmp_path: Path) -> None:
    # no snapshot is taken and no input logged: the restart is cold
    cfg = EngineConfig(bar_seconds=60.0,
                       live=LiveOptions(snapshot_every_bars=10**9, log_input=False))
    frames = [[topic_for(m), encode(m)] for m in TRADES]
    cut = 3_000
    ctx = zmq.asyncio.Context()
    journal = Journal(tmp_path / "j.db")
    first = _daemon(ctx, journal, cfg)
    asyncio.run(first._step(frames[:cut], time.perf_counter(), False))
    assert first.engine.decisions.weights is not None  # traded by weights
    _close(first)
    journal.close()

    journal = Journal(tmp_path / "j.db")
    second = _daemon(ctx, journal, cfg)
    assert second.restored == "cold"
    guard = second.engine.strategy
    # the defect: the guard hid target_weights, so the engine could not ask for weights
    assert isinstance(guard, WeightWarmupGuard) and isinstance(guard, WeightStrategy)
    restored = [a.position for a in second.engine.broker.accounts]
    assert any(restored)
    n_fills = len(second.engine.broker.fills)
    # small steps: after each, a symbol the guard still holds has its restored position
    for i in range(cut, len(frames), 20):
        asyncio.run(second._step(frames[i:i + 20], time.perf_counter(), False))
        for s, a in enumerate(second.engine.broker.accounts):
            if guard.held[s]:
                assert a.position == restored[s], "a warming position was traded"
        for f in second.engine.broker.fills[n_fills:]:
            reason = {o.order_id: o.reason for o in second.engine.broker.orders}[f.order_id]
            if reason == "enter":  # weight-sized: WEIGHT x the equity at the fill
                equity = second.engine.broker.equity()
                assert abs(f.quantity * f.price / equity - WEIGHT) < 0.02
        n_fills = len(second.engine.broker.fills)
    assert guard.held_bars > 0 and not guard.held.any()  # held, then released
    reasons = [o.reason for o in second.engine.broker.orders[len(first.engine.broker.orders):]]
    assert "enter" in reasons  # it kept trading by weights after the warm-up
    _close(second)
    journal.close()
    ctx.term()


class _Fixed:
    """A weight strategy answering the rows it is given, one per call."""

    name = "fixed"
    long_only = False
    enter_on_from_zero = True

    def __init__(self, rows: list[list[float]]) -> None:
        self.rows = rows

    def reset(self, symbols: list[str]) -> None:
        pass

    async def target_signals(self, features: np.ndarray, closed: np.ndarray) -> np.ndarray:
        raise AssertionError("a weight strategy is asked for weights")

    async def target_weights(self, features: np.ndarray, closed: np.ndarray) -> np.ndarray:
        return np.asarray(self.rows.pop(0), np.float64)


def test_the_weight_guard_holds_current_weights_and_releases_per_symbol() -> None:
    """Held long A and short C, flat B: while warming and weighted 0 they get their current
    weights; A is released by a nonzero weight, C once its indicators are warm."""
    current = np.array([0.3, 0.0, -0.2])
    inner = _Fixed([[0.0, 0.5, 0.0], [0.7, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    held: npt.NDArray[np.int8] = np.array([1, 0, -1], np.int8)
    guard = WeightWarmupGuard(inner, held, lambda: current)
    assert isinstance(guard, WarmupGuard) and isinstance(guard, WeightStrategy)
    cold = np.full((3, 4), np.nan, np.float32)
    closed = np.ones(3, bool)
    w = asyncio.run(guard.target_weights(cold, closed))
    assert w.tolist() == [0.3, 0.5, -0.2] and guard.held_bars == 2
    w = asyncio.run(guard.target_weights(cold, closed))
    assert w.tolist() == [0.7, 0.0, -0.2]  # A spoke for itself: released
    warm = cold.copy()
    warm[2] = 1.0  # C's indicators are warm, A's not: A stays released
    w = asyncio.run(guard.target_weights(warm, closed))
    assert w.tolist() == [0.0, 0.0, 0.0] and not guard.held.any()
    w = asyncio.run(guard.target_weights(cold, closed))
    assert w.tolist() == [0.0, 0.0, 0.0]  # released for good
