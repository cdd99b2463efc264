"""Walk-forward evolution: fold boundaries (rolling, anchored, step) against a brute-force
enumeration, no look-ahead (prices after a fold's test window change nothing in it), the
stitched out-of-sample ROI compounds exactly, the same seed gives the same folds, and a Dask
cluster gives the serial result.

Synthetic market (geometric random walks), a few stocks, populations of tens: seconds.
"""

from __future__ import annotations

import math

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feeds.daily import DailyMatrix
from gpu.gp.core import cost_tuple
from gpu.gp.evaluate import PopulationEvaluator
from strategies.gp import walk_forward as wfm
from strategies.gp.evolution import EvolutionConfig, evolve
from strategies.gp.reference import eval_tree
from strategies.gp.strategy import simulate_money
from strategies.gp.window import GPWindow, window_from_matrix

CONFIG = EvolutionConfig(population=30, generations=3, seed=11, elite=2, hall_of_fame=4)
PLAN = wfm.WalkForwardPlan(60, 20, 20)


def market(days: int = 140, stocks: int = 3, seed: int = 5) -> DailyMatrix:
    rng = np.random.default_rng(seed)
    close = 40.0 * np.exp(np.cumsum(rng.normal(0.0004, 0.02, (days, stocks)), axis=0))
    spread = np.abs(rng.normal(0, 0.01, (days, stocks))) * close
    open_ = close * np.exp(rng.normal(0, 0.005, (days, stocks)))
    volume = rng.integers(10_000, 1_000_000, (days, stocks)).astype(np.float64)
    dates = np.arange(np.datetime64("2020-01-01"), np.datetime64("2020-01-01") + days)
    return DailyMatrix(dates=dates, symbols=[f"S{i}" for i in range(stocks)], open=open_,
                       high=np.maximum(open_, close) + spread,
                       low=np.minimum(open_, close) - spread, close=close, volume=volume)


def fold_window(m: DailyMatrix, f: wfm.Fold) -> GPWindow:
    """What `evolve` builds for the fold's days: the panel starts with its training days."""
    sl = slice(f.train0, f.test1)
    part = DailyMatrix(dates=m.dates[sl], symbols=m.symbols,
                       **{k: getattr(m, k)[sl] for k in ("open", "high", "low", "close",
                                                         "volume")})
    return window_from_matrix(part, f.train1 - f.train0, f.test1 - f.test0)


def history(m: DailyMatrix, commission: float = 1.0, bps: float = 0.0) -> wfm.History:
    return wfm.History.of(m, cost_tuple(commission, bps))


@pytest.fixture(scope="module")
def window() -> DailyMatrix:
    return market()


# --------------------------------------------------------------------------- fold boundaries
def brute_force_folds(n: int, train: int, test: int, step: int, anchored: bool
                      ) -> list[tuple[int, int, int, int]]:
    """Every (train0, train1, test0, test1) by trying every fold start in order."""
    out = []
    for k in range(n):
        end = train + k * step
        if end + test > n:
            break
        out.append((0 if anchored else k * step, end, end, end + test))
    return out


@settings(max_examples=200, deadline=None)
@given(n=st.integers(2, 400), train=st.integers(2, 120), test=st.integers(2, 60),
       step=st.integers(1, 70), anchored=st.booleans())
def test_folds_match_brute_force(n: int, train: int, test: int, step: int,
                                 anchored: bool) -> None:
    plan = wfm.WalkForwardPlan(train, test, step, anchored)
    want = brute_force_folds(n, train, test, step, anchored)
    if not want:
        with pytest.raises(ValueError, match="needed for one fold"):
            plan.folds(n)
        return
    got = [(f.train0, f.train1, f.test0, f.test1) for f in plan.folds(n)]
    assert got == want
    for f in plan.folds(n):
        assert f.train1 - f.train0 == (f.train1 if anchored else train)
        assert f.test0 == f.train1 and f.test1 <= n   # test follows training, inside data


def test_plan_parsing_step_defaults_to_test_and_anchored_grows() -> None:
    assert wfm.WalkForwardPlan.parse("768,63") == wfm.WalkForwardPlan(768, 63, 63)
    assert wfm.WalkForwardPlan.parse(" 100, 20 ,5", anchored=True) == wfm.WalkForwardPlan(
        100, 20, 5, True)
    rolling = wfm.WalkForwardPlan(50, 10, 10).folds(100)
    anchored = wfm.WalkForwardPlan(50, 10, 10, True).folds(100)
    assert [(f.train0, f.test1) for f in rolling] == [(0, 60), (10, 70), (20, 80), (30, 90),
                                                       (40, 100)]
    assert [(f.train0, f.train1) for f in anchored] == [(0, 50), (0, 60), (0, 70), (0, 80),
                                                        (0, 90)]


@pytest.mark.parametrize("bad", ["0,5", "10", "a,b", "10,5,0", "10,1", "5,5,5,5", "", "1.5,3"])
def test_bad_plans_are_one_line_errors(bad: str) -> None:
    with pytest.raises(ValueError) as e:
        wfm.WalkForwardPlan.parse(bad)
    assert "\n" not in str(e.value) and "--walk-forward" in str(e.value)


# --------------------------------------------------------------------------- folds
@pytest.fixture(scope="module")
def serial(window: DailyMatrix) -> list[wfm.FoldOutcome]:
    return wfm.run_folds(history(window), CONFIG, PLAN.folds(window.n_days), 2, "cpu")


def test_each_fold_trades_its_choice_out_of_sample_by_the_rules(
        window: DailyMatrix, serial: list[wfm.FoldOutcome]) -> None:
    """The test ROI of each fold, recomputed with a plain loop: trees walked by the
    reference evaluator, voted, money by the broker's rules; buy-and-hold the same."""
    assert [o.fold.index for o in serial] == [0, 1, 2, 3]
    for o in serial:
        f = o.fold
        assert o.seed == CONFIG.seed + f.index
        assert len(o.chosen) == 2 and o.chosen == [c.rule for c in o.hall_of_fame[:2]]
        fw = fold_window(window, f)
        roi, roi_bh = plain_period(o.chosen, fw, fw.test.day0, fw.test.day1)
        assert o.test.roi == pytest.approx(roi, abs=1e-12)
        assert o.test.roi_buy_hold == pytest.approx(roi_bh, abs=1e-12)
        assert o.test.returns.shape == (f.test1 - f.test0,)


def test_a_fold_is_evolve_over_its_days_with_its_seed(window: DailyMatrix,
                                                     serial: list[wfm.FoldOutcome]) -> None:
    """Fold k is `evolve` over the window of its training and test days (indicators from
    its first training day) with seed + k: the same hall of fame, the same test money."""
    for o in serial[:2]:
        fw = fold_window(window, o.fold)
        ev = PopulationEvaluator(fw.panel, fw.close, fw.train.day0, fw.train.day1, "cpu")
        result = evolve(ev, msgspec.structs.replace(CONFIG, seed=o.seed))
        assert [(str(c.rule), c.fitness) for c in result.hall_of_fame] == \
            [(str(c.rule), c.fitness) for c in o.hall_of_fame]
        cash = simulate_money(o.chosen, fw.panel, fw.close, fw.test.day0, fw.test.day1)
        assert np.array_equal(cash, o.test.cash)


def plain_period(rules: list, w: GPWindow, d0: int, d1: int) -> tuple[float, float]:
    """Mean ROI of the majority vote of `rules` and of buy-and-hold, $1 a trade."""
    rois, bh = [], []
    for s in range(w.close.shape[1]):
        cash, shares, long_ = 10_000.0, 0.0, False
        for d in range(d0, d1):
            values = [float(v) for v in w.panel[d, :, s]]
            buys = sum(eval_tree(r.buy, values) for r in rules)
            sells = sum(eval_tree(r.sell, values) for r in rules)
            buy, sell = 2 * buys > len(rules), 2 * sells > len(rules)
            price = float(w.close[d, s])
            if buy and not sell and not long_:
                long_ = True
                n = math.floor((cash - 1.0) / price)
                if n >= 1:
                    cash, shares = cash - (n * price + 1.0), n
            elif sell and not buy and long_:
                long_ = False
                if shares:
                    cash, shares = cash + (shares * price - 1.0), 0.0
        if shares:
            cash += shares * float(w.close[d1 - 1, s]) - 1.0
        rois.append(cash / 10_000 - 1)
        first, last = float(w.close[d0, s]), float(w.close[d1 - 1, s])
        n = math.floor(9_999.0 / first)
        bh.append((10_000 - (n * first + 1) + (n * last - 1)) / 10_000 - 1)
    return float(np.mean(rois)), float(np.mean(bh))


def test_no_look_ahead_prices_after_a_fold_change_nothing_in_it(
        serial: list[wfm.FoldOutcome]) -> None:
    """Prices after fold 1's test window are replaced by another random walk: the indicator
    panel is recomputed over the whole history, and folds 0 and 1 come out identical, while
    the later folds (which see the new prices) differ."""
    m = market()
    cut = PLAN.folds(m.n_days)[1].test1
    other = market(seed=99)
    changed = DailyMatrix(
        dates=m.dates, symbols=m.symbols,
        **{k: np.concatenate([getattr(m, k)[:cut], getattr(other, k)[cut:] * 1.7])
           for k in ("open", "high", "low", "close", "volume")})
    assert not np.array_equal(changed.close[cut:], m.close[cut:])
    again = wfm.run_folds(history(changed), CONFIG, PLAN.folds(m.n_days), 2, "cpu")
    for a, b in zip(serial[:2], again[:2], strict=True):
        assert_same_fold(a, b)
    assert any(not np.array_equal(a.test.returns, b.test.returns)
               for a, b in zip(serial[2:], again[2:], strict=True))


def assert_same_fold(a: wfm.FoldOutcome, b: wfm.FoldOutcome) -> None:
    assert a.fold == b.fold and a.seed == b.seed
    assert [(str(c.rule), c.fitness, c.generation) for c in a.hall_of_fame] == \
        [(str(c.rule), c.fitness, c.generation) for c in b.hall_of_fame]
    assert np.array_equal(a.test.cash, b.test.cash)
    assert np.array_equal(a.test.returns, b.test.returns)
    assert np.array_equal(a.test.buy_hold_returns, b.test.buy_hold_returns)
    assert np.array_equal(a.train.cash, b.train.cash)


def test_same_seed_same_folds_other_seed_other_folds(
        window: DailyMatrix, serial: list[wfm.FoldOutcome]) -> None:
    again = wfm.run_folds(history(window), CONFIG, PLAN.folds(window.n_days), 2, "cpu")
    for a, b in zip(serial, again, strict=True):
        assert_same_fold(a, b)
    other = wfm.run_folds(history(window), EvolutionConfig(
        population=30, generations=3, seed=12, elite=2, hall_of_fame=4),
        PLAN.folds(window.n_days)[:1], 2, "cpu")
    assert other[0].seed == 12
    assert [str(c.rule) for c in other[0].hall_of_fame] != \
        [str(c.rule) for c in serial[0].hall_of_fame]


def test_stitched_roi_compounds_exactly(window: DailyMatrix,
                                        serial: list[wfm.FoldOutcome]) -> None:
    dates = [str(d) for d in window.dates]
    wf = wfm.stitch(PLAN, history(window), serial, dates, 2, 1.0, 0.0)
    rois = [r["test_roi"] for r in wf.fold_rows()]
    prod = 1.0
    for r in rois:
        prod *= 1.0 + r
    assert wf.oos_roi == prod - 1.0
    assert wf.oos_roi_buy_hold == math.prod(1.0 + r["test_roi_buy_hold"]
                                            for r in wf.fold_rows()) - 1.0
    # the daily curve ends where the folds compound to (portfolio sums vs means of ROIs)
    curves = wf.curves()
    assert curves["strategy"][-1] == pytest.approx(1.0 + wf.oos_roi, rel=1e-12)
    assert curves["buy_hold"][-1] == pytest.approx(1.0 + wf.oos_roi_buy_hold, rel=1e-12)
    assert len(curves["strategy"]) == sum(o.fold.test1 - o.fold.test0 for o in serial)
    # the first fold's rule held: on fold 0 it is the fold's own rule
    assert wf.static[0].roi == serial[0].test.roi
    stats = wf.stats()
    assert stats.trials == len(serial) * CONFIG.population * CONFIG.generations
    assert stats.total_return == pytest.approx(wf.oos_roi, rel=1e-12)


def test_costs_lower_every_fold_and_buy_and_hold_pays_them(window: DailyMatrix) -> None:
    fold = PLAN.folds(window.n_days)[:1]
    cheap = wfm.run_folds(history(window, 0.0, 0.0), CONFIG, fold, 1, "cpu")[0]
    dear = wfm.run_folds(history(window, 5.0, 20.0), CONFIG, fold, 1, "cpu")[0]
    assert dear.test.roi_buy_hold < cheap.test.roi_buy_hold
    # the same rule under both cost models: costs only take money away
    again = wfm.trade_static(history(window, 5.0, 20.0), cheap.chosen, fold[0])
    assert again.roi <= cheap.test.roi
    assert again.roi < cheap.test.roi or cheap.test.fills == 0


def test_a_dask_cluster_gives_the_serial_folds(window: DailyMatrix,
                                               serial: list[wfm.FoldOutcome]) -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        seen: list[int] = []
        on_dask = wfm.run_folds(history(window), CONFIG, PLAN.folds(window.n_days), 2,
                                "cpu", client, lambda o, done, n, t: seen.append(done))
    assert seen == [1, 2, 3, 4]
    for a, b in zip(serial, on_dask, strict=True):
        assert_same_fold(a, b)
