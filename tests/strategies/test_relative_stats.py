"""Statistics against a benchmark, checked with scipy and the deflated-Sharpe paper's example."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from strategies.relative_stats import (
    bootstrap_mean_interval,
    deflated_sharpe_ratio,
    relative_stats,
    summary_lines,
)


def _pair(seed: int, n: int = 500, beta: float = 0.8, alpha: float = 2e-4,
          noise: float = 0.004) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    b = rng.normal(3e-4, 0.01, n)
    r = alpha + beta * b + rng.normal(0.0, noise, n)
    return r, b


@pytest.mark.parametrize("seed", range(5))
def test_regression_figures_match_scipy(seed: int) -> None:
    r, b = _pair(seed)
    s = relative_stats(r, b, bootstrap_samples=200)
    reg = sps.linregress(b, r)
    assert s.beta == pytest.approx(reg.slope, rel=1e-12)
    assert s.alpha_annual == pytest.approx(reg.intercept * 252, rel=1e-10)
    assert s.correlation == pytest.approx(sps.pearsonr(r, b)[0], rel=1e-12)
    assert s.total_return == pytest.approx(np.prod(1 + r) - 1, rel=1e-12)
    assert s.excess_return == pytest.approx((np.prod(1 + r) - 1) - (np.prod(1 + b) - 1), rel=1e-12)
    d = r - b
    assert s.information_ratio == pytest.approx(d.mean() / d.std(ddof=1) * math.sqrt(252))
    assert s.sharpe == pytest.approx(r.mean() / r.std(ddof=1) * math.sqrt(252))


def test_deflated_sharpe_reproduces_the_papers_example() -> None:
    # Bailey & Lopez de Prado (2014), numerical example: 100 trials, annualised SR 2.5 and
    # trial variance 0.5 over 1,250 daily observations (250 a year), skew -3, kurtosis 10:
    # expected maximum SR 0.1132 per day and DSR 0.9004.
    per_year = 250
    dsr = deflated_sharpe_ratio(2.5 / math.sqrt(per_year), 1250, -3.0, 10.0, 100, 0.5 / per_year)
    assert dsr == pytest.approx(0.9004, abs=1e-4)


def test_one_trial_is_the_probabilistic_sharpe_ratio() -> None:
    # PSR against zero for normal returns: Phi(SR sqrt(T-1) / sqrt(1 + SR^2/2))
    sr, t = 0.05, 400
    expected = sps.norm.cdf(sr * math.sqrt(t - 1) / math.sqrt(1 + sr * sr / 2))
    assert deflated_sharpe_ratio(sr, t, 0.0, 3.0, 1, 0.0) == pytest.approx(expected, rel=1e-12)


def test_more_trials_deflate_more() -> None:
    r, b = _pair(3)
    maybe = [relative_stats(r, b, trials=k, bootstrap_samples=50).deflated_sharpe
             for k in (1, 10, 1000, 1_000_000)]
    values = [v for v in maybe if v is not None]
    assert len(values) == len(maybe)
    assert values == sorted(values, reverse=True)
    assert values[0] > values[-1]


def test_bootstrap_interval_agrees_with_scipy_and_is_seeded() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(1e-4, 0.01, 800)
    lo, hi = bootstrap_mean_interval(x, 4000, seed=1)
    ref = sps.bootstrap((x,), np.mean, n_resamples=4000, method="percentile",
                        random_state=np.random.default_rng(2)).confidence_interval
    width = ref.high - ref.low
    assert abs(lo - ref.low) < 0.1 * width and abs(hi - ref.high) < 0.1 * width
    assert bootstrap_mean_interval(x, 4000, seed=1) == (lo, hi)
    assert bootstrap_mean_interval(x, 4000, seed=2) != (lo, hi)


def test_verdict_says_when_the_interval_contains_zero() -> None:
    r, b = _pair(11, alpha=0.0, beta=1.0, noise=0.001)
    s = relative_stats(r, b, bootstrap_samples=500)
    assert s.ci_contains_zero()
    assert "contains zero" in s.verdict() and "no evidence of an edge" in s.verdict()
    assert "moves with buy-and-hold" in s.verdict()
    winner = relative_stats(b + 0.002, b, bootstrap_samples=500)
    assert not winner.ci_contains_zero() and "lies above zero" in winner.verdict()
    loser = relative_stats(b - 0.002, b, bootstrap_samples=500)
    assert "lies below zero" in loser.verdict()
    assert summary_lines(s)[-1].strip() == s.verdict()
    assert s.as_dict()["ci_contains_zero"] is True


def test_degenerate_inputs() -> None:
    flat = relative_stats(np.zeros(30), np.zeros(30), bootstrap_samples=20)
    assert flat.beta is None and flat.correlation is None and flat.sharpe is None
    one = relative_stats([0.01], [0.02], bootstrap_samples=20)
    assert one.days == 1 and "Too few days" in one.verdict()
    # a short sample (two days of a quick replay) gives no beta, ratio or verdict
    short = relative_stats([0.01, 0.02, -0.01], [0.0, 0.01, 0.02], bootstrap_samples=20)
    assert short.beta is None and short.sharpe is None and short.deflated_sharpe is None
    assert "Too few days (3)" in short.verdict() and "lies above" not in short.verdict()
    with pytest.raises(ValueError, match="differ in length"):
        relative_stats([0.1, 0.2], [0.1])
    with pytest.raises(ValueError, match="finite"):
        relative_stats([0.1, math.nan], [0.1, 0.2])
    with pytest.raises(ValueError, match="trials"):
        relative_stats([0.1, 0.2], [0.1, 0.2], trials=0)
