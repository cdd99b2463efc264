"""Populations and hand-written rules shared by the GP evaluator tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from gpu.device import cuda_present
from strategies.gp import reference
from strategies.gp.init import ramped_half_and_half
from strategies.gp.operators import breed
from strategies.gp.representation import GPRule, Population, rules_programs
from strategies.gp.window import GPWindow

needs_cuda = pytest.mark.skipif(not cuda_present(), reason="no CUDA device or simulator")


def bred_population(n: int, seed: int, max_depth: int) -> Population:
    """Ramped half-and-half trees of depth 1..max_depth, then one generation bred from
    them: deeper, lopsided trees after crossover too."""
    rng = np.random.default_rng(seed)
    pop = ramped_half_and_half(n, rng, 1, max_depth)
    return breed(pop, rng.integers(0, n, n), rng.integers(0, n, n), rng)


HAND_RULES = [
    GPRule.from_infix("(close > sma10)", "(close < sma10)"),
    GPRule.from_infix("(macd_above_signal AND (ema5 > ema25))", "NOT macd_above_zero"),
    GPRule.from_infix("(sma200 < close)", "(sma200 > close)"),       # NaN while warming up
    GPRule.from_infix("NOT (close < close)", "(close < close)"),     # buy always, never sell
]


def assert_matches_reference(window: GPWindow, pop: Population,
                             make_evaluator: Callable[[int, int], Any]) -> list[tuple[Any, Any]]:
    """The population's rules and HAND_RULES, evaluated over the train and the test period
    by `make_evaluator(day0, day1)`: final cash and fitness equal the plain-Python
    reference's. Returns (evaluator, cash) per period for further checks."""
    rules = [pop.rule(i) for i in range(len(pop))] + HAND_RULES
    programs, lengths = rules_programs(rules)
    out = []
    for period in (window.train, window.test):
        ev = make_evaluator(period.day0, period.day1)
        fit, cash = ev.fitness(programs, lengths)
        ref_fit, ref_cash = reference.fitness(rules, window.panel, window.close, period.day0,
                                              period.day1)
        assert np.array_equal(cash, ref_cash)
        assert np.array_equal(fit, ref_fit)
        out.append((ev, cash))
    return out
