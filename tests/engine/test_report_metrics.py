"""The replay report's metrics against a reference computed here with pandas and numpy from
the files the replay writes (fills.csv, equity.csv), never from the report's own code."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import run_engine
from engine.reporting.report import MIN_RATIO_DAYS
from tests.helpers import daily_csv

TRADING_DAYS = 252


def _daily_csv(path: Path) -> Path:
    return daily_csv(path, 300, seed=4, drift=0.0003)


def _reference(out: Path, initial: float) -> dict[str, float | None]:
    eq = pd.read_csv(out / "equity.csv")
    fills = pd.read_csv(out / "fills.csv")
    e = eq["equity"].to_numpy()
    day = pd.to_datetime(eq["ts"], utc=True).dt.tz_convert("America/New_York").dt.date
    daily = eq.groupby(day, sort=False)["equity"].last()
    r = pd.concat([pd.Series([initial]), daily.reset_index(drop=True)]).pct_change().dropna()
    down = np.sqrt(np.mean(np.minimum(r.to_numpy(), 0.0) ** 2)) or math.nan
    peak = np.maximum.accumulate(e)
    mdd = float(np.max((peak - e) / peak))
    span_days = (eq["ts"].iloc[-1] - eq["ts"].iloc[0]) / 86_400e9
    cagr = (e[-1] / initial) ** (365.25 / span_days) - 1 if span_days >= 30 else None
    # round trips: a new trip whenever a symbol's position leaves zero
    fills["signed"] = fills["side"].map({"buy": 1, "sell": -1}) * fills["quantity"]
    pnls = []
    for _, g in fills.groupby("symbol", sort=False):
        pos = g["signed"].cumsum().round(9)
        trip = (pos.shift(fill_value=0) == 0).cumsum()
        cash = -(g["signed"] * g["price"]) - g["commission"]
        closed = pos.groupby(trip).last() == 0
        pnls += list(cash.groupby(trip).sum()[closed])
    p = np.asarray(pnls)
    wins, losses = p[p > 0], p[p < 0]
    traded = float((fills["quantity"] * fills["price"]).sum())
    return {
        "sharpe": r.mean() / r.std(ddof=1) * math.sqrt(TRADING_DAYS),
        "sortino": r.mean() / down * math.sqrt(TRADING_DAYS),
        "annual_volatility": r.std(ddof=1) * math.sqrt(TRADING_DAYS),
        "max_drawdown": mdd,
        "cagr": cagr,
        "calmar": cagr / mdd if cagr is not None and mdd > 0 else None,
        "trading_days": float(len(r)),
        "round_trips": float(len(p)),
        "win_rate": len(wins) / len(p),
        "profit_factor": wins.sum() / -losses.sum(),
        "average_win": wins.mean(),
        "average_loss": losses.mean(),
        "exposure": float(np.mean(eq["gross_exposure"] / eq["equity"])),
        "turnover": traded / float(np.mean(e)),
        "final_equity": float(e[-1]),
    }


@pytest.mark.parametrize("strategy", ["sma-cross:5,25,long-only", "sma-cross:5,25"])
def test_daily_metrics_match_pandas(tmp_path: Path, strategy: str) -> None:
    data = _daily_csv(tmp_path / "d.csv")
    out = tmp_path / "out"
    assert run_engine.main(["replay", "--data", str(data), "--strategy", strategy,
                            "--device", "cpu", "--out", str(out)]) == 0
    rep = json.loads((out / "report.json").read_text())
    want = _reference(out, rep["initial_equity"])
    assert rep["round_trips"] >= 5
    for key, value in want.items():
        assert rep[key] == pytest.approx(value, rel=1e-9, abs=1e-9), key
    trades = pd.read_csv(out / "trades.csv")
    assert len(trades) == rep["round_trips"]
    assert trades["pnl"].sum() == pytest.approx(rep["final_equity"] - rep["initial_equity"])
    assert (pd.to_datetime(trades["exit_time"]) >= pd.to_datetime(trades["entry_time"])).all()
    if strategy.endswith("long-only"):
        assert set(trades["side"]) == {"long"}
    else:
        assert set(trades["side"]) == {"long", "short"}
    # the buy-and-hold line ends where the report's buy-and-hold ROI does, its exit
    # commission paid as the strategy's is (issue 23)
    bh_end = pd.read_csv(out / "equity.csv")["buy_hold_equity"].iloc[-1]
    assert bh_end == pytest.approx(rep["initial_equity"] * (1 + rep["roi_buy_hold"]),
                                   rel=0, abs=1e-6)
    assert (out / "equity.png").stat().st_size > 10_000


def test_sharpe_of_a_short_tick_replay_is_not_annualised_bar_noise(tmp_path: Path) -> None:
    """The old report annualised one-minute returns by 252 x 390 bars: a few days of
    synthetic ticks showed Sharpe 41.65. Daily returns (exchange days) are used now."""
    out = tmp_path / "o"
    assert run_engine.main(["replay", "--ticks", "60000", "--n-symbols", "3", "--device", "cpu",
                            "--out", str(out), "--no-plots"]) == 0
    rep = json.loads((out / "report.json").read_text())
    want = _reference(out, rep["initial_equity"])
    if rep["trading_days"] >= MIN_RATIO_DAYS:
        assert rep["sharpe"] == pytest.approx(want["sharpe"], rel=1e-9)
    else:  # a few days of returns give no annualised ratio at all
        assert rep["sharpe"] is None
        assert rep["sortino"] is None
        assert rep["annual_volatility"] is None
    assert rep["cagr"] is None  # a few days say nothing about a year
    assert rep["trading_days"] == want["trading_days"]
