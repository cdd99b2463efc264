"""The live daemon as a real process: ZeroMQ in, SQLite journal, SIGTERM, restart."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zmq

from feeds.messages import Trade
from feeds.synthetic import SyntheticMarket
from feeds.transport import Publisher
from tests.helpers import handshake_watch, trade_messages
from tests.live_procs import free_port

ROOT = Path(__file__).resolve().parents[2]


def _trades(n: int, seed: int) -> list[Trade]:
    return trade_messages(SyntheticMarket(n_symbols=3, n_ticks=n, seed=seed))


def _start(journal: Path, ticks: str, orders: str, status: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "run_engine.py"), "live", "--ticks", ticks,
         "--orders", orders, "--journal", str(journal), "--strategy", "sma-cross:5,10",
         "--device", "cpu", "--json", str(status), "--max-seconds", "120"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _seq_done(journal: Path, topic: bytes, seq: int, proc: subprocess.Popen[str]) -> None:
    """Wait until the daemon has committed `seq` of `topic` (it commits after each batch)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        try:
            with sqlite3.connect(journal) as db:
                row = db.execute("SELECT seq FROM stream_seq WHERE topic = ?", (topic,)).fetchone()
            if row and row[0] >= seq:
                return
        except sqlite3.OperationalError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"daemon did not reach {topic!r} seq {seq}")


def _stop(proc: subprocess.Popen[str], status: Path) -> dict:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "live stopped" in out
    return json.loads(status.read_text())


@pytest.mark.slow
def test_daemon_survives_bad_input_journals_and_restarts(tmp_path: Path) -> None:
    journal = tmp_path / "journal.sqlite"
    pub = Publisher("tcp://127.0.0.1:*", zmq.Context())
    orders = f"tcp://127.0.0.1:{free_port()}"
    trades = _trades(12_000, seed=5)
    first, second = trades[:8_000], trades[8_000:]

    proc = _start(journal, pub.endpoint, orders, tmp_path / "s1.json")
    pub.wait_for_subscriber(30)
    time.sleep(0.3)  # let the daemon subscribe to every topic
    for i, t in enumerate(first):
        pub.send(t)
        if i == 100:  # malformed input in the middle of the stream
            pub.send_raw(b"T.SYN000", b"\xc1 not msgpack")
            pub.send_raw(b"T.SYN000", msgspec.msgpack.encode(["T", 1, "bad"]))
            # bad content on streams of their own, so good streams keep their sequence
            pub.send(Trade(1, t.ts, "BAD1", float("nan"), 100.0))
            pub.send(Trade(1, t.ts, "BAD2", 10.0, -5.0))
    last = {t.symbol: t.seq for t in first}
    for sym, seq in last.items():
        _seq_done(journal, b"T." + sym.encode(), seq, proc)
    s1 = _stop(proc, tmp_path / "s1.json")
    assert s1["ticks"] == len(first)
    assert s1["skipped"]["undecodable"] == 1 and s1["skipped"]["wrong_schema"] == 1
    assert s1["skipped"]["bad_price"] == 1 and s1["skipped"]["bad_size"] == 1
    assert s1["orders"] > 0 and s1["fills"] > 0
    with sqlite3.connect(journal) as db:
        n_fills = db.execute("SELECT COUNT(*) FROM fills").fetchone()[0]
        n_orders = db.execute("SELECT COUNT(*) FROM orders").fetchone()[0]
    assert (n_fills, n_orders) == (s1["fills"], s1["orders"])

    # restart on the same journal: money and stream positions come back
    proc = _start(journal, pub.endpoint, orders, tmp_path / "s2.json")
    pub.wait_for_subscriber(30)
    time.sleep(0.3)
    pub.send(first[-1])  # a re-sent old message: a duplicate after the restart
    for t in second:
        pub.send(t)
    last2 = {t.symbol: t.seq for t in second}
    for sym, seq in last2.items():
        _seq_done(journal, b"T." + sym.encode(), seq, proc)
    s2 = _stop(proc, tmp_path / "s2.json")
    assert s2["skipped"].get("duplicate") == 1
    assert s2["ticks"] == len(first) + len(second)  # counters restored from the snapshot
    assert s2["restored_from"] == "snapshot"
    assert s2["fills"] >= s1["fills"] and s2["orders"] >= s1["orders"]
    with sqlite3.connect(journal) as db:
        assert db.execute("SELECT COUNT(*) FROM fills").fetchone()[0] == s2["fills"]
    pub.close()
    pub.context.term()  # its own context, not left to the garbage collector


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_daemon_publishes_option_values(tmp_path: Path, device: str) -> None:
    """With [[options]] in its config the daemon reprices the group on underlying ticks and
    publishes theoretical values on its orders endpoint: in process on the CPU, and on
    CUDA through the GPU worker process, whose spots the daemon's validation hands out."""
    from feeds.messages import OptionValue, make_decoder

    cfg = tmp_path / "engine.toml"
    cfg.write_text('[[options]]\nunderlying = "SYN000"\nstrikes = [35.0, 40.0]\n'
                   'expiries = [30]\nrights = ["C"]\nstyle = "european"\ngrid = "seed"\n'
                   'messages = "option"\n')  # per contract (the default is one per group)
    pub = Publisher("tcp://127.0.0.1:*", zmq.Context())
    orders = f"tcp://127.0.0.1:{free_port()}"
    journal = tmp_path / "j.sqlite"
    status = tmp_path / "s.json"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "run_engine.py"), "live", "--ticks", pub.endpoint,
         "--orders", orders, "--journal", str(journal), "--config", str(cfg),
         "--device", device, "--json", str(status), "--max-seconds", "120"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ctx = zmq.Context()
    values = ctx.socket(zmq.SUB)
    values.setsockopt(zmq.SUBSCRIBE, b"V.")
    joined = handshake_watch(values)
    values.connect(orders)
    pub.wait_for_subscriber(30)
    joined(30.0)  # the daemon bound its orders socket and our SUB joined it
    trades = [t for t in _trades(3_000, seed=5)]
    for t in trades:
        pub.send(t)
    last = max(t.seq for t in trades if t.symbol == "SYN000")
    _seq_done(journal, b"T.SYN000", last, proc)
    dec = make_decoder()
    got: list[Any] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(got) < 2:
        if values.poll(200):
            _topic, payload = values.recv_multipart()
            got.append(dec.decode(payload))
    _stop(proc, status)
    values.close()
    ctx.term()
    pub.close()
    pub.context.term()  # its own context, not left to the garbage collector
    assert got and all(isinstance(m, OptionValue) and m.underlying == "SYN000" for m in got)
    assert all(m.price > 0 and 0 < m.delta < 1 for m in got)
