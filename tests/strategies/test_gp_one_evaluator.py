"""`evolve`'s report compiles one evaluator (issue 27, cold start): the money of a single
rule through the bitwise evaluator, and a period's decision codes in chunks on threads,
give what the stack interpreter and the prange loop give, bit for bit, on real data."""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import pytest

from gpu.gp import evaluate
from gpu.gp.core import cost_tuple
from gpu.gp.evaluate import _codes_cpu, decision_codes
from strategies.gp.representation import GPRule, rules_programs
from strategies.gp.strategy import simulate_money, simulate_money_next_open
from strategies.gp.window import GPWindow, load_window
from tests.gpu.gp_common import HAND_RULES, bred_population

COSTS = cost_tuple(1.0, 5.0)  # $1 a trade and 5 bp of slippage


@pytest.fixture(scope="module")
def window(shared_data: Any) -> GPWindow:
    return load_window(shared_data / "sp500_5yr_daily", 8, 300, 120, start="2015-06-01")


@pytest.fixture(scope="module")
def rules() -> list[GPRule]:
    pop = bred_population(60, 7, 5)
    return HAND_RULES + [pop.rule(i) for i in range(60)]


@pytest.mark.parametrize("costs", [None, COSTS])
def test_one_rules_money_is_the_same_on_both_evaluators(window: GPWindow,
                                                          rules: list[GPRule],
                                                          costs: Any) -> None:
    extra = {} if costs is None else {"costs": costs}
    for period in (window.train, window.test):
        for rule in rules:
            args = (rule, window.panel, window.close, period.day0, period.day1)
            stack = simulate_money(*args, **extra)
            bits = simulate_money(*args, **extra, method="bitwise")
            assert stack.tobytes() == bits.tobytes()
            assert window.open is not None
            nxt = (rule, window.panel, window.open, window.close, period.day0, period.day1,
                   window.last_day)
            stack = simulate_money_next_open(*nxt, **extra)
            bits = simulate_money_next_open(*nxt, **extra, method="bitwise")
            assert stack.tobytes() == bits.tobytes()


def test_a_periods_codes_in_chunks_equal_the_prange_loop(window: GPWindow,
                                                           rules: list[GPRule],
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    monkeypatch.setattr(evaluate, "is_small", lambda *dims: False)  # the compiled chunks
    programs, lengths = rules_programs(rules)
    period = window.train
    want = np.zeros((len(rules), period.days, window.n_stocks), np.int8)
    _codes_cpu(programs, lengths, window.panel, period.day0, period.day1, want)
    before = numba.get_num_threads()
    try:
        for threads in sorted({1, before}):  # one serial call, and chunks on threads
            numba.set_num_threads(threads)
            got = decision_codes(programs, lengths, window.panel, period.day0, period.day1,
                                 device="cpu")
            assert np.array_equal(got, want)
    finally:
        numba.set_num_threads(before)
    assert np.count_nonzero(want) > 0
