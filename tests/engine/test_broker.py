"""Paper broker: fills, sizing, commission, slippage and the accounting invariants."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.trading.broker import PaperBroker, buy_and_hold_cash
from feeds.messages import Side


def _enter(b: PaperBroker, sym: int, side: int, price: float, ts: int = 1):
    qty = b.entry_quantity(sym, side, price)
    order = b.new_order(ts, sym, side, qty, "enter")
    return b.execute(order, sym, price, ts)


def _close(b: PaperBroker, sym: int, price: float, ts: int = 2):
    pos = b.accounts[sym].position
    side = Side.SELL if pos > 0 else Side.BUY
    order = b.new_order(ts, sym, int(side), abs(pos), "close")
    return b.execute(order, sym, price, ts)


def test_all_in_buy_takes_most_whole_shares_after_commission() -> None:
    b = PaperBroker(["A"])
    fill = _enter(b, 0, Side.BUY, 33.0)
    assert fill is not None
    assert fill.quantity == math.floor((10_000 - 1) / 33.0) == 303
    assert b.accounts[0].cash == pytest.approx(10_000 - 303 * 33.0 - 1)
    assert b.accounts[0].cash >= 0
    _close(b, 0, 35.0)
    assert b.accounts[0].position == 0
    assert b.accounts[0].cash == pytest.approx(10_000 - 303 * 33 - 1 + 303 * 35 - 1)


def test_slippage_moves_price_against_the_order() -> None:
    b = PaperBroker(["A"], slippage_bps=10.0)
    buy = _enter(b, 0, Side.BUY, 100.0)
    assert buy is not None and buy.price == pytest.approx(100.1)
    sell = _close(b, 0, 100.0)
    assert sell is not None and sell.price == pytest.approx(99.9)


def test_fixed_sizing_and_short() -> None:
    b = PaperBroker(["A"], sizing="fixed", quantity=10, allow_short=True)
    fill = _enter(b, 0, Side.SELL, 50.0)
    assert fill is not None and b.accounts[0].position == -10
    b.mark(0, 40.0)
    assert b.equity() == pytest.approx(10_000 + 10 * 50 - 1 - 10 * 40)


def test_nothing_filled_when_cash_buys_no_share() -> None:
    b = PaperBroker(["A"], cash_per_symbol=50.0)
    assert _enter(b, 0, Side.BUY, 100.0) is None
    assert b.accounts[0].cash == 50.0 and b.fills == []


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError):
        PaperBroker(["A"], sizing="half")
    with pytest.raises(ValueError):
        PaperBroker(["A"], commission=-1)


@settings(max_examples=200, deadline=None)
@given(
    prices=st.lists(st.floats(0.5, 2000.0), min_size=2, max_size=40),
    actions=st.lists(st.sampled_from(["buy", "sell", "close", "hold"]), min_size=2, max_size=40),
    short=st.booleans(),
    slippage=st.floats(0.0, 50.0),
)
def test_invariants(prices: list[float], actions: list[str], short: bool, slippage: float) -> None:
    """equity = cash + position x price always; all-in longs never go below zero cash."""
    b = PaperBroker(["A", "B"], allow_short=short, slippage_bps=slippage)
    for t, (price, act) in enumerate(zip(prices, actions, strict=False)):
        pos = b.accounts[0].position
        if act == "buy" and pos == 0:
            _enter(b, 0, Side.BUY, price, t)
        elif act == "sell" and pos == 0 and short:
            _enter(b, 0, Side.SELL, price, t)
        elif act == "close" and pos != 0:
            _close(b, 0, price, t)
        b.mark(0, price)
        acct = b.accounts[0]
        assert acct.equity() == pytest.approx(acct.cash + acct.position * price)
        assert b.equity() == pytest.approx(acct.equity() + b.accounts[1].cash)
        if not short:  # a short can lose more than its cash; an all-in long cannot
            assert acct.cash >= -1e-9
        assert acct.position == int(acct.position)
    total_commission = sum(f.commission for f in b.fills)
    assert total_commission == pytest.approx(len(b.fills) * 1.0)


def test_buy_and_hold_cash() -> None:
    want = 10_000 - 999 * 10 - 1 + 999 * 12 - 1
    assert buy_and_hold_cash(10.0, 12.0, 10_000, 1.0) == pytest.approx(want)
    assert buy_and_hold_cash(20_000.0, 1.0, 10_000, 1.0) == 10_000
