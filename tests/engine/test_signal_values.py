"""A strategy's signals outside {-1, 0, +1} (NaN, 2, 0.5) are the strategy's error, named
with the bar, not a traceback inside the decision table or a spurious close and re-entry."""

from __future__ import annotations

import asyncio
import datetime as dt

import numpy as np
import pytest

from engine.errors import StrategyError
from engine.trading.decisions import Decisions


class Fixed:
    name = "fixed"
    long_only = False
    enter_on_from_zero = False

    def __init__(self, signals: np.ndarray) -> None:
        self.signals = signals

    async def target_signals(self, features: np.ndarray, closed: np.ndarray) -> np.ndarray:
        return self.signals


def _signals(values: list[float], dtype: type) -> np.ndarray:
    closed = np.ones(len(values), np.bool_)
    strat = Fixed(np.asarray(values, dtype))
    when = dt.datetime(2024, 1, 2, 10, tzinfo=dt.UTC)
    return asyncio.run(Decisions.target_signals(
        strat, np.zeros((len(values), 4)), closed, lambda: when))  # type: ignore[arg-type]


@pytest.mark.parametrize(("values", "dtype"), [
    ([1.0, float("nan"), 0.0], np.float64),
    ([0, 2, -1], np.int8),
    ([0.5, 0.0, 0.0], np.float32),
])
def test_signals_outside_minus_one_zero_one_are_the_strategys_error(
        values: list[float], dtype: type) -> None:
    with pytest.raises(StrategyError, match=r"'fixed'.*bar closing.*-1, 0 or \+1"):
        _signals(values, dtype)


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.float64])
def test_valid_signals_pass_unchanged(dtype: type) -> None:
    out = _signals([-1, 0, 1, 1], dtype)
    assert out.tolist() == [-1, 0, 1, 1]


def test_a_long_only_strategy_may_answer_with_booleans() -> None:
    assert _signals([1, 0, 1], np.bool_).tolist() == [True, False, True]
