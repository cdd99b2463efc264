"""The journal's input log (engine/live/journal.py): what a restart reads back, and its cost in
pages: a step rewrites one page in place (real SQLite, WAL)."""

from __future__ import annotations

import os
from pathlib import Path

from engine.live.journal import Journal


def _step(j: Journal, flags: int, frames: bytes) -> None:
    j.begin()
    j.log_input(flags, frames)
    j.commit()


def _snapshot(j: Journal) -> None:
    j.begin()
    j.record_snapshot({"x": 1}, 0)
    j.commit()


def test_a_restart_reads_exactly_the_steps_since_the_last_snapshot(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.db")
    for i in range(7):  # slots 0..6
        _step(j, 0, b"old %d" % i)
    _snapshot(j)
    _step(j, 1, b"new 0")
    _step(j, 2, b"new 1")  # slots 2..6 still hold the old generation's rows
    j.close()  # what kill -9 leaves: the last commit
    j = Journal(tmp_path / "j.db")
    assert j.input_log() == [(1, b"new 0"), (2, b"new 1")]
    _step(j, 4, b"new 2")  # appended after the live steps, over a stale row
    j.close()
    j = Journal(tmp_path / "j.db")
    assert j.input_log() == [(1, b"new 0"), (2, b"new 1"), (4, b"new 2")]
    j.close()


def test_a_rolled_back_step_or_snapshot_loses_no_logged_step(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.db")
    _step(j, 0, b"a")
    j.begin()
    j.log_input(0, b"lost")
    j.record_snapshot({"x": 1}, 0)  # a new generation, undone with the rest
    j.rollback()
    _step(j, 0, b"b")
    j.close()
    j = Journal(tmp_path / "j.db")
    _step(j, 0, b"c")
    assert j.input_log() == [(0, b"a"), (0, b"b"), (0, b"c")]
    j.close()


def test_a_logged_step_rewrites_one_page_once_its_slots_exist(tmp_path: Path) -> None:
    """After a first stretch between snapshots, each step's commit adds one page to the
    WAL (its slot's); inserting after the snapshot's delete also rewrote the freelist,
    the B-tree's interior page and the database header (about five pages a step)."""
    path = tmp_path / "j.db"
    j = Journal(path)
    j.db.execute("PRAGMA wal_autocheckpoint = 0")  # the WAL only grows: frames countable
    page = j.db.execute("PRAGMA page_size").fetchone()[0]
    blob = bytes(range(256)) * 13  # a step of 64 ticks is about this size

    def wal_frames() -> int:
        return (os.path.getsize(f"{path}-wal") - 32) // (page + 24)

    for _ in range(3):  # the slots come into existence
        for _ in range(40):
            _step(j, 0, blob)
        _snapshot(j)
    grown = []
    for _ in range(3):
        for _ in range(40):
            before = wal_frames()
            _step(j, 0, blob)
            grown.append(wal_frames() - before)
        _snapshot(j)
    j.close()
    assert grown == [1] * 120, grown
