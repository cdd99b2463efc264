"""Trading logic that cannot reach an impossible state, cannot overdraw, and fails cleanly.

Seeded random signal sequences over many session days (the class of input, not one
sample), accounts that cannot afford a share, fixed-size orders beyond the account's money,
a strategy that raises inside a replay, and the exchange's clock for bars and dates.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import threading
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pytest

import run_engine
from engine.settings.config import BrokerConfig, EngineConfig
from engine.trading.broker import PaperBroker
from engine.trading.core import Engine
from feeds.messages import Trade

NS = 1_000_000_000
NY = ZoneInfo("America/New_York")


class Scripted:
    """A strategy whose signals are a seeded random walk over {-1, 0, +1}."""

    name = "scripted"

    def __init__(self, seed: int, long_only: bool = False, from_zero: bool = True,
                 p_change: float = 0.3) -> None:
        self.p_change = p_change
        self.r = random.Random(seed)
        self.long_only = long_only
        self.enter_on_from_zero = from_zero
        self.sig: np.ndarray = np.zeros(0, np.int8)

    def reset(self, symbols: list[str]) -> None:
        self.sig = np.zeros(len(symbols), np.int8)

    async def target_signals(self, features: np.ndarray, closed: np.ndarray) -> np.ndarray:
        if self.sig.size < closed.size:
            self.sig = np.concatenate([self.sig, np.zeros(closed.size - self.sig.size, np.int8)])
        for i in np.flatnonzero(closed):
            if self.r.random() < self.p_change:
                self.sig[i] = self.r.choice((-1, 0, 1))
        return self.sig.copy()


class CheckedEngine(Engine):
    """Checks after every bar that intent and the broker's position agree."""

    async def _close_bars(self, bar_ts: int, phase=None) -> None:
        await super()._close_bars(bar_ts, phase)
        bad = self.intent_mismatches()
        assert not bad, (bar_ts, bad)
        b = self.broker
        if b.sizing == "per-symbol":  # each symbol's own account
            for a in b.accounts:
                if a.position > 0:
                    assert a.cash >= -1e-6
        elif any(a.position > 0 for a in b.accounts) and not any(
                a.position < 0 for a in b.accounts):
            # one account: long entries are paid from its cash (short proceeds aside)
            assert b.total_cash() >= -1e-6


def _ny_ns(day: dt.date, hh: int, mm: int, ss: int = 0) -> int:
    return int(dt.datetime(day.year, day.month, day.day, hh, mm, ss, tzinfo=NY).timestamp()) * NS


def _session_trades(days: int, end: tuple[int, int], seed: int) -> list[Trade]:
    """Minute-spaced trades of two symbols from 09:30 to `end` New York time each weekday."""
    r = random.Random(seed)
    out: list[Trade] = []
    seq = {"A": 0, "B": 0}
    price = {"A": 100.0, "B": 50.0}
    day = dt.date(2024, 3, 4)
    while days:
        if day.weekday() < 5:
            t = _ny_ns(day, 9, 30)
            stop = _ny_ns(day, *end)
            while t < stop:
                for s in ("A", "B"):
                    seq[s] += 1
                    price[s] *= 1 + r.gauss(0, 0.001)
                    out.append(Trade(seq[s], t + r.randrange(NS), s, price[s], 1.0))
                t += 60 * NS
            days -= 1
        day += dt.timedelta(days=1)
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("fill", ["bar-close", "next-tick"])
def test_no_impossible_state_when_the_day_ends_before_stop(seed: int, fill: str) -> None:
    """Session 10:00,15:00,16:30 with data ending at 16:00: the old engine carried the
    position over night and raised InconsistentState (TRADE, positioned, FROM_ZERO)."""
    trades = _session_trades(6, (16, 0), seed)
    cfg = EngineConfig(bar_seconds=60, session="10:00,15:00,16:30",
                       broker=BrokerConfig(fill=fill))  # type: ignore[arg-type]
    eng = CheckedEngine(["A", "B"], Scripted(seed, from_zero=bool(seed % 2), p_change=0.03),
                        cfg)

    async def go() -> None:
        for t in trades:
            await eng.process([t])
        await eng.finish()

    asyncio.run(go())
    assert eng.stats.fills > 0
    # every position was opened and closed within the session day of its orders
    by_day: dict[tuple[str, dt.date], float] = {}
    for f in eng.broker.fills:
        order = next(o for o in eng.broker.orders if o.order_id == f.order_id)
        key = (f.symbol, eng.local_date(order.ts))
        by_day[key] = by_day.get(key, 0.0) + f.side * f.quantity
    assert all(abs(q) < 1e-9 for q in by_day.values()), by_day  # flat at each day's end


@pytest.mark.parametrize("seed", range(4))
def test_intent_follows_the_position_when_nothing_is_affordable(seed: int) -> None:
    """$50 per symbol and $100 shares: no entry can fill; the old engine reset the intent
    to 0 and then set it back to ±1, so intent and position disagreed."""
    cfg = EngineConfig(bar_seconds=60, broker=BrokerConfig(cash_per_symbol=50.0,
                                                           fill="bar-close"))
    eng = CheckedEngine(["A", "B"], Scripted(seed), cfg)
    trades = [Trade(i + 1, (1_700_000_000 + 30 * i) * NS, s, 100.0 + (i % 9), 1.0)
              for i, s in enumerate(["A", "B"] * 400)]
    for k, t in enumerate(trades):  # one sequence per symbol
        trades[k] = Trade(k // 2 + 1, t.ts, t.symbol, t.price, t.size)

    async def go() -> None:
        await eng.process(trades)
        await eng.finish()

    asyncio.run(go())
    assert eng.stats.orders == 0 and eng.stats.fills == 0


@pytest.mark.parametrize("seed", range(20))
def test_entries_never_spend_money_the_account_lacks(seed: int) -> None:
    """Seeded random entries and exits, fixed sizes up to 1,000,000 shares: a long entry
    never leaves cash below 0, a short entry always has its margin; refusals are counted.
    (The old broker bought 1,000,000 shares with $10,000: cash -$99,990,001.)"""
    r = random.Random(seed)
    margin = r.choice((0.5, 1.0, 1.5))
    b = PaperBroker(["A"], cash_per_symbol=10_000.0, commission=1.0, sizing="fixed",
                    quantity=float(r.choice((1, 10, 100, 1000, 1_000_000))),
                    allow_short=True, short_margin=margin)
    price = 100.0
    refused_seen = 0
    for step in range(300):
        price *= 1 + r.gauss(0, 0.02)
        acct = b.accounts[0]
        if acct.position != 0 and r.random() < 0.4:
            side = -1 if acct.position > 0 else 1
            o = b.new_order(step, 0, side, abs(acct.position), "close")
        else:
            o = b.new_order(step, 0, r.choice((1, -1)), b.quantity * r.choice((1, 0.01)),
                            "enter")
        before = b.total_refused()
        fill = b.execute(o, 0, price, step)
        b.mark(0, price)
        if fill is None:
            refused_seen += b.total_refused() - before
            continue
        if o.reason == "enter":  # (an entry against the position only reduces risk)
            if acct.position > 0 and o.side > 0:
                assert acct.cash >= -1e-9
            elif acct.position < 0 and o.side < 0:
                assert acct.equity() >= margin * -acct.position * price - 1e-6
    if b.quantity >= 1000:
        assert refused_seen > 0
        assert b.refused.keys() <= {"insufficient_cash", "insufficient_margin",
                                    "max_leverage"}


def test_fixed_size_replay_cannot_go_negative() -> None:
    """`quantity = 1000000` in a replay: the old engine ended with cash -$99,990,001."""
    cfg = EngineConfig(bar_seconds=60, broker=BrokerConfig(sizing="fixed", quantity=1e6,
                                                           fill="bar-close"))
    eng = CheckedEngine(["A"], Scripted(3, long_only=True), cfg)
    trades = [Trade(i + 1, (1_700_000_000 + 30 * i) * NS, "A", 100.0 + (i % 11), 1.0)
              for i in range(600)]

    async def go() -> None:
        await eng.process(trades)
        await eng.finish()

    asyncio.run(go())
    assert eng.broker.total_refused() > 0
    assert eng.stats.fills == 0
    assert eng.broker.equity() == pytest.approx(10_000.0)


RAISING = """
import numpy as np

class Boom:
    name = "boom"
    long_only = False
    enter_on_from_zero = False
    def reset(self, symbols):
        self.n = 0
    async def target_signals(self, features, closed):
        self.n += 1
        if self.n == 30:
            raise ZeroDivisionError("the user's bug")
        return np.zeros(closed.size, np.int8)

def make_strategy():
    return Boom()
"""


@pytest.mark.parametrize("transport", ["inproc", "ipc"])
def test_a_strategy_that_raises_ends_the_replay_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], transport: str) -> None:
    """The old replay hung or aborted inside libzmq (Assertion failed: pfd.revents & POLLIN)."""
    strat = tmp_path / "boom.py"
    strat.write_text(RAISING)
    rc = run_engine.main(["replay", "--strategy", str(strat), "--ticks", "200000",
                          "--n-symbols", "3", "--transport", transport])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1, err
    assert "boom" in err[0] and "ZeroDivisionError" in err[0] and "bar closing" in err[0]
    assert not [t for t in threading.enumerate() if t.name == "replay-feed"]


def test_bars_and_dates_use_the_exchange_clock() -> None:
    """4-hour bars built from ticks start at New York midnight (UTC bars would cut at
    20:00 or 19:00 New York); the option book's date is New York's."""
    from engine.options.group import _tick_date
    from strategies.sma_cross import SmaCross

    day = dt.date(2024, 3, 5)
    for bar_h, (hh, mm), want in ((4, (9, 30), (12, 0)), (24, (15, 0), (24, 0)),
                                  (1, (23, 30), (24, 0))):
        eng = Engine(["A"], SmaCross(), EngineConfig(bar_seconds=bar_h * 3600))
        ts = _ny_ns(day, hh, mm)
        asyncio.run(eng.process([Trade(1, ts, "A", 10.0, 1.0)]))
        want_ns = _ny_ns(day, 0, 0) + (want[0] * 3600 + want[1] * 60) * NS
        assert eng.clock.next_boundary == want_ns, (bar_h, hh)
    late = _ny_ns(day, 23, 30)  # 04:30 UTC the next day
    assert _tick_date(late, NY) == day
    assert Engine(["A"], SmaCross(), EngineConfig()).local_date(late) == day
    london = Engine(["A"], SmaCross(), EngineConfig(timezone="Europe/London"))
    assert london.local_date(late) == day + dt.timedelta(days=1)



@pytest.mark.parametrize("margin", [0.5, 1.0, 1.5, 2.0])
def test_all_in_shorts_are_sized_to_the_margin(margin: float) -> None:
    """An all-in short takes the most shares its margin allows: never refused, never more."""
    r = random.Random(int(margin * 10))
    for _ in range(200):
        b = PaperBroker(["A"], cash_per_symbol=r.uniform(1_000, 50_000), commission=1.0,
                        allow_short=True, short_margin=margin)
        price = r.uniform(1.0, 500.0)
        q = b.entry_quantity(0, -1, price)
        fill = b.execute(b.new_order(0, 0, -1, q, "enter"), 0, price, 0)
        acct = b.accounts[0]
        if q == 0:
            assert fill is None
            continue
        assert fill is not None and b.total_refused() == 0
        assert acct.equity() >= margin * fill.quantity * price - 1e-6
        # one more share would break the margin
        assert acct.equity() < margin * (fill.quantity + 1) * price
