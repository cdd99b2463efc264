"""One account: capital set once, sizing models, interest and fees, multipliers, invariants.

References nobody here wrote: pandas for the volatility a volatility-target entry sizes by,
plain arithmetic for interest and futures P&L; seeded property tests (hypothesis) for the
accounting invariants at every equity row.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.phases import Phase
from engine.settings.config import BrokerConfig, EngineConfig, InstrumentConfig
from engine.trading.core import Engine, EngineHooks
from engine.trading.orders import OrderHooks
from feeds.messages import Bar, Fill, Trade
from strategies.base import BookView
from strategies.sma_cross import SmaCross, parse_sma_cross

NS = 1_000_000_000
DAY_NS = 86_400 * NS


class Signals:
    """Replays a fixed table of signals: row k is the k-th bar event's signals."""

    name = "table"

    def __init__(self, rows: Sequence[Sequence[int]], long_only: bool = False) -> None:
        self.rows = [np.asarray(r, np.int8) for r in rows]
        self.k = 0
        self.long_only = long_only
        self.enter_on_from_zero = True
        self.last = np.zeros(0, np.int8)

    def reset(self, symbols: list[str]) -> None:
        self.last = np.zeros(len(symbols), np.int8)

    async def target_signals(self, features: np.ndarray, closed: np.ndarray) -> np.ndarray:
        n = closed.size
        row = self.rows[min(self.k, len(self.rows) - 1)]
        self.k += 1
        out = np.zeros(n, np.int8)
        out[: min(n, row.size)] = row[:n]
        return out


def _daily_bars(prices: Mapping[str, Sequence[float]], start: datetime | None = None
                ) -> list[Bar]:
    """One bar a day per symbol (open = high = low = close), closing 16:00 New York."""
    t0 = start or datetime(2024, 1, 2, 21, 0, tzinfo=UTC)
    out: list[Bar] = []
    n = max(len(p) for p in prices.values())
    for k in range(n):
        ts = int((t0 + timedelta(days=k)).timestamp()) * NS
        for s, p in prices.items():
            if k < len(p):
                out.append(Bar(k + 1, ts, s, p[k], p[k], p[k], p[k], 1e6, DAY_NS))
    return out


def _run(eng: Engine, msgs: list) -> Engine:
    async def go() -> None:
        await eng.process(msgs)
        await eng.finish()

    asyncio.run(go())
    return eng


def _cfg(**broker: object) -> EngineConfig:
    broker.setdefault("fill", "signal-close")
    return EngineConfig(bar_seconds=60, broker=BrokerConfig(**broker))  # type: ignore[arg-type]


# ---------------------------------------------------------------------- one account
@pytest.mark.parametrize("sizing", ["equal-weight", "per-symbol", "fixed-fraction"])
def test_symbols_that_appear_add_no_money(sizing: str) -> None:
    """A stream of 200 symbols nobody named at the start: the old broker gave each its own
    $10,000, so equity grew to $2,010,000 with no trade (issue 29's live measurement)."""
    eng = Engine(["A"], Signals([[0]]), _cfg(sizing=sizing))
    trades = [Trade(1, (1_700_000_000 + i) * NS, f"N{i:03d}", 10.0 + i % 7, 1.0)
              for i in range(200)]
    _run(eng, trades)
    assert len(eng.symbols) == 201
    assert eng.broker.initial_capital() == 10_000.0
    assert eng.broker.equity() == 10_000.0
    assert eng.equity_curve[-1].equity == 10_000.0


def test_new_symbols_trade_from_the_one_account() -> None:
    """A symbol seen later can trade (one account), and its money comes out of the
    account's cash: total cash falls by exactly what its fill cost."""
    eng = Engine(["A"], Signals([[0, 1]]), _cfg(sizing="fixed", quantity=10.0))
    bars = _daily_bars({"A": [50.0] * 3, "B": [20.0] * 3})
    _run(eng, bars)
    b = eng.broker
    assert b.initial_capital() == 10_000.0
    buys = [f for f in b.fills if f.symbol == "B" and f.side > 0]
    assert buys and buys[0].quantity == 10.0
    assert b.equity() == pytest.approx(10_000.0 - 2 * 1.0)  # bought and sold at 20: fees


def test_cash_is_set_once_and_shared() -> None:
    eng = Engine(["A", "B", "C"], Signals([[0, 0, 0]]), _cfg(cash=25_000.0))
    assert eng.broker.initial_capital() == 25_000.0
    assert eng.broker.equity() == 25_000.0
    assert sum(eng.broker.sleeves) + eng.broker.unallocated == pytest.approx(25_000.0)


def test_equal_weight_divides_equity_by_the_active_signals() -> None:
    """Two of three symbols long: each entry takes half the equity (less commission)."""
    eng = Engine(["A", "B", "C"], Signals([[1, 1, 0]]), _cfg(cash=30_000.0))
    _run(eng, _daily_bars({"A": [10.0, 10.0], "B": [7.0, 7.0], "C": [3.0, 3.0]}))
    entries = {f.symbol: f.quantity for f in eng.broker.fills if f.side > 0}
    assert entries["A"] == math.floor((30_000 / 2 - 1.0) / 10.0)
    # B is sized from the equity after A's entry (its commission): equity / 2
    assert entries["B"] == math.floor(((30_000.0 - 1.0) / 2 - 1.0) / 7.0)
    assert "C" not in entries


def test_fixed_fraction_takes_its_fraction_of_equity() -> None:
    eng = Engine(["A"], Signals([[1]]), _cfg(cash=50_000.0, sizing="fixed-fraction",
                                            fraction=0.2))
    _run(eng, _daily_bars({"A": [37.0, 37.0]}))
    assert eng.broker.fills[0].quantity == math.floor((0.2 * 50_000 - 1.0) / 37.0)


def test_volatility_target_sizes_by_pandas_volatility() -> None:
    """Entry at bar 30: units = floor((equity x min(1, target / sigma) - fee) / price),
    sigma the annualised std of the last 20 log returns as pandas computes it."""
    rng = np.random.default_rng(7)
    prices = list(100.0 * np.exp(np.cumsum(rng.normal(0, 0.03, 31))))
    rows = [[0]] * 30 + [[1]]
    eng = Engine(["A"], Signals(rows), _cfg(sizing="volatility-target",
                                           volatility_target=0.2, volatility_lookback=20))
    _run(eng, _daily_bars({"A": prices}))
    sigma = float(np.log(pd.Series(prices)).diff().rolling(20).std().iloc[-1]
                  * math.sqrt(252))
    want = math.floor((10_000.0 * min(1.0, 0.2 / sigma) - 1.0) / prices[-1])
    assert sigma > 0.2  # the target binds: a real cut, not all-in
    buys = [f for f in eng.broker.fills if f.side > 0]
    assert len(buys) == 1 and buys[0].quantity == want


def test_volatility_target_waits_for_its_lookback() -> None:
    eng = Engine(["A"], Signals([[1]]), _cfg(sizing="volatility-target",
                                            volatility_lookback=20))
    _run(eng, _daily_bars({"A": [10.0 + k for k in range(10)]}))
    assert eng.broker.fills == [] and eng.stats.orders == 0  # sized to nothing: no order


# ---------------------------------------------------------------------- interest, fees
def test_interest_on_cash_accrues_daily() -> None:
    """Flat for 10 calendar days at 5%: cash compounds once a day, act/365."""
    eng = Engine(["A"], Signals([[0]]), _cfg(interest_rate=0.05))
    _run(eng, _daily_bars({"A": [10.0] * 11}))
    assert eng.broker.equity() == pytest.approx(10_000.0 * (1 + 0.05 / 365) ** 10, rel=1e-12)


def test_borrow_fee_on_shorts_accrues_daily() -> None:
    """Short 100 units at $50 held for 4 days at a 10% fee: 4 x 5,000 x 0.10 / 365."""
    eng = Engine(["A"], Signals([[-1]] * 5 + [[0]]), _cfg(sizing="fixed", quantity=100.0,
                                                         borrow_rate=0.10))
    _run(eng, _daily_bars({"A": [50.0] * 6}))
    fee = eng.broker.borrow_fees
    assert fee == pytest.approx(5 * 5_000 * 0.10 / 365, rel=1e-12)
    assert eng.broker.equity() == pytest.approx(10_000.0 - 2.0 - fee, rel=1e-12)


# ---------------------------------------------------------------------- contracts
def test_contract_multiplier_makes_futures_pnl_right() -> None:
    """2 gold contracts (100 oz each) bought at 2,000 and sold at 2,015: $3,000 - fees."""
    cfg = EngineConfig(bar_seconds=60, broker=BrokerConfig(
        fill="signal-close", sizing="fixed", quantity=2.0, cash=500_000.0),
        instruments={"GC": InstrumentConfig(multiplier=100.0, tick_size=0.1)})
    eng = Engine(["GC"], Signals([[1], [1], [0]]), cfg)
    _run(eng, _daily_bars({"GC": [2000.0, 2010.0, 2015.0]}))
    assert eng.broker.equity() - 500_000.0 == pytest.approx(2 * 15.0 * 100.0 - 2.0)
    assert eng.equity_curve[1].equity - 500_000.0 == pytest.approx(2 * 10 * 100.0 - 1.0)


def test_gross_exposure_is_checked_at_the_fill() -> None:
    """Leverage 1: a fixed order worth twice the equity is refused at its fill, even when
    it was placed (estimated) at a price it could pay."""
    eng = Engine(["A"], Signals([[1]]), _cfg(sizing="fixed", quantity=150.0,
                                            fill="next-open", cash=10_000.0))
    bars = _daily_bars({"A": [60.0, 60.0]})
    bars[1] = Bar(2, bars[1].ts, "A", 130.0, 130.0, 130.0, 130.0, 1e6, DAY_NS)
    _run(eng, bars)
    assert eng.broker.fills == []
    assert eng.broker.refused.get("insufficient_cash", 0) == 1


# ---------------------------------------------------------------------- properties
@settings(max_examples=25, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1),
       sizing=st.sampled_from(["equal-weight", "fixed-fraction", "fixed", "per-symbol"]),
       fill=st.sampled_from(["signal-close", "next-open"]),
       margin=st.sampled_from([0.5, 1.0, 1.5]), mult=st.sampled_from([1.0, 50.0]))
def test_accounting_invariants_at_every_equity_row(seed: int, sizing: str, fill: str,
                                                   margin: float, mult: float) -> None:
    """Random prices and signals: at every equity row equity = cash + sum of position x
    price x multiplier; positions equal the sum of fills; after every entry fill the
    account holds its short margin and a long entry left cash >= 0."""
    rng = np.random.default_rng(seed)
    syms = ["A", "B", "C"]
    n = 40
    prices = {s: list(20.0 * np.exp(np.cumsum(rng.normal(0, 0.04, n)))) for s in syms}
    rows = [list(rng.choice([-1, 0, 1], 3, p=[0.3, 0.3, 0.4])) for _ in range(n)]
    broker = BrokerConfig(fill=fill, sizing=sizing,  # type: ignore[arg-type]
                          quantity=40.0, short_margin=margin, fraction=0.3)
    cfg = EngineConfig(bar_seconds=60, broker=broker,
                       instruments={"B": InstrumentConfig(multiplier=mult)})
    checked: list[Engine] = []  # the engine the hook checks, once it exists
    eng = _InvariantEngine(syms, Signals(rows), cfg, hooks=EngineHooks(OrderHooks(
        on_fill=lambda fill: _check_entry(checked[0], fill))))
    checked.append(eng)
    _run(eng, _daily_bars(prices))
    held: dict[str, float] = {}
    for f in eng.broker.fills:
        held[f.symbol] = held.get(f.symbol, 0.0) + f.side * f.quantity
    for s, a in zip(eng.symbols, eng.broker.accounts, strict=True):
        assert a.position == pytest.approx(held.get(s, 0.0), abs=1e-9)
    assert eng.checked_rows >= len(eng.equity_curve) > 0
    last = eng.equity_curve[-1]  # the end of data's row, after everything was sold
    assert last.equity == pytest.approx(eng.broker.total_cash(), rel=1e-12)
    assert all(a.position == 0.0 for a in eng.broker.accounts)


class _InvariantEngine(Engine):
    """Checks the accounting identity at each equity row."""

    checked_rows = 0

    async def _close_bars(self, bar_ts: int, phase: Phase | None = None) -> None:
        await super()._close_bars(bar_ts, phase)
        b = self.broker
        marked = b.total_cash() + sum(a.position * a.last_price * a.multiplier
                                      for a in b.accounts)
        assert self.equity_curve[-1].equity == pytest.approx(marked, rel=1e-12, abs=1e-6)
        self.checked_rows += 1


def _check_entry(eng: Engine, fill: Fill) -> None:
    """After an entry's fill: a long one left cash >= 0, a short one holds its margin (the
    symbol's own account under per-symbol sizing, the one account otherwise)."""
    if next(o for o in eng.broker.orders if o.order_id == fill.order_id).reason != "enter":
        return
    b = eng.broker
    a = b.accounts[eng.sym_index[fill.symbol]]
    if b.sizing == "per-symbol":
        cash, equity, shorts = a.cash, a.equity(), a.notional() if a.position < 0 else 0.0
    else:
        cash, equity = b.total_cash(), b.equity()
        shorts = sum(x.notional() for x in b.accounts if x.position < 0)
    if fill.side > 0:
        assert cash >= -1e-6 or shorts > 0  # short proceeds may pay for a long
    else:
        assert equity >= b.short_margin * shorts - 1e-6


# ---------------------------------------------------------------------- the strategy's view
class _Logged:
    """Wraps a strategy and keeps each bar event's signals."""

    def __init__(self, inner: SmaCross) -> None:
        self.inner = inner
        self.name, self.long_only = inner.name, inner.long_only
        self.enter_on_from_zero = inner.enter_on_from_zero
        self.history_bars = inner.history_bars
        self.log: list[int] = []

    def reset(self, symbols: list[str]) -> None:
        self.inner.reset(symbols)

    def see_book(self, book: BookView) -> None:
        self.inner.see_book(book)

    async def target_signals(self, features: np.ndarray, closed: np.ndarray) -> np.ndarray:
        out = await self.inner.target_signals(features, closed)
        self.log.append(int(out[0]))
        return out


def _expected_signals(fast: pd.Series, slow: pd.Series) -> list[int]:
    out, prev = [], 0
    for f, s in zip(fast, slow, strict=True):
        prev = 0 if (np.isnan(f) or np.isnan(s)) else (1 if f > s else -1 if f < s else prev)
        out.append(prev)
    return out


@pytest.mark.parametrize("spec", ["sma-cross:7,30", "sma-cross:20,100", "sma-cross:12,26,ema"])
def test_any_window_a_user_names_is_computed(spec: str) -> None:
    """Signals of windows the indicator bank has no column for, against pandas' rolling
    mean and ewm(span, adjust=False) (warm from the slow window's bar)."""
    rng = np.random.default_rng(3)
    prices = 50.0 * np.exp(np.cumsum(rng.normal(0, 0.02, 160)))
    strat = _Logged(parse_sma_cross(spec))
    eng = Engine(["A"], strat, _cfg())
    _run(eng, _daily_bars({"A": list(prices)}))
    s = pd.Series(prices)
    f, w = strat.inner.fast, strat.inner.slow
    if strat.inner.kind == "ema":
        seen = np.arange(1, len(s) + 1)
        fast = s.ewm(span=f, adjust=False).mean().where(seen >= w)
        slow = s.ewm(span=w, adjust=False).mean().where(seen >= w)
    else:
        fast, slow = s.rolling(f).mean(), s.rolling(w).mean()
    assert not strat.inner.from_bank and eng.history is not None
    assert strat.log == _expected_signals(fast, slow)[:len(strat.log)]
    assert len(strat.log) >= len(prices) - 1 and eng.stats.fills > 0


def test_bank_windows_still_come_from_the_bank() -> None:
    strat = parse_sma_cross("sma-cross:10,50")
    eng = Engine(["A"], strat, _cfg())
    assert strat.from_bank and eng.history is None  # the GP paper's path keeps no bars


class _Peeker:
    """Reads its book every bar; tries to write into what it was shown."""

    name = "peeker"
    long_only = True
    enter_on_from_zero = True
    history_bars = 3

    def __init__(self) -> None:
        self.seen: list[tuple[float, float, float, int]] = []
        self.book: BookView | None = None

    def reset(self, symbols: list[str]) -> None:
        pass

    def see_book(self, book: BookView) -> None:
        self.book = book

    async def target_signals(self, features: np.ndarray, closed: np.ndarray) -> np.ndarray:
        assert self.book is not None
        pos = self.book.positions()
        bars = self.book.bars(0)
        self.seen.append((float(pos[0]), self.book.cash, self.book.equity, bars.shape[0]))
        pos[0] = 1e9  # a copy: the book does not move
        bars[:] = 0.0
        return np.ones(closed.size, np.int8)


def test_a_strategy_sees_its_positions_cash_equity_and_last_bars() -> None:
    strat = _Peeker()
    eng = Engine(["A"], strat, _cfg(sizing="fixed", quantity=10.0))
    _run(eng, _daily_bars({"A": [10.0, 11.0, 12.0, 13.0, 14.0]}))
    assert strat.seen[0] == (0.0, 10_000.0, 10_000.0, 1)
    assert strat.seen[1] == (10.0, 10_000.0 - 100.0 - 1.0, 10_000.0 - 1.0 + 10.0, 2)
    assert strat.seen[4][3] == 3  # the window keeps the last history_bars
    assert eng.broker.accounts[0].position == 0.0  # sold at the end, not 1e9
    assert eng.book.bars(0)[-1, 3] == 14.0


class _Weights:
    """Target weights from a table, one row per bar event."""

    name = "weights"
    long_only = False
    enter_on_from_zero = True

    def __init__(self, rows: Sequence[Sequence[float]]) -> None:
        self.rows, self.k = rows, 0

    def reset(self, symbols: list[str]) -> None:
        pass

    async def target_signals(self, features: np.ndarray, closed: np.ndarray) -> np.ndarray:
        raise AssertionError("a weight strategy is asked for weights")

    async def target_weights(self, features: np.ndarray, closed: np.ndarray) -> np.ndarray:
        row = self.rows[min(self.k, len(self.rows) - 1)]
        self.k += 1
        return np.asarray(row, np.float64)


def test_target_weights_enter_rebalance_and_ignore_tiny_drifts() -> None:
    """Weight 0.5 at $10: 499 units (half of 10,000 less the fee); 0.5 -> 0.8 buys up to
    0.8 x equity; 0.8 -> 0.805 is 5 units ($50), below min_trade (1% of equity): nothing;
    -0.3 closes and enters short with 0.3 x equity."""
    eng = Engine(["A"], _Weights([[0.5], [0.8], [0.805], [-0.3]]), _cfg(min_trade=0.01))
    _run(eng, _daily_bars({"A": [10.0] * 5}))
    reasons = {o.order_id: o.reason for o in eng.broker.orders}
    f = [(reasons[x.order_id], x.side * x.quantity) for x in eng.broker.fills]
    assert f[0] == ("enter", math.floor((5_000.0 - 1.0) / 10.0))
    assert f[1] == ("rebalance", math.floor(0.8 * (10_000.0 - 1.0) / 10.0) - f[0][1])
    assert f[2] == ("close", -(f[0][1] + f[1][1]))  # no trade on the tiny drift
    assert f[3] == ("enter", -math.floor((0.3 * (10_000.0 - 3.0) - 1.0) / 10.0))
    assert len(f) == 5  # and the end of data's close


def test_weights_out_of_range_are_a_strategy_error() -> None:
    from engine.errors import StrategyError

    eng = Engine(["A"], _Weights([[1.5]]), _cfg())
    with pytest.raises(StrategyError, match="weights are in"):
        _run(eng, _daily_bars({"A": [10.0, 10.0]}))
