"""The columnar replay (trade batches, feeds/trade_batch.py) against the one-tick replay over
the real LEAN tick files: the same report, fills, trades and equity curve, to the byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import run_engine
from engine.reporting.report import TIMING_KEYS

TICKS = "lean_ticks_2013-10/equity/usa/tick"


def _replay(out: Path, data: list[Path], frame_ticks: int, *extra: str) -> dict:
    args = ["replay", *[a for d in data for a in ("--data", str(d))], "--frame-ticks",
            str(frame_ticks), "--out", str(out), *extra]
    assert run_engine.main(args) == 0
    return json.loads((out / "report.json").read_text())


def _same_outputs(a: Path, b: Path) -> None:
    ra = json.loads((a / "report.json").read_text())
    rb = json.loads((b / "report.json").read_text())
    assert {k: v for k, v in ra.items() if k not in TIMING_KEYS} == \
        {k: v for k, v in rb.items() if k not in TIMING_KEYS}
    for name in ("fills.csv", "trades.csv", "equity.csv"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.mark.slow
def test_spy_and_bac_batched_over_ipc_equal_one_tick_messages(
        shared_data: Path, tmp_path: Path) -> None:
    """The README's LEAN example (SPY + BAC trades, 7-11 Oct 2013, sma-cross, next-tick
    fills: every fill is a flagged tick) over ipc, batches against one tick per message."""
    data = [shared_data / TICKS / "spy", shared_data / TICKS / "bac"]
    batched = _replay(tmp_path / "batched", data, 4096, "--transport", "ipc")
    one = _replay(tmp_path / "one", data, 0, "--transport", "ipc")
    _same_outputs(tmp_path / "batched", tmp_path / "one")
    assert batched["ticks"] > 2_000_000 and one["fills"] > 100
    assert batched["messages_received"] == one["messages_received"]


@pytest.mark.parametrize("extra", [
    ("--session", "10:00,15:00,15:50", "--fill", "signal-close"),
    ("--bar-seconds", "7", "--fill", "next-tick", "--frame-ticks", "333"),
])
def test_one_day_of_spy_batched_equals_one_tick_with_sessions_and_odd_frames(
        shared_data: Path, tmp_path: Path, extra: tuple[str, ...]) -> None:
    """One day of SPY through inproc with a session schedule (STOP at the day's end) or
    short bars and frames that do not divide the chunks: bar boundaries and flagged ticks
    fall anywhere inside a frame."""
    day = [shared_data / TICKS / "spy" / "20131008_trade.zip"]
    _replay(tmp_path / "one", day, 0, *extra[:4])
    frame = extra[5] if len(extra) > 4 else "4096"
    rep = _replay(tmp_path / "batched", day, int(frame), *extra[:4])
    assert rep["fills"] > 10 and rep["bars"] > 300
    _same_outputs(tmp_path / "batched", tmp_path / "one")
