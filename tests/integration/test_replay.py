"""Replay end to end: the real engine over real sockets, deterministic, with its outputs."""

from __future__ import annotations

import asyncio
import functools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import run_engine
from engine.reporting.report import TIMING_KEYS, build_report
from engine.settings.config import BrokerConfig, EngineConfig
from engine.trading.core import Engine
from engine.trading.replay import replay
from feeds.messages import Heartbeat, Trade
from feeds.synthetic import SyntheticMarket
from gpu.indicators.catalogue import TERMINAL_INDEX
from strategies.sma_cross import SmaCross
from tests.helpers import trade_messages

ROOT = Path(__file__).resolve().parents[2]

DESIGN_KEYS = {"ticks", "bars", "orders", "fills", "wall_seconds", "ticks_per_second",
               "final_equity", "roi", "roi_buy_hold", "sharpe", "max_drawdown"}


def _small_market() -> functools.partial:
    return functools.partial(SyntheticMarket, n_symbols=5, n_ticks=40_000, seed=3)


def _strip_timing(r: dict) -> dict:
    return {k: v for k, v in r.items() if k not in TIMING_KEYS}


@pytest.fixture(scope="module")
def inproc_report() -> dict:
    """One in-process replay of the small market: the reference of the tests below (a
    replay of its own each cost them 0.4 s)."""
    return build_report(replay(_small_market(), SmaCross()), "sma")


def test_replay_is_deterministic_and_complete(inproc_report: dict) -> None:
    r1 = inproc_report  # read only, as in the tests below
    r2 = build_report(replay(_small_market(), SmaCross()), "sma")
    assert r1.keys() >= DESIGN_KEYS
    assert _strip_timing(r1) == _strip_timing(r2)
    assert r1["ticks"] == 40_000 and r1["bars"] > 0 and r1["fills"] > 0
    # after STOP nothing is held and equity is all cash
    per = r1["per_symbol"]
    assert all(v["position"] == 0 for v in per.values())
    assert r1["final_equity"] == pytest.approx(sum(v["final_equity"] for v in per.values()))
    assert r1["roi"] == pytest.approx(r1["final_equity"] / r1["initial_equity"] - 1)


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_transports_give_the_same_report(transport: str, inproc_report: dict) -> None:
    base = inproc_report
    cfg = EngineConfig(transport=transport)  # type: ignore[arg-type]
    other = build_report(replay(_small_market(), SmaCross(), cfg), "sma")
    assert _strip_timing({**other, "transport": "x"}) == _strip_timing({**base, "transport": "x"})


class Recorder:
    """A strategy that stays flat and records what the engine shows it."""

    name = "recorder"
    enter_on_from_zero = False
    long_only = True

    def __init__(self) -> None:
        self.rows: list[tuple[np.ndarray, np.ndarray]] = []

    def reset(self, symbols: list[str]) -> None:
        self.symbols = symbols

    async def target_signals(self, features, closed):
        self.rows.append((features.copy(), closed.copy()))
        return np.zeros(features.shape[0], np.int8)


def test_time_bars_match_pandas_resample() -> None:
    rng = np.random.default_rng(5)
    n = 3000
    t0 = 1_700_000_000 * 10**9
    ts = np.sort(t0 + rng.integers(0, 3600 * 10**9, n))
    sym = rng.integers(0, 2, n)
    price = np.round(100 + np.cumsum(rng.normal(0, 0.05, n)), 2)
    size = rng.integers(1, 10, n) * 100.0
    names = ["AAA", "BBB"]
    seq = [0, 0]
    msgs: list[Any] = []
    for t, s, p, q in zip(ts.tolist(), sym.tolist(), price.tolist(), size.tolist(), strict=True):
        seq[s] += 1
        msgs.append(Trade(seq[s], t, names[s], p, q))
    msgs.append(Heartbeat(1, int(ts[-1]), "", True))
    rec = Recorder()
    eng = Engine(list(names), rec, EngineConfig(bar_seconds=60))
    asyncio.run(eng.process(msgs))
    df = pd.DataFrame({"ts": pd.to_datetime(ts, unit="ns"), "sym": sym, "p": price})
    for s, name in enumerate(names):
        bars = df[df.sym == s].set_index("ts")["p"].resample("60s").ohlc().dropna()
        got_close = [f[s, TERMINAL_INDEX["close"]] for f, c in rec.rows if c[s]]
        got_typ = [f[s, TERMINAL_INDEX["typical"]] for f, c in rec.rows if c[s]]
        np.testing.assert_array_equal(np.float32(bars["close"].to_numpy()), got_close, err_msg=name)
        typical = (bars["high"] + bars["low"] + bars["close"]) / 3
        np.testing.assert_allclose(got_typ, typical.to_numpy(), rtol=1e-6)
    assert eng.stats.trades == n


def test_cli_writes_report_fills_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "run"
    rc = run_engine.main(["replay", "--ticks", "30000", "--n-symbols", "4", "--seed", "2",
                          "--out", str(out), "--json", str(tmp_path / "r.json")])
    assert rc == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep.keys() >= DESIGN_KEYS
    assert json.loads((tmp_path / "r.json").read_text())["final_equity"] == rep["final_equity"]
    fills = pd.read_csv(out / "fills.csv")
    assert len(fills) == rep["fills"] > 0
    # cash per symbol rebuilt from the fills CSV equals the report's final equity
    cash = 10_000.0 * 4
    cash -= float((fills.side.map({"buy": 1, "sell": -1}) * fills.quantity * fills.price).sum())
    cash -= float(fills.commission.sum())
    assert cash == pytest.approx(rep["final_equity"], abs=1e-6)
    assert (out / "equity.png").stat().st_size > 10_000
    assert (out / "report.html").stat().st_size > 10_000


def test_no_plots_writes_the_same_numbers_without_the_png_and_html(tmp_path: Path) -> None:
    runs = {}
    for name, extra in (("plots", []), ("numbers", ["--no-plots"])):
        out = tmp_path / name
        assert run_engine.main(["replay", "--ticks", "20000", "--n-symbols", "2", "--seed", "2",
                                "--quiet", "--out", str(out), *extra]) == 0
        runs[name] = out
    assert (runs["plots"] / "equity.png").is_file() and (runs["plots"] / "report.html").is_file()
    assert sorted(p.name for p in runs["numbers"].iterdir()) == [
        "equity.csv", "fills.csv", "report.json", "trades.csv"]
    for name in ("fills.csv", "trades.csv", "equity.csv"):
        assert (runs["plots"] / name).read_bytes() == (runs["numbers"] / name).read_bytes()
    reports = [_strip_timing(json.loads((runs[n] / "report.json").read_text())) for n in runs]
    assert reports[0] == reports[1] and reports[0]["fills"] > 0


def test_cli_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_engine.main(["replay", "--data", str(tmp_path / "missing.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "missing.csv" in err[0]
    # any window is computed now (issue 29); a fast window not below the slow is refused
    assert run_engine.main(["replay", "--strategy", "sma-cross:50,7"]) == 2
    bad = tmp_path / "bad.toml"
    bad.write_text("bar_seconds = 60\nno_such_key = 1\n")
    assert run_engine.main(["replay", "--config", str(bad)]) == 2
    assert "no_such_key" in capsys.readouterr().err


def test_replay_real_daily_bars(shared_data: Path, tmp_path: Path) -> None:
    path = shared_data / "sp500_5yr_daily" / "all_stocks_5yr.csv.gz"
    rc = run_engine.main(["replay", "--data", str(path), "--symbols", "AAPL,MSFT,XOM",
                          "--start", "2014-01-01", "--end", "2016-12-31",
                          "--strategy", "sma-cross:10,50,long-only", "--out", str(tmp_path)])
    assert rc == 0
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["bars"] == 3 * 756  # 756 NYSE sessions in 2014-2016
    assert set(rep["per_symbol"]) == {"AAPL", "MSFT", "XOM"}
    assert not math.isnan(rep["sharpe"])


def test_symbols_first_seen_live_trade_like_known_ones() -> None:
    """An engine that meets 40 symbols in the stream (growing its indicator bank twice)
    ends exactly like one that knew them up front, given the same capital (one account:
    a symbol that appears adds no money, issue 29)."""
    src = SyntheticMarket(n_symbols=40, n_ticks=30_000, seed=8)
    msgs: list = list(trade_messages(src))
    msgs.append(Heartbeat(1, msgs[-1].ts, "", True))
    cfg = EngineConfig(bar_seconds=30, broker=BrokerConfig(cash=400_000.0))
    known = Engine(list(src.symbols), SmaCross(), cfg)
    live = Engine([], SmaCross(), cfg)
    asyncio.run(known.process(msgs))
    asyncio.run(live.process(msgs))
    assert live.bank.n_symbols >= 40 and live.stats.fills == known.stats.fills > 0
    assert live.broker.initial_capital() == known.broker.initial_capital() == 400_000.0
    assert live.broker.equity() == pytest.approx(known.broker.equity(), rel=1e-12)
    for s in src.symbols:
        a = known.broker.accounts[known.sym_index[s]]
        b = live.broker.accounts[live.sym_index[s]]
        assert (a.position, a.trades) == (b.position, b.trades), s
        np.testing.assert_array_equal(known.feature_row(s), live.feature_row(s))


@pytest.mark.parametrize("transport", ["inproc", "ipc"])
def test_malformed_rows_of_a_file_are_counted_in_the_report(tmp_path: Path,
                                                            transport: str) -> None:
    csv = tmp_path / "ticks.csv"
    csv.write_text(
        "ts,symbol,price,size\n"
        "1700000000000000000,A,10,100\n"
        "1700000000000000001,A,nan,100\n"      # bad price
        "not-a-time,A,1,1\n"                    # bad timestamp
        "1700000000000000002,A,11,-5\n"         # bad size
        "1700000000000000003,A,12,100\n"
    )
    out = tmp_path / "r.json"
    assert run_engine.main(["replay", "--data", str(csv), "--transport", transport,
                            "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["ticks"] == 2
    assert rep["source_skipped"] == {"bad_price": 1, "bad_ts": 1, "bad_size": 1}
    assert rep["skipped"] == {}


def test_cuda_without_a_gpu_is_a_one_line_error() -> None:
    """Run as a separate process without the CUDA simulator, as a user would."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    root = Path(__file__).resolve().parents[2]
    probe = subprocess.run([sys.executable, "-c", "from gpu.device import cuda_present as c;"
                            "print(c())"], cwd=root, env=env, capture_output=True, text=True)
    if probe.stdout.strip() == "True":
        pytest.skip("this machine has a GPU")
    res = subprocess.run([sys.executable, "run_engine.py", "replay", "--device", "cuda"],
                         cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "no CUDA GPU" in err[0]


def test_session_schedule_trades_only_in_trade_phase_and_ends_days_flat() -> None:
    """WAIT before t1, entries only in TRADE, LIQUIDATE/STOP leave every day flat."""
    from zoneinfo import ZoneInfo

    market = functools.partial(SyntheticMarket, n_symbols=4, n_ticks=60_000, seed=12)
    cfg = EngineConfig(bar_seconds=60, session="10:00,15:00,15:30")
    res = replay(market, SmaCross(), cfg)
    ny = ZoneInfo("America/New_York")
    orders = res.engine.broker.orders
    fills = res.engine.broker.fills
    assert any(o.reason == "enter" for o in orders) and fills
    import datetime as dt

    def local(ts: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(ts / 1e9, dt.UTC).astimezone(ny)

    for o in orders:
        t = local(o.ts)
        minutes = t.hour * 60 + t.minute
        if o.reason == "enter":  # decided at a bar close inside TRADE
            assert 10 * 60 < minutes <= 15 * 60, (o, t)
    net: dict[tuple[str, dt.date], float] = {}
    for f in fills:
        key = (f.symbol, local(f.ts).date())
        net[key] = net.get(key, 0.0) + f.side * f.quantity
    assert all(abs(q) < 1e-9 for q in net.values()), net


@pytest.mark.parametrize("fill", ["bar-close", "next-tick"])
def test_switching_sides_all_in_takes_the_freed_cash(fill: str) -> None:
    """Long -> short: the short is sized from the cash the close frees, whichever fill model
    (under next-tick fills the entry is ordered before the close has filled)."""
    from engine.settings.config import BrokerConfig
    from feeds.messages import Bar

    class Flip:
        name = "flip"
        enter_on_from_zero = True
        long_only = False

        def reset(self, symbols: list[str]) -> None:
            self.calls = 0

        async def target_signals(self, features, closed):
            self.calls += 1
            return np.array([1 if self.calls < 5 else -1], np.int8)

    day = 86_400 * 10**9
    msgs: list = [Bar(i + 1, (i + 1) * day, "A", 100.0, 100.0, 100.0, 100.0, 1e6)
                  for i in range(10)]
    msgs.append(Heartbeat(1, 11 * day, "", True))
    eng = Engine(["A"], Flip(), EngineConfig(broker=BrokerConfig(fill=fill)))  # type: ignore[arg-type]
    asyncio.run(eng.process(msgs))
    got = [(f.side, f.quantity) for f in eng.broker.fills]
    # buy 99 (= floor(9,999 / 100)), sell 99 to close, short 99 from 9,998 freed, cover
    assert got == [(1, 99.0), (-1, 99.0), (-1, 99.0), (1, 99.0)]
    assert eng.broker.accounts[0].cash == pytest.approx(10_000 - 4)



def test_an_engine_behind_its_feed_process_still_gets_the_whole_stream(
    shared_data: Path, tmp_path: Path
) -> None:
    """A one-day SPY replay with the CPU option group over ipc: the engine lags its feed,
    whose process used to close the socket once it had published everything; libzmq then
    dropped the bytes the engine had not read yet (~500 trades and the final heartbeat),
    and the replay failed with 'feed stopped before the end of data'."""
    day = shared_data / "lean_ticks_2013-10/equity/usa/tick/spy/20131007_trade.zip"
    out = tmp_path / "r.json"
    assert run_engine.main(["replay", "--data", str(day), "--config",
                            str(ROOT / "examples" / "spy_options.toml"), "--transport", "ipc",
                            "--device", "cpu", "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["ticks"] > 200_000
    assert not rep["skipped"]
