"""Sizing models (engine/trading/sizing.py), one at a time, through the real broker.

Each model's units follow from its rule written out here in plain arithmetic; the checks at
the fill (cash, margin, gross exposure) cut or refuse what the account cannot take.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from engine.trading.broker import PaperBroker
from engine.trading.sizing import SIZING_MODELS, canonical, make_sizing


def _enter(b: PaperBroker, sym: int, side: int, price: float) -> float:
    """Units filled by an entry at `price` (0 when none)."""
    for i, a in enumerate(b.accounts):
        if a.last_price != a.last_price:
            b.mark(i, price)
    order = b.new_order(1, sym, side, b.entry_quantity(sym, side, price), "enter")
    fill = b.execute(order, sym, price, 1)
    return 0.0 if fill is None else fill.quantity


def test_names_and_old_names() -> None:
    assert canonical("all-in") == "per-symbol"
    assert set(SIZING_MODELS) == {"per-symbol", "equal-weight", "fixed-fraction",
                                  "volatility-target", "fixed"}
    with pytest.raises(ValueError, match="unknown sizing 'kelly'"):
        canonical("kelly")
    with pytest.raises(ValueError, match="bar history"):
        make_sizing("volatility-target")


def test_per_symbol_is_all_in_of_the_symbols_own_part() -> None:
    b = PaperBroker(["A", "B"], sizing="per-symbol", cash=30_000.0)
    assert _enter(b, 0, 1, 33.0) == math.floor((15_000 - 1) / 33.0)
    # B's part is untouched by A's entry
    assert _enter(b, 1, 1, 7.0) == math.floor((15_000 - 1) / 7.0)


def test_equal_weight_uses_the_active_signals() -> None:
    b = PaperBroker(["A", "B", "C"], sizing="equal-weight", cash=30_000.0)
    b.active_signals = 3
    assert _enter(b, 0, 1, 10.0) == math.floor((30_000 / 3 - 1) / 10.0)


def test_fixed_fraction_and_margin_for_shorts() -> None:
    b = PaperBroker(["A"], sizing="fixed-fraction", fraction=0.25, cash=40_000.0,
                    allow_short=True, short_margin=1.5)
    # a short sale needs 150% margin: units sized so the check passes
    assert _enter(b, 0, -1, 20.0) == math.floor((0.25 * 40_000 - 1) / (20.0 * 1.5))


def test_volatility_target_from_the_closes_it_is_given() -> None:
    closes = 50.0 * np.exp(np.cumsum(np.random.default_rng(1).normal(0, 0.02, 30)))
    model = make_sizing("volatility-target", volatility_target=0.1, volatility_lookback=20,
                        closes=lambda sym, n: closes[-n:])
    b = PaperBroker(["A"], sizing="volatility-target", cash=10_000.0, sizer=model)
    sigma = float(np.log(pd.Series(closes)).diff().iloc[-20:].std() * math.sqrt(252))
    want = math.floor((10_000.0 * min(1.0, 0.1 / sigma) - 1.0) / closes[-1])
    assert _enter(b, 0, 1, float(closes[-1])) == want


def test_fixed_units_are_refused_not_cut_when_the_cash_is_short() -> None:
    b = PaperBroker(["A"], sizing="fixed", quantity=500.0, cash=10_000.0)
    assert _enter(b, 0, 1, 30.0) == 0.0 and b.refused == {"insufficient_cash": 1}


def test_budget_models_are_cut_to_the_cash_at_the_fill() -> None:
    """An equal-weight entry estimated at one price fills at a higher one: cut to what the
    cash buys there, not refused."""
    b = PaperBroker(["A"], sizing="fixed-fraction", fraction=1.0, cash=10_000.0)
    b.mark(0, 10.0)
    order = b.new_order(1, 0, 1, b.entry_quantity(0, 1, 10.0), "enter")
    b.mark(0, 20.0)  # the fill comes later, at twice the price
    fill = b.execute(order, 0, 20.0, 2)
    assert fill is not None and fill.quantity == math.floor((10_000.0 - 1.0) / 20.0)
    assert b.total_cash() >= 0.0


def test_gross_exposure_cap_binds_across_symbols() -> None:
    """Leverage 1 with 50% short margin: shorts may not take gross past equity."""
    b = PaperBroker(["A", "B"], sizing="fixed", quantity=400.0, cash=10_000.0,
                    allow_short=True, short_margin=0.5, max_leverage=1.0)
    assert _enter(b, 0, -1, 20.0) == 400.0  # $8,000 short
    assert _enter(b, 1, -1, 20.0) == 0.0  # another $8,000 would make gross $16,000
    assert b.refused == {"max_leverage": 1}
