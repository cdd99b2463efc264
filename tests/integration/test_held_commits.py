"""The live daemon's steps and commits (issue 27): steps that publish nothing leave their
journal transaction open (`[live] commit_within_ms`, `Daemon.commit_held`) with the same
journal rows as a commit per step, every order and fill committed before it is published,
a kill with a transaction open resuming from the committed stream positions exactly as an
uninterrupted run; a step ends at the trade that closes a bar; the WAL is checkpointed by
the daemon, never inside a commit. Real ZeroMQ sockets on loopback, real SQLite files, the
daemon's own `_batch`."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import zmq.asyncio

from engine.live.daemon import Daemon, _frames_decoder, open_sockets
from engine.live.journal import Journal
from engine.settings.config import BrokerConfig, EngineConfig
from engine.settings.live import LiveOptions
from feeds.messages import encode, topic_for
from feeds.synthetic import SyntheticMarket
from strategies.sma_cross import SmaCross
from tests.helpers import trade_messages
from tests.live_procs import endpoints, fills, orders

FRAMES = [[topic_for(m), encode(m)]
          for m in trade_messages(SyntheticMarket(n_symbols=4, n_ticks=8_000, seed=5))]


def _cfg(commit_within_ms: float) -> EngineConfig:
    return EngineConfig(bar_seconds=20.0, broker=BrokerConfig(sizing="fixed", quantity=5.0),
                        live=LiveOptions(snapshot_every_bars=7,
                                         commit_within_ms=commit_within_ms))


class Driven:
    """A Daemon on real sockets and a real journal, fed batches as its loop feeds them."""

    def __init__(self, path: Path, cfg: EngineConfig) -> None:
        self.path = path
        self.ctx = zmq.asyncio.Context()
        self.journal = Journal(path)
        ticks, out_ep = endpoints()
        self.sub, self.out = open_sockets(self.ctx, ticks, out_ep, cfg, [b""], None)
        self.d = Daemon(cfg=cfg, strategy=SmaCross(5, 10), journal=self.journal,
                        state=self.journal.load(), sub=self.sub, out=self.out, device="cpu",
                        status_file=None, max_seconds=0.0, ticks=ticks)
        asyncio.run(self.d.recover())

    def batch(self, frames: list[list[bytes]]) -> None:
        asyncio.run(self.d._batch(frames, time.perf_counter()))

    def close(self) -> None:
        """Without `commit_held`: what a kill leaves (an open transaction rolls back)."""
        self.d.close()
        self.sub.close()
        self.out.close()
        self.journal.close()
        self.ctx.destroy(linger=0)


def _committed(path: Path) -> dict[str, Any]:
    """What another process reads from the journal now (committed rows only)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return {"orders": db.execute("SELECT COALESCE(MAX(order_id), 0) FROM orders")
                .fetchone()[0],
                "fills": db.execute("SELECT COUNT(*) FROM fills").fetchone()[0],
                "seqs": {bytes(t): int(s) for t, s in
                         db.execute("SELECT topic, seq FROM stream_seq")}}


def test_held_steps_journal_the_same_rows_and_publish_only_what_is_committed(
        tmp_path: Path) -> None:
    exports = []
    for ms in (0.0, 10_000.0):  # every step commits; steps hold until something publishes
        run = Driven(tmp_path / f"j{ms:g}.db", _cfg(ms))
        held = 0
        for i in range(0, len(FRAMES), 3):
            run.batch(FRAMES[i:i + 3])
            seen = _committed(run.path)
            # every order and fill made is committed (and published): a step with one
            # never holds, and a held one made none
            assert seen["orders"] == run.d.engine.broker._order_id == run.d.orders_out
            assert seen["fills"] == len(run.d.engine.broker.fills) == run.d.fills_out
            if run.d._held_since is not None:
                held += 1
                assert seen["seqs"] != run.d.validator.last_seq  # really not committed yet
            else:
                assert seen["seqs"] == run.d.validator.last_seq
        run.d.commit_held()
        assert _committed(run.path)["seqs"] == run.d.validator.last_seq
        assert (held > 500) is (ms > 0)
        exported = run.journal.export()
        run.close()
        exports.append(exported)
    a, b = exports
    assert len(a["orders"]) > 20 and len(a["fills"]) > 20
    for key in ("orders", "fills", "positions", "cash", "risk_events", "streams",
                "order_states", "snapshot"):
        assert a[key] == b[key], key


def test_a_kill_with_a_transaction_held_resumes_where_the_journal_says(tmp_path: Path) -> None:
    """Killed with steps uncommitted: the restart re-applies the committed input, and the
    stream resumed after the committed positions (`feed --skip`) trades exactly as a run
    that never stopped."""
    cfg = _cfg(10_000.0)
    ref = Driven(tmp_path / "ref.db", cfg)
    for i in range(0, len(FRAMES), 3):
        ref.batch(FRAMES[i:i + 3])
    ref.d.commit_held()
    ref.close()

    first = Driven(tmp_path / "j.db", cfg)
    committed_upto = 0
    for i in range(0, 5_000, 3):
        first.batch(FRAMES[i:i + 3])
        if first.d._held_since is None:
            committed_upto = min(i + 3, 5_000)
    assert first.d._held_since is not None and committed_upto < 5_000  # killed while held
    first.close()
    again = Driven(tmp_path / "j.db", cfg)
    assert sum(again.d.validator.last_seq.values()) == committed_upto  # one seq per frame
    for i in range(committed_upto, len(FRAMES), 3):
        again.batch(FRAMES[i:i + 3])
    again.d.commit_held()
    assert again.d.validator.skipped.counts == {}  # no gap, no duplicate
    again.close()
    assert orders(tmp_path / "j.db") == orders(tmp_path / "ref.db")
    assert fills(tmp_path / "j.db") == fills(tmp_path / "ref.db")
    assert len(fills(tmp_path / "ref.db")) > 20


def test_the_wal_is_checkpointed_by_the_daemon_after_publishing_never_inside_a_commit(
        tmp_path: Path) -> None:
    """SQLite's own checkpoint (inside the commit that takes the WAL past 1000 pages:
    milliseconds on that commit, an order's too) is off; the daemon's, after publishing,
    keeps the WAL from growing: 3,000 commits of a page or more each would write 12 MB of
    WAL frames without one."""
    run = Driven(tmp_path / "j.db", _cfg(0.0))  # every step commits
    assert run.journal.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    for i in range(3_000):
        run.batch(FRAMES[i:i + 1])
    wal = (tmp_path / "j.db-wal").stat().st_size
    run.close()
    assert 0 < wal < 5 << 20, wal


def test_a_step_ends_at_the_trade_that_closes_a_bar(tmp_path: Path) -> None:
    """A batch of 60 frames with a bar boundary inside: the step ends right after the first
    trade past the boundary (its close decides the orders, which are committed and
    published before the frames behind it are even validated); the log holds the batch
    as those two steps, and the rest of the batch follows."""
    from feeds.messages import make_decoder

    cfg = EngineConfig(bar_seconds=20.0, broker=BrokerConfig(sizing="fixed", quantity=5.0),
                       live=LiveOptions(snapshot_every_bars=10**9, commit_within_ms=10_000.0))
    run = Driven(tmp_path / "j.db", cfg)  # no snapshot: the log keeps every step
    decode = make_decoder().decode
    at, splits = 0, 0
    while at + 60 <= 6_000:
        boundary = run.d.engine.clock.next_boundary
        chunk = FRAMES[at:at + 60]
        cross = next((k for k, f in enumerate(chunk) if decode(f[1]).ts >= boundary), None)
        logged = len(run.journal.input_log())
        run.batch(chunk)
        steps = [len(_frames_decoder.decode(b)) for _, b in run.journal.input_log()[logged:]]
        assert sum(steps) == 60
        if boundary >= 0 and cross is not None:
            assert steps[0] == cross + 1, (steps, cross)
            splits += 1
        at += 60
    assert splits > 20
    run.d.commit_held()
    run.close()


def test_a_checkpoint_starts_the_wal_over_at_once_and_changes_nothing(tmp_path: Path) -> None:
    """`Journal.checkpoint` copies the WAL into the database and makes the WAL start over
    right then (what the first write after a checkpoint does, off any order's commit):
    the WAL then holds only that one small transaction, and the journal reads the same."""
    journal = Journal(tmp_path / "j.db")
    journal.defer_checkpoints()
    journal.restart_input_log("start")
    for k in range(300):
        journal.begin()
        journal.record_seqs({b"T.A": k + 1})
        journal.log_input(0, bytes(300))
        journal.commit()
    before = journal.export()
    journal.checkpoint()
    busy, log_frames, _ = journal.db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert busy == 0 and 0 < log_frames <= 4, log_frames  # started over: not the 300 commits'
    after = journal.export()
    journal.close()
    assert after == before
