"""Append-only SQLite journal (WAL) of everything that costs money or must survive a crash.

The daemon writes one transaction per batch of market data: the batch's orders, fills and
risk rejections, the last processed sequence number of every stream and, every few bars,
a snapshot of the engine's state (indicators, strategy, signals, open bars, pending orders,
validator) with the sequence numbers it covers. Orders and fills are published only after
their transaction commits, so a killed daemon has either all of a batch or none of it: a
fill that anyone saw is in the journal, and nothing is doubled when the stream resumes
after the journaled sequence numbers.

One daemon per journal: an exclusive lock (`<journal>.lock`, released by the kernel when
the process dies, `kill -9` included) keeps a second daemon out with a one-line error.
A SQLite file that is not an engine journal is refused, never modified.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import pickle
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from feeds.messages import Fill, Order, RiskRejection

#: PRAGMA application_id of an engine journal ("TRDJ")
APPLICATION_ID = 0x5452444A

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    order_id INTEGER PRIMARY KEY, ts INTEGER NOT NULL, symbol TEXT NOT NULL,
    side INTEGER NOT NULL, quantity REAL NOT NULL, reason TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS fills (
    fill_id INTEGER PRIMARY KEY AUTOINCREMENT, order_id INTEGER NOT NULL, ts INTEGER NOT NULL,
    symbol TEXT NOT NULL, side INTEGER NOT NULL, quantity REAL NOT NULL, price REAL NOT NULL,
    commission REAL NOT NULL);
CREATE TABLE IF NOT EXISTS stream_seq (topic BLOB PRIMARY KEY, seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS symbols (symbol TEXT PRIMARY KEY, idx INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS risk_events (
    event_id INTEGER PRIMARY KEY AUTOINCREMENT, ts INTEGER NOT NULL, symbol TEXT NOT NULL,
    side INTEGER NOT NULL, quantity REAL NOT NULL, limit_name TEXT NOT NULL,
    detail TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS snapshot (
    id INTEGER PRIMARY KEY CHECK (id = 1), last_fill_id INTEGER NOT NULL,
    last_order_id INTEGER NOT NULL, bar_events INTEGER NOT NULL, state BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
TABLES = {"orders", "fills", "stream_seq", "symbols", "risk_events", "snapshot", "meta",
          "sqlite_sequence"}


class JournalError(ValueError):
    """The journal cannot be used (one line for the user)."""


@dataclass
class Snapshot:
    last_fill_id: int
    last_order_id: int
    state: dict[str, Any]


@dataclass
class JournalState:
    symbols: list[str] = field(default_factory=list)
    orders: list[Order] = field(default_factory=list)
    fills: list[Fill] = field(default_factory=list)
    last_seq: dict[bytes, int] = field(default_factory=dict)
    session: int | None = None
    kill_switch: bool = False
    snapshot: Snapshot | None = None
    #: the risk gate's daily-loss baseline: (exchange day, equity at the day's start)
    risk_day: tuple[dt.date, float] | None = None


class Journal:
    def __init__(self, path: str | Path, *, lock: bool = True, readonly: bool = False) -> None:
        self.path = Path(path)
        self._lock_file: Any = None
        if readonly:
            if not self.path.is_file():
                raise JournalError(f"journal {self.path}: no such file")
        else:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise JournalError(f"journal {self.path}: cannot create its folder: "
                                   f"{exc.strerror}") from None
        if lock and not readonly:
            self._lock()
        try:
            if readonly:
                self.db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                          isolation_level=None)
            else:
                self.db = sqlite3.connect(str(self.path), isolation_level=None)
            tables = {r[0] for r in self.db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            app_id = self.db.execute("PRAGMA application_id").fetchone()[0]
            if tables and app_id != APPLICATION_ID and not tables <= TABLES:
                raise JournalError(f"journal {self.path}: a SQLite database of something "
                                   f"else (tables {', '.join(sorted(tables))}); not touching it")
            if not readonly:
                self.db.execute("PRAGMA journal_mode=WAL")
                # NORMAL in WAL mode: a commit survives a killed process (not a power cut)
                self.db.execute("PRAGMA synchronous=NORMAL")
                self.db.executescript(SCHEMA)
                self.db.execute(f"PRAGMA application_id={APPLICATION_ID}")
        except sqlite3.DatabaseError as exc:
            self._unlock()
            what = ("cannot write to it" if "readonly" in str(exc) or "read-only" in str(exc)
                    else "not a usable SQLite database")
            raise JournalError(f"journal {self.path}: {what} ({exc})") from None
        except JournalError:
            self._unlock()
            raise
        self._in_batch = False
        #: the stream positions as the database holds them: a batch writes only the streams
        #: whose position moved (a daemon on hundreds of symbols moves a few per batch)
        self._seqs_written: dict[bytes, int] = {}

    # ------------------------------------------------------------------ lock
    def _lock(self) -> None:
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            f = open(lock_path, "a+")  # noqa: SIM115 - held for the daemon's lifetime
        except OSError as exc:
            raise JournalError(f"journal {self.path}: cannot create its lock file "
                               f"{lock_path}: {exc.strerror}") from None
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.seek(0)
            holder = f.read().strip() or "?"
            f.close()
            raise JournalError(f"journal {self.path} is in use by another daemon "
                               f"(pid {holder})") from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        self._lock_file = f

    def _unlock(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()  # closing the descriptor releases the flock
            self._lock_file = None

    # ------------------------------------------------------------------ read
    def load(self) -> JournalState:
        st = JournalState()
        st.symbols = [r[0] for r in self.db.execute("SELECT symbol FROM symbols ORDER BY idx")]
        st.orders = [
            Order(seq=r[0], ts=r[1], symbol=r[2], order_id=r[0], side=r[3], quantity=r[4],
                  reason=r[5])
            for r in self.db.execute(
                "SELECT order_id, ts, symbol, side, quantity, reason FROM orders ORDER BY order_id")
        ]
        st.fills = [
            Fill(seq=r[0], ts=r[2], symbol=r[3], order_id=r[1], side=r[4], quantity=r[5],
                 price=r[6], commission=r[7], fill_id=r[0])
            for r in self.db.execute(
                "SELECT fill_id, order_id, ts, symbol, side, quantity, price, commission "
                "FROM fills ORDER BY fill_id")
        ]
        st.last_seq = {bytes(r[0]): int(r[1]) for r in self.db.execute(
            "SELECT topic, seq FROM stream_seq")}
        self._seqs_written = dict(st.last_seq)
        meta = self.meta()
        st.session = int(meta["session"]) if "session" in meta else None
        st.kill_switch = meta.get("kill_switch") == "1"
        if "risk_day" in meta:
            day, equity = meta["risk_day"].split()
            st.risk_day = (dt.date.fromisoformat(day), float(equity))
        row = self.db.execute(
            "SELECT last_fill_id, last_order_id, state FROM snapshot WHERE id = 1").fetchone()
        if row is not None:
            try:
                st.snapshot = Snapshot(int(row[0]), int(row[1]), pickle.loads(row[2]))
            except Exception as exc:  # noqa: BLE001 - an unreadable snapshot: start cold
                import logging

                logging.getLogger(__name__).warning(
                    "journal %s: snapshot unreadable (%s): indicators start cold", self.path, exc)
        return st

    def meta(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.db.execute("SELECT key, value FROM meta")}

    def export(self) -> dict[str, Any]:
        """Everything in the journal as plain data (the `journal` command)."""
        q = self.db.execute
        orders = [dict(zip(("order_id", "ts", "symbol", "side", "quantity", "reason"), r,
                           strict=True))
                  for r in q("SELECT order_id, ts, symbol, side, quantity, reason FROM orders "
                             "ORDER BY order_id")]
        fills = [dict(zip(("fill_id", "order_id", "ts", "symbol", "side", "quantity", "price",
                           "commission"), r, strict=True))
                 for r in q("SELECT fill_id, order_id, ts, symbol, side, quantity, price, "
                            "commission FROM fills ORDER BY fill_id")]
        risk = [dict(zip(("event_id", "ts", "symbol", "side", "quantity", "limit", "detail"),
                         r, strict=True))
                for r in q("SELECT event_id, ts, symbol, side, quantity, limit_name, detail "
                           "FROM risk_events ORDER BY event_id")]
        positions: dict[str, float] = {}
        cash_flow: dict[str, float] = {}
        for f in fills:
            s = f["symbol"]
            positions[s] = positions.get(s, 0.0) + f["side"] * f["quantity"]
            cash_flow[s] = cash_flow.get(s, 0.0) - (f["side"] * f["quantity"] * f["price"]
                                                    + f["commission"])
        streams = {bytes(t).decode(errors="replace"): int(s)
                   for t, s in q("SELECT topic, seq FROM stream_seq ORDER BY topic")}
        snap = q("SELECT last_fill_id, last_order_id, bar_events FROM snapshot").fetchone()
        return {
            "journal": str(self.path),
            "orders": orders,
            "fills": fills,
            "positions": {s: p for s, p in positions.items() if abs(p) > 1e-12},
            "cash": cash_flow,
            "risk_events": risk,
            "streams": streams,
            "meta": self.meta(),
            "snapshot": (None if snap is None else
                         {"last_fill_id": snap[0], "last_order_id": snap[1],
                          "bar_events": snap[2]}),
        }

    # ------------------------------------------------------------------ write
    def begin(self) -> None:
        """Open the batch's transaction (everything until `commit` is one unit)."""
        self.db.execute("BEGIN")
        self._in_batch = True

    def commit(self) -> None:
        self.db.execute("COMMIT")
        self._in_batch = False

    def rollback(self) -> None:
        if self._in_batch:
            self.db.execute("ROLLBACK")
            self._in_batch = False
            self._seqs_written.clear()  # unknown again: the next batch writes every stream

    def record_symbol(self, symbol: str, idx: int) -> None:
        self.db.execute("INSERT OR IGNORE INTO symbols(symbol, idx) VALUES (?, ?)", (symbol, idx))

    def record_order(self, o: Order) -> None:
        self.db.execute(
            "INSERT INTO orders(order_id, ts, symbol, side, quantity, reason) "
            "VALUES (?, ?, ?, ?, ?, ?)", (o.order_id, o.ts, o.symbol, o.side, o.quantity, o.reason))

    def record_fill(self, f: Fill) -> int:
        """Journal a fill; returns its fill_id (the row's id)."""
        cur = self.db.execute(
            "INSERT INTO fills(order_id, ts, symbol, side, quantity, price, commission) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (f.order_id, f.ts, f.symbol, f.side, f.quantity, f.price, f.commission))
        return int(cur.lastrowid or 0)

    def record_rejection(self, r: RiskRejection) -> int:
        cur = self.db.execute(
            "INSERT INTO risk_events(ts, symbol, side, quantity, limit_name, detail) "
            "VALUES (?, ?, ?, ?, ?, ?)", (r.ts, r.symbol, r.side, r.quantity, r.limit, r.detail))
        return int(cur.lastrowid or 0)

    def record_seqs(self, seqs: dict[bytes, int]) -> None:
        """Stream positions (inside the batch's transaction, or one of their own)."""
        written = self._seqs_written
        moved = [(t, q) for t, q in seqs.items() if written.get(t) != q]
        if not moved:
            return
        own = not self._in_batch
        if own:
            self.db.execute("BEGIN")
        self.db.executemany(
            "INSERT INTO stream_seq(topic, seq) VALUES (?, ?) "
            "ON CONFLICT(topic) DO UPDATE SET seq = excluded.seq", moved)
        if own:
            self.db.execute("COMMIT")
        written.update(moved)

    def replace_seqs(self, seqs: dict[bytes, int]) -> None:
        """After a feed session change the old streams' positions are void."""
        self.db.execute("DELETE FROM stream_seq")
        self._seqs_written.clear()
        self.record_seqs(seqs)

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT INTO meta(key, value) VALUES (?, ?) "
                        "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))

    def record_risk_day(self, day: dt.date, equity: float) -> None:
        """The daily-loss baseline (in the batch's transaction, like every other state)."""
        self.set_meta("risk_day", f"{day.isoformat()} {equity!r}")

    def record_snapshot(self, state: dict[str, Any], bar_events: int) -> None:
        last_fill = self.db.execute("SELECT COALESCE(MAX(fill_id), 0) FROM fills").fetchone()[0]
        last_order = self.db.execute(
            "SELECT COALESCE(MAX(order_id), 0) FROM orders").fetchone()[0]
        self.db.execute(
            "INSERT INTO snapshot(id, last_fill_id, last_order_id, bar_events, state) "
            "VALUES (1, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
            "last_fill_id = excluded.last_fill_id, last_order_id = excluded.last_order_id, "
            "bar_events = excluded.bar_events, state = excluded.state",
            (last_fill, last_order, bar_events,
             pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)))

    def close(self) -> None:
        self.rollback()
        self.db.close()
        self._unlock()
