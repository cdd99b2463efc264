"""Bit-parallel GP evaluation equals the plain-Python reference evaluator, cent for cent.

The reference (`strategies.gp.reference`, a tree walk in plain Python) and the stack
interpreter share no code with the bitwise path except the money step; masks are checked
bit by bit against numpy comparisons of the panel.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from gpu.device import cuda_simulated
from gpu.gp import bitwise as gp_bitwise
from gpu.gp import evaluate as gp_eval
from gpu.indicators.catalogue import N_FLOAT, N_TERMINALS
from strategies.gp.representation import GPRule, Population, rules_programs
from strategies.gp.window import GPWindow, load_window
from tests.gpu.gp_common import HAND_RULES as SHARED_RULES
from tests.gpu.gp_common import assert_matches_reference, bred_population, needs_cuda


@pytest.fixture(scope="module")
def window(shared_data) -> GPWindow:
    # 5 stocks; a 150-day window spans three words, the last one partial (22 days)
    return load_window(shared_data / "sp500_5yr_daily", 5, 150, 70)


HAND_RULES = [*SHARED_RULES,
              GPRule.from_infix("NOT (close < close)", "NOT (close < close)")]  # never trades


def test_masks_equal_numpy_comparisons(window: GPWindow) -> None:
    day0, day1 = window.train.day0, window.train.day1
    masks = gp_bitwise.build_masks(window.panel, day0, day1, "cpu")
    days = np.arange(day0, day1)
    for k in (0, 5, 3 * N_FLOAT + 7, gp_bitwise.N_COMPARE - 1, gp_bitwise.N_COMPARE,
              gp_bitwise.N_MASKS - 1):
        if k < gp_bitwise.N_COMPARE:
            a, b = divmod(k, N_FLOAT)
            want = window.panel[days, a, :] < window.panel[days, b, :]
        else:
            t = N_FLOAT + k - gp_bitwise.N_COMPARE
            want = window.panel[days, t, :].astype(np.float64) > 0.5
        bits = (masks[k][:, None, :] >> np.arange(64, dtype=np.uint64)[None, :, None]) & 1
        got = bits.reshape(-1, window.panel.shape[2])[: day1 - day0].astype(bool)
        assert np.array_equal(got, want), k
        # days past the window are zero bits
        assert not bits.reshape(-1, window.panel.shape[2])[day1 - day0:].any()


def test_translation_maps_every_comparison_to_its_mask() -> None:
    rule = GPRule.from_infix("((close > sma10) AND NOT macd_above_zero)", "(ema5 < ema25)")
    programs, lengths = rules_programs([rule])
    code, n = gp_bitwise.to_mask_programs(programs, lengths)
    from gpu.indicators.catalogue import TERMINAL_INDEX as T

    expected = [T["sma10"] * N_FLOAT + T["close"],            # close > sma10 == sma10 < close
                gp_bitwise.N_COMPARE + T["macd_above_zero"] - N_FLOAT,
                gp_bitwise.INS_NOT, gp_bitwise.INS_AND,
                T["ema5"] * N_FLOAT + T["ema25"]]
    assert list(code[0, : n[0]]) == expected


def test_cpu_bitwise_equals_reference_evaluator(window: GPWindow) -> None:
    # with a rule that never trades (buy and sell at once) besides the shared hand rules
    pop = Population.concat([bred_population(60, 5, 6), Population.from_rules(HAND_RULES[-1:])])
    checked = assert_matches_reference(window, pop, lambda d0, d1: gp_bitwise.BitwiseEvaluator(
        window.panel, window.close, d0, d1, "cpu"))
    for ev, _ in checked:
        counts = ev.last_counts
        assert counts.credited < counts.node_equivalent  # comparisons collapse to one load
        assert counts.executed * 64 >= counts.credited


def test_cpu_bitwise_equals_stack_interpreter_on_larger_population(window: GPWindow) -> None:
    pop = bred_population(400, 9, 6)
    programs, lengths = pop.compile()
    period = window.train
    stack = gp_eval.PopulationEvaluator(window.panel, window.close, period.day0, period.day1,
                                        "cpu", method="stack")
    default = gp_eval.PopulationEvaluator(window.panel, window.close, period.day0, period.day1,
                                          "cpu")
    assert default.method == "bitwise"
    bits = gp_bitwise.BitwiseEvaluator(window.panel, window.close, period.day0, period.day1,
                                       "cpu")
    want = stack.final_cash(programs, lengths)
    assert np.array_equal(bits.final_cash(programs, lengths), want)
    assert np.array_equal(default.final_cash(programs, lengths), want)
    assert default.last_ops == bits.last_counts.credited


@needs_cuda
def test_cuda_bitwise_equals_cpu(window: GPWindow) -> None:
    pop = bred_population(6 if cuda_simulated() else 3000, 13, 6)
    programs, lengths = pop.compile()
    period = window.test  # short window keeps the simulator quick
    cpu = gp_bitwise.BitwiseEvaluator(window.panel, window.close, period.day0, period.day1, "cpu")
    gpu = gp_bitwise.BitwiseEvaluator(window.panel, window.close, period.day0, period.day1,
                                      "cuda")
    assert np.array_equal(gpu.final_cash(programs, lengths), cpu.final_cash(programs, lengths))


def test_bad_programs_rejected(window: GPWindow) -> None:
    ev = gp_bitwise.BitwiseEvaluator(window.panel, window.close, window.test.day0,
                                     window.test.day1, "cpu")
    bad = np.array([[N_TERMINALS + 1, N_TERMINALS - 1]], np.int16)  # OR with one argument
    with pytest.raises(ValueError, match="typed postfix"):
        ev.final_cash(bad, np.array([2], np.int32))


@pytest.mark.gpu
def test_cuda_bitwise_equals_stack_interpreter_at_paper_size(shared_data) -> None:
    w = load_window(shared_data / "sp500_5yr_daily", 32, 768, 0)
    programs, lengths = bred_population(3000, 21, 6).compile()
    day1 = w.panel.shape[0]
    stack = gp_eval.PopulationEvaluator(w.panel, w.close, 0, day1, "cpu", method="stack")
    bits = gp_eval.PopulationEvaluator(w.panel, w.close, 0, day1, "cuda", method="bitwise")
    assert np.array_equal(bits.final_cash(programs, lengths), stack.final_cash(programs, lengths))


def test_population_fitness_equals_fitness_of_the_cash_on_every_call(window: GPWindow) -> None:
    bits = gp_bitwise.BitwiseEvaluator(window.panel, window.close, window.train.day0,
                                       window.train.day1, "cpu")
    for seed, n in ((1, 50), (2, 80), (3, 30)):  # growing and shrinking: buffers reused
        programs, lengths = bred_population(n, seed, 6).compile()
        want, cash = bits.fitness(programs, lengths)
        got = bits.population_fitness(programs, lengths)
        assert np.array_equal(got, want)
        assert np.array_equal(gp_eval.fitness_from_cash(cash, bits.bh_cash),
                              np.mean(gp_eval.roi(cash) - gp_eval.roi(bits.bh_cash), axis=1))


@needs_cuda
def test_parts_fitness_equals_the_whole_population_at_once(window: GPWindow) -> None:
    # the pipelined path: parts through pinned buffers on one stream, buffers reused
    n = 9 if cuda_simulated() else 5000
    programs, lengths = bred_population(n, 31, 6).compile()
    ev = gp_bitwise.BitwiseEvaluator(window.panel, window.close, window.train.day0,
                                     window.train.day1, "cuda")
    whole = ev.population_fitness(programs, lengths)
    cpu = gp_bitwise.BitwiseEvaluator(window.panel, window.close, window.train.day0,
                                      window.train.day1, "cpu")
    assert np.array_equal(whole, cpu.population_fitness(programs, lengths))
    for cuts in ([0, n], [0, 2, 3, n - 1, n], [0, 1, n]):
        spans = list(zip(cuts[:-1], cuts[1:], strict=False))
        assert np.array_equal(ev.parts_fitness(
            ((programs[a:b], lengths[a:b]) for a, b in spans), n), whole)
        assert ev.last_ops > 0 and ev.last_seconds > 0
        assert np.array_equal(cpu.parts_fitness(
            ((programs[a:b], lengths[a:b]) for a, b in spans), n), whole)
    with pytest.raises(ValueError, match="announced"):
        ev.parts_fitness(iter([(programs, lengths)]), n + 1)
    # a breeder that fails after its first part: its error reaches the caller, and the
    # evaluator's reused buffers still give the right fitness on the next call
    def failing() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        yield programs[:2], lengths[:2]
        raise RuntimeError("breeding failed")

    with pytest.raises(RuntimeError, match="breeding failed"):
        ev.parts_fitness(failing(), n)
    assert np.array_equal(ev.parts_fitness(iter([(programs, lengths)]), n), whole)
