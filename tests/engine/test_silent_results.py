"""Issue 25's silent results, each checked against what it should have said.

Next-open fills on daily bars stamped at the next bar's open (not the signal bar's close),
the report's `trades` counting round trips, the SPY-style options replay naming its options
in the summary, and `ising` at small sizes finding the U4 crossing its plot shows. (Epoch
second/millisecond tick CSVs: tests/feeds/test_data_in.py.)
"""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pytest

import run_engine
from tests.helpers import daily_csv

NEW_YORK = ZoneInfo("America/New_York")


def _replay(tmp_path: Path, *argv: str) -> tuple[dict, Path]:
    out = tmp_path / "out"
    assert run_engine.main(["replay", *argv, "--device", "cpu", "--out", str(out),
                            "--no-plots"]) == 0
    return json.loads((out / "report.json").read_text()), out


def test_next_open_fills_on_daily_bars_are_stamped_at_the_open(tmp_path: Path) -> None:
    data = daily_csv(tmp_path / "d.csv", 120, seed=9)
    report, out = _replay(tmp_path, "--data", str(data), "--strategy", "sma-cross:5,25")
    assert report["fill"] == "next-open" and report["fills"] > 0
    opens: dict[tuple[str, str], float] = {}
    with open(data) as fh:
        for row in csv.DictReader(fh):
            opens[(row["Name"], row["date"])] = float(row["open"])
    with open(out / "fills.csv") as fh:
        fills = list(csv.DictReader(fh))
    last_close = max(int(f["ts"]) for f in fills)
    # every fill but the end of data's liquidation (at the last close, by design)
    fills = [f for f in fills if int(f["ts"]) != last_close]
    assert len(fills) > 5
    for f in fills:
        local = datetime.fromtimestamp(int(f["ts"]) / 1e9, UTC).astimezone(NEW_YORK)
        # the open of the day whose open price it paid: 09:30 New York, not 16:00
        assert (local.hour, local.minute) == (9, 30), f
        assert float(f["price"]) == opens[(f["symbol"], local.date().isoformat())]


def test_report_trades_counts_round_trips(tmp_path: Path) -> None:
    report, out = _replay(tmp_path, "--ticks", "20000", "--n-symbols", "3")
    with open(out / "trades.csv") as fh:
        trips = list(csv.DictReader(fh))
    assert report["trades"] == len(trips) == report["round_trips"]
    # the market data's trade messages, under their own name
    assert report["market_trades"] == 20000 > report["trades"]


def test_options_replay_summary_names_its_options(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "engine.toml"
    cfg.write_text('bar_seconds = 60\n[[options]]\nunderlying = "SYN001"\n'
                   'strikes = [20.0, 30.0]\nexpiries = [60]\nstyle = "american"\n')
    js = tmp_path / "r.json"
    assert run_engine.main(["replay", "--ticks", "4000", "--n-symbols", "2", "--config",
                            str(cfg), "--device", "cpu", "--json", str(js)]) == 0
    opts = json.loads(js.read_text())["options"]
    line = next(x for x in capsys.readouterr().out.splitlines() if "options:" in x)
    assert f"{opts['repricings']:,} repricings" in line
    assert f"{opts['coalesced_ticks']:,} coalesced" in line
    assert f"p50 {opts['latency_us_p50']:,.0f} µs" in line
    assert f"{opts['options']:,} contracts" in line


def test_ising_small_sizes_find_the_crossing_the_curves_show(tmp_path: Path) -> None:
    """L = 8 and 16 with 2,000 sweeps over the default scan: U4 - U4 changes sign several
    times in the noise, and the old local fit said "no crossing"."""
    js = tmp_path / "i.json"
    assert run_engine.main(["ising", "--device", "cpu", "--size", "8", "16", "--sweeps",
                            "2000", "--seed", "1", "--json", str(js)]) == 0
    out = json.loads(js.read_text())
    temps = sorted({r["T"] for r in out["results"]})
    assert out["tc"] is not None and temps[0] <= out["tc"] <= temps[-1]
    # the curves do cross there: U4(16) - U4(8) is above zero on average below tc and
    # below zero above it
    u = {L: np.array([r["binder"] for r in out["results"] if r["L"] == L]) for L in (8, 16)}
    d, t = u[16] - u[8], np.array(temps)
    assert d[t < out["tc"]].mean() > 0 > d[t > out["tc"]].mean()
    assert abs(out["tc"] - 2.269185) < 5 * out["tc_err"] + 0.02

