"""Plain-Python reference evaluator of GP trading rules (slow; for tests only).

Written independently of the compiled path: it walks the prefix trees recursively (no
postfix, no stack machine) and spells out the paper's money rules in a plain loop, so the
numba and CUDA evaluators are checked against code that shares nothing with them but the
terminal order. Semantics: strategies/gp/__init__.py.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from gpu.indicators.catalogue import BOOL_TERMINALS, FLOAT_TERMINALS, TERMINALS
from strategies.gp.representation import GPRule

START_CASH = 10_000.0
FEE = 1.0


def eval_tree(prefix: Iterable[int] | npt.NDArray[Any],
              values: Sequence[float] | npt.NDArray[Any]) -> bool:
    """Truth of a prefix bool tree for one (day, stock): values[k] = terminal k."""
    ops = [int(x) for x in prefix]
    pos = 0

    def node() -> bool | float:
        nonlocal pos
        op = ops[pos]
        pos += 1
        if op < len(FLOAT_TERMINALS):
            return float(values[op])
        if op < len(TERMINALS):
            return float(values[op]) > 0.5   # NaN > 0.5 is False
        name = ("AND", "OR", "NOT", "<", ">")[op - len(TERMINALS)]
        if name == "NOT":
            return not node()
        a = node()
        b = node()
        if name == "AND":
            return bool(a) and bool(b)
        if name == "OR":
            return bool(a) or bool(b)
        if name == "<":
            return a < b                     # any comparison with NaN is False
        return a > b

    out = node()
    assert isinstance(out, bool) and pos == len(ops)
    return out


def final_cash(rule: GPRule, panel: npt.NDArray[np.float32], close: npt.NDArray[np.float64],
               day0: int = 0, day1: int | None = None) -> list[float]:
    """Final cash per stock of one rule trading days [day0, day1), liquidated at the end."""
    day1 = panel.shape[0] if day1 is None else day1
    out = []
    for s in range(panel.shape[2]):
        cash = START_CASH
        shares = 0
        long_signal = False
        for d in range(day0, day1):
            values = [float(v) for v in panel[d, :, s]]
            buy = eval_tree(rule.buy, values)
            sell = eval_tree(rule.sell, values)
            price = float(close[d, s])
            if buy and not sell and not long_signal:
                long_signal = True
                n = math.floor((cash - FEE) / price)
                if n >= 1:
                    cash = cash - (n * price + FEE)
                    shares = n
            elif sell and not buy and long_signal:
                long_signal = False
                if shares > 0:
                    cash = cash + (shares * price - FEE)
                    shares = 0
        if shares > 0:
            cash = cash + (shares * float(close[day1 - 1, s]) - FEE)
        out.append(cash)
    return out


def buy_hold_cash(close: npt.NDArray[np.float64], day0: int = 0,
                  day1: int | None = None) -> list[float]:
    day1 = close.shape[0] if day1 is None else day1
    out = []
    for s in range(close.shape[1]):
        first, last = float(close[day0, s]), float(close[day1 - 1, s])
        n = math.floor((START_CASH - FEE) / first)
        cash = START_CASH
        if n >= 1:
            cash = cash - (n * first + FEE)
            cash = cash + (n * last - FEE)
        out.append(cash)
    return out


def fitness(rules: Sequence[GPRule], panel: npt.NDArray[np.float32],
            close: npt.NDArray[np.float64], day0: int = 0, day1: int | None = None
            ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(fitness per rule, final cash per rule and stock). Fitness is the mean over stocks of
    ROI - buy-and-hold ROI, reduced with numpy's mean along the stock axis."""
    cash = np.array([final_cash(r, panel, close, day0, day1) for r in rules], np.float64)
    bh = np.array(buy_hold_cash(close, day0, day1), np.float64)
    excess = (cash / START_CASH - 1.0) - (bh / START_CASH - 1.0)[None, :]
    return np.mean(excess, axis=1), cash


assert len(BOOL_TERMINALS) == 14
