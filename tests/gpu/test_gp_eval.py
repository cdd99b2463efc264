"""GP evaluators: the plain-Python reference, the numba CPU evaluator and the CUDA kernel
(simulator here, the real GPU under the `gpu` marker) give identical money and fitness on
random populations over real S&P 500 data; trivial rules against hand-written loops.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpu.device import cuda_simulated
from gpu.gp import evaluate as gp_eval
from gpu.gp.core import CASH0
from gpu.indicators.catalogue import N_TERMINALS, TERMINAL_INDEX
from strategies.gp import reference
from strategies.gp.representation import GPRule, rules_programs
from strategies.gp.window import GPWindow, load_window
from tests.gpu import gp_common
from tests.gpu.gp_common import HAND_RULES, bred_population, needs_cuda


@pytest.fixture(scope="module")
def window(shared_data) -> GPWindow:
    # 6 stocks x 300 days: the panel still warms up (NaN) in the first ~255 days
    return load_window(shared_data / "sp500_5yr_daily", 6, 200, 100)


def test_reference_cpu_identical_money_and_fitness(window: GPWindow) -> None:
    checked = gp_common.assert_matches_reference(
        window, bred_population(40, 11, 5), lambda d0, d1: gp_eval.PopulationEvaluator(
            window.panel, window.close, d0, d1, "cpu", method="stack"))
    for (ev, cash), period in zip(checked, (window.train, window.test), strict=True):
        assert np.array_equal(ev.bh_cash, reference.buy_hold_cash(window.close, period.day0,
                                                                   period.day1))
        # the population does trade: not every rule ends with the untouched $10,000
        assert np.count_nonzero(cash != CASH0) > cash.size // 4


def test_population_compile_matches_rule_programs(window: GPWindow) -> None:
    pop = bred_population(30, 5, 5)
    p1, l1 = pop.compile()
    p2, l2 = rules_programs([pop.rule(i) for i in range(len(pop))])
    c1 = gp_eval.final_cash(p1, l1, window.panel, window.close, device="cpu")
    c2 = gp_eval.final_cash(p2, l2, window.panel, window.close, device="cpu")
    assert np.array_equal(c1, c2)


@needs_cuda
def test_cuda_identical_to_cpu_and_reference(window: GPWindow) -> None:
    # simulator: tiny (20 individuals x 4 stocks x 100 days)
    pop = bred_population(20, 12, 5)
    rules = [pop.rule(i) for i in range(len(pop))] + HAND_RULES[:2]
    programs, lengths = rules_programs(rules)
    panel = np.ascontiguousarray(window.panel[150:250, :, :4])
    close = np.ascontiguousarray(window.close[150:250, :4])
    cpu = gp_eval.final_cash(programs, lengths, panel, close, device="cpu")
    gpu = gp_eval.final_cash(programs, lengths, panel, close, device="cuda")
    ref_fit, ref = reference.fitness(rules, panel, close)
    assert np.array_equal(gpu, cpu)
    assert np.array_equal(cpu, ref)
    bh = gp_eval.buy_hold_cash(close)
    assert np.array_equal(gp_eval.fitness_from_cash(gpu, bh), ref_fit)
    assert np.array_equal(gp_eval.fitness_from_cash(cpu, bh), ref_fit)
    codes_cpu = gp_eval.decision_codes(programs, lengths, panel, 90, 100, device="cpu")
    codes_gpu = gp_eval.decision_codes(programs, lengths, panel, 90, 100, device="cuda")
    assert np.array_equal(codes_cpu, codes_gpu)


def test_decision_codes_match_reference_trees(window: GPWindow) -> None:
    pop = bred_population(15, 4, 5)
    rules = [pop.rule(i) for i in range(len(pop))]
    programs, lengths = rules_programs(rules)
    codes = gp_eval.decision_codes(programs, lengths, window.panel, 180, 230, device="cpu")
    for i, rule in enumerate(rules):
        for d in range(180, 230):
            for s in range(window.n_stocks):
                values = window.panel[d, :, s]
                want = (int(reference.eval_tree(rule.buy, values))
                        + 2 * int(reference.eval_tree(rule.sell, values)))
                assert codes[i, d - 180, s] == want


def test_buy_always_equals_buy_and_hold(window: GPWindow) -> None:
    rule = HAND_RULES[3]
    programs, lengths = rule.programs()
    for period in (window.train, window.test):
        ev = gp_eval.PopulationEvaluator(window.panel, window.close, period.day0, period.day1,
                                         "cpu", method="stack")
        fit, cash = ev.fitness(programs, lengths)
        assert np.array_equal(cash[0], ev.bh_cash)
        assert fit[0] == 0.0
        # and buy-and-hold itself, by hand: all-in at the first close, out at the last
        for s in range(window.n_stocks):
            first = window.close[period.day0, s]
            last = window.close[period.day1 - 1, s]
            shares = math.floor((10_000.0 - 1.0) / first)
            want = 10_000.0 - shares * first - 1.0 + shares * last - 1.0
            assert ev.bh_cash[s] == pytest.approx(want, abs=1e-9)


def test_never_trading_keeps_the_cash(window: GPWindow) -> None:
    rule = GPRule.from_infix("(close < close)", "(close > close)")
    cash = gp_eval.final_cash(*rule.programs(), window.panel, window.close, device="cpu")
    assert np.all(cash == CASH0)


def test_sma_cross_rule_against_a_hand_loop(window: GPWindow) -> None:
    """Long while close > sma10, flat after close < sma10: the money by hand."""
    rule = HAND_RULES[0]
    cash = gp_eval.final_cash(*rule.programs(), window.panel, window.close, device="cpu")[0]
    c_col, s_col = TERMINAL_INDEX["close"], TERMINAL_INDEX["sma10"]
    for s in range(window.n_stocks):
        money, shares, trades = 10_000.0, 0, 0
        for d in range(window.panel.shape[0]):
            c, m = window.panel[d, c_col, s], window.panel[d, s_col, s]
            price = window.close[d, s]
            if c > m and shares == 0:
                shares = math.floor((money - 1.0) / price)
                money -= shares * price + 1.0
                trades += 1
            elif c < m and shares > 0:
                money += shares * price - 1.0
                shares = 0
                trades += 1
        if shares:
            money += shares * window.close[-1, s] - 1.0
            trades += 1
        assert trades > 4
        assert cash[s] == pytest.approx(money, abs=1e-6)


def test_codes_path_equals_fused_path(window: GPWindow) -> None:
    pop = bred_population(10, 21, 5)
    programs, lengths = pop.compile()
    fused = gp_eval.final_cash(programs, lengths, window.panel, window.close, 50, 280, "cpu")
    codes = gp_eval.decision_codes(programs, lengths, window.panel, 50, 280, "cpu")
    for i in range(len(pop)):
        assert np.array_equal(gp_eval.cash_from_codes(codes[i], window.close, 50, 280), fused[i])


def test_bad_inputs_are_value_errors(window: GPWindow) -> None:
    programs, lengths = HAND_RULES[0].programs()
    with pytest.raises(ValueError, match="panel"):
        gp_eval.final_cash(programs, lengths, window.panel[:, :30], window.close, device="cpu")
    with pytest.raises(ValueError, match="close"):
        gp_eval.final_cash(programs, lengths, window.panel, window.close[:, :2], device="cpu")
    with pytest.raises(ValueError, match="day range"):
        gp_eval.final_cash(programs, lengths, window.panel, window.close, 10, 10_000, "cpu")
    bad = window.close.copy()
    bad[3, 1] = 0.0
    with pytest.raises(ValueError, match="> 0"):
        gp_eval.final_cash(programs, lengths, window.panel, bad, device="cpu")
    with pytest.raises(ValueError, match="program 0"):
        gp_eval.final_cash(programs, lengths + 100, window.panel, window.close, device="cpu")
    for broken in ([17, 18, 19], [0, 17, 34, 18], [0, 1, 31, 17], [17, 18, 99], [17, 33]):
        p = np.asarray([broken], np.int16)
        with pytest.raises(ValueError, match="typed postfix"):
            gp_eval.final_cash(p, np.array([p.shape[1]]), window.panel, window.close, device="cpu")
    assert window.panel.shape[1] == N_TERMINALS


@pytest.mark.gpu
def test_cuda_equals_cpu_large_population(shared_data) -> None:
    if cuda_simulated():
        pytest.skip("real GPU only")
    w = load_window(shared_data / "sp500_5yr_daily", 32, 768, 0)
    pop = bred_population(3000, 99, 5)
    programs, lengths = pop.compile()
    cpu = gp_eval.final_cash(programs, lengths, w.panel, w.close, device="cpu")
    gpu = gp_eval.final_cash(programs, lengths, w.panel, w.close, device="cuda")
    assert np.array_equal(gpu, cpu)
    bh = gp_eval.buy_hold_cash(w.close)
    assert np.array_equal(gp_eval.fitness_from_cash(gpu, bh), gp_eval.fitness_from_cash(cpu, bh))


@pytest.mark.parametrize("n_stocks", [1, 7, 8, 9, 31, 127, 128, 129, 136, 257, 1000, 4099])
def test_fitness_from_cash_equals_numpy_mean_bit_for_bit(n_stocks: int) -> None:
    # the parallel pass replays numpy's pairwise summation: blocks of 8 accumulators up to
    # 128 values, halves above; every length class of that recursion is here
    rng = np.random.default_rng(n_stocks)
    cash = rng.uniform(0.0, 4 * CASH0, (70, n_stocks))
    cash[3] = CASH0  # an exact zero excess row
    bh = rng.uniform(0.5 * CASH0, 2 * CASH0, n_stocks)
    want = np.mean(gp_eval.roi(cash) - gp_eval.roi(bh)[None, :], axis=1)
    got = gp_eval.fitness_from_cash(cash, bh)
    assert got.dtype == np.float64 and got.shape == (70,)
    assert np.array_equal(got, want)
