"""A strategy's daily returns against a benchmark's: does the rule have an edge out of sample?

Every research output (evolve, walk-forward, the replay report) answers the same question
with the same numbers, so they live here, in plain numpy and the standard library:

- totals: compounded return of the strategy and of the benchmark (buy-and-hold of the same
  stocks with the same costs), and their difference, the excess return;
- regression of the strategy's daily returns on the benchmark's: beta (cov/var, ddof 1),
  annualised alpha ((mean r - beta mean b) x periods a year) and the correlation;
- the information ratio: mean daily excess over its standard deviation (ddof 1), annualised
  by sqrt(periods a year);
- a seeded bootstrap 95% interval of the mean daily excess return: days resampled with
  replacement (i.i.d.; daily strategy returns are close to uncorrelated, and the interval
  is a statement about the mean, not about paths), percentile interval;
- the deflated Sharpe ratio of Bailey and Lopez de Prado (2014): the probability that the
  strategy's true Sharpe ratio is above the best one expected from `trials` unskilled rules,
  given the sample's skewness and kurtosis. The spread of the trials' Sharpe ratios is
  `trial_sharpe_variance` (per-period units) when the caller knows it; otherwise the
  sampling variance of a Sharpe estimate under the null, 1/(T-1), which makes the deflation
  a lower bound on the haircut. With one trial it is the probabilistic Sharpe ratio
  against zero.

Sharpe ratios assume a zero risk-free rate, as the replay report does. With fewer than
`MIN_DAYS` daily returns the regression figures, the ratios and the deflated Sharpe are not
given (None) and the verdict says the sample is too short, as the replay report does for its
own ratios: two or three days make any beta or interval look decisive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

EULER_GAMMA = 0.5772156649015329
MIN_DAYS = 20  # daily returns needed before a regression, ratio or verdict means anything
_NORMAL = NormalDist()


@dataclass(frozen=True)
class RelativeStats:
    """A strategy's daily simple returns against a benchmark's (usually buy-and-hold)."""

    days: int
    total_return: float
    total_return_benchmark: float
    excess_return: float
    beta: float | None
    alpha_annual: float | None
    correlation: float | None
    information_ratio: float | None
    mean_daily_excess: float
    excess_ci95: tuple[float, float]
    sharpe: float | None
    deflated_sharpe: float | None
    trials: int

    def ci_contains_zero(self) -> bool:
        lo, hi = self.excess_ci95
        return bool(lo <= 0.0 <= hi)

    def as_dict(self) -> dict[str, Any]:
        return {
            "days": self.days,
            "total_return": self.total_return,
            "total_return_benchmark": self.total_return_benchmark,
            "excess_return": self.excess_return,
            "beta": self.beta,
            "alpha_annual": self.alpha_annual,
            "correlation": self.correlation,
            "information_ratio": self.information_ratio,
            "mean_daily_excess": self.mean_daily_excess,
            "excess_ci95": [self.excess_ci95[0], self.excess_ci95[1]],
            "ci_contains_zero": self.ci_contains_zero(),
            "sharpe": self.sharpe,
            "deflated_sharpe": self.deflated_sharpe,
            "trials": self.trials,
            "verdict": self.verdict(),
        }

    def verdict(self) -> str:
        """One sentence a researcher can act on."""
        if self.days < MIN_DAYS:
            return (f"Too few days ({self.days}) to judge an edge over buy-and-hold: at least "
                    f"{MIN_DAYS} daily returns are needed.")
        lo, hi = self.excess_ci95
        interval = f"[{lo * 1e4:+.2f}, {hi * 1e4:+.2f}] bp"
        if lo <= 0.0 <= hi:
            text = (f"The 95% interval of the mean daily excess return over buy-and-hold, "
                    f"{interval}, contains zero: no evidence of an edge over buy-and-hold")
        elif hi < 0.0:
            text = (f"The 95% interval of the mean daily excess return over buy-and-hold, "
                    f"{interval}, lies below zero: the rule does worse than buy-and-hold")
        else:
            text = (f"The 95% interval of the mean daily excess return over buy-and-hold, "
                    f"{interval}, lies above zero")
            if self.deflated_sharpe is not None:
                text += (f"; deflated Sharpe ratio {self.deflated_sharpe:.2f} for "
                         f"{_rules(self.trials)} tried")
        if (self.correlation is not None and self.beta is not None
                and self.correlation > 0.95 and abs(self.beta - 1.0) < 0.1):
            text += (f"; it moves with buy-and-hold (correlation {self.correlation:.3f}, "
                     f"beta {self.beta:.2f})")
        return text + "."


def deflated_sharpe_ratio(sharpe: float, observations: int, skewness: float, kurtosis: float,
                          trials: int, trial_sharpe_variance: float) -> float:
    """Bailey & Lopez de Prado's deflated Sharpe ratio, all Sharpe figures per period.

    `kurtosis` is the plain (not excess) kurtosis: 3 for normal returns.
    """
    if observations < 2:
        raise ValueError("the deflated Sharpe ratio needs at least 2 observations")
    if trials < 1:
        raise ValueError("trials must be at least 1")
    if trials == 1:
        sr0 = 0.0
    else:
        expected_max_z = ((1.0 - EULER_GAMMA) * _NORMAL.inv_cdf(1.0 - 1.0 / trials)
                          + EULER_GAMMA * _NORMAL.inv_cdf(1.0 - 1.0 / (trials * math.e)))
        sr0 = math.sqrt(max(trial_sharpe_variance, 0.0)) * expected_max_z
    denominator = 1.0 - skewness * sharpe + (kurtosis - 1.0) / 4.0 * sharpe * sharpe
    if denominator <= 0.0:
        # The moments make the estimator's variance formula meaningless (extreme skew):
        # say nothing rather than a number.
        return math.nan
    z = (sharpe - sr0) * math.sqrt(observations - 1) / math.sqrt(denominator)
    return _NORMAL.cdf(z)


def _moments(r: npt.NDArray[np.float64]) -> tuple[float, float]:
    """Sample skewness and plain kurtosis (population moments, as the paper uses)."""
    d = r - r.mean()
    m2 = float(np.mean(d * d))
    if m2 == 0.0:
        return 0.0, 3.0
    return float(np.mean(d ** 3)) / m2 ** 1.5, float(np.mean(d ** 4)) / m2 ** 2


def bootstrap_mean_interval(values: npt.NDArray[np.float64], samples: int, seed: int,
                            level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean (days resampled with replacement)."""
    n = len(values)
    if n == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = np.empty(samples)
    # chunks keep the index matrix small for long histories
    chunk = max(1, 2_000_000 // n)
    for start in range(0, samples, chunk):
        stop = min(samples, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = values[idx].mean(axis=1)
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [tail, 1.0 - tail])
    return (float(lo), float(hi))


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0.0 and math.isfinite(num / den) else None


def relative_stats(returns: npt.ArrayLike, benchmark: npt.ArrayLike, *, trials: int = 1,
                   trial_sharpe_variance: float | None = None, periods_per_year: int = 252,
                   bootstrap_samples: int = 2000, seed: int = 0) -> RelativeStats:
    """Statistics of daily simple `returns` against `benchmark`'s over the same days."""
    r = np.asarray(returns, np.float64).ravel()
    b = np.asarray(benchmark, np.float64).ravel()
    if r.shape != b.shape:
        raise ValueError(f"returns ({len(r)} days) and benchmark ({len(b)} days) differ in length")
    if not (np.isfinite(r).all() and np.isfinite(b).all()):
        raise ValueError("returns and benchmark must be finite")
    if trials < 1:
        raise ValueError("trials must be at least 1")
    n = len(r)
    total = float(np.prod(1.0 + r) - 1.0)
    total_b = float(np.prod(1.0 + b) - 1.0)
    excess = r - b
    mean_excess = float(excess.mean()) if n else math.nan
    beta = alpha = corr = info = sharpe = dsr = None
    if n >= MIN_DAYS:
        var_b = float(np.var(b, ddof=1))
        sd_r = float(np.std(r, ddof=1))
        cov = float(np.cov(r, b, ddof=1)[0, 1])
        beta = _ratio(cov, var_b)
        if beta is not None:
            alpha = (float(r.mean()) - beta * float(b.mean())) * periods_per_year
        corr = _ratio(cov, math.sqrt(var_b) * sd_r) if var_b > 0 else None
        info_daily = _ratio(mean_excess, float(np.std(excess, ddof=1)))
        info = info_daily * math.sqrt(periods_per_year) if info_daily is not None else None
        sr = _ratio(float(r.mean()), sd_r)
        if sr is not None:
            sharpe = sr * math.sqrt(periods_per_year)
            skew, kurt = _moments(r)
            variance = (trial_sharpe_variance if trial_sharpe_variance is not None
                        else 1.0 / (n - 1))
            value = deflated_sharpe_ratio(sr, n, skew, kurt, trials, variance)
            dsr = value if math.isfinite(value) else None
    ci = bootstrap_mean_interval(excess, bootstrap_samples, seed)
    return RelativeStats(
        days=n, total_return=total, total_return_benchmark=total_b,
        excess_return=total - total_b, beta=beta, alpha_annual=alpha, correlation=corr,
        information_ratio=info, mean_daily_excess=mean_excess, excess_ci95=ci,
        sharpe=sharpe, deflated_sharpe=dsr, trials=trials)


def _rules(trials: int) -> str:
    return "1 rule" if trials == 1 else f"{trials:,} rules"


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def summary_lines(stats: RelativeStats) -> list[str]:
    """Short human lines for a command's summary (the verdict last)."""
    lo, hi = stats.excess_ci95
    return [
        f"vs buy-and-hold over {stats.days} days: return {stats.total_return:+.2%} against "
        f"{stats.total_return_benchmark:+.2%}, excess {stats.excess_return:+.2%}",
        f"  beta {_fmt(stats.beta, '.3f')}, alpha {_fmt(stats.alpha_annual, '+.2%')}/yr, "
        f"correlation {_fmt(stats.correlation, '.3f')}, information ratio "
        f"{_fmt(stats.information_ratio, '+.2f')}",
        f"  mean daily excess {stats.mean_daily_excess * 1e4:+.2f} bp, bootstrap 95% "
        f"[{lo * 1e4:+.2f}, {hi * 1e4:+.2f}] bp; Sharpe {_fmt(stats.sharpe, '.2f')}, "
        f"deflated Sharpe {_fmt(stats.deflated_sharpe, '.2f')} ({_rules(stats.trials)} tried)",
        f"  {stats.verdict()}",
    ]
