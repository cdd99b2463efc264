"""The columnar replay (trade batches, feeds/trade_batch.py) against the one-tick replay over
the real LEAN tick files: the same report, fills, trades and equity curve, to the byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import run_engine
from engine.reporting.report import TIMING_KEYS

TICKS = "lean_ticks_2013-10/equity/usa/tick"


def _replay(out: Path, data: list[Path], frame_ticks: int, *extra: str,
            plots: bool = False) -> dict:
    """The outputs compared are the numbers files: equity.png and report.html are drawn only
    where `plots` (the one-day batched replays: the tearsheet of LEAN ticks stays tested)."""
    args = ["replay", *[a for d in data for a in ("--data", str(d))], "--frame-ticks",
            str(frame_ticks), "--out", str(out), *extra, *([] if plots else ["--no-plots"])]
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
    rep = _replay(tmp_path / "batched", day, int(frame), *extra[:4], plots=True)
    assert rep["fills"] > 10 and rep["bars"] > 300
    _same_outputs(tmp_path / "batched", tmp_path / "one")


def test_the_raw_limit_counts_every_tick_batched_or_not() -> None:
    """The receive-and-decode floor the replay is compared with (benchmarks/
    replay_throughput.py) decodes the same stream whether trades travel one per message
    (in-process) or in batch frames from a feed process (whose set-up it waits for before
    its clock starts: `_Feed.wait_ready`): the same number of records either way, and the
    replay of the same source receives as many."""
    import asyncio
    import functools

    from engine.trading.core import EngineConfig
    from engine.trading.replay import raw_limit_async, replay_async
    from feeds.synthetic import SyntheticMarket
    from strategies.sma_cross import SmaCross

    factory = functools.partial(SyntheticMarket, n_symbols=5, n_ticks=3_000, seed=3)
    one, t_one = asyncio.run(raw_limit_async(factory, "inproc", 0))
    batched, t_batched = asyncio.run(raw_limit_async(factory, "ipc", 64))
    res = asyncio.run(replay_async(factory, SmaCross(), EngineConfig(replay_frame_ticks=64)))
    assert one == batched and t_one > 0 and t_batched > 0
    assert res.received == batched
    assert res.engine.stats.trades == 3_000
