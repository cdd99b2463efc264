"""ENGINE_RT_PRIORITY on the live daemon as a real process: its loop's thread under
SCHED_FIFO, its other threads (ZeroMQ's I/O) under the normal policy, trading as without;
a bad value refused in one line before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.live_procs import endpoints, fills, run_feed, start_daemon, stop_daemon, wait_processed

ROOT = Path(__file__).resolve().parents[2]


def _policies(pid: int) -> dict[int, tuple[int, int]]:
    """(scheduling policy, real-time priority) of each thread of `pid`, from /proc."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = (task / "stat").read_text().rpartition(")")[2].split()
        out[int(task.name)] = (int(fields[38]), int(fields[37]))  # stat fields 41 and 40
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="SCHED_FIFO needs root or CAP_SYS_NICE")
def test_the_daemons_loop_runs_under_sched_fifo_and_trades_as_without(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journals = {}
    for rt in ("", "3"):
        monkeypatch.setenv("ENGINE_RT_PRIORITY", rt)
        ticks, orders = endpoints()
        journal = tmp_path / f"j{rt or 'normal'}.db"
        d = start_daemon(journal, ticks, orders, tmp_path / f"s{rt}.json")
        run_feed(ticks, "--ticks", "3000")
        wait_processed(journal, 3000, d)
        threads = _policies(d.pid)
        stop_daemon(d, tmp_path / f"s{rt}.json")
        loop = threads.pop(d.pid)
        assert loop == ((os.SCHED_FIFO, 3) if rt else (os.SCHED_OTHER, 0))
        assert threads and set(threads.values()) == {(os.SCHED_OTHER, 0)}  # ZeroMQ's I/O
        journals[rt] = fills(journal)
    assert len(journals[""]) > 10 and journals["3"] == journals[""]


def test_a_bad_realtime_priority_is_one_line_before_the_daemon_starts(tmp_path: Path) -> None:
    ticks, orders = endpoints()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "run_engine.py"), "live", "--market-data", ticks, "--orders",
         orders, "--journal", str(tmp_path / "j.db"), "--max-seconds", "5"],
        env={**os.environ, "ENGINE_RT_PRIORITY": "high"}, capture_output=True, text=True,
        timeout=120, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: ENGINE_RT_PRIORITY must be a SCHED_FIFO priority from 1 to 99, got 'high'"]
    assert not (tmp_path / "j.db").exists()
