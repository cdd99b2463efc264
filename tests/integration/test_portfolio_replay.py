"""One account through `replay` on real S&P 500 daily bars: --cash, --sizing, any window.

The command line's money settings reach the broker (capital, sizing model), a flag not
given never overrides the TOML file, and `sma-cross:20,100` (windows the indicator bank has
no column for) trades.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import run_engine
from tests.integration.sp500_subset import sp500_subset

SYMBOLS = ("AAPL", "XOM", "GE", "JPM")
ARGS = ["--start", "2014-01-02", "--end", "2015-06-30"]


def _replay(csv: Path, out: Path, *extra: str) -> dict[str, Any]:
    assert run_engine.main(["replay", "--data", str(csv), *ARGS, "--out", str(out),
                            "--no-plots", *extra]) == 0
    return dict(json.loads((out / "report.json").read_text()))


@pytest.fixture(scope="module")
def sp_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from feeds.datadir import data_dir

    if not (data_dir() / "sp500_5yr_daily").is_dir():
        pytest.skip("shared market data not found")
    return sp500_subset(data_dir(), tmp_path_factory.mktemp("sp") / "sp.csv", SYMBOLS)


def test_cash_is_the_capital_and_sizing_divides_it(sp_csv: Path, tmp_path: Path) -> None:
    """--cash 100000 --sizing equal-weight: the equity curve starts at 100,000 (not
    $10,000 per symbol), and each first entry took equity / active signals."""
    rep = _replay(sp_csv, tmp_path / "ew", "--strategy", "sma-cross:10,50,long-only",
                  "--cash", "100000", "--sizing", "equal-weight")
    eq = pd.read_csv(tmp_path / "ew" / "equity.csv")
    assert rep["capital"] == 100_000.0 and rep["sizing"] == "equal-weight"
    assert rep["final_equity"] == pytest.approx(100_000.0 * (1 + rep["roi"]))
    assert abs(eq.equity.iloc[0] - 100_000.0) < 100_000.0 * 0.05
    assert abs(eq.buy_hold_equity.iloc[0] - 100_000.0) < 100_000.0 * 0.05
    fills = pd.read_csv(tmp_path / "ew" / "fills.csv")
    first = fills.iloc[0]
    # one entry can never take more than the whole account
    assert first.quantity * first.price <= 100_000.0
    assert rep["fills"] > 0


def test_the_file_sets_sizing_and_a_flag_not_given_keeps_it(sp_csv: Path,
                                                            tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[broker]\nsizing = "fixed"\nquantity = 7.0\ncash = 50000.0\n')
    rep = _replay(sp_csv, tmp_path / "f", "--strategy", "sma-cross:10,50,long-only",
                  "--config", str(cfg))
    fills = pd.read_csv(tmp_path / "f" / "fills.csv")
    assert (fills.quantity == 7.0).all() and len(fills) > 0
    # a flag given wins over the file
    rep2 = _replay(sp_csv, tmp_path / "g", "--strategy", "sma-cross:10,50,long-only",
                   "--config", str(cfg), "--sizing", "fixed-fraction")
    fills2 = pd.read_csv(tmp_path / "g" / "fills.csv")
    assert not (fills2.quantity == 7.0).all()
    assert rep["roi"] != rep2["roi"]


def test_any_sma_window_a_user_names(sp_csv: Path, tmp_path: Path) -> None:
    """sma-cross:20,100 (issue 29: refused before, 100 is no bank column): it warms on
    the 100 bars before --start and trades; each entry fills at a next day's open."""
    rep = _replay(sp_csv, tmp_path / "w", "--strategy", "sma-cross:20,100,long-only",
                  "--cash", "40000", "--sizing", "per-symbol")
    assert rep["strategy"].startswith("sma-cross(20,100")
    assert rep["warmup"]["requested"] == 100
    assert rep["fills"] > 0
    # per-symbol: each symbol's part is a quarter of the capital
    for s in SYMBOLS:
        per = rep["per_symbol"][s]
        assert math.isclose(per["final_equity"] / (1 + per["roi"]), 10_000.0, rel_tol=1e-9)


# ---------------------------------------------------------------------- the live daemon
def test_the_daemon_journals_order_states_and_restores_working_exits(tmp_path: Path) -> None:
    """A daemon with a stop-loss on every entry: each exit's state changes are in the
    journal, and a daemon restarted on it works the exits that were working at the stop."""
    import asyncio
    import time

    import zmq
    import zmq.asyncio

    from engine.live.daemon import Daemon, open_sockets
    from engine.live.journal import Journal
    from engine.settings.config import BrokerConfig, EngineConfig
    from feeds.messages import encode, topic_for
    from feeds.synthetic import SyntheticMarket
    from strategies.sma_cross import SmaCross
    from tests.helpers import trade_messages
    from tests.live_procs import endpoints

    cfg = EngineConfig(bar_seconds=60.0, broker=BrokerConfig(stop_loss=0.002, fill="next-tick"))
    trades = trade_messages(SyntheticMarket(n_symbols=3, n_ticks=6_000, seed=21))

    def daemon(ctx: zmq.asyncio.Context, journal: Journal) -> Daemon:
        ticks, out_ep = endpoints()
        sub, out = open_sockets(ctx, ticks, out_ep, cfg, [b""], None)
        return Daemon(cfg=cfg, strategy=SmaCross(5, 10), journal=journal,
                      state=journal.load(), sub=sub, out=out, device="cpu",
                      status_file=None, max_seconds=0.0, ticks=ticks)

    def close(d: Daemon, journal: Journal, ctx: zmq.asyncio.Context) -> None:
        d.close()
        d.sub.socket.close(0)
        d.out.socket.close(0)
        journal.close()
        ctx.term()

    ctx, journal = zmq.asyncio.Context(), Journal(tmp_path / "j.db")
    d = daemon(ctx, journal)
    asyncio.run(d._step([[topic_for(m), encode(m)] for m in trades], time.perf_counter(),
                        False))
    working = [list(w) for w in d.engine.orders.working]
    close(d, journal, ctx)
    journal = Journal(tmp_path / "j.db")
    states = journal.export()["order_states"]
    assert {s["state"] for s in states} >= {"accepted", "filled", "cancelled"}
    assert all(s["reason"] == "stop-loss" for s in states)
    ctx = zmq.asyncio.Context()
    d2 = daemon(ctx, journal)
    restored = [[(w.order.order_id, w.stop) for w in ws] for ws in d2.engine.orders.working]
    assert restored == [[(w.order.order_id, w.stop) for w in ws] for ws in working]
    assert any(restored)  # a stop was working when the daemon stopped
    close(d2, journal, ctx)


def test_turnover_counts_the_contract_multiplier(sp_csv: Path, tmp_path: Path) -> None:
    """XOM traded as a contract of 100 (`[instruments.XOM] multiplier = 100`): its fills'
    notional is quantity x price x 100 in the turnover (issue 29: the multiplier was left
    out, so a futures book's turnover was 100 times too small), checked against a hand
    computation from fills.csv and equity.csv."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('[broker]\nsizing = "fixed"\nquantity = 1.0\ncash = 1000000.0\n'
                   "[instruments.XOM]\nmultiplier = 100.0\n")
    rep = _replay(sp_csv, tmp_path / "m", "--strategy", "sma-cross:10,50,long-only",
                  "--config", str(cfg))
    fills = pd.read_csv(tmp_path / "m" / "fills.csv")
    assert (fills.symbol == "XOM").any() and (fills.symbol != "XOM").any()
    mult = np.where(fills.symbol == "XOM", 100.0, 1.0)
    notional = float((fills.quantity * fills.price * mult).sum())
    mean_equity = float(pd.read_csv(tmp_path / "m" / "equity.csv").equity.mean())
    assert math.isclose(rep["turnover"], notional / mean_equity, rel_tol=1e-9)
    assert math.isclose(rep["turnover_annual_one_way"],
                        notional / 2 / mean_equity * 252 / rep["trading_days"], rel_tol=1e-9)
    # and not the shares' sum the report gave before
    shares = float((fills.quantity * fills.price).sum())
    assert not math.isclose(rep["turnover"], shares / mean_equity, rel_tol=1e-3)
    # round trips count the multiplier too: each XOM trip's P&L is 100 x the price move
    # less commissions, recomputed from its own fills (the run ends flat, so every fill
    # belongs to a closed trip)
    trades = pd.read_csv(tmp_path / "m" / "trades.csv")
    xom = fills[fills.symbol == "XOM"]
    signed = np.where(xom.side == "sell", 1.0, -1.0) * xom.quantity * xom.price * 100.0
    expected = float(signed.sum() - xom.commission.sum())
    assert math.isclose(float(trades[trades.symbol == "XOM"].pnl.sum()), expected,
                        rel_tol=1e-9, abs_tol=1e-6)
