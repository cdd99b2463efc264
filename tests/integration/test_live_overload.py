"""Overload: a lossy feed far faster than the daemon. Memory stays bounded (ZeroMQ
high-water marks, market data conflated to the newest per symbol) and no order or fill is
lost between the journal and a reader of the orders socket.

CI runs the flood for 5 s; `benchmarks/live_latency.py --overload-seconds 30` is the
issue's 30-second run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.live_procs import flood


@pytest.mark.slow
@pytest.mark.alone  # the daemon must fall behind its feed: no other test's processes beside
def test_overload_memory_bounded_nothing_lost(tmp_path: Path) -> None:
    r = flood(tmp_path, seconds=5.0, n_ticks=3_000_000)
    st = r["status"]
    assert isinstance(st, dict)
    assert st["conflated"] > 0  # it was behind, and said so
    assert r["rss_peak_mb"] - r["rss_base_mb"] < 250
    assert r["journal_fills"] == st["fills"] > 0
    assert r["seen"] == {"O": r["journal_orders"], "F": r["journal_fills"]}
