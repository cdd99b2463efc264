"""Daily returns of GP rules: the paper's money simulation valued at every close.

Each rule trades each stock of the window from CASH0 dollars by the evaluator's own money
step (gpu.gp_core: buy the most whole shares on buy-only, sell all on sell-only, $1 per
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
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

from gpu.gp_core import CASH0, CPU
from gpu.gp_eval import decision_codes
from strategies.gp.representation import GPRule, rules_programs
from strategies.gp.window import GPWindow, Period

_step_money = CPU.step_money
_liquidate = CPU.liquidate
COLUMN = "hof{}"
_COLUMN_RE = re.compile(r"^hof(\d+)$")


@njit(cache=True)
def _portfolio_values(codes: Any, close: Any, day0: int, out: Any) -> None:
    n_days, n_stocks = codes.shape
    out[:] = 0.0
    for s in range(n_stocks):
        signal = 0
        shares = 0.0
        cash = CASH0
        for d in range(n_days):
            price = close[day0 + d, s]
            signal, shares, cash = _step_money(codes[d, s], signal, shares, cash, price)
            if d == n_days - 1:
                out[d] += _liquidate(shares, cash, price)
            else:
                out[d] += cash + shares * price


def portfolio_values(codes: npt.ArrayLike, close: npt.ArrayLike, day0: int
                     ) -> npt.NDArray[np.float64]:
    """Portfolio value (dollars) after each day of decision codes (days, stocks) at close."""
    c = np.ascontiguousarray(codes, np.int8)
    out = np.empty(c.shape[0], np.float64)
    _portfolio_values(c, np.ascontiguousarray(close, np.float64), day0, out)
    return out


def daily_returns(rules: Sequence[GPRule], window: GPWindow, period: Period,
                  device: str = "auto") -> npt.NDArray[np.float64]:
    """Daily portfolio returns (period days × rules) of each rule over `period`."""
    programs, lengths = rules_programs(list(rules))
    codes = decision_codes(programs, lengths, window.panel, period.day0, period.day1, device)
    start = window.n_stocks * CASH0
    out = np.empty((period.days, len(rules)), np.float64)
    for i in range(len(rules)):
        values = portfolio_values(codes[i], window.close, period.day0)
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
