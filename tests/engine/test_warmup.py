"""Warm-up before --start: the indicators see the bars before it, nothing trades before it,
nothing at or after it reaches the warm-up, and the first trade can come on its first bar."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest

import run_engine
from engine.settings.config import BrokerConfig, EngineConfig
from engine.trading.replay import replay
from engine.trading.warmup import LONGEST_LOOKBACK, strategy_lookback, terminal_lookback
from feeds.records import parse_date
from feeds.sources import open_sources
from gpu.indicators.catalogue import TERMINAL_INDEX, TERMINALS
from gpu.indicators.compute import compute_panel
from strategies.base import Features, Signals
from strategies.gp.representation import GPRule, parse_infix
from strategies.gp.strategy import GPStrategy
from strategies.sma_cross import SmaCross
from tests.integration.sp500_subset import sp500_subset

SYMBOLS = ("AAPL", "JPM", "MSFT", "XOM")
START, END = "2014-06-02", "2014-09-30"
NY = "America/New_York"


@pytest.fixture(scope="module")
def daily(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sp500_subset(shared_data, tmp_path_factory.mktemp("warm") / "d.csv", SYMBOLS)


def _frame(path: Path) -> pd.DataFrame:
    df = pd.read_csv(path)
    df["date"] = pd.to_datetime(df["date"])
    return df


def test_each_terminal_lookback_is_where_its_first_value_appears() -> None:
    """terminal_lookback(name) bars give the first non-NaN value of the indicator panel."""
    rng = np.random.default_rng(3)
    n = 300
    close = 50 * np.exp(np.cumsum(rng.normal(0, 0.01, (n, 1)), axis=0))
    high, low = close * 1.01, close * 0.99
    volume = rng.integers(1_000, 5_000, (n, 1)).astype(np.float64)
    panel = compute_panel(close, high, low, close, volume, device="cpu")
    for i, name in enumerate(TERMINALS):
        first = int(np.flatnonzero(np.isfinite(panel[:, i, 0]))[0])
        assert first + 1 == terminal_lookback(name), name


def test_default_lookback_of_each_strategy() -> None:
    assert strategy_lookback(SmaCross(10, 50))[0] == 50
    assert strategy_lookback(SmaCross(5, 25, long_only=True))[0] == 25
    short = GPRule(parse_infix("(close > sma15)"), parse_infix("NOT cci_above_100"))
    assert strategy_lookback(GPStrategy(short, device="cpu"))[0] == 20
    volume = GPRule(parse_infix("(nvi_above AND (close > sma5))"),
                    parse_infix("(ema9 < close)"))
    assert strategy_lookback(GPStrategy(volume, device="cpu"))[0] == LONGEST_LOOKBACK == 255

    class Plain:
        pass

    assert strategy_lookback(Plain())[0] == LONGEST_LOOKBACK


def _replay(daily: Path, tmp: Path, *extra: str) -> tuple[dict[str, Any], pd.DataFrame,
                                                          pd.DataFrame]:
    rc = run_engine.main(["replay", "--data", str(daily), "--start", START, "--end", END,
                          "--strategy", "sma-cross:5,25,long-only", "--fill", "signal-close",
                          "--device", "cpu", "--out", str(tmp), "--no-plots", *extra])
    assert rc == 0
    rep = json.loads((tmp / "report.json").read_text())
    return rep, pd.read_csv(tmp / "fills.csv"), pd.read_csv(tmp / "equity.csv")


def test_warm_replay_can_trade_on_its_first_bar_and_never_before(daily: Path,
                                                                 tmp_path: Path) -> None:
    df = _frame(daily)
    start_ns = parse_date(START)
    first_day = df.loc[df["date"] >= START, "date"].min()
    # the first bar's close: 16:00 New York of the first trading day at or after --start
    first_close_ns = pd.Timestamp(first_day).tz_localize(NY).replace(hour=16).value
    days_before = df.loc[df["date"] < START, "date"].nunique()

    warm, warm_fills, warm_eq = _replay(daily, tmp_path / "warm")
    assert warm["warmup"]["requested"] == 25 and warm["warmup"]["bars"] == 25
    assert warm["warmup"]["complete"] and days_before >= 25
    assert int(warm_fills["ts"].min()) == first_close_ns  # a trade on the first bar
    assert int(warm_eq["ts"].min()) == first_close_ns
    # buy-and-hold buys at the first traded bar's close, not in the warm-up
    for sym in SYMBOLS:
        want = df.loc[(df["Name"] == sym) & (df["date"] == first_day), "close"].item()
        assert warm["per_symbol"][sym]["first_price"] == want

    cold, cold_fills, cold_eq = _replay(daily, tmp_path / "cold", "--warmup", "0")
    assert cold["warmup"]["bars"] == 0
    traded_days = np.sort(df.loc[df["date"] >= START, "date"].unique())
    # a 25-bar SMA exists from the 25th bar on: no trade before it
    earliest = pd.Timestamp(traded_days[24]).tz_localize(NY).replace(hour=16).value
    assert int(cold_fills["ts"].min()) >= earliest
    for fills, eq in ((warm_fills, warm_eq), (cold_fills, cold_eq)):
        assert (fills["ts"] >= start_ns).all() and (eq["ts"] >= start_ns).all()


class FirstFeatures(SmaCross):
    """sma-cross that keeps the feature matrix of every call (copies)."""

    def __init__(self) -> None:
        super().__init__(5, 25, long_only=True)
        self.seen: list[npt.NDArray[np.float32]] = []

    async def target_signals(self, features: Features, closed: npt.NDArray[np.bool_]
                             ) -> Signals:
        self.seen.append(np.array(features, copy=True))
        return await super().target_signals(features, closed)


def test_warm_up_sees_only_data_before_start(daily: Path) -> None:
    """The strategy is first asked at the first bar at or after --start, with indicators
    made of the bars up to that one only (pandas rolling means of the CSV's closes)."""
    df = _frame(daily)
    strategy = FirstFeatures()
    start_ns = parse_date(START)
    factory = functools.partial(open_sources, [str(daily)], symbols=list(SYMBOLS),
                                start=None, end=parse_date(END, end_of_day=True))
    cfg = EngineConfig(broker=BrokerConfig(fill="signal-close"))
    res = replay(factory, strategy, cfg, trade_from=start_ns)
    eng = res.engine
    traded_days = df.loc[(df["date"] >= START) & (df["date"] <= END), "date"].nunique()
    assert len(strategy.seen) == traded_days  # never asked in the warm-up
    assert eng.stats.warmup_bar_events == df.loc[df["date"] < START, "date"].nunique()
    first = strategy.seen[0]
    first_day = df.loc[df["date"] >= START, "date"].min()
    for i, sym in enumerate(eng.symbols):
        closes = df.loc[(df["Name"] == sym) & (df["date"] <= first_day)].sort_values("date")
        c = closes["close"].to_numpy()
        assert first[i, TERMINAL_INDEX["close"]] == np.float32(c[-1])
        for w in (5, 25, 200):
            assert first[i, TERMINAL_INDEX[f"sma{w}"]] == pytest.approx(c[-w:].mean(),
                                                                        rel=1e-6)
    assert all(p.ts >= start_ns for p in eng.equity_curve)
    assert all(f.ts >= start_ns for f in eng.broker.fills)


@pytest.mark.parametrize("bad", ["-1", "x", "2.5", ""])
def test_bad_warmup_is_a_one_line_error(daily: Path, bad: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    rc = run_engine.main(["replay", "--data", str(daily), "--start", START,
                          "--warmup", bad, "--device", "cpu"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--warmup" in err[0]


def test_warmup_longer_than_the_data_is_reported(daily: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    rep, fills, _eq = _replay(daily, tmp_path / "long", "--warmup", "5000")
    df = _frame(daily)
    have = df.loc[df["date"] < START, "date"].nunique()
    assert rep["warmup"] | {"why": ""} == rep["warmup"] | {
        "requested": 5000, "bars": have, "complete": False, "why": ""}
    assert f"had only {have:,} of the 5,000" in capsys.readouterr().out
    assert len(fills) > 0


def test_a_tick_bar_spanning_start_is_cut_there(tmp_path: Path) -> None:
    """5-hour bars do not divide a day, so one bar spans midnight at --start: its ticks
    before --start close a warm-up bar, its ticks from --start open the first traded bar
    (pandas groups the ticks the same way: by bar and by side of --start)."""
    start = pd.Timestamp("2024-01-04", tz=NY)
    ts = pd.date_range(pd.Timestamp("2024-01-02", tz=NY), periods=3 * 144,
                       freq="10min").as_unit("ns")
    price = 100.0 + np.sin(np.arange(len(ts)) / 7.0) + np.arange(len(ts)) * 0.001
    path = tmp_path / "ticks.csv"
    pd.DataFrame({"ts": ts.asi8, "symbol": "AAA", "price": price, "size": 1.0}).to_csv(
        path, index=False)
    bar_ns = 5 * 3600 * 10**9
    local = ts.asi8 + int(ts[0].utcoffset().total_seconds()) * 10**9  # EST all along
    frame = pd.DataFrame({"key": local // bar_ns, "after": ts >= start, "price": price})
    bars = frame.groupby(["key", "after"], sort=True)["price"].last().reset_index()
    assert (bars.groupby("key").size() == 2).sum() == 1  # one bar spans --start

    strategy = FirstFeatures()
    factory = functools.partial(open_sources, [str(path)])
    res = replay(factory, strategy, EngineConfig(bar_seconds=5 * 3600),
                 trade_from=start.value)
    warm = bars[~bars["after"]]
    assert res.engine.stats.warmup_bar_events == len(warm)
    first_traded = bars[bars["after"]].iloc[0]["price"]
    closes = np.concatenate([warm["price"].to_numpy(), [first_traded]])
    assert strategy.seen[0][0, TERMINAL_INDEX["close"]] == np.float32(first_traded)
    assert strategy.seen[0][0, TERMINAL_INDEX["sma5"]] == pytest.approx(closes[-5:].mean(),
                                                                        rel=1e-6)
    assert len(strategy.seen) == int(bars["after"].sum())
