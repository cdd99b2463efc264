"""The equity point against a plain per-symbol loop (the definition, one float at a time)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.trading.broker import PaperBroker
from engine.trading.stats import equity_point


def loop_equity_point(broker: PaperBroker, closes: list[float], firsts: list[float]
                      ) -> tuple[float, float, float]:
    """(equity, gross, buy-and-hold) symbol by symbol: all-in at the first price with one
    commission, marked at the close; a symbol with no first price or no close yet holds
    its cash."""
    gross = 0.0
    bh = 0.0
    cash0, fee = broker.cash_per_symbol, broker.commission
    for acct, p, first in zip(broker.accounts, closes, firsts, strict=True):
        if acct.position != 0.0:
            gross += abs(acct.position) * acct.last_price
        if not math.isnan(first) and p > 0.0:
            shares = max(0, math.floor((cash0 - fee) / first))
            bh += cash0 - (shares * first + fee) + shares * p if shares else cash0
        else:
            bh += cash0
    equity = sum(a.cash + (a.position * a.last_price if a.position != 0.0 else 0.0)
                 for a in broker.accounts)
    return equity, gross, bh


@pytest.mark.parametrize("seed", range(40))
def test_equity_point_is_the_loops_to_the_last_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    cash0 = float(rng.choice([10_000.0, 1_000.0, 123.45]))
    fee = float(rng.choice([0.0, 1.0, 7.5]))
    broker = PaperBroker([f"S{i}" for i in range(n)], cash_per_symbol=cash0, commission=fee)
    for a in broker.accounts:
        a.last_price = float(rng.uniform(0.5, 500.0))
        if rng.random() < 0.3:
            a.position = float(rng.choice([-1.0, 1.0]) * rng.integers(1, 200))
            a.cash = float(rng.uniform(-5_000.0, 20_000.0))
    # first prices: NaN (no trade yet), above the cash (no share affordable), tiny, normal
    firsts = [math.nan if u < 0.1 else float(v) for u, v in zip(
        rng.random(n), rng.choice([cash0 * 2, 1e-3, 0.37, 12.5, 250.0], n) * rng.uniform(
            0.9, 1.1, n), strict=True)]
    # closes: 0.0 (no bar yet), NaN, normal
    closes = [0.0 if u < 0.1 else (math.nan if u < 0.15 else float(v)) for u, v in zip(
        rng.random(n), rng.uniform(0.01, 600.0, n), strict=True)]
    point = equity_point(broker, closes, firsts, 7)
    equity, gross, bh = loop_equity_point(broker, closes, firsts)
    assert point.ts == 7
    assert point.gross == gross
    assert point.buy_hold == bh
    assert point.equity == pytest.approx(equity, rel=1e-12)  # the broker's own sum


def test_equity_point_refuses_mismatched_lengths() -> None:
    broker = PaperBroker(["A", "B"])
    with pytest.raises(ValueError, match="2 accounts, 3 closes and 3 first prices"):
        equity_point(broker, [1.0, 2.0, 3.0], [1.0, 2.0, 3.0], 0)
    with pytest.raises(ValueError, match="2 accounts, 2 closes and 1 first prices"):
        equity_point(broker, [1.0, 2.0], [1.0], 0)


@pytest.mark.parametrize("seed", range(60))
def test_few_symbols_as_floats_equal_the_arrays_to_the_last_bit(seed: int) -> None:
    """Up to SCALAR_MAX_SYMBOLS the buy-and-hold sum is a float loop: the same bits as the
    array path (checked above against the definition) with slippage, uneven sleeves, the
    end-of-data sale, NaN first prices and closes not yet seen."""
    from engine.trading.stats import SCALAR_MAX_SYMBOLS, _buy_hold_arrays, _buy_hold_scalar

    rng = np.random.default_rng(1000 + seed)
    n = int(rng.integers(1, SCALAR_MAX_SYMBOLS + 1))
    broker = PaperBroker([f"S{i}" for i in range(n)], cash_per_symbol=10_000.0,
                         commission=float(rng.choice([0.0, 1.0, 7.5])),
                         slippage_bps=float(rng.choice([0.0, 2.5, 10.0])))
    broker.sleeves = [float(x) for x in rng.choice([0.0, 123.45, 10_000.0, 2.5e6], n)]
    broker.unallocated = float(rng.uniform(0.0, 1.0))
    firsts = [math.nan if u < 0.15 else float(v) for u, v in zip(
        rng.random(n), rng.uniform(1e-3, 3e4, n), strict=True)]
    closes = [0.0 if u < 0.1 else (math.nan if u < 0.15 else float(v)) for u, v in zip(
        rng.random(n), rng.uniform(0.01, 600.0, n), strict=True)]
    for liquidate in (False, True):
        scalar = _buy_hold_scalar(broker, closes, firsts, liquidate)
        arrays = _buy_hold_arrays(broker, closes, firsts, liquidate)
        assert scalar == arrays or (math.isnan(scalar) and math.isnan(arrays))
        assert equity_point(broker, closes, firsts, 1, liquidate).buy_hold == scalar
