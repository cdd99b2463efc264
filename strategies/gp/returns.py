"""Daily returns of GP rules: the paper's money simulation valued at every close.

Each rule trades each stock of the window from CASH0 dollars by the evaluator's own money
step (gpu.gp.core: buy the most whole shares on buy-only, sell all on sell-only, $1 per
trade), and the portfolio (all stocks together) is valued after each day's trade at that
day's close: cash + shares × close, on the last day the liquidated cash. So the last value
equals the sum over stocks of the evaluator's final cash (tested), and the returns of a
rule are value[d] / value[d−1] − 1 with value[−1] = n_stocks × CASH0.

`evolve --returns-out FILE` writes these for its hall of fame, one column per rule named
`hof<i>` (its index in the strategy file's `hall_of_fame`), for `select`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

from gpu.gp import core as gp_core
from gpu.gp.core import CASH0, CODE_BUY, CODE_SELL, CPU, DEFAULT_COSTS
from gpu.gp.evaluate import MONEY_BUDGET, decision_codes
from gpu.small import interpreted, uncompiled
from strategies.gp.representation import GPRule, rules_programs
from strategies.gp.window import GPWindow, Period

_step_money = CPU.step_money
_liquidate = CPU.liquidate
COLUMN = "hof{}"
_COLUMN_RE = re.compile(r"^hof(\d+)$")


@njit(cache=True)
def _portfolio_values(codes: Any, close: Any, day0: int, costs: Any, out: Any) -> None:
    n_days, n_stocks = codes.shape
    out[:] = 0.0
    for s in range(n_stocks):
        signal = np.int64(0)  # the types gpu.gp.core's callers pass: one specialisation
        shares = 0.0
        cash = CASH0
        for d in range(n_days):
            price = close[day0 + d, s]
            signal, shares, cash = _step_money(np.int64(codes[d, s]), signal, shares, cash,
                                               price, costs)
            if d == n_days - 1:
                out[d] += _liquidate(shares, cash, price, costs)
            else:
                out[d] += cash + shares * price


def portfolio_values(codes: npt.ArrayLike, close: npt.ArrayLike, day0: int,
                     costs: tuple[float, float, float] = DEFAULT_COSTS
                     ) -> npt.NDArray[np.float64]:
    """Portfolio value (dollars) after each day of decision codes (days, stocks) at close,
    trades paying `costs` (gp_core.cost_tuple)."""
    c = np.ascontiguousarray(codes, np.int8)
    out = np.empty(c.shape[0], np.float64)
    _portfolio_values(c, np.ascontiguousarray(close, np.float64), day0, costs, out)
    return out


def daily_returns(rules: Sequence[GPRule], window: GPWindow, period: Period,
                  device: str = "auto", costs: tuple[float, float, float] = DEFAULT_COSTS
                  ) -> npt.NDArray[np.float64]:
    """Daily portfolio returns (period days × rules) of each rule over `period`."""
    programs, lengths = rules_programs(list(rules))
    codes = decision_codes(programs, lengths, window.panel, period.day0, period.day1, device)
    return returns_of_codes(codes, window.close, period.day0, costs)


def returns_of_codes(codes: npt.NDArray[np.int8], close: npt.NDArray[np.float64], day0: int,
                     costs: tuple[float, float, float] = DEFAULT_COSTS
                     ) -> npt.NDArray[np.float64]:
    """Daily portfolio returns (days × programs) of decision codes (programs, days, stocks)
    trading close[day0:] from CASH0 per stock."""
    n_programs, n_days, n_stocks = codes.shape
    start = n_stocks * CASH0
    out = np.empty((n_days, n_programs), np.float64)
    for i in range(n_programs):
        values = portfolio_values(codes[i], close, day0, costs)
        out[:, i] = np.diff(values, prepend=start) / np.concatenate(([start], values[:-1]))
    return out


def column_names(n_rules: int) -> list[str]:
    return [COLUMN.format(i) for i in range(n_rules)]


def hall_of_fame_indices(names: Sequence[str], n_rules: int) -> list[int]:
    """Indices into a hall of fame of selected column names `hof<i>`; ValueError otherwise."""
    out = []
    for name in names:
        m = _COLUMN_RE.match(name)
        if not m:
            raise ValueError(f"selected strategy {name!r} is not a hall-of-fame column hof<i>")
        i = int(m.group(1))
        if i >= n_rules:
            raise ValueError(f"selected strategy {name!r}: the hall of fame has {n_rules} rules")
        out.append(i)
    return out


@njit(cache=True)
def _trading_path(codes: Any, close: Any, day0: int, costs: Any, values: Any, cash_out: Any
                  ) -> tuple[int, float]:
    """Portfolio value after each day (values), final cash per stock (cash_out), and the
    fills and their traded value at the close (the final liquidation included)."""
    n_days, n_stocks = codes.shape
    values[:] = 0.0
    fills = 0
    traded = 0.0
    for s in range(n_stocks):
        signal = np.int64(0)
        shares = 0.0
        cash = CASH0
        for d in range(n_days):
            price = close[day0 + d, s]
            held = shares
            signal, shares, cash = _step_money(np.int64(codes[d, s]), signal, shares, cash,
                                               price, costs)
            if shares != held:
                fills += 1
                traded += abs(shares - held) * price
            if d == n_days - 1:
                if shares > 0.0:
                    fills += 1
                    traded += shares * price
                cash = _liquidate(shares, cash, price, costs)
                values[d] += cash
            else:
                values[d] += cash + shares * price
        cash_out[s] = cash
    return fills, traded


@dataclass(frozen=True)
class PeriodTrading:
    """One rule (or a vote of several) trading every stock of a period from CASH0 each, by
    the evaluator's money rules and costs, against buy-and-hold of the same stocks with the
    same costs. ROIs are means over stocks, as `evolve` reports them."""

    cash: npt.NDArray[np.float64]               # final cash per stock
    returns: npt.NDArray[np.float64]            # daily portfolio returns
    buy_hold_cash: npt.NDArray[np.float64]
    buy_hold_returns: npt.NDArray[np.float64]
    fills: int                                  # trades over all stocks
    turnover: float                             # traded value at the close / start equity

    @property
    def roi(self) -> float:
        return float(np.mean(self.cash / CASH0 - 1.0))

    @property
    def roi_buy_hold(self) -> float:
        return float(np.mean(self.buy_hold_cash / CASH0 - 1.0))


#: `_trading_path` run by the interpreter over the plain money rules
_trading_path_python = interpreted(_trading_path, _step_money=gp_core.step_money,
                                   _liquidate=gp_core.liquidate)


def _path(codes: npt.NDArray[np.int8], close: npt.NDArray[np.float64], day0: int,
          costs: tuple[float, float, float]
          ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], int, float]:
    values = np.empty(codes.shape[0], np.float64)
    cash = np.empty(codes.shape[1], np.float64)
    # a small window through the plain money rules, interpreted (gpu.small)
    path = (_trading_path_python if uncompiled(_trading_path, codes.size, MONEY_BUDGET)
            else _trading_path)
    fills, traded = path(np.ascontiguousarray(codes, np.int8),
                         np.ascontiguousarray(close, np.float64), day0, costs, values, cash)
    start = codes.shape[1] * CASH0
    returns = np.diff(values, prepend=start) / np.concatenate(([start], values[:-1]))
    return cash, returns, int(fills), float(traded) / start


def voted_codes(rules: Sequence[GPRule], panel: npt.NDArray[np.float32], day0: int, day1: int,
                last_day: npt.NDArray[np.int64] | None = None, device: str = "cpu"
                ) -> npt.NDArray[np.int8]:
    """Decision codes (days, stocks) of one rule, or the majority vote of several (the
    GPEnsemble's), SELL from each stock's last trading day on (`last_day`, see GPWindow)."""
    from strategies.gp.strategy import vote

    programs, lengths = rules_programs(list(rules))
    codes = decision_codes(programs, lengths, panel, day0, day1, device)
    voted = (np.array(codes[0], np.int8) if len(rules) == 1
             else np.stack([vote(codes[:, d, :]) for d in range(day1 - day0)]))
    if last_day is not None:
        for s, d in enumerate(last_day.tolist()):
            if d < day1 - 1:
                voted[max(d - day0, 0):, s] = CODE_SELL
    return voted


def trade_period(rules: Sequence[GPRule], panel: npt.NDArray[np.float32],
                 close: npt.NDArray[np.float64], day0: int, day1: int,
                 costs: tuple[float, float, float] = DEFAULT_COSTS,
                 last_day: npt.NDArray[np.int64] | None = None, device: str = "cpu"
                 ) -> PeriodTrading:
    """`rules` (voted when several) over days [day0, day1) and buy-and-hold beside them."""
    codes = voted_codes(rules, panel, day0, day1, last_day, device)
    cash, returns, fills, turnover = _path(codes, close, day0, costs)
    hold = np.zeros_like(codes)
    hold[0, :] = CODE_BUY
    bh_cash, bh_returns, _, _ = _path(hold, close, day0, costs)
    return PeriodTrading(cash, returns, bh_cash, bh_returns, fills, turnover)
