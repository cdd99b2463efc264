"""The replay report against buy-and-hold, recomputed here from the files the replay writes
(equity.csv) and the input CSV with numpy, pandas and scipy: buy-and-hold pays the same
commission and slippage as the strategy, and `vs_buy_hold` holds the excess return, beta,
alpha, correlation, information ratio, bootstrap interval and deflated Sharpe ratio."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

import run_engine
from tests.integration.sp500_subset import sp500_subset

SYMBOLS = ("AAPL", "JPM", "MSFT", "XOM")
START, END = "2014-01-02", "2015-06-30"
COMMISSION, SLIPPAGE_BPS = 2.0, 5.0


@pytest.fixture(scope="module")
def replayed(shared_data: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[dict, pd.DataFrame, pd.DataFrame, str]:
    tmp = tmp_path_factory.mktemp("vsbh")
    data = sp500_subset(shared_data, tmp / "d.csv", SYMBOLS)
    out = tmp / "out"
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        rc = run_engine.main(["replay", "--data", str(data), "--start", START, "--end", END,
                              "--strategy", "sma-cross:5,25", "--commission", str(COMMISSION),
                              "--slippage-bps", str(SLIPPAGE_BPS), "--device", "cpu",
                              "--out", str(out), "--no-plots"])
    assert rc == 0
    rep = json.loads((out / "report.json").read_text())
    return rep, pd.read_csv(out / "equity.csv"), pd.read_csv(data), text.getvalue()


def test_buy_and_hold_pays_the_strategys_costs(replayed: tuple) -> None:
    rep, eq, daily, _ = replayed
    daily = daily[(daily["date"] >= START) & (daily["date"] <= END)]
    total = 0.0
    for sym in SYMBOLS:  # all-in at the first close, sold at the last, both ways costed
        closes = daily.loc[daily["Name"] == sym].sort_values("date")["close"].to_numpy()
        buy, sell = closes[0] * (1 + SLIPPAGE_BPS / 1e4), closes[-1] * (1 - SLIPPAGE_BPS / 1e4)
        shares = math.floor((10_000 - COMMISSION) / buy)
        total += 10_000 - shares * buy - COMMISSION + shares * sell - COMMISSION
    initial = rep["initial_equity"]
    assert rep["roi_buy_hold"] == pytest.approx(total / initial - 1, abs=1e-12)
    # the equity file's buy-and-hold line ends there: its exit costs paid
    assert eq["buy_hold_equity"].iloc[-1] == pytest.approx(
        initial * (1 + rep["roi_buy_hold"]), rel=0, abs=1e-6)


def _daily(eq: pd.DataFrame, column: str, initial: float) -> np.ndarray:
    day = pd.to_datetime(eq["ts"], utc=True).dt.tz_convert("America/New_York").dt.date
    last = eq.groupby(day, sort=False)[column].last().to_numpy()
    values = np.concatenate([[initial], last])
    return np.diff(values) / values[:-1]


def test_vs_buy_hold_from_the_equity_file(replayed: tuple) -> None:
    rep, eq, _, summary = replayed
    vs = rep["vs_buy_hold"]
    r = _daily(eq, "equity", rep["initial_equity"])
    b = _daily(eq, "buy_hold_equity", rep["initial_equity"])
    x = r - b
    n = len(r)
    assert vs["days"] == n == rep["trading_days"]
    total, total_b = np.prod(1 + r) - 1, np.prod(1 + b) - 1
    assert vs["total_return"] == pytest.approx(rep["roi"], abs=1e-12)
    assert vs["total_return_benchmark"] == pytest.approx(rep["roi_buy_hold"], abs=1e-12)
    assert vs["excess_return"] == pytest.approx(total - total_b, abs=1e-12)
    beta = np.cov(r, b, ddof=1)[0, 1] / np.var(b, ddof=1)
    assert vs["beta"] == pytest.approx(beta, rel=1e-9)
    assert vs["alpha_annual"] == pytest.approx((r.mean() - beta * b.mean()) * 252, rel=1e-9)
    assert vs["correlation"] == pytest.approx(sps.pearsonr(r, b)[0], rel=1e-9)
    assert vs["information_ratio"] == pytest.approx(
        x.mean() / x.std(ddof=1) * math.sqrt(252), rel=1e-9)
    assert vs["mean_daily_excess"] == pytest.approx(x.mean(), rel=1e-9)
    # the seeded bootstrap: 2000 resamples of the days, seed 0, percentile interval
    idx = np.random.default_rng(0).integers(0, n, size=(2000, n))
    lo, hi = np.quantile(x[idx].mean(axis=1), [0.025, 0.975])
    assert vs["excess_ci95"] == pytest.approx([lo, hi], rel=1e-9)
    # deflated Sharpe ratio for one rule tried: the probabilistic Sharpe ratio against 0
    sr = r.mean() / r.std(ddof=1)
    skew, kurt = sps.skew(r), sps.kurtosis(r, fisher=False)
    psr = sps.norm.cdf(sr * math.sqrt(n - 1) / math.sqrt(1 - skew * sr + (kurt - 1) / 4 * sr**2))
    assert vs["trials"] == 1
    assert vs["deflated_sharpe"] == pytest.approx(psr, rel=1e-9)
    # in words, and the interval's zero said so
    contains = lo <= 0 <= hi
    assert vs["ci_contains_zero"] == contains
    assert vs["verdict"] in summary
    assert ("contains zero" in summary) == contains
