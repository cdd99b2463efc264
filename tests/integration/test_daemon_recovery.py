"""The live daemon against single hostile messages, a second daemon, a full disk and kill -9:
real ZeroMQ sockets on loopback, real SQLite, real processes where the issue is between
processes."""

from __future__ import annotations

import asyncio
import contextlib
import io
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.asyncio

import run_engine
from engine.live.daemon import Daemon, open_sockets
from engine.live.journal import Journal
from engine.settings.config import EngineConfig
from engine.settings.live import LiveOptions
from feeds.messages import Fill, Heartbeat, Order, Trade, encode, make_decoder, topic_for
from feeds.synthetic import SyntheticMarket
from strategies.sma_cross import SmaCross
from tests.helpers import trade_messages
from tests.live_procs import (
    ROOT,
    endpoints,
    fills,
    orders,
    processed,
    run_feed,
    start_daemon,
    start_feed,
    stop_daemon,
    wait_processed,
)

TRADES = trade_messages(SyntheticMarket(n_symbols=3, n_ticks=6_000, seed=21))
U64_MAX = 2**64 - 1


def _frames(msgs: list[Any]) -> list[list[bytes]]:
    return [[topic_for(m), encode(m)] for m in msgs]


class InProcessDaemon:
    """A Daemon object on real sockets and a real journal, driven step by step."""

    def __init__(self, journal_path: Path, cfg: EngineConfig) -> None:
        self.ctx = zmq.asyncio.Context()
        self.journal = Journal(journal_path)
        ticks, self.orders_endpoint = endpoints()
        sub, out = open_sockets(self.ctx, ticks, self.orders_endpoint, cfg, [b""], None)
        self.daemon = Daemon(cfg=cfg, strategy=SmaCross(5, 10), journal=self.journal,
                             state=self.journal.load(), sub=sub, out=out, device="cpu",
                             status_file=None, max_seconds=0.0, ticks=ticks)

    def step(self, frames: list[list[bytes]]) -> None:
        asyncio.run(self.daemon._step(frames, time.perf_counter(), False))

    def close(self) -> None:
        self.daemon.close()
        self.daemon.sub.socket.close(0)
        self.daemon.out.socket.close(0)
        self.journal.close()
        self.ctx.term()


@pytest.fixture
def in_process(tmp_path: Path) -> Iterator[InProcessDaemon]:
    d = InProcessDaemon(tmp_path / "j.db", EngineConfig(bar_seconds=60.0))
    yield d
    d.close()


# ---------------------------------------------------------------- item 1
def test_a_sequence_number_of_2_64_minus_1_does_not_stop_the_daemon(
        in_process: InProcessDaemon, tmp_path: Path) -> None:
    first = TRADES[:200]
    in_process.step(_frames(first))
    t = first[-1]
    hostile = [Trade(U64_MAX, t.ts, t.symbol, t.price, t.size),
               Heartbeat(U64_MAX, t.ts, session=3),
               Trade(U64_MAX, t.ts, "NEWSYM", t.price, t.size)]
    for m in hostile:  # each alone, then together: none raises
        in_process.step(_frames([m]))
    in_process.step(_frames(hostile))
    before = in_process.daemon.engine.stats.market_data
    in_process.step(_frames(TRADES[200:400]))  # the daemon goes on taking ticks
    with sqlite3.connect(tmp_path / "j.db") as db:
        seqs = {bytes(k): int(v) for k, v in db.execute("SELECT topic, seq FROM stream_seq")}
    assert seqs == in_process.daemon.validator.last_seq
    assert in_process.daemon.engine.stats.market_data > before


# ---------------------------------------------------------------- item 7
@pytest.mark.slow
def test_a_second_daemon_on_the_same_journal_by_any_path_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "data" / "j.db"
    real.parent.mkdir()
    ticks, out = endpoints()
    first = start_daemon(real, ticks, out, tmp_path / "a.json")
    run_feed(ticks, "--ticks", "3000", "--feed-session", "4", "--count", "1500")
    wait_processed(real, 1500, first)
    link = tmp_path / "link.db"
    link.symlink_to(real)
    hard = tmp_path / "hard.db"
    hard.hardlink_to(real)
    other = tmp_path / "data" / ".." / "data" / "j.db"
    t2, o2 = endpoints()
    # the symbolic link by a real second process; the hard link and the `..` path through
    # the same command in this process (run_engine.main): the refusal is the journal's lock,
    # held by the first daemon's process either way, and a process start costs 2-3 s here
    intruder = subprocess.Popen(
        [sys.executable, str(ROOT / "run_engine.py"), "live", "--market-data", t2,
         "--orders", o2, "--journal", str(link), "--strategy", "sma-cross:5,10",
         "--device", "cpu", "--max-seconds", "20"], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    refusals = []
    for path in (hard, other):
        t2, o2 = endpoints()
        err_text = io.StringIO()
        with contextlib.redirect_stderr(err_text):
            rc = run_engine.main(["live", "--market-data", t2, "--orders", o2, "--journal",
                                  str(path), "--strategy", "sma-cross:5,10", "--device", "cpu",
                                  "--max-seconds", "20"])
        refusals.append((rc, err_text.getvalue()))
    _, err = intruder.communicate(timeout=60)
    refusals.append((intruder.returncode, err))
    for rc, err in refusals:
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1, err
        assert "in use by another daemon" in lines[0] and f"pid {first.pid}" in lines[0], err
    assert first.poll() is None  # the first daemon keeps running, and trading
    run_feed(ticks, "--ticks", "3000", "--feed-session", "4", "--skip", "1500")
    wait_processed(real, 3000, first)
    st = stop_daemon(first, tmp_path / "a.json")
    assert st["ticks"] == 3000 and processed(real) == 3000


# ---------------------------------------------------------------- item 9
def _published(endpoint: str, got: list[Any], stop: threading.Event) -> None:
    """Every order and fill the daemon publishes."""
    ctx = zmq.Context()
    s = ctx.socket(zmq.SUB)
    s.setsockopt(zmq.SUBSCRIBE, b"O.")
    s.setsockopt(zmq.SUBSCRIBE, b"F.")
    s.connect(endpoint)
    dec = make_decoder()
    while not stop.is_set() or s.poll(0):
        if s.poll(50):
            got.append(dec.decode(s.recv_multipart()[1]))
    s.close(0)
    ctx.term()


def test_a_full_disk_stops_the_daemon_with_its_cause_and_publishes_nothing_unjournaled(
        tmp_path: Path) -> None:
    # one-second bars: the journal grows with every few steps (many orders and fills)
    d = InProcessDaemon(tmp_path / "j.db", EngineConfig(bar_seconds=1.0))
    got: list[Any] = []
    stop = threading.Event()
    reader = threading.Thread(target=_published, args=(d.orders_endpoint, got, stop),
                              daemon=True)
    reader.start()
    try:
        time.sleep(0.3)  # the reader's subscription reaches the publisher
        frames = _frames(TRADES)
        at = 0
        while at < 2_500:  # trading under way before the disk fills
            d.step(frames[at:at + 64])
            at += 64
        assert d.daemon.engine.broker.fills
        pages = d.journal.db.execute("PRAGMA page_count").fetchone()[0]
        d.journal.db.execute(f"PRAGMA max_page_count = {pages + 1}")  # SQLITE_FULL, for real
        with pytest.raises(sqlite3.OperationalError) as err:
            while at < len(frames):
                d.step(frames[at:at + 64])
                at += 64
        assert "full" in str(err.value) and "rollback" not in str(err.value)
        assert not d.journal.db.in_transaction
        time.sleep(0.5)
    finally:
        stop.set()
        reader.join(5)
        d.close()
    journal = Journal(tmp_path / "j.db")
    state = journal.load()
    journal.close()
    orders = {o.order_id: o for o in state.orders}
    by_id = {f.fill_id: f for f in state.fills}
    assert got  # orders and fills went out before the disk filled
    for m in got:  # each one published is journaled, as published
        if isinstance(m, Order):
            assert orders[m.order_id] == m
        else:
            assert isinstance(m, Fill)
            f = by_id[m.fill_id]
            assert (f.order_id, f.ts, f.side, f.quantity, f.price) == (
                m.order_id, m.ts, m.side, m.quantity, m.price)


def _limit_file_size() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))


@pytest.mark.slow
def test_an_io_error_is_one_line_naming_the_cause_and_exit_code_3(tmp_path: Path) -> None:
    """A real write error: files of this process may not grow beyond 256 KiB, so the
    journal's write-ahead log hits EFBIG (SQLITE_IOERR_WRITE) as the daemon trades."""
    j = tmp_path / "j.db"
    ticks, out = endpoints()
    cfg = tmp_path / "engine.toml"
    cfg.write_text("[live]\nconflate_above = 0\n")
    d = subprocess.Popen(
        [sys.executable, str(ROOT / "run_engine.py"), "live", "--market-data", ticks,
         "--orders", out, "--journal", str(j), "--strategy", "sma-cross:5,10", "--device", "cpu",
         "--config", str(cfg), "--max-seconds", "60"], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=_limit_file_size)
    feed = subprocess.Popen(
        [sys.executable, str(ROOT / "run_engine.py"), "feed", "--publish", ticks,
         "--n-symbols", "3", "--seed", "5", "--wait", "30", "--ticks", "60000"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = d.communicate(timeout=120)
    feed.kill()
    feed.communicate(timeout=30)
    last = err.strip().splitlines()[-1]
    assert d.returncode == 3, err
    assert last.startswith("error: journal ") and "disk I/O error" in last, err
    assert "Traceback" not in err and "cannot rollback" not in err


# ---------------------------------------------------------------- item 12
KILL_N = 8_000


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The journal of the run that never stopped, made once for both kill -9 cases (a
    daemon and 8,000 messages fewer). Its snapshots come every 10 bars (the default), the
    killed runs' every 5 or never: snapshots are not part of trading, so the fills must
    equal across cadences too."""
    tmp = tmp_path_factory.mktemp("uninterrupted")
    cfg = tmp / "engine.toml"
    cfg.write_text("[live]\nconflate_above = 0\n")
    ref = tmp / "ref.db"
    ticks, out = endpoints()
    d = start_daemon(ref, ticks, out, tmp / "ref.json", "--config", str(cfg))
    # no wall-clock heartbeats: the stream is the same messages however it is paced
    run_feed(ticks, "--ticks", str(KILL_N), "--feed-session", "7", "--heartbeat", "0")
    wait_processed(ref, KILL_N, d)
    stop_daemon(d, tmp / "ref.json")
    return ref


@pytest.mark.slow
@pytest.mark.parametrize(("snapshot_every_bars", "seed"), [(5, 3), (10**9, 4)])
def test_kill_9_and_resume_make_exactly_the_fills_of_the_uninterrupted_run(
        tmp_path: Path, uninterrupted: Path, snapshot_every_bars: int, seed: int) -> None:
    """Killed mid-stream (after some snapshots, or before the first), restarted, the feed
    resumed from the journaled position: every order and fill equals the run that never
    stopped (they diverged before the input log: 306 fills against 318)."""
    cfg = tmp_path / "engine.toml"
    cfg.write_text(f"[live]\nsnapshot_every_bars = {snapshot_every_bars}\n"
                   "conflate_above = 0\n")
    ref = uninterrupted
    assert len(fills(ref)) > 20  # the stream trades: the comparison means something

    j = tmp_path / "j.db"
    ticks, out = endpoints()
    d = start_daemon(j, ticks, out, tmp_path / "a.json", "--config", str(cfg))
    feed = start_feed(ticks, "--ticks", str(KILL_N), "--feed-session", "7", "--rate", "4000",
                      "--heartbeat", "0")
    wait_processed(j, random.Random(seed).randint(2_000, KILL_N - 2_500), d)
    d.send_signal(signal.SIGKILL)
    d.wait(10)
    feed.kill()
    feed.communicate(timeout=30)
    done = processed(j)
    assert 0 < done < KILL_N
    ticks, out = endpoints()
    d = start_daemon(j, ticks, out, tmp_path / "b.json", "--config", str(cfg))
    run_feed(ticks, "--ticks", str(KILL_N), "--feed-session", "7", "--skip", str(done),
             "--heartbeat", "0")
    wait_processed(j, KILL_N, d)
    st = stop_daemon(d, tmp_path / "b.json")
    assert d.stderr is not None
    assert st["skipped"] == {}
    assert fills(j) == fills(ref)
    assert orders(j) == orders(ref)


def _run_in_process(path: Path, frames: list[list[bytes]], cfg: EngineConfig) -> InProcessDaemon:
    """A daemon that takes `frames` and is then dropped without a shutdown snapshot (what
    kill -9 leaves: the journal as of its last commit)."""
    d = InProcessDaemon(path, cfg)
    asyncio.run(d.daemon.recover())
    for i in range(0, len(frames), 64):
        d.step(frames[i:i + 64])
    return d


def test_the_logged_input_rebuilds_the_state_a_kill_left_in_process(tmp_path: Path) -> None:
    cfg = EngineConfig(bar_seconds=60.0, live=LiveOptions(snapshot_every_bars=5))
    frames = _frames(TRADES)
    ref = _run_in_process(tmp_path / "ref.db", frames, cfg)
    ref.close()
    cut = 3_331
    _run_in_process(tmp_path / "j.db", frames[:cut], cfg).close()  # "killed" here
    again = _run_in_process(tmp_path / "j.db", frames[cut:], cfg)
    assert again.daemon.restored == "snapshot"
    again.close()
    assert fills(tmp_path / "j.db") == fills(tmp_path / "ref.db")
    assert len(fills(tmp_path / "ref.db")) > 10


def test_a_replay_that_differs_from_the_journal_falls_back_to_the_journaled_fills(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = EngineConfig(bar_seconds=60.0, live=LiveOptions(snapshot_every_bars=10**9))
    path = tmp_path / "j.db"
    _run_in_process(path, _frames(TRADES[:4_000]), cfg).close()
    rows = fills(path)
    assert rows  # traded before the "kill", with no snapshot: the log holds everything
    with sqlite3.connect(path) as db:  # the journal says the last fill was larger
        db.execute("UPDATE fills SET quantity = quantity + 1 WHERE fill_id = ?", (rows[-1][0],))
    d = InProcessDaemon(path, cfg)
    assert d.daemon.restored == "log"
    asyncio.run(d.daemon.recover())
    assert d.daemon.restored == "cold"
    assert "re-applying the logged input made" in caplog.text
    pos: dict[str, float] = {}
    for r in fills(path):
        pos[r[3]] = pos.get(r[3], 0.0) + r[4] * r[5]
    held = {s: a.position for s, a in zip(d.daemon.engine.symbols,
                                          d.daemon.engine.broker.accounts, strict=True)}
    assert {s: p for s, p in held.items() if p} == {s: p for s, p in pos.items() if p}
    d.close()


# ------------------------------------------- held messages across a snapshot (item 12)
DAY_NS = 86_400 * 10**9


def _daily_bar_chunks(days: int, symbols: tuple[str, ...]) -> list[list[list[bytes]]]:
    """Daily bars of `symbols` (a random walk each), in steps that each end with the first
    bar of a new day: the validator holds that bar (ahead of the clock by a day) until the
    second symbol's bar agrees, which comes only in the next step."""
    from feeds.messages import Bar

    rng = random.Random(12)
    price = {s: 50.0 + 10 * i for i, s in enumerate(symbols)}
    t0 = 1_700_000_000 * 10**9
    by_day = []
    for d in range(days):
        day = []
        for s in symbols:
            p = price[s]
            c = p * (1 + rng.gauss(0.0, 0.03))
            price[s] = c
            day.append(Bar(d + 1, t0 + d * DAY_NS, s, p, max(p, c) * 1.01,
                           min(p, c) * 0.99, c, 1e5, DAY_NS))
        by_day.append(day)
    chunks = [_frames(by_day[0] + by_day[1][:1])]
    for d in range(1, days):
        chunks.append(_frames(by_day[d][1:] + by_day[d + 1][:1] if d + 1 < days
                              else by_day[d][1:]))
    return chunks


def test_messages_held_at_a_snapshot_survive_a_kill(tmp_path: Path) -> None:
    """A daily-bar stream, each day's first bar held until a second symbol agrees, killed
    right after a snapshot taken while a bar was held: the restart holds it again and makes
    exactly the uninterrupted run's fills (the snapshot lost it before: the input log is
    emptied at a snapshot)."""
    cfg = EngineConfig(bar_seconds=86_400.0, live=LiveOptions(snapshot_every_bars=1))
    chunks = _daily_bar_chunks(160, ("AAA", "BBB", "CCC", "DDD"))

    def run(path: Path, steps: list[list[list[bytes]]]) -> InProcessDaemon:
        d = InProcessDaemon(path, cfg)
        asyncio.run(d.daemon.recover())
        for frames in steps:
            d.step(frames)
        return d

    ref = run(tmp_path / "ref.db", chunks)
    ref_bars = ref.daemon.engine.stats.bars
    ref.close()
    assert len(fills(tmp_path / "ref.db")) > 10
    cut = 97
    killed = run(tmp_path / "j.db", chunks[:cut])  # dropped: no shutdown snapshot
    assert killed.daemon.validator.held == 1
    with sqlite3.connect(tmp_path / "j.db") as db:  # killed right after a snapshot
        gen = db.execute("SELECT value FROM meta WHERE key = 'input_log_gen'").fetchone()[0]
        assert db.execute("SELECT count(*) FROM input_steps WHERE gen = ?",
                          (int(gen),)).fetchone()[0] == 0
    killed.close()
    again = run(tmp_path / "j.db", [])
    assert again.daemon.restored == "snapshot"
    assert again.daemon.validator.held == 1
    for frames in chunks[cut:]:
        again.step(frames)
    assert again.daemon.engine.stats.bars == ref_bars
    again.close()
    assert fills(tmp_path / "j.db") == fills(tmp_path / "ref.db")
    assert orders(tmp_path / "j.db") == orders(tmp_path / "ref.db")


# ---------------------------------------------------------------- status and skip logs
def test_the_status_shows_messages_held_ahead_of_the_clock(tmp_path: Path) -> None:
    import json

    d = InProcessDaemon(tmp_path / "j.db", EngineConfig(bar_seconds=86_400.0))
    try:
        chunks = _daily_bar_chunks(3, ("AAA", "BBB", "CCC"))
        d.step(chunks[0])  # day 0, and day 1's first bar: held
        d.daemon.status_file = tmp_path / "status.json"
        d.daemon.write_status()
        first = json.loads((tmp_path / "status.json").read_text())
        # day 1's second bar is held too, and agrees: both released; day 2's first held
        d.step(chunks[1])
        second = d.daemon.status()
    finally:
        d.close()
    assert first["validator"] == {"held_ahead": 1, "held": 1}
    assert second["validator"] == {"held_ahead": 3, "held": 1}
    assert list(first).index("validator") == list(first).index("skipped") + 1


def test_every_skip_log_states_its_true_count(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Undecodable frames in three steps: the first is logged at once without a count
    that reads as the total, the status counts all of them as they come, and the daemon's
    close logs the true total (it said "skipped 1 record(s)" for thousands)."""
    d = InProcessDaemon(tmp_path / "j.db", EngineConfig(bar_seconds=60.0))
    frames = _frames(TRADES[:300])
    try:
        with caplog.at_level("WARNING"):
            for k in range(3):  # 1, 2, 3 undecodable frames: 6 in all
                d.step(frames[100 * k:100 * k + 100] + [[b"T.X", b"\xc1"]] * (k + 1))
                if k == 0:
                    assert d.daemon.status()["skipped"] == {"undecodable": 1}
            assert d.daemon.status()["skipped"] == {"undecodable": 6}
            during = [r.getMessage() for r in caplog.records
                      if "undecodable" in r.getMessage()]
    finally:
        with caplog.at_level("WARNING"):
            d.close()
    assert len(during) == 1 and "record(s)" not in during[0], during
    totals = [r.getMessage() for r in caplog.records if "undecodable" in r.getMessage()]
    assert totals[-1].startswith("skipped 6 record(s): undecodable"), totals
