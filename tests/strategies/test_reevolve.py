"""Re-evolution's parts: a job evolves exactly what a walk-forward fold evolves (it reads
only the training days), through a real spawned worker process too; a budget spent stops
it with no rule; a missing data file is the worker's error, not a hang; the swappable GP
strategy swaps rules keeping or clearing its signals; the [reevolve] settings refuse bad
values in one line."""

from __future__ import annotations

import asyncio

import msgspec
import numpy as np
import pytest

from engine.settings.reevolve import ReevolveSettings, at_seconds
from strategies.gp import walk_forward as wfm
from strategies.gp.evolution import EvolutionConfig
from strategies.gp.reevolve import (
    AsOfJob,
    BudgetExceeded,
    EvolveJob,
    Reevolver,
    RuleText,
    RuleVersion,
    evolve_job,
)
from strategies.gp.representation import GPRule
from strategies.gp.strategy import SwappableGP
from tests.strategies.test_gp_walk_forward import market

CONFIG = EvolutionConfig(population=30, generations=3, seed=11, elite=2, hall_of_fame=4)


def test_a_job_is_the_walk_forward_fold_and_reads_only_its_training_days() -> None:
    m = market()
    fold = wfm.WalkForwardPlan(60, 20, 20).folds(m.n_days)[1]
    want = wfm.run_fold(wfm.History.of(m), CONFIG, fold, 1, "cpu")
    job = EvolveJob.of_days(m, fold.train0, fold.train1,
                            config=msgspec.structs.replace(CONFIG, seed=want.seed))
    got = evolve_job(job)
    assert [RuleText(r.buy_infix, r.sell_infix) for r in want.chosen] == got.rules
    assert got.fitness == want.hall_of_fame[0].fitness
    assert (got.train_start, got.train_end) == (str(m.dates[fold.train0])[:10],
                                                str(m.dates[fold.train1 - 1])[:10])
    assert job.close.shape[0] == fold.train1 - fold.train0  # nothing after training
    # the same job in the spawned worker process gives the same version
    with Reevolver() as rv:
        again = rv.submit(job).result(timeout=120)
        assert msgspec.structs.replace(again, seconds=0.0) == msgspec.structs.replace(
            got, seconds=0.0)
        # a failure in the worker comes back as the future's exception
        missing = AsOfJob(data="/nonexistent/daily.csv", symbols=["A"], as_of="2017-01-03",
                          train_days=10, config=CONFIG)
        with pytest.raises(Exception, match="nonexistent"):
            rv.submit(missing).result(timeout=120)


def test_a_spent_budget_gives_no_rule() -> None:
    m = market()
    job = EvolveJob.of_days(m, 0, 60, config=msgspec.structs.replace(CONFIG, generations=5),
                            budget_seconds=1e-9)
    with pytest.raises(BudgetExceeded, match="budget"):
        evolve_job(job)


def test_swap_keeps_or_clears_signals_and_no_rule_holds_them() -> None:
    up = GPRule.from_infix("(close > sma5)", "(close < sma5)")
    always_buy = GPRule.from_infix("((close > sma5) OR NOT (close > sma5))",
                                   "((close > sma5) AND NOT (close > sma5))")
    s = SwappableGP([], device="cpu")
    s.reset(["A", "B"])
    features = np.zeros((2, 31), np.float32)
    closed = np.ones(2, np.bool_)
    assert asyncio.run(s.target_signals(features, closed)).tolist() == [0, 0]
    s.swap([always_buy])
    assert asyncio.run(s.target_signals(features, closed)).tolist() == [1, 1]
    s.swap([up])  # positions carry over: NaN features decide nothing, signals stay
    nan = np.full((2, 31), np.nan, np.float32)
    assert asyncio.run(s.target_signals(nan, closed)).tolist() == [1, 1]
    s.swap([up], flat=True)  # a walk-forward fold starts flat
    assert asyncio.run(s.target_signals(nan, closed)).tolist() == [0, 0]
    with pytest.raises(ValueError, match="at least one rule"):
        s.swap([])


def test_rule_versions_round_trip_and_settings_refuse_bad_values() -> None:
    v = RuleVersion(version=2, rules=[RuleText("(close > sma5)", "(close < sma5)")],
                    train_start="2017-01-03", train_end="2017-06-30", seed=3, fitness=0.1)
    assert msgspec.convert(v.as_dict(), RuleVersion) == v
    assert v.gp_rules() == [GPRule.from_infix("(close > sma5)", "(close < sma5)")]
    assert at_seconds("16:30") == 16 * 3600 + 30 * 60
    for bad in ({"at": "16h30"}, {"at": "24:00"}, {"train_days": 1}, {"gpu_seconds": -1},
                {"device": "gpu"}, {"ensemble": 0}):
        with pytest.raises((ValueError, msgspec.ValidationError)):
            ReevolveSettings(**bad)
    assert not ReevolveSettings().enabled and ReevolveSettings(at="16:30").enabled
