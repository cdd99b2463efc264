"""The journal is total and holds data only: every value a message decodes to is stored and
read back; a snapshot can never run code; a file that is not ours is never written."""

from __future__ import annotations

import hashlib
import math
import pickle
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.live import snapshot_format
from engine.live.journal import Journal, JournalError
from feeds.messages import Fill, Order, RiskRejection

ROOT = Path(__file__).resolve().parents[2]
#: every integer msgspec decodes from MessagePack
ANY_INT = st.integers(min_value=-(2**63), max_value=2**64 - 1)
EXTREME_INTS = [-(2**63), -1, 0, 2**63 - 1, 2**63, 2**64 - 1]
ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ts=ANY_INT, side=ANY_INT, order_ref=ANY_INT, seq=ANY_INT, qty=ANY_FLOAT,
       price=ANY_FLOAT, commission=ANY_FLOAT)
def test_every_journaled_field_holds_any_decodable_value(
        tmp_path: Path, ts: int, side: int, order_ref: int, seq: int, qty: float, price: float,
        commission: float) -> None:
    path = tmp_path / f"j{abs(hash((ts, side, seq))) % 10**9}.db"
    j = Journal(path)
    j.begin()
    j.record_order(Order(1, ts, "S", 1, side, qty, "entry"))
    fill_id = j.record_fill(Fill(1, ts, "S", order_ref, side, qty, price, commission))
    j.record_rejection(RiskRejection(0, ts, "S", side, qty, "max_position", "x"))
    j.record_seqs({b"T.S": seq, b"H.": seq})
    j.commit()
    j.close()
    j = Journal(path)
    state = j.load()
    o, f = state.orders[0], state.fills[0]
    assert (o.ts, o.side) == (ts, side) and _same(o.quantity, qty)
    assert (f.fill_id, f.ts, f.order_id, f.side) == (fill_id, ts, order_ref, side)
    assert all(_same(a, b) for a, b in ((f.quantity, qty), (f.price, price),
                                        (f.commission, commission)))
    assert state.last_seq == {b"T.S": seq, b"H.": seq}
    data = j.export()
    assert data["streams"] == {"T.S": seq, "H.": seq}
    assert data["risk_events"][0]["ts"] == ts and data["fills"][0]["order_id"] == order_ref
    j.close()
    path.unlink()


@pytest.mark.parametrize("seq", EXTREME_INTS)
def test_stream_positions_at_the_integer_extremes_survive_later_batches(
        tmp_path: Path, seq: int) -> None:
    j = Journal(tmp_path / "j.db")
    j.begin()
    j.record_seqs({b"T.A": seq})
    j.commit()
    j.begin()
    j.record_seqs({b"T.A": seq, b"T.B": 1})  # the moved-only write path over a BLOB cell
    j.commit()
    j.close()
    j = Journal(tmp_path / "j.db")
    assert j.load().last_seq == {b"T.A": seq, b"T.B": 1}
    j.close()


# ---------------------------------------------------------------- snapshots: data only
class _Bomb:
    """Unpickling this creates a file: what a crafted journal would do."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (Path(self.target),))


def _journal_with_snapshot_blob(path: Path, blob: bytes) -> None:
    j = Journal(path)
    j.begin()
    j.record_snapshot({"symbols": []}, 0)
    j.commit()
    j.db.execute("UPDATE snapshot SET state = ?", (blob,))
    j.close()


def test_a_pickle_snapshot_is_refused_and_never_unpickled(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    path = tmp_path / "j.db"
    _journal_with_snapshot_blob(path, pickle.dumps(_Bomb(str(target))))
    j = Journal(path)
    with pytest.raises(JournalError, match="old pickle format.*--drop-snapshot") as err:
        j.load()
    j.close()
    assert "\n" not in str(err.value)
    assert not target.exists()


def test_live_refuses_a_crafted_journal_in_one_line(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    path = tmp_path / "j.db"
    _journal_with_snapshot_blob(path, pickle.dumps(_Bomb(str(target))))
    r = subprocess.run(
        [sys.executable, str(ROOT / "run_engine.py"), "live", "--market-data", "tcp://127.0.0.1:1",
         "--orders", "tcp://127.0.0.1:2", "--journal", str(path), "--device", "cpu",
         "--max-seconds", "5"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "pickle" in lines[0], r.stderr
    assert not target.exists()
    # the way out the message names: drop the snapshot, then the journal opens
    r = subprocess.run([sys.executable, str(ROOT / "run_engine.py"), "journal", "--journal",
                        str(path), "--drop-snapshot"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    j = Journal(path)
    assert j.load().snapshot is None
    j.close()
    assert not target.exists()


@pytest.mark.parametrize("blob", [b"", b"TRDSNAP1", b"TRDSNAP1\xc1", b"\x93\x01\x02\x03",
                                  snapshot_format.MAGIC + b"\xc7\x02\x63OO"])
def test_a_damaged_or_foreign_snapshot_is_one_line(tmp_path: Path, blob: bytes) -> None:
    path = tmp_path / "j.db"
    _journal_with_snapshot_blob(path, blob)
    j = Journal(path)
    with pytest.raises(JournalError, match="snapshot") as err:
        j.load()
    j.close()
    assert "\n" not in str(err.value)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_after_the_magic_decode_to_data_or_are_refused(body: bytes) -> None:
    try:
        value = snapshot_format.decode(snapshot_format.MAGIC + body)
    except snapshot_format.BadSnapshot:
        return
    snapshot_format.encode(value)  # whatever decodes is data again


def test_the_format_round_trips_the_engine_state_types() -> None:
    state: dict[str, Any] = {"a": (1, 2.5, None), "b": {b"T.X": 2**64 - 1, 3: -(2**63)},
             "c": np.arange(6, dtype=np.float32).reshape(2, 3), "d": np.int64(7),
             "e": [np.float32(0.1), {1, 2}, Order(1, 2, "S", 3, -1, 4.0, "entry")],
             "f": np.array([True, False]), "big": 2**70, "nan": float("nan")}
    back = snapshot_format.decode(snapshot_format.encode(state))
    assert back["a"] == (1, 2.5, None) and back["b"] == state["b"]
    assert back["c"].dtype == np.float32 and (back["c"] == state["c"]).all()
    assert type(back["d"]) is np.int64 and back["d"] == 7
    assert type(back["e"][0]) is np.float32 and back["e"][1:] == state["e"][1:]
    assert back["f"].tolist() == [True, False] and back["big"] == 2**70
    assert math.isnan(back["nan"])
    with pytest.raises(snapshot_format.NotData):
        snapshot_format.encode({"x": _Bomb("y")})
    with pytest.raises(snapshot_format.NotData):
        snapshot_format.encode({"x": np.array([object()])})


# ---------------------------------------------------------------- foreign files
def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _foreign(path: Path, sql: str) -> None:
    db = sqlite3.connect(path)
    db.executescript(sql)
    db.commit()
    db.close()


@pytest.mark.parametrize("sql", [
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, total REAL);"
    "INSERT INTO orders VALUES (1, 'ann', 9.5);",
    "CREATE TABLE orders (order_id INTEGER PRIMARY KEY, ts INTEGER NOT NULL, symbol TEXT "
    "NOT NULL, side INTEGER NOT NULL, quantity REAL NOT NULL, reason TEXT NOT NULL);",
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL); PRAGMA application_id=7;",
])
def test_a_foreign_sqlite_file_is_refused_before_any_write(tmp_path: Path, sql: str) -> None:
    path = tmp_path / "shop.db"
    _foreign(path, sql)
    before = _digest(path)
    for readonly in (False, True):
        with pytest.raises(JournalError, match="something else") as err:
            Journal(path, readonly=readonly)
        assert "\n" not in str(err.value)
        assert _digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shop.db"]  # no -wal, no -shm


def test_a_journal_written_before_the_application_id_still_opens(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    j = Journal(path)
    j.close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA application_id=0")
    db.commit()
    db.close()
    Journal(path).close()


# ---------------------------------------------------------------- output into a closed pipe
def test_journal_json_into_a_pipe_closed_early_ends_quietly(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    j = Journal(path)
    j.begin()
    for i in range(1, 3_001):  # far more JSON than a pipe buffers
        j.record_order(Order(i, i, f"S{i % 50}", i, 1, 1.0, "entry"))
        j.record_fill(Fill(i, i, f"S{i % 50}", i, 1, 1.0, 10.0, 1.0))
    j.commit()
    j.close()
    p = subprocess.Popen([sys.executable, str(ROOT / "run_engine.py"), "journal", "--journal",
                          str(path), "--json", "/dev/stdout"], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    head = p.stdout.read(200)  # `| head -c 200`: the reader takes a little and leaves
    p.stdout.close()
    err = p.stderr.read().decode()
    p.wait(60)
    assert "BrokenPipe" not in err and "error" not in err, err
    assert p.returncode == 141
    assert head.startswith(b"{")  # stdout carries the JSON alone (the table is on stderr)
