"""The hall of fame keeps distinct behaviours: rules whose daily returns over the training
days are identical (the same trades under different trees) count once, the fitter or
earlier one staying; an evolution's and a merged islands' hall hold no two such rules.
Daily returns are recomputed here with a plain loop over the reference evaluator's trees."""

from __future__ import annotations

import math

import numpy as np
import pytest

from feeds.daily import DailyMatrix
from gpu.gp import evaluate as gp_eval
from strategies.gp.evolution import (
    Champion,
    EvolutionConfig,
    HallOfFame,
    evolve,
    population_behaviours,
)
from strategies.gp.islands import merge_halls
from strategies.gp.reference import eval_tree
from strategies.gp.representation import GPRule, Population
from strategies.gp.window import GPWindow, window_from_matrix

A_BUY, A_SELL = "(sma5 > sma25)", "(sma5 < sma25)"
# the same decisions as rule A under other trees: clones in behaviour, not in genotype
CLONES = [
    (A_BUY, A_SELL),
    (f"({A_BUY} AND {A_BUY})", A_SELL),
    (f"NOT NOT {A_BUY}", A_SELL),
    (A_BUY, f"({A_SELL} OR {A_SELL})"),
    ("(sma25 < sma5)", "(sma25 > sma5)"),
]
OTHERS = [("(ema5 > ema20)", "(ema5 < ema20)"), ("macd_above_signal", "macd_below_signal"),
          ("(close > sma50)", "(close < sma50)"), ("cci_below_minus_100", "cci_above_100"),
          ("(sma10 > sma100)", "(sma10 < sma100)")]


@pytest.fixture(scope="module")
def window() -> GPWindow:
    rng = np.random.default_rng(3)
    days, stocks = 160, 3
    close = 30.0 * np.exp(np.cumsum(rng.normal(0.0, 0.02, (days, stocks)), axis=0))
    dates = np.arange(np.datetime64("2021-01-01"), np.datetime64("2021-01-01") + days)
    m = DailyMatrix(dates=dates, symbols=["A", "B", "C"], open=close, high=close * 1.01,
                    low=close * 0.99, close=close,
                    volume=rng.integers(1_000, 100_000, (days, stocks)).astype(np.float64))
    return window_from_matrix(m, days, 0)


def plain_daily_returns(rule: GPRule, w: GPWindow) -> list[float]:
    """Portfolio returns after each day's trade at the close, $1 a trade, $10,000 a stock."""
    n_days, n_stocks = w.close.shape
    values = [0.0] * n_days
    for s in range(n_stocks):
        cash, shares, long_ = 10_000.0, 0.0, False
        for d in range(n_days):
            v = [float(x) for x in w.panel[d, :, s]]
            buy, sell = eval_tree(rule.buy, v), eval_tree(rule.sell, v)
            price = float(w.close[d, s])
            if buy and not sell and not long_:
                long_ = True
                n = math.floor((cash - 1.0) / price)
                if n >= 1:
                    cash, shares = cash - (n * price + 1.0), float(n)
            elif sell and not buy and long_:
                long_ = False
                if shares:
                    cash, shares = cash + (shares * price - 1.0), 0.0
            if d == n_days - 1 and shares:
                cash, shares = cash + (shares * price - 1.0), 0.0
            values[d] += cash + shares * price
    start = n_stocks * 10_000.0
    prev = [start, *values[:-1]]
    return [v / p - 1.0 for v, p in zip(values, prev, strict=True)]


def distinct_behaviours(rules: list[GPRule], w: GPWindow) -> int:
    return len({tuple(plain_daily_returns(r, w)) for r in rules})


def offered(w: GPWindow, pairs: list[tuple[str, str]]
            ) -> tuple[Population, np.ndarray, gp_eval.PopulationEvaluator]:
    pop = Population.from_rules([GPRule.from_infix(b, s) for b, s in pairs])
    ev = gp_eval.PopulationEvaluator(w.panel, w.close, 0, w.close.shape[0], "cpu")
    return pop, ev.population_fitness(*pop.compile()), ev


def test_clones_in_behaviour_count_once_and_the_first_stays(window: GPWindow) -> None:
    pairs = CLONES + OTHERS
    pop, fitness, ev = offered(window, pairs)
    clone_returns = {tuple(plain_daily_returns(GPRule.from_infix(*p), window)) for p in CLONES}
    assert len(clone_returns) == 1  # the construction: five spellings of one behaviour
    assert len({float(fitness[i]) for i in range(len(CLONES))}) == 1
    hall = HallOfFame(8)
    hall.update(pop, fitness, 0, population_behaviours(ev))
    rules = [c.rule for c in hall.members]
    returns = [tuple(plain_daily_returns(r, window)) for r in rules]
    assert len(set(returns)) == len(returns)  # no two members with identical daily returns
    assert len(rules) == distinct_behaviours([GPRule.from_infix(*p) for p in pairs], window)
    # of the clones, the first offered (equal fitness: earlier in the population) stayed
    kept = [r for r in rules if tuple(plain_daily_returns(r, window)) in clone_returns]
    assert kept == [GPRule.from_infix(*CLONES[0])]
    # without fingerprints the same offer fills the hall with the clones: the test can fail
    blind = HallOfFame(8)
    blind.update(pop, fitness, 0)
    blind_returns = [tuple(plain_daily_returns(c.rule, window)) for c in blind.members]
    assert len(set(blind_returns)) < len(blind_returns)


def test_a_fitter_twin_replaces_the_member_and_later_clones_stay_out(window: GPWindow) -> None:
    pop, fitness, ev = offered(window, CLONES[:2])
    hall = HallOfFame(3)
    first = fitness.copy()
    first[1] = -np.inf  # generation 0: only the first spelling is fit
    hall.update(pop, first, 0, population_behaviours(ev))
    assert [c.rule for c in hall.members] == [GPRule.from_infix(*CLONES[0])]
    later = fitness.copy()
    later[1] += 1.0  # the same trades with a higher fitness (as if scored anew): it wins
    hall.update(pop.take([1, 0]), later[[1, 0]], 1, population_behaviours(ev))
    assert [c.rule for c in hall.members] == [GPRule.from_infix(*CLONES[1])]
    assert hall.members[0].generation == 1


def test_an_evolved_hall_of_fame_holds_distinct_daily_returns(window: GPWindow) -> None:
    ev = gp_eval.PopulationEvaluator(window.panel, window.close, 0, window.close.shape[0], "cpu")
    result = evolve(ev, EvolutionConfig(population=60, generations=6, seed=2, elite=2,
                                        hall_of_fame=6, tournament=9))
    rules = [c.rule for c in result.hall_of_fame]
    returns = [tuple(plain_daily_returns(r, window)) for r in rules]
    assert len(set(returns)) == len(returns)
    assert all(c.behaviour is not None for c in result.hall_of_fame)
    assert len({c.behaviour for c in result.hall_of_fame}) == len(rules)


def test_merged_island_halls_keep_one_of_each_behaviour(window: GPWindow) -> None:
    pop, fitness, ev = offered(window, CLONES + OTHERS[:2])
    marks = ev.behaviours(*pop.compile())
    champions = [Champion(pop.rule(i), float(fitness[i]), 0, int(marks[i]))
                 for i in range(len(pop))]
    # island 0 has the first two clones, island 1 the other three and two distinct rules
    merged = merge_halls([champions[:2], champions[2:]], 10)
    assert [c.rule for c in merged].count(champions[0].rule) == 1
    assert len(merged) == 3
    assert len({c.behaviour for c in merged}) == 3
