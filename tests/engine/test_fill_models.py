"""Fill models: signal-close (the GP paper's), next-open (the default for bars), next-tick.

Fills are checked against a reference computed independently with pandas (the next bar's
open by shifting), and the GP evaluator's next-open evaluation against a plain Python loop.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import run_engine
from engine.settings.config import BrokerConfig, EngineConfig
from engine.trading.core import Engine
from feeds.messages import Bar
from gpu.gp.core import CODE_BUY, CODE_SELL
from gpu.gp.evaluate import cash_from_codes
from strategies.gp.strategy import next_open_prices
from tests.helpers import daily_csv, paper_money

NS = 1_000_000_000
DAY = 86_400 * NS


class Pattern:
    """Long-only signals of one fixed pattern per bar event (the same for every symbol)."""

    name = "pattern"
    long_only = True
    enter_on_from_zero = True

    def __init__(self, pattern: list[int]) -> None:
        self.pattern = pattern
        self.k = 0

    def reset(self, symbols: list[str]) -> None:
        self.n = len(symbols)

    async def target_signals(self, features: np.ndarray, closed: np.ndarray) -> np.ndarray:
        s = self.pattern[self.k % len(self.pattern)]
        self.k += 1
        return np.full(closed.size, s, np.int8)


def _bars(seed: int, n: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for sym in ("A", "B"):
        c = 50.0
        for k in range(n):
            o = c * math.exp(rng.normal(0, 0.01))
            c = o * math.exp(rng.normal(0, 0.01))
            rows.append({"k": k, "ts": (1_700_000_000 + 20 * 3600) * NS + k * DAY,
                         "symbol": sym, "open": o, "high": max(o, c) * 1.01,
                         "low": min(o, c) * 0.99, "close": c})
    return pd.DataFrame(rows).sort_values(["k", "symbol"], kind="stable")


def _run(bars: pd.DataFrame, fill: str, pattern: list[int]) -> Engine:
    eng = Engine(["A", "B"], Pattern(pattern),
                 EngineConfig(broker=BrokerConfig(fill=fill)))  # type: ignore[arg-type]
    seq = {"A": 0, "B": 0}
    msgs = []
    for r in bars.itertuples():
        seq[r.symbol] += 1
        msgs.append(Bar(seq[r.symbol], int(r.ts), r.symbol, r.open, r.high, r.low, r.close,
                        100.0, DAY))

    async def go() -> None:
        await eng.process(msgs)
        await eng.finish()

    asyncio.run(go())
    return eng


@pytest.mark.parametrize("seed", range(3))
def test_fill_prices_match_a_pandas_reference(seed: int) -> None:
    bars = _bars(seed)
    pattern = [0, 1, 1, 1, 0, 0, 1, 0]
    for fill in ("signal-close", "next-open", "auto"):
        eng = _run(bars, fill, pattern)
        assert eng.fill_model == ("signal-close" if fill == "signal-close" else "next-open")
        for sym, g in bars.groupby("symbol"):
            g = g.set_index("k")
            # reference: orders at bar k (the signal's change), filled at close k or open k+1
            sig = pd.Series([pattern[k % len(pattern)] for k in g.index], index=g.index)
            change = sig.diff().fillna(sig.iloc[0]).ne(0)
            order_bars = list(g.index[change.to_numpy()])
            fills = [f for f in eng.broker.fills if f.symbol == sym]
            last = g.index[-1]
            want = []
            for k in order_bars:
                if fill == "signal-close":
                    want.append(g.loc[k, "close"])
                else:
                    nxt = g["open"].shift(-1)
                    want.append(nxt[k] if k < last else g.loc[last, "close"])
            if sig.iloc[-1] == 1:  # the end of data liquidates at the last close
                want.append(g.loc[last, "close"])
            got = [f.price for f in fills]
            assert got == pytest.approx(want, rel=0, abs=1e-12), (fill, sym)


def test_gp_next_open_money_matches_a_plain_loop() -> None:
    """The evaluator's money rules on next-open prices equal a loop written here."""
    rng = np.random.default_rng(5)
    n_days, n_stocks = 60, 4
    close = 40 * np.exp(np.cumsum(rng.normal(0, 0.02, (n_days, n_stocks)), axis=0))
    open_ = close * np.exp(rng.normal(0, 0.01, (n_days, n_stocks)))
    codes = rng.choice([0, CODE_BUY, CODE_SELL, 3], size=(n_days - 10, n_stocks)).astype(np.int8)
    d0, d1 = 5, 55
    got = cash_from_codes(codes, next_open_prices(open_, close, d0, d1), d0, d1)
    for s in range(n_stocks):
        prices = [open_[d + 1, s] if d + 1 < d1 else close[d1 - 1, s] for d in range(d0, d1)]
        want = paper_money(codes[:, s], prices, close[d1 - 1, s])
        assert got[s] == pytest.approx(want, abs=1e-9)


def _daily_csv(path: Path) -> Path:
    return daily_csv(path, 120, seed=9)


def test_replay_default_for_bars_is_next_open_and_the_report_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _daily_csv(tmp_path / "d.csv")
    reports = {}
    for fill in (None, "signal-close"):
        out = tmp_path / str(fill)
        argv = ["replay", "--data", str(data), "--strategy", "sma-cross:5,25,long-only",
                "--device", "cpu", "--out", str(out), "--no-plots"]
        assert run_engine.main(argv + (["--fill", fill] if fill else [])) == 0
        reports[fill] = json.loads((out / "report.json").read_text())
        assert f"fills: {fill or 'next-open'}" in capsys.readouterr().out
    assert reports[None]["fill"] == "next-open"
    assert reports["signal-close"]["fill"] == "signal-close"
    assert reports[None]["fills"] > 0
    assert reports[None]["final_equity"] != reports["signal-close"]["final_equity"]
    out = tmp_path / "ticks"
    assert run_engine.main(["replay", "--ticks", "3000", "--n-symbols", "2", "--device", "cpu",
                            "--out", str(out), "--no-plots"]) == 0
    assert json.loads((out / "report.json").read_text())["fill"] == "next-tick"


def test_evolve_reports_the_paper_model_and_next_open(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    data = _daily_csv(tmp_path / "d.csv")
    js = tmp_path / "e.json"
    assert run_engine.main(["evolve", "--data", str(data), "--stocks", "3", "--train-days",
                            "80", "--test-days", "30", "--population", "40", "--generations",
                            "2", "--device", "cpu", "--quiet", "--out",
                            str(tmp_path / "b.json"), "--json", str(js)]) == 0
    rep = json.loads(js.read_text())
    assert rep["fill_model"] == "signal-close"
    for part in ("train", "test"):
        assert math.isfinite(rep[part]["roi_next_open"])
    assert "signal-close" in capsys.readouterr().out
