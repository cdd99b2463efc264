"""The Python API (`from engine import backtest`): DataFrames in and out, the same engine as
`replay` (its figures equal a replay of the same data written to CSV), and an engine that
runs without pandas."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import run_engine
from engine import Result, backtest
from engine.errors import UserError
from tests.helpers import daily_csv


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, pd.DataFrame]]:
    path = daily_csv(tmp_path_factory.mktemp("api") / "d.csv", 160, seed=21)
    long = pd.read_csv(path)
    frames = {s: g.drop(columns="Name").set_index("date")
              for s, g in long.groupby("Name")}
    return path, frames


def _replay(path: Path, tmp: Path, strategy: str) -> tuple[dict, Path]:
    out = tmp / "out"
    assert run_engine.main(["replay", "--data", str(path), "--strategy", strategy,
                            "--device", "cpu", "--out", str(out), "--no-plots"]) == 0
    return json.loads((out / "report.json").read_text()), out


def test_backtest_equals_replay_of_the_csv(data: tuple[Path, dict], tmp_path: Path) -> None:
    path, frames = data
    res = backtest(frames, "sma-cross:5,25,long-only")
    assert isinstance(res, Result)
    report, out = _replay(path, tmp_path, "sma-cross:5,25,long-only")
    for key in ("final_equity", "roi", "roi_buy_hold", "sharpe", "max_drawdown", "trades",
                "fills", "orders", "bars", "turnover_annual_one_way"):
        assert res.report[key] == report[key], key
        assert res.stats[key] == report[key], key
    eq = pd.read_csv(out / "equity.csv")
    np.testing.assert_array_equal(res.equity["equity"].to_numpy(), eq["equity"].to_numpy())
    np.testing.assert_array_equal(res.equity.index.asi8, eq["ts"].to_numpy())
    fills = pd.read_csv(out / "fills.csv")
    for col in ("ts", "symbol", "side", "quantity", "price", "commission"):
        np.testing.assert_array_equal(res.fills[col].to_numpy(), fills[col].to_numpy())
    trades = pd.read_csv(out / "trades.csv")
    assert len(res.trades) == len(trades) == report["trades"]
    np.testing.assert_array_equal(res.trades["pnl"].to_numpy(), trades["pnl"].to_numpy())


def test_long_frame_and_function_strategy(data: tuple[Path, dict], tmp_path: Path) -> None:
    """A plain function of the indicator values trades like the built-in rule it spells."""
    path, frames = data
    long = pd.read_csv(path).rename(columns={"Name": "symbol"})

    def crossover(features: pd.DataFrame) -> pd.Series:
        return (features["sma5"] > features["sma25"]).astype(int)

    res = backtest(long, crossover)
    ref = backtest(frames, "sma-cross:5,25,long-only")
    assert res.report["strategy"] == "crossover"
    assert res.report["final_equity"] == ref.report["final_equity"]
    np.testing.assert_array_equal(res.fills["price"], ref.fills["price"])


def test_plot_and_html(data: tuple[Path, dict], tmp_path: Path) -> None:
    res = backtest(data[1], "sma-cross:5,25", commission=2.0)
    assert res.report["costs"]["commission"] == 2.0
    fig = res.plot()
    assert len(fig.axes) == 2
    page = res.to_html(tmp_path / "t.html")
    assert (tmp_path / "t.html").read_text() == page
    assert f'data-key="roi" data-value="{res.report["roi"]!r}"' in page
    assert "<table" in res._repr_html_()


def test_bad_input_is_a_user_error(data: tuple[Path, dict]) -> None:
    with pytest.raises(UserError, match="symbol column"):
        backtest(pd.read_csv(data[0]).drop(columns="Name"))
    with pytest.raises(UserError, match="close"):
        backtest({"A": data[1]["AAA"].drop(columns="close")})
    hourly = data[1]["AAA"].set_axis(pd.date_range("2020-01-02 10:00", periods=len(
        data[1]["AAA"]), freq="h"))
    with pytest.raises(UserError, match="daily bars"):
        backtest({"AAA": hourly})
    with pytest.raises(UserError, match="unknown setting"):
        backtest(data[1], warp_speed=9)
    with pytest.raises(UserError):
        backtest(data[1], "no-such-strategy")


def test_engine_runs_without_pandas(tmp_path: Path) -> None:
    """pandas blocked: the engine's modules import and a replay runs; only the API's
    DataFrame functions need it."""
    code = (
        "import sys; sys.modules['pandas'] = None\n"
        "import engine, engine.api, engine.reporting.report, engine.reporting.tearsheet\n"
        "import engine.trading.replay\n"
        "import engine.commands.replay, feeds.sources, feeds.parquet\n"
        "import run_engine\n"
        f"rc = run_engine.main(['replay', '--ticks', '3000', '--n-symbols', '2', "
        f"'--device', 'cpu', '--out', {str(tmp_path / 'o')!r}])\n"
        "assert rc == 0, rc\n"
        "from engine.errors import UserError\n"
        "try:\n    engine.backtest({})\nexcept UserError as e:\n"
        "    assert '[report]' in str(e), e\nelse:\n    raise AssertionError('no error')\n"
        "assert 'pandas' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[2],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "o" / "report.html").is_file()
