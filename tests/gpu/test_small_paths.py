"""gpu.small: the uncompiled paths of small problems equal their compiled twins bit for bit
on real data (S&P 500 windows, evolved-like rules, the paper's costs and a broker's)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpu import small
from gpu.gp import bitwise, core, evaluate
from gpu.gp import window as gp_window
from gpu.threads import run_chunks
from strategies.gp import returns
from strategies.gp.representation import rules_programs
from strategies.gp.window import GPWindow, load_window
from tests.gpu.gp_common import HAND_RULES, bred_population

COSTS = [core.DEFAULT_COSTS, core.cost_tuple(1.0, 5.0)]


@pytest.fixture(scope="module")
def window(shared_data: Any) -> GPWindow:
    # 300 + 123 days: periods that end inside a 64-day word
    return load_window(shared_data / "sp500_5yr_daily", 9, 300, 123, start="2014-03-03")


@pytest.fixture(scope="module")
def programs() -> tuple[np.ndarray, np.ndarray]:
    pop = bred_population(40, 11, 6)
    return rules_programs(HAND_RULES + [pop.rule(i) for i in range(40)])


def periods(window: GPWindow) -> list[tuple[int, int]]:
    return [(window.train.day0, window.train.day1), (window.test.day0, window.test.day1),
            (5, 70)]


def test_is_small_and_interpreted() -> None:
    assert small.is_small(small.SMALL_CELLS) and not small.is_small(small.SMALL_CELLS + 1)
    assert small.is_small(128, 256) and not small.is_small(1024, 64, 2)
    twice = small.interpreted(_doubled, _helper=lambda x: x + 1)
    assert _doubled(3) == 6 and twice(3) == 8  # the original keeps its own callee


def test_uncompiled_work_is_charged_to_a_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(small, "_spent", {})
    assert small.uncompiled(_helper, 600, budget=1000)
    assert not small.uncompiled(_helper, 600, budget=1000)  # 1200 > 1000: compile it now
    assert small.uncompiled(_helper, 400, budget=1000)
    assert not small.uncompiled(_doubled, small.SMALL_CELLS + 1, budget=1 << 30)  # not small
    compiled = evaluate._codes_cpu  # compiled by the tests before, or cached on disk: run it
    compiled(np.zeros((1, 4), np.int16), np.zeros(1, np.int32),
             np.zeros((1, 31, 1), np.float32), 0, 1, np.zeros((1, 1, 1), np.int8))
    assert small.has_machine_code(compiled) and not small.uncompiled(compiled, 1)


def test_interpreted_panel_equals_the_compiled(shared_data: Any) -> None:
    from feeds.daily import daily_matrix
    from gpu.indicators import compute
    from gpu.indicators.core import N_RAW
    from strategies.gp.window import _table

    m = daily_matrix(_table(shared_data / "sp500_5yr_daily" / "all_stocks_5yr.csv.gz"),
                     n_stocks=5, n_days=400)
    arrays = compute._panel_inputs(m.open, m.high, m.low, m.close, m.volume)
    n_days, n_stocks = arrays[3].shape
    outs = [np.empty((n_days, 31, n_stocks), np.float32) for _ in range(2)]
    raws = [np.empty((n_days, N_RAW, n_stocks)) for _ in range(2)]
    compute._panel_python(0, n_stocks, *arrays, outs[0], raws[0])
    run_chunks(compute._panel_cpu, n_stocks, *arrays, outs[1], raws[1], min_chunk=1)
    assert outs[0].tobytes() == outs[1].tobytes()  # NaN warm-ups included, bit for bit
    assert raws[0].tobytes() == raws[1].tobytes()
    assert np.isfinite(outs[0][-1]).all()


def _helper(x: int) -> int:
    return x


def _doubled(x: int) -> int:
    return _helper(x) * 2


def test_numpy_masks_equal_the_compiled_loop(window: GPWindow) -> None:
    for day0, day1 in periods(window):
        got = bitwise.masks_numpy(window.panel, day0, day1)
        want = np.empty_like(got)
        run_chunks(bitwise._masks_cpu, want.shape[0], window.panel, day0, day1, want,
                   min_chunk=1)
        assert got.dtype == np.uint64 and np.array_equal(got, want)


def test_numpy_codes_equal_the_interpreter(window: GPWindow,
                                           programs: tuple[np.ndarray, np.ndarray]) -> None:
    progs, lengths = programs
    for day0, day1 in periods(window):
        got = bitwise.codes_numpy(progs, lengths, window.panel, day0, day1)
        want = np.zeros_like(got)
        evaluate._codes_cpu(progs, lengths, window.panel, day0, day1, want)
        assert np.array_equal(got, want)
        assert np.count_nonzero(want == core.CODE_BUY) and np.count_nonzero(want == core.CODE_SELL)
        # decision_codes takes the numpy path here (a few rules on a small window)
        assert np.array_equal(evaluate.decision_codes(progs, lengths, window.panel, day0, day1,
                                                      device="cpu"), want)


@pytest.mark.parametrize("costs", COSTS)
def test_interpreted_money_equals_the_compiled(window: GPWindow,
                                               programs: tuple[np.ndarray, np.ndarray],
                                               costs: Any) -> None:
    progs, lengths = programs
    close, n_stocks = window.close, window.n_stocks
    for day0, day1 in periods(window):
        codes = bitwise.codes_numpy(progs, lengths, window.panel, day0, day1)
        for c in codes:
            c = np.ascontiguousarray(c)
            got, want = np.empty(n_stocks), np.empty(n_stocks)
            evaluate._codes_cash_python(c, close, day0, day1, costs, got)
            evaluate._codes_cash_cpu(c, close, day0, day1, costs, want)
            assert got.tobytes() == want.tobytes()
            assert evaluate.cash_from_codes(c, close, day0, day1, costs).tobytes() == \
                want.tobytes()
            values = [np.empty(day1 - day0), np.empty(day1 - day0)]
            cash = [np.empty(n_stocks), np.empty(n_stocks)]
            a = returns._trading_path_python(c, close, day0, costs, values[0], cash[0])
            b = returns._trading_path(c, close, day0, costs, values[1], cash[1])
            assert (a[0], float(a[1])) == (b[0], float(b[1]))
            assert values[0].tobytes() == values[1].tobytes()
            assert cash[0].tobytes() == cash[1].tobytes()


@pytest.mark.parametrize("costs", COSTS)
def test_buy_and_hold_in_python_equals_the_compiled_core(window: GPWindow, costs: Any) -> None:
    for day0, day1 in periods(window):
        got = gp_window.buy_hold_cash(window.close, day0, day1, costs)
        want = [core.CPU.buy_hold(window.close, s, day0, day1, costs)
                for s in range(window.n_stocks)]
        assert got.tobytes() == np.array(want, np.float64).tobytes()


def test_numpy_fitness_equals_the_parallel_pass(window: GPWindow,
                                                programs: tuple[np.ndarray, np.ndarray],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    progs, lengths = programs
    day0, day1 = window.train.day0, window.train.day1
    ev = evaluate.PopulationEvaluator(window.panel, window.close, day0, day1, "cpu")
    cash = ev.final_cash(progs, lengths)
    for stocks in (1, 7, 9):  # the pairwise sum's short and unrolled blocks
        part = np.ascontiguousarray(cash[:, :stocks])
        got = gp_window.fitness_from_cash(part, ev.bh_cash[:stocks])
        monkeypatch.setattr(gp_window, "is_small", lambda *dims: False)
        want = gp_window.fitness_from_cash(part, ev.bh_cash[:stocks])
        monkeypatch.undo()
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("k", [2, 3, 5])
def test_interpreted_subset_search_equals_the_compiled(window: GPWindow, k: int,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu.subset import search

    closes = window.close[: window.train.day1]
    corr = np.corrcoef(np.diff(np.log(closes), axis=0).T)
    results = []
    for uncompiled in (True, False):
        monkeypatch.setattr(search, "uncompiled", lambda *a, u=uncompiled, **kw: u)
        for chunk in (None, 1, 7):
            r = search.least_correlated(corr, k, device="cpu", chunk=chunk)
            results.append((r.subset, r.rank, float(r.objective).hex()))
    assert len(set(results)) == 1, results
