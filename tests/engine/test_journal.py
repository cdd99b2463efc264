"""The journal's stream positions: each batch writes only the streams that moved, and what
the database holds is always every stream's newest position."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from engine.live.journal import Journal


def _stored(path: Path) -> dict[bytes, int]:
    with sqlite3.connect(path) as db:
        return {bytes(t): int(q) for t, q in db.execute("SELECT topic, seq FROM stream_seq")}


def test_a_batch_writes_only_the_streams_that_moved(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    journal = Journal(path)
    rng = np.random.default_rng(5)
    seqs = {f"T.S{i}".encode(): 0 for i in range(300)}
    for step in range(40):  # seeded batches: a few streams move in each
        journal.begin()
        before = journal.db.total_changes
        moved = rng.choice(300, size=int(rng.integers(0, 6)), replace=False)
        for i in moved:
            seqs[f"T.S{i}".encode()] += int(rng.integers(1, 50))
        journal.record_seqs(seqs)
        journal.commit()
        written = journal.db.total_changes - before
        assert written == (300 if step == 0 else len(moved))
        assert _stored(path) == seqs
    # a batch rolled back leaves the database as it was; the next one writes everything again
    journal.begin()
    seqs[b"T.S0"] += 1
    journal.record_seqs(seqs)
    journal.rollback()
    assert _stored(path)[b"T.S0"] == seqs[b"T.S0"] - 1
    journal.begin()
    before = journal.db.total_changes
    journal.record_seqs(seqs)
    journal.commit()
    assert journal.db.total_changes - before == 300 and _stored(path) == seqs
    journal.close()
    # a journal opened again knows what it holds: an unchanged batch writes nothing
    journal = Journal(path)
    assert journal.load().last_seq == seqs
    before = journal.db.total_changes
    journal.record_seqs(seqs)
    assert journal.db.total_changes == before
    journal.close()
