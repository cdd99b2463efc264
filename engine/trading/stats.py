"""The engine's record of a run: counts of what it handled, and the equity curve.

An `EquityPoint` is taken after every bar event: equity, gross exposure and the equity of
buying every symbol all-in at its first price and holding it (the report's benchmark).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.trading.broker import PaperBroker


@dataclass
class EngineStats:
    """What the engine has handled. `trades` and `quotes` count market-data messages by kind
    (`market_data` both); `bars` counts closed bars, built from ticks or received."""

    trades: int = 0
    quotes: int = 0
    bars: int = 0
    bar_events: int = 0
    #: bar events whose strategy evaluation overlapped the messages after them
    overlapped_bar_events: int = 0
    orders: int = 0
    fills: int = 0
    heartbeats: int = 0
    option_values: int = 0
    #: bar events and bars before the trading period that only warmed the indicators
    warmup_bar_events: int = 0
    warmup_bars: int = 0

    @property
    def market_data(self) -> int:
        return self.trades + self.quotes


@dataclass
class EquityPoint:
    """The account after one bar event: equity, gross exposure, and buy-and-hold's equity."""

    ts: int
    equity: float
    #: sum over symbols of |position| x last price (dollars at risk)
    gross: float = 0.0
    #: equity of buying every symbol all-in at its first price and holding it
    buy_hold: float = math.nan


def buy_hold_cash(first_price: float, last_price: float, cash: float, commission: float,
                  slippage_bps: float = 0.0) -> float:
    """Final cash of buying all-in at `first_price` and selling everything at `last_price`,
    paying the broker's costs both ways: its commission per trade and its slippage, which
    moves each fill price against the order (`PaperBroker._fill_price`). With no slippage
    it is `engine.trading.broker.buy_and_hold_cash` to the last bit (same operation order)."""
    buy = first_price * (1.0 + slippage_bps * 1e-4)
    shares = max(0, math.floor((cash - commission) / buy))
    if shares == 0:
        return cash
    cash = cash - (shares * buy + commission)
    return cash + (shares * (last_price * (1.0 - slippage_bps * 1e-4)) - commission)


def equity_point(broker: PaperBroker, closes: Sequence[float], first_prices: Sequence[float],
                 ts: int, liquidate: bool = False) -> EquityPoint:
    """The account now, marked at each symbol's last price (`closes`, the open bars' `c`);
    buy-and-hold from each symbol's `first_prices`, bought with the broker's commission and
    slippage. `liquidate` (the end of data, where the strategy's positions are sold): the
    buy-and-hold positions are sold too, paying the exit commission and slippage, so the
    last point is the report's `roi_buy_hold` (`buy_hold_cash`).

    Taken at every bar event, so its per-symbol work is array arithmetic beyond a few
    symbols (a loop over floats below): each symbol's buy-and-hold equity is computed in
    the same operation order as one float at a time, and summed one after another in
    symbol order, so the point is the same to the last bit as a plain loop's
    (`tests/engine/test_stats.py`)."""
    gross = 0.0
    for acct in broker.accounts:
        if acct.position != 0.0:
            gross += abs(acct.position) * acct.last_price * acct.multiplier
    n = len(broker.accounts)
    if len(closes) != n or len(first_prices) != n:
        raise ValueError(f"equity_point: {n} accounts, {len(closes)} closes "
                         f"and {len(first_prices)} first prices")
    if n <= SCALAR_MAX_SYMBOLS and all(f > 0.0 or f != f for f in first_prices):
        # a few symbols: plain floats cost less than a dozen numpy calls (the point is
        # taken at every bar event), with the same operations in the same order
        bh = _buy_hold_scalar(broker, closes, first_prices, liquidate)
    else:
        bh = _buy_hold_arrays(broker, closes, first_prices, liquidate)
    return EquityPoint(ts, broker.equity(), gross, bh)


#: up to this many symbols the buy-and-hold part of an equity point is a loop over floats
SCALAR_MAX_SYMBOLS = 32


def _buy_hold_scalar(broker: PaperBroker, closes: Sequence[float],
                     first_prices: Sequence[float], liquidate: bool) -> float:
    """`_buy_hold_arrays` one float at a time, for first prices that are NaN or > 0 (the
    arrays' handling of 0, an infinite share count, has no float loop twin)."""
    fee = broker.commission
    slip = broker.slippage_bps * 1e-4
    bh = broker.unallocated
    for sleeve, close, first_price in zip(broker.sleeves, closes, first_prices, strict=True):
        cash0, p, first = float(sleeve), float(close), float(first_price)
        buy = first * (1.0 + slip)
        shares = float(math.floor((cash0 - fee) / buy)) if first == first else 0.0
        if shares > 0.0 and p > 0.0:
            if liquidate:
                bh += cash0 - (shares * buy + fee) + (shares * (p * (1.0 - slip)) - fee)
            else:
                bh += cash0 - (shares * buy + fee) + shares * p
        else:
            bh += cash0
    return bh


def _buy_hold_arrays(broker: PaperBroker, closes: Sequence[float],
                     first_prices: Sequence[float], liquidate: bool) -> float:
    """Each symbol's buy-and-hold equity elementwise, in the operation order of one float
    at a time, summed one after another in symbol order."""
    # each symbol's part of the capital (a symbol seen later has none: buy-and-hold of the
    # capital set at the start); the paper's $10,000 per symbol under per-symbol sizing
    cash0 = np.asarray(broker.sleeves, np.float64)
    fee = broker.commission
    slip = broker.slippage_bps * 1e-4
    p = np.asarray(closes, np.float64)
    first = np.asarray(first_prices, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # NaN or 0 first prices: masked
        buy = first * (1.0 + slip)
        shares = np.maximum(0.0, np.floor((cash0 - fee) / buy))
        held = (first == first) & (p > 0.0) & (shares > 0.0)
        if liquidate:
            value = cash0 - (shares * buy + fee) + (shares * (p * (1.0 - slip)) - fee)
        else:
            value = cash0 - (shares * buy + fee) + shares * p
        per_symbol = np.where(held, value, cash0)
    bh = broker.unallocated  # capital no symbol's part holds (0 but for rounding)
    for v in per_symbol.tolist():  # in order, one at a time: as the loop it replaces
        bh += v
    return bh
