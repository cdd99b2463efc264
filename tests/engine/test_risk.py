"""Pre-trade risk limits: each limit checked against a brute-force reading of the orders,
fills and rejections of an engine fed a seeded synthetic stream (plus the daemon's journal
and orders socket, as real processes)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import run_engine
from engine.live.risk_gate import RiskGate
from engine.settings.config import BrokerConfig, EngineConfig
from engine.settings.risk import RiskLimits
from engine.trading.core import Engine, EngineHooks
from engine.trading.orders import OrderHooks
from feeds.messages import Fill, Heartbeat, Order, RiskRejection, Trade
from feeds.synthetic import SyntheticMarket
from strategies.sma_cross import SmaCross
from tests.helpers import trade_messages
from tests.live_procs import (
    ROOT,
    collect,
    endpoints,
    run_feed,
    start_daemon,
    stop_daemon,
    wait_processed,
)

NS = 1_000_000_000


def _gated(symbols: list[str], strategy: Any, cfg: EngineConfig, gate: RiskGate,
           **hooks: Any) -> Engine:
    """An engine whose order desk asks `gate` before every order (as the daemon wires it)."""
    eng = Engine(symbols, strategy, cfg,
                 hooks=EngineHooks(OrderHooks(risk_check=gate.check, **hooks)))
    gate.watch(eng)
    return eng


def test_a_gate_refuses_to_watch_an_engine_whose_orders_skip_it() -> None:
    """The wiring is checked: an engine built without the gate's check (every order would
    reach the broker unchecked) cannot be watched as if its limits applied."""
    cfg = EngineConfig(bar_seconds=1)
    gate = RiskGate(RiskLimits(max_position=1))
    with pytest.raises(ValueError, match="do not pass the risk gate"):
        gate.watch(Engine(["A"], _Scripted([1]), cfg))
    other = RiskGate(RiskLimits())
    with pytest.raises(ValueError, match="do not pass the risk gate"):
        gate.watch(_gated(["A"], _Scripted([1]), cfg, other))
    assert gate.engine is None


def _run(limits: RiskLimits, *, quantity: float = 100.0, n_symbols: int = 4,
         n_ticks: int = 20_000) -> tuple[Engine, RiskGate, list[Order], list[Fill]]:
    cfg = EngineConfig(bar_seconds=60.0,
                       broker=BrokerConfig(sizing="fixed", quantity=quantity, commission=1.0))
    trades = trade_messages(SyntheticMarket(n_symbols=n_symbols, n_ticks=n_ticks, seed=8))
    orders: list[Order] = []
    fills: list[Fill] = []
    gate = RiskGate(limits)
    eng = _gated([], SmaCross(5, 10), cfg, gate, on_order=orders.append, on_fill=fills.append)
    tripped = []

    async def go() -> None:
        for i in range(0, len(trades), 500):  # batches, as the daemon sees them
            await eng.process(trades[i:i + 500])
            if gate.after_batch():
                tripped.append(eng._now)
                eng.flatten()

    asyncio.run(go())
    gate.tripped = tripped  # type: ignore[attr-defined]
    return eng, gate, orders, fills


def _positions_over_time(fills: list[Fill]) -> list[dict[str, float]]:
    pos: dict[str, float] = {}
    out = []
    for f in fills:
        pos[f.symbol] = pos.get(f.symbol, 0.0) + f.side * f.quantity
        out.append(dict(pos))
    return out


def test_no_limits_no_rejections_and_the_stream_trades() -> None:
    _, gate, orders, fills = _run(RiskLimits())
    assert gate.rejected == {} and len(fills) > 20 and len(orders) >= len(fills)


def test_max_position_never_exceeded_and_each_refusal_recorded() -> None:
    free = _run(RiskLimits())[3]
    assert max(abs(p) for snap in _positions_over_time(free) for p in snap.values()) == 100
    for limit in (50.0, 150.0):
        _, gate, orders, fills = _run(RiskLimits(max_position=limit))
        peak = max((abs(p) for snap in _positions_over_time(fills) for p in snap.values()),
                   default=0.0)
        assert peak <= limit
        if limit < 100:  # every entry is too large: nothing is bought, all refused
            assert fills == [] and gate.rejected["max_position"] > 0
            assert all(r.limit == "max_position" for r in gate.rejections)
            assert len(gate.rejections) == gate.rejected["max_position"]
        else:
            assert fills and "max_position" not in gate.rejected


def test_max_gross_notional_bounds_money_at_risk() -> None:
    eng, gate, orders, fills = _run(RiskLimits(max_gross_notional=6_000.0))
    assert gate.rejected.get("max_gross_notional", 0) > 0 and fills
    # brute force: gross notional right after every entry fill, at the fill prices
    pos: dict[str, float] = {}
    last: dict[str, float] = {}
    for f in fills:
        pos[f.symbol] = pos.get(f.symbol, 0.0) + f.side * f.quantity
        last[f.symbol] = f.price
        gross = sum(abs(p) * last[s] for s, p in pos.items())
        # the check used the last trade price before the fill; allow the tick's move
        assert gross <= 6_000.0 * 1.05


def test_max_orders_per_second_of_data_time() -> None:
    _, gate, orders, _ = _run(RiskLimits(max_orders_per_second=1.0), n_symbols=8)
    entries = [o.ts for o in orders if o.reason == "enter"]
    assert gate.rejected.get("max_orders_per_second", 0) > 0
    for i, ts in enumerate(entries):  # no two entries within one second of data time
        assert sum(1 for t in entries[:i] if t > ts - NS) == 0


def test_daily_loss_kill_switch_flattens_and_blocks_entries() -> None:
    eng, gate, orders, fills = _run(RiskLimits(max_daily_loss=5.0))
    assert gate.killed and len(gate.tripped) == 1  # type: ignore[attr-defined]
    t_kill = gate.tripped[0]  # type: ignore[attr-defined]
    assert not [o for o in orders if o.reason == "enter" and o.ts > t_kill]
    assert all(a.position == 0 for a in eng.broker.accounts)  # flattened (and stays flat)
    assert gate.rejected["max_daily_loss"] == 1
    gate.reset_kill_switch()
    assert not gate.killed


def test_stale_feed_blocks_entries_not_closes() -> None:
    eng, gate, _, _ = _run(RiskLimits(), n_ticks=2_000)
    gate.stale = True
    assert not gate.check(0, 1, 10.0, "enter", 10.0, eng._now)
    assert gate.check(0, -1, 10.0, "close", 10.0, eng._now)
    assert gate.rejections[-1].limit == "feed_stale"


def test_limits_are_validated() -> None:
    for bad in ({"max_position": -1.0}, {"max_daily_loss": float("nan")}):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert(bad, RiskLimits)


@pytest.mark.slow
def test_daemon_journals_and_publishes_rejections(tmp_path: Path) -> None:
    ticks, out = endpoints()
    cfg = tmp_path / "engine.toml"
    cfg.write_text('[broker]\nsizing = "fixed"\nquantity = 100.0\n[risk]\nmax_position = 50.0\n')
    got: list[RiskRejection] = []
    stop = threading.Event()

    th = threading.Thread(target=collect, args=(out, b"R.", RiskRejection, got, stop),
                          daemon=True)
    th.start()
    j = tmp_path / "j.db"
    d = start_daemon(j, ticks, out, tmp_path / "s.json", "--config", str(cfg))
    run_feed(ticks, "--ticks", "8000")
    # waits on the journal (every message committed) and on the reader (every rejection
    # the daemon published has arrived), not a fixed second: a loaded machine may need more
    wait_processed(j, 8000, d)
    st = stop_daemon(d, tmp_path / "s.json")
    assert st["fills"] == 0 and st["rejected"]["max_position"] > 0
    deadline = time.monotonic() + 30
    while len(got) < st["rejected"]["max_position"] and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    th.join(5)
    # the export in this process (run_engine.main): the journal command is a reader of a
    # closed file here; the operator's journal process beside a running daemon is the
    # kill-switch test's below
    out_text = io.StringIO()
    with contextlib.redirect_stdout(out_text):
        rc = run_engine.main(["journal", "--journal", str(j), "--json", str(tmp_path / "x.json")])
    assert rc == 0
    exported = json.loads((tmp_path / "x.json").read_text())
    events = exported["risk_events"]
    assert len(events) == st["rejected"]["max_position"]
    assert {e["limit"] for e in events} == {"max_position"}
    assert [(e["event_id"], e["symbol"]) for e in events] == [(m.seq, m.symbol) for m in got]
    assert "max_position" in out_text.getvalue()


@pytest.mark.slow
def test_kill_switch_survives_restart_until_the_operator_resets_it(tmp_path: Path) -> None:
    from engine.live.journal import Journal

    j = tmp_path / "j.db"
    journal = Journal(j)
    journal.set_meta("kill_switch", "1")  # tripped by an earlier run
    journal.close()
    ticks, out = endpoints()
    status = tmp_path / "status.json"
    cfg = tmp_path / "engine.toml"
    cfg.write_text("[live]\nstatus_every_seconds = 0.2\n")
    d = start_daemon(j, ticks, out, tmp_path / "s.json", "--config", str(cfg),
                     "--status-file", str(status))

    def wait_for(cond: object) -> dict:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                st = json.loads(status.read_text())
                if cond(st):  # type: ignore[operator]
                    return st
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        raise AssertionError("status never matched")

    wait_for(lambda s: s["kill_switch"] is True)
    r = subprocess.run([sys.executable, str(ROOT / "run_engine.py"), "journal", "--journal",
                        str(j), "--reset-kill-switch"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    wait_for(lambda s: s["kill_switch"] is False)
    stop_daemon(d, tmp_path / "s.json")


class _Scripted:
    """A one-symbol strategy that emits the given signals, one per bar, then the last."""

    name = "scripted"
    enter_on_from_zero = True
    long_only = False

    def __init__(self, signals: list[int]) -> None:
        self.signals, self.k = signals, 0

    def reset(self, symbols: list[str]) -> None:
        pass

    async def target_signals(self, features: np.ndarray, closed: np.ndarray) -> np.ndarray:
        v = self.signals[min(self.k, len(self.signals) - 1)]
        self.k += 1
        return np.array([v], np.int8)


def _scripted_positions(engine: Engine, prices: list[float]) -> list[float]:
    positions = []

    async def run() -> None:
        for i, p in enumerate(prices):
            await engine.process([Trade(i + 1, (i + 1) * NS, "A", float(p), 1.0)])
            positions.append(engine.broker.accounts[0].position)

    asyncio.run(run())
    return positions


def test_a_switch_of_sides_cannot_carry_the_position_past_max_position() -> None:
    """Short 100 at 100, then long: under next-tick fills the all-in entry is sized again at
    the next tick's price (50) from the cash the close freed, 300 shares against a limit of
    250 before the fix."""
    cfg = EngineConfig(bar_seconds=1, broker=BrokerConfig(fill="next-tick", commission=0))
    engine = _gated(["A"], _Scripted([-1, 1, 1, 1]), cfg, RiskGate(RiskLimits(max_position=250)))
    positions = _scripted_positions(engine, [100, 100, 50, 50, 50, 50])
    assert -100.0 in positions  # it did go short first
    assert max(abs(p) for p in positions) <= 250
    assert positions[-1] > 0  # and then long, capped at the limit


def test_an_entry_filled_after_a_gap_stays_within_max_gross_notional() -> None:
    """The gate approves 50 shares at 100 (5,000 against a 6,000 limit); the fill comes at
    the next tick, 150: 7,500 of notional before the fix, 40 shares (6,000) after."""
    cfg = EngineConfig(bar_seconds=1, broker=BrokerConfig(fill="next-tick", sizing="fixed",
                                                          quantity=50, commission=0))
    gate = RiskGate(RiskLimits(max_gross_notional=6_000))
    engine = _gated(["A"], _Scripted([1]), cfg, gate)
    positions = _scripted_positions(engine, [100, 150, 150])
    assert "max_gross_notional" not in gate.rejected  # the gate itself said yes
    assert engine.broker.fills and engine.broker.fills[0].price == 150.0
    assert positions[-1] == 40.0  # floor(6,000 / 150)
    # nothing is left of the limit: the next gap up refuses the whole entry and counts it
    engine2 = _gated(["A"], _Scripted([1]), cfg, RiskGate(RiskLimits(max_gross_notional=6_000)))
    assert _scripted_positions(engine2, [100, 7_000, 7_000])[-1] == 0.0
    assert engine2.broker.refused == {"max_gross_notional": 1}


def _losing_day(limits: RiskLimits, opening: list[Any]) -> tuple[Engine, RiskGate]:
    """One day of a seeded stream that loses money, after `opening` messages."""
    cfg = EngineConfig(bar_seconds=60.0,
                       broker=BrokerConfig(sizing="fixed", quantity=100.0, commission=1.0))
    trades = trade_messages(SyntheticMarket(n_symbols=4, n_ticks=20_000, seed=8))
    gate = RiskGate(limits)
    eng = _gated([], SmaCross(5, 10), cfg, gate)

    async def go() -> None:
        await eng.process(opening)
        if gate.after_batch():
            eng.flatten()
        for i in range(0, len(trades), 500):
            await eng.process(trades[i:i + 500])
            if gate.after_batch():
                eng.flatten()

    asyncio.run(go())
    return eng, gate


def test_the_kill_switch_trips_on_the_first_day_after_an_opening_heartbeat() -> None:
    """The daily baseline used to be the equity at the opening heartbeat: 0 before any
    symbol, so no loss could ever reach the limit that day."""
    first = trade_messages(SyntheticMarket(n_symbols=4, n_ticks=10, seed=8))[0]
    heartbeat = Heartbeat(1, first.ts - NS, session=1)
    for opening in ([heartbeat], []):
        _, gate = _losing_day(RiskLimits(max_daily_loss=5.0), opening)
        assert gate.killed and gate.rejected["max_daily_loss"] == 1
        day, pnl = gate.day_baseline  # type: ignore[misc]
        assert pnl == 0.0  # the day started flat: P&L 0, whatever the symbols' capital


def test_a_new_symbol_at_a_price_of_1e_minus_9_cannot_open_a_huge_position() -> None:
    cfg = EngineConfig(bar_seconds=1, broker=BrokerConfig(fill="next-tick"))
    gate = RiskGate(RiskLimits())  # the defaults
    engine = _gated(["A"], _Scripted([-1]), cfg, gate)
    positions = _scripted_positions(engine, [1e-9] * 6)
    assert max(abs(p) for p in positions) == 0.0
    assert gate.rejected.get("min_price", 0) > 0
    assert {r.limit for r in gate.rejections} == {"min_price"}


@settings(max_examples=150, deadline=None)
@given(exponent=st.floats(min_value=-300, max_value=300), side=st.sampled_from([-1, 1]),
       fill=st.sampled_from(["next-tick", "signal-close"]))
def test_default_limits_bound_every_order_at_any_price(exponent: float, side: int,
                                                       fill: str) -> None:
    price = 10.0 ** exponent
    cfg = EngineConfig(bar_seconds=1, broker=BrokerConfig(fill=fill))  # type: ignore[arg-type]
    lim = RiskLimits()
    gate = RiskGate(lim)
    engine = _gated(["A"], _Scripted([side]), cfg, gate)
    _scripted_positions(engine, [price] * 6)
    for f in engine.broker.fills:
        assert f.price >= lim.min_price
        assert f.quantity <= lim.max_order_quantity
        assert f.quantity * f.price <= lim.max_order_notional * (1 + 1e-9)
    # an entry that was decided and not filled was refused, and each refusal is an event
    assert sum(gate.rejected.values()) == len(gate.rejections)
    if price < lim.min_price:
        assert not engine.broker.fills and gate.rejected.get("min_price", 0) > 0
    elif 1e4 / price > 2 * lim.max_order_quantity:  # all-in would be too many units
        assert gate.rejected.get("max_order_quantity", 0) > 0
