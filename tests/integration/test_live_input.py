"""The daemon as a real process against hostile and changing feeds: malformed frames,
oversized frames, restarted feeds (new sessions), silence, and operator mistakes."""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zmq

import run_engine
from feeds.messages import Heartbeat, Trade, encode
from feeds.synthetic import SyntheticMarket
from feeds.transport import Publisher
from tests.helpers import trade_messages
from tests.live_procs import ROOT, endpoints, start_daemon, stop_daemon, wait_journal_held

NS = 1_000_000_000


def _status(path: Path, want: Any, timeout: float = 30) -> dict[str, Any]:
    """Poll the daemon's status file until `want(status)` holds."""
    deadline = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            last = json.loads(path.read_text())
            if want(last):
                return last
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"status never satisfied the condition; last: {last}")


def _config(tmp: Path, extra: str = "") -> Path:
    cfg = tmp / "engine.toml"
    cfg.write_text("[live]\nstatus_every_seconds = 0.3\nheartbeat_timeout_seconds = 1.0\n"
                   "max_message_bytes = 4096\n" + extra)
    return cfg


class Malformed:
    """Seeded malformed frames of six classes, each counted under one known kind."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.seq: dict[bytes, int] = {}
        self.expected: dict[str, int] = {}

    def _next(self, topic: bytes) -> int:
        self.seq[topic] = self.seq.get(topic, 0) + 1
        return self.seq[topic]

    def frames(self) -> list[bytes]:
        r = self.r
        kind = r.choice(("undecodable", "bad_framing", "wrong_schema", "bad_price",
                         "bad_size", "unknown_kind"))
        self.expected[kind] = self.expected.get(kind, 0) + 1
        ts = 1_700_000_000 * NS
        if kind == "undecodable":  # random bytes; 0xc1 is never valid MessagePack
            return [b"T.JUNK", b"\xc1" + r.randbytes(r.randrange(0, 40))]
        if kind == "bad_framing":  # three frames instead of two
            return [b"T.JUNK", b"x" + r.randbytes(r.randrange(0, 8)), r.randbytes(3)]
        if kind == "wrong_schema":  # valid MessagePack of the wrong shape
            return [b"T.JUNK", msgspec.msgpack.encode(
                r.choice((["T", 1, "bad"], {"k": "T"}, ["T", "x", 1, "A", 1.0, 1.0], 7,
                          ["Q", 1, 2])))]
        if kind == "unknown_kind":
            return [b"Z.JUNK", msgspec.msgpack.encode(["Z", 1, ts, "A"])]
        sym = "NANP" if kind == "bad_price" else "NEGS"
        topic = f"T.{sym}".encode()
        seq = self._next(topic)  # in sequence on its own stream: only the content is bad
        if kind == "bad_price":
            price = r.choice((math.nan, math.inf, -1.0, 0.0))
            return [topic, encode(Trade(seq, ts, sym, price, 10.0))]
        return [topic, encode(Trade(seq, ts, sym, 10.0, r.choice((-5.0, 0.0, -math.inf))))]


@pytest.mark.slow
def test_100k_malformed_frames_then_trades(tmp_path: Path) -> None:
    ctx = zmq.Context()
    pub = Publisher("tcp://127.0.0.1:*", ctx)
    _, orders = endpoints()
    status = tmp_path / "status.json"
    d = start_daemon(tmp_path / "j.db", pub.endpoint, orders, tmp_path / "s.json",
                     "--config", str(_config(tmp_path)), "--status-file", str(status))
    pub.wait_for_subscriber(30)
    time.sleep(0.3)
    bad = Malformed(seed=3)
    n_bad = 100_000
    sock = pub.socket
    for _ in range(n_bad):
        sock.send_multipart(bad.frames())
    st = _status(status, lambda s: sum(s["skipped"].values()) >= n_bad)
    assert st["skipped"] == bad.expected  # every frame counted once, under its kind
    assert d.poll() is None

    # oversized frames: each counted and skipped, the connection stays (issue 24, item 3)
    for _ in range(3):
        sock.send_multipart([b"T.BIG", b"\x95" + b"\0" * 10_000])
    trades = trade_messages(SyntheticMarket(n_symbols=3, n_ticks=6_000, seed=5))
    for t in trades:
        pub.send(t)
    st = _status(status, lambda s: s["ticks"] >= len(trades))
    assert st["ticks"] == len(trades)
    assert st["fills"] > 0  # still trades
    assert st["skipped"] == {**bad.expected, "oversize": 3}
    assert st["feed_disconnects"] == 0
    final = stop_daemon(d, tmp_path / "s.json")
    assert final["ticks"] == len(trades)
    pub.close()
    ctx.term()


def _trade_stream(t0: int, n: int, seq0: int = 0) -> list[Trade]:
    return [Trade(seq0 + i + 1, t0 + i * NS, "SESS", 100.0 + (i % 7) * 0.1, 10.0)
            for i in range(n)]


@pytest.mark.slow
def test_restarted_feed_new_session_accepted_at_once_and_silence_is_stale(
        tmp_path: Path) -> None:
    _, orders = endpoints()
    status = tmp_path / "status.json"
    ctx = zmq.Context()
    pub = Publisher("tcp://127.0.0.1:*", ctx)
    endpoint = pub.endpoint
    d = start_daemon(tmp_path / "j.db", endpoint, orders, tmp_path / "s.json",
                     "--config", str(_config(tmp_path)), "--status-file", str(status))
    pub.wait_for_subscriber(30)
    time.sleep(0.3)
    t0 = 1_700_000_000 * NS
    pub.send(Heartbeat(1, t0, "", False, 111))
    for t in _trade_stream(t0, 500):
        pub.send(t)
    pub.send(Heartbeat(2, t0 + 500 * NS, "", True, 111))  # the feed's end of stream
    _status(status, lambda s: s["ticks"] == 500)
    pub.close()
    st = _status(status, lambda s: s["stale"])  # silence beyond the heartbeat timeout
    assert st["stale_episodes"] == 1 and st["feed_ended"] == 1

    # the feed restarts on the same endpoint, numbering its stream from 1 again
    pub = Publisher(endpoint, ctx)
    pub.wait_for_subscriber(30)
    time.sleep(0.3)
    pub.send(Heartbeat(1, t0 + 600 * NS, "", False, 222))
    for t in _trade_stream(t0 + 600 * NS, 300):
        pub.send(t)
    st = _status(status, lambda s: s["ticks"] == 800 and not s["stale"])
    assert st["feed_session"] == 222 and st["feed_session_changes"] == 1
    assert st["skipped"] == {}  # not one "duplicate"
    stop_daemon(d, tmp_path / "s.json")
    with sqlite3.connect(tmp_path / "j.db") as db:
        assert db.execute("SELECT seq FROM stream_seq WHERE topic = ?",
                          (b"T.SESS",)).fetchone()[0] == 300
    pub.close()
    ctx.term()


def _live(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "run_engine.py"), "live", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


def _live_in_process(*args: str) -> subprocess.CompletedProcess[str]:
    """`live` through the same entry point (run_engine.main) in this process: for mistakes
    refused before any socket, journal or daemon exists, a process start (the imports: 1.5-2 s
    of CPU, 3 s of wall time on a loaded two-core machine) adds nothing to what is tested;
    the exit code and stderr are the command's own. The process-level path is tested by the
    journal-in-use case below and by
    test_an_orders_endpoint_in_use_is_a_one_line_error_not_a_hang."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = run_engine.main(["live", *args])
    return subprocess.CompletedProcess(["live", *args], rc, "", err.getvalue())


def _one_line_error(r: subprocess.CompletedProcess[str], *words: str) -> None:
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.slow
def test_operator_mistakes_are_one_line_errors(tmp_path: Path) -> None:
    ticks, orders = endpoints()
    base = ["--strategy", "sma-cross:5,10", "--device", "cpu", "--max-seconds", "20"]
    j = tmp_path / "j.db"
    first = start_daemon(j, ticks, orders, tmp_path / "s.json")
    try:
        # until the first daemon holds the journal (the flock on the file itself: this
        # waited for a `.lock` file the journal no longer writes, 30 s every run)
        wait_journal_held(j, first)
        _, orders2 = endpoints()
        r = _live("--ticks", ticks, "--orders", orders2, "--journal", str(j), *base)
        _one_line_error(r, "in use by another daemon", f"pid {first.pid}")
    finally:
        stop_daemon(first, tmp_path / "s.json")
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE customers (id INTEGER)")
    mistake = _live_in_process  # refused before anything starts: see its docstring
    _one_line_error(mistake("--ticks", ticks, "--orders", orders, "--journal", str(foreign),
                            *base), "something else")
    with sqlite3.connect(foreign) as db:  # and it was left alone
        assert {r[0] for r in db.execute("SELECT name FROM sqlite_master")} == {"customers"}
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    _one_line_error(mistake("--ticks", ticks, "--orders", orders, "--journal",
                            str(blocker / "j.db"), *base), "cannot create")
    _one_line_error(mistake("--market-data", "tcp://nowhere", "--orders", orders, "--journal",
                            str(tmp_path / "k.db"), *base), "--market-data")
    _one_line_error(mistake("--ticks", ticks, "--orders", "tcp://10.1.2.3:5555", "--journal",
                            str(tmp_path / "k.db"), *base), "loopback")
    bad = tmp_path / "strategy.py"
    bad.write_text("this is not python(")
    _one_line_error(mistake("--ticks", ticks, "--orders", orders, "--journal",
                            str(tmp_path / "k.db"), "--strategy", str(bad), "--device", "cpu"),
                    "strategy")


def test_an_orders_endpoint_in_use_is_a_one_line_error_not_a_hang(tmp_path: Path) -> None:
    """The failed XPUB socket kept its linger and the context's term() waited on it for
    ever: `live` hung instead of saying the endpoint is taken."""
    import socket as pysocket

    with pysocket.socket() as s:  # a free port pair, taken by a plain listener
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        with pysocket.socket() as t:
            t.bind(("127.0.0.1", 0))
            ticks = t.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, str(ROOT / "run_engine.py"), "live", "--ticks",
             f"tcp://127.0.0.1:{ticks}", "--orders", f"tcp://127.0.0.1:{taken}",
             "--journal", str(tmp_path / "j.db"), "--max-seconds", "2"],
            capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr[-500:]
    assert "cannot bind --orders" in proc.stderr and "Traceback" not in proc.stderr
