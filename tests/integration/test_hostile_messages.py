"""Hostile single messages against the live daemon as a real process (its journal, tcp on
loopback): a trade of a new symbol 29 days ahead, frames above max_message_bytes in the
middle of the stream, lone frames. Each costs only itself: the same fills as the control."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
import zmq
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from feeds.messages import Heartbeat, Message, Trade, encode
from feeds.synthetic import SyntheticMarket
from feeds.transport import Publisher
from tests.feeds.test_validation_hypothesis import EXTREME, _frame
from tests.helpers import trade_messages
from tests.live_procs import endpoints, fills, start_daemon, stop_daemon

NS = 1_000_000_000
DAY = 86_400 * NS
N_TICKS = 6_000
T_MID = trade_messages(SyntheticMarket(n_symbols=3, n_ticks=N_TICKS, seed=5))[N_TICKS // 2].ts


def _status(path: Path, want: Any, proc: Any, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        try:
            last = json.loads(path.read_text())
            if want(last):
                return last
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"status never satisfied the condition; last: {last}")


def _journaled(journal: Path, trades: list[Trade], proc: Any, timeout: float = 60) -> None:
    """Wait until the journal holds each symbol's last trade in its stream position: the
    batch that carried it, and its fills, are committed in one transaction (a fixed half
    second before). Per topic, since a hostile seq of 2**64-1 outweighs any sum."""
    last = {f"T.{t.symbol}".encode(): t.seq for t in trades}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        try:
            with sqlite3.connect(journal) as db:
                seqs = dict(db.execute("SELECT topic, seq FROM stream_seq").fetchall())
        except sqlite3.OperationalError:
            seqs = {}
        if all(int(seqs.get(k, 0)) >= q for k, q in last.items()):
            return
        time.sleep(0.05)
    raise AssertionError(f"the journal never reached the stream's end: {last}")


def run_daemon(tmp: Path, hostile: dict[int, list[list[bytes]]]
               ) -> tuple[dict[str, Any], list[Any]]:
    """The synthetic market (3 symbols) sent to a daemon, `hostile[i]` (messages as frame
    lists) after its i-th trade. Returns the daemon's final status and its journal's
    fills."""
    tmp.mkdir(parents=True, exist_ok=True)
    trades = trade_messages(SyntheticMarket(n_symbols=3, n_ticks=N_TICKS, seed=5))
    cfg = tmp / "engine.toml"
    cfg.write_text("[live]\nconflate_above = 0\nstatus_every_seconds = 0.3\n"
                   "heartbeat_timeout_seconds = 0\nmax_message_bytes = 4096\n")
    ctx = zmq.Context()
    pub = Publisher("tcp://127.0.0.1:*", ctx)
    _, orders = endpoints()
    status = tmp / "status.json"
    d = start_daemon(tmp / "j.db", pub.endpoint, orders, tmp / "s.json", "--config", str(cfg),
                     "--status-file", str(status))
    try:
        pub.wait_for_subscriber(60)
        time.sleep(0.3)
        for i, t in enumerate(trades):
            pub.send(t)
            for frames in hostile.get(i, ()):
                pub.socket.send_multipart(frames)
        _status(status, lambda s: s["ticks"] >= len(trades), d)
        _journaled(tmp / "j.db", trades, d)  # the last batch's fills journaled
        final = stop_daemon(d, tmp / "s.json")
    finally:
        if d.poll() is None:
            d.kill()
        pub.close()
        ctx.term()
    return final, fills(tmp / "j.db")


def far_ahead_trade() -> list[bytes]:
    trades = trade_messages(SyntheticMarket(n_symbols=3, n_ticks=N_TICKS, seed=5))
    t = Trade(1, trades[len(trades) // 3].ts + 29 * DAY, "ZZZ", 50.0, 1.0)
    return [b"T.ZZZ", encode(t)]


@pytest.fixture(scope="module")
def control(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], list[Any]]:
    """The daemon on the plain stream (no hostile message)."""
    return run_daemon(tmp_path_factory.mktemp("control"), {})


@pytest.mark.slow
def test_single_hostile_messages_cost_only_themselves(
        tmp_path: Path, control: tuple[dict[str, Any], list[Any]]) -> None:
    """Control, then the same stream with: one trade of a new symbol 29 days ahead (before:
    no order after it), 3 frames above max_message_bytes (before: the connection dropped
    and the ticks behind them were lost), 300 lone frames (before: each took the next
    valid tick along). The same ticks and the same fills."""
    control_status, control_fills = control
    third = N_TICKS // 3
    hostile = {third: [far_ahead_trade()]}
    for i in range(3):  # between the limit (4096) and the hard transport cap
        hostile[third + 100 * (i + 1)] = [[b"T.BIG", b"\x95" + bytes(10_000)]]
    lone = [[b"T.SYN000"], [b"T."], [b"T.\x95\x01"]]  # lone frames the daemon subscribes to
    for i in range(300):
        hostile.setdefault(20 * i + 7, []).append(lone[i % 3])
    got, got_fills = run_daemon(tmp_path / "hostile", hostile)
    assert len(control_fills) >= 10
    assert got["ticks"] == control_status["ticks"] == N_TICKS
    assert [f[2:] for f in got_fills] == [f[2:] for f in control_fills]
    assert got["skipped"] == {"oversize": 3, "bad_framing": 300}


HOSTILE_FRAMES = st.one_of(
    EXTREME.map(lambda m: list(_frame(m))),
    st.integers(4097, 40_000).map(lambda n: [b"T.BIG", b"\x95" + bytes(n)]),  # oversize
    st.sampled_from([[b"T.SYN000"], [b"T."], [b"H."], [b"T.\x95"]]),  # lone frames
    st.lists(st.binary(max_size=16), min_size=2, max_size=4).map(lambda f: [b"T.Z", *f]),
)


@pytest.mark.slow
@settings(max_examples=1, deadline=None, phases=[Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(st.lists(HOSTILE_FRAMES, min_size=40, max_size=60))
def test_the_message_classes_through_the_daemon_and_its_journal(
        tmp_path_factory: pytest.TempPathFactory, control: tuple[dict[str, Any], list[Any]],
        hostile: list[list[bytes]]) -> None:
    """Once, small: extreme values of every kind, seq 2**64-1, sessions, oversize, lone
    and multi-frame messages spread over the stream's middle third. The daemon keeps
    running, journals, and the valid ticks after them still trade."""
    tmp = tmp_path_factory.mktemp("classes")
    last: list[Message] = [Trade(2**64 - 1, T_MID, "ZZQ", 10.0, 1.0),
                           Heartbeat(2**64 - 1, T_MID, "", False, 2**64 - 1)]
    every_class = [[b"T.BIG", b"\x95" + bytes(5000)], [b"T.SYN001"], [b"T."], [b"H."],
                   [b"T.Z", b"\x95", b"x", b"y"]]  # besides what hypothesis drew
    frames = hostile + every_class + [list(_frame(m)) for m in last]
    third = N_TICKS // 3
    inserts: dict[int, list[list[bytes]]] = {}
    for i, f in enumerate(frames):
        inserts.setdefault(third + i * (third // len(frames)), []).append(f)
    got, got_fills = run_daemon(tmp, inserts)
    assert got["ticks"] >= N_TICKS  # every valid tick (hostile trades may add theirs)
    # the valid symbols trade as in the control: the same fills at the same times (the
    # quantities may differ: accepted hostile symbols share the equity)
    def syn(rows: list[Any]) -> list[Any]:
        return [(f[2], f[3], f[4]) for f in rows if f[3].startswith("SYN")]
    assert syn(got_fills) == syn(control[1]) and len(syn(got_fills)) >= 10
