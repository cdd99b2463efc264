"""Survivorship: evolve chooses stocks by what was known at the end of training.

A stock complete over the training days but delisted in the test window used to be left out
of the window altogether (only stocks complete over train + test qualified), which flatters
the test ROI. Now it stays, and its position is closed at its last price.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import run_engine
from gpu.gp.core import CASH0, CODE_SELL
from gpu.gp.evaluate import decision_codes
from strategies.gp.representation import rules_programs
from strategies.gp.strategy_file import read_strategy_file
from strategies.gp.window import load_window
from tests.helpers import paper_money

TRAIN, TEST, STOP_AFTER = 80, 40, 12  # CCC's last bar: test day 12


def _csv(path: Path, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    days = np.busday_offset("2015-01-02", np.arange(TRAIN + TEST), roll="forward")
    rows = ["date,open,high,low,close,volume,Name"]
    for sym in ("AAA", "BBB", "CCC", "DDD"):
        c = 50.0
        n = TRAIN + STOP_AFTER + 1 if sym == "CCC" else len(days)
        for d in days[:n]:
            o = c * math.exp(rng.normal(0, 0.01))
            c = o * math.exp(rng.normal(0, 0.02))
            rows.append(f"{d},{o:.2f},{max(o, c) * 1.01:.2f},{min(o, c) * 0.99:.2f},"
                        f"{c:.2f},1000,{sym}")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_window_keeps_a_stock_that_stops_trading_in_the_test_days(tmp_path: Path) -> None:
    w = load_window(_csv(tmp_path / "d.csv", 1), 3, TRAIN, TEST)
    assert w.symbols == ["AAA", "BBB", "CCC"]  # the old window took DDD instead of CCC
    last = TRAIN + STOP_AFTER
    assert w.stopped(w.test) == {"CCC": str(w.dates[last])}
    assert w.stopped(w.train) == {}
    j = w.symbols.index("CCC")
    assert np.all(w.close[last:, j] == w.close[last, j])


def _reference_cash(codes: np.ndarray, close: np.ndarray, d0: int, d1: int, last: int) -> float:
    """The paper's money rules, with SELL forced from the stock's last bar."""
    forced = [CODE_SELL if d >= last else codes[d - d0] for d in range(d0, d1)]
    return paper_money(forced, [close[min(d, last)] for d in range(d0, d1)], close[last])


@pytest.mark.parametrize("seed", [1, 2])
def test_evolve_closes_a_delisted_stock_at_its_last_price(tmp_path: Path, seed: int) -> None:
    data = _csv(tmp_path / "d.csv", seed)
    js, best = tmp_path / "e.json", tmp_path / "b.json"
    assert run_engine.main(["evolve", "--data", str(data), "--stocks", "3", "--train-days",
                            str(TRAIN), "--test-days", str(TEST), "--population", "60",
                            "--generations", "2", "--seed", str(seed), "--device", "cpu",
                            "--quiet", "--out", str(best), "--json", str(js)]) == 0
    rep = json.loads(js.read_text())
    assert rep["test"]["symbols"] == ["AAA", "BBB", "CCC"]
    assert set(rep["test"]["stopped_trading"]) == {"CCC"}
    w = load_window(data, 3, TRAIN, TEST)
    programs, lengths = rules_programs([read_strategy_file(best).rule()])
    codes = decision_codes(programs, lengths, w.panel, w.test.day0, w.test.day1, "cpu")[0]
    assert w.last_day is not None
    want = [_reference_cash(codes[:, s], w.close[:, s], w.test.day0, w.test.day1,
                            int(w.last_day[s])) for s in range(3)]
    assert rep["test"]["roi"] == pytest.approx(float(np.mean(np.array(want) / CASH0 - 1)),
                                               abs=1e-12)
