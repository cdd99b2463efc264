"""Append-only SQLite journal (WAL) of everything that costs money or must survive a crash.

The daemon writes one transaction per batch of market data: the batch's orders, fills and
risk rejections, the last processed sequence number of every stream and, every few bars,
a snapshot of the engine's state (indicators, strategy, signals, open bars, pending orders,
validator) with the sequence numbers it covers. Orders and fills are published only after
their transaction commits, so a killed daemon has either all of a batch or none of it: a
fill that anyone saw is in the journal, and nothing is doubled when the stream resumes
after the journaled sequence numbers.

One daemon per journal: an exclusive lock on the database file itself (flock on its
inode, so every path that reaches the file, a symlink, a hard link or another relative
path, meets the same lock; released by the kernel when the process dies, `kill -9`
included) keeps a second daemon out with a one-line error. SQLite's own locks are POSIX
locks, apart from this one. A SQLite file that is not an engine journal is refused before
anything is written to it.

Input log: each batch's raw frames (with the daemon's flags at that batch) are appended
in the batch's own transaction, and the log is emptied in the transaction that writes a
snapshot. Its rows are reused, never deleted (`input_steps`: a slot per step since the
snapshot, tagged with the log's generation, which a snapshot advances): a step rewrites
its slot's page in place, where an insert after a delete also rewrote the freelist, the
B-tree's interior page and the database header in every commit's WAL frames. The table
keeps as many slots as the longest stretch between two snapshots needed; the `input_log`
table is the layout before, read (and emptied) once. After `kill -9` a restart restores
the last snapshot and re-applies the logged input, which rebuilds indicator, strategy and
signal state exactly as a SIGTERM restart would have it (the daemon,
engine.live.daemon.Daemon.recover).

Data only: the snapshot is MessagePack (engine.live.snapshot_format), never pickle; a snapshot
of the old pickle format is refused (never unpickled) with the command that drops it.
Every value a message can decode to is stored: integers beyond SQLite's 64 bits (a peer's
sequence number of 2**64-1) and NaN (which SQLite would store as NULL) are stored as the
text of the number in a BLOB, which SQLite never converts; readers turn them back.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.live import snapshot_format
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
CREATE TABLE IF NOT EXISTS input_log (
    step INTEGER PRIMARY KEY, flags INTEGER NOT NULL, frames BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS input_steps (
    slot INTEGER PRIMARY KEY, gen INTEGER NOT NULL, flags INTEGER NOT NULL,
    frames BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS rule_versions (
    version INTEGER PRIMARY KEY, adopted_ts INTEGER NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS order_states (
    state_id INTEGER PRIMARY KEY AUTOINCREMENT, order_id INTEGER NOT NULL,
    ts INTEGER NOT NULL, symbol TEXT NOT NULL, state TEXT NOT NULL, type TEXT NOT NULL,
    side INTEGER NOT NULL, quantity REAL NOT NULL, limit_price REAL, stop_price REAL,
    reason TEXT NOT NULL, tif TEXT NOT NULL, group_id INTEGER NOT NULL, trail REAL NOT NULL,
    best REAL, expires_ns INTEGER NOT NULL);
"""
TABLES = {"orders", "fills", "stream_seq", "symbols", "risk_events", "snapshot", "meta",
          "rule_versions", "input_log", "input_steps", "order_states", "sqlite_sequence"}
#: the columns of an order state row (engine.trading.orders.StateChange), as exported
ORDER_STATE_COLUMNS = ("state_id", "order_id", "ts", "symbol", "state", "type", "side",
                       "quantity", "limit_price", "stop_price", "reason", "tif", "group_id",
                       "trail", "best", "expires_ns")
#: meta key: what the input log starts from ("snapshot": the snapshot; "start": an empty
#: journal; "cold": a restart without a usable snapshot, so the log cannot rebuild state)
INPUT_LOG_FROM = "input_log_from"
#: meta key written and deleted in one transaction after a checkpoint (`checkpoint`)
WAL_RESTART_KEY = "wal_restart"
#: meta key: the input log's generation; its live steps are the `input_steps` rows of it
INPUT_LOG_GEN = "input_log_gen"
#: the journal's durability ([live] journal_sync) as SQLite's `synchronous` in WAL mode:
#: "normal" a commit is in the WAL file (the operating system's cache) when it returns, so
#: it survives the process's death (kill -9 included) but not a power cut or kernel crash;
#: "full" the WAL is fsynced at every commit, which survives those too
SYNC_MODES = {"normal": "NORMAL", "full": "FULL"}
#: SQLite's INTEGER range; other integers are stored as the text of the number in a BLOB
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def cell(x: Any) -> Any:
    """A value as SQLite stores it without loss (see the module's docstring)."""
    if type(x) is int and not INT64_MIN <= x <= INT64_MAX:
        return str(x).encode()
    if type(x) is float and x != x:
        return b"nan"
    return x


def as_int(v: Any) -> int:
    """An integer cell back as the integer it was (a BLOB holds its text)."""
    return int(v)  # int() reads the text in bytes too


def as_float(v: Any) -> float:
    return float(v)


def _number(v: Any) -> Any:
    """A cell of a number column for export: BLOB text back to its number."""
    if isinstance(v, bytes):
        text = v.decode("ascii", "replace")
        try:
            return int(text)
        except ValueError:
            return float(text)
    return v


class JournalError(ValueError):
    """The journal cannot be used (one line for the user)."""


class JournalWriteError(UserError):
    """A write to the journal failed (disk full, I/O error, the file locked or gone): the
    daemon stops with this one line and exit code 3; nothing of the failed batch was
    published, and everything published is journaled."""

    exit_code = 3

    @classmethod
    def of(cls, path: Path, exc: BaseException) -> JournalWriteError:
        name = getattr(exc, "sqlite_errorname", "") or type(exc).__name__
        return cls(f"journal {path}: cannot write ({exc}, {name}); the daemon stops: the "
                   "batch being written was not published, everything published is "
                   "journaled; restart once the cause is fixed")


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
    #: the risk gate's daily-loss baseline: (exchange day, P&L at the day's start)
    risk_day: tuple[dt.date, float] | None = None
    #: the input logged since the snapshot (flags, frames) and what it starts from
    input_log: list[tuple[int, bytes]] = field(default_factory=list)
    input_log_from: str | None = None


class Journal:
    def __init__(self, path: str | Path, *, lock: bool = True, readonly: bool = False,
                 sync: str = "normal") -> None:
        if sync not in SYNC_MODES:
            raise JournalError(f"journal {path}: sync must be one of {', '.join(SYNC_MODES)}, "
                               f"got {sync!r}")
        self.path = Path(path)
        self._lock_fd: int | None = None
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
        db: sqlite3.Connection | None = None
        try:
            if readonly:
                db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                     isolation_level=None)
            else:
                db = sqlite3.connect(str(self.path), isolation_level=None)
            self._refuse_foreign(db)  # before the first write
            if not readonly:
                db.execute("PRAGMA journal_mode=WAL")
                # NORMAL in WAL mode: a commit survives a killed process (not a power cut);
                # FULL: an fsync of the WAL at every commit survives that too (`SYNC_MODES`)
                db.execute(f"PRAGMA synchronous={SYNC_MODES[sync]}")
                db.executescript(SCHEMA)
                db.execute(f"PRAGMA application_id={APPLICATION_ID}")
        except sqlite3.DatabaseError as exc:
            if db is not None:
                db.close()
            self._unlock()
            what = ("cannot write to it" if "readonly" in str(exc) or "read-only" in str(exc)
                    else "not a usable SQLite database")
            raise JournalError(f"journal {self.path}: {what} ({exc})") from None
        except JournalError:
            if db is not None:
                db.close()
            self._unlock()
            raise
        self.db = db
        self._in_batch = False
        #: the stream positions as the database holds them: a batch writes only the streams
        #: whose position moved (a daemon on hundreds of symbols moves a few per batch)
        self._seqs_written: dict[bytes, int] = {}
        #: the input log: its generation, its next slot (None: read from the database
        #: first) and how many slots the table holds
        self._log_gen = 0
        self._log_next: int | None = None
        self._log_slots = 0

    def _refuse_foreign(self, db: sqlite3.Connection) -> None:
        """Raise unless the file is empty, an engine journal (our application id) or a
        journal written before the id existed (only our tables, with our columns)."""
        tables = {str(r[0]) for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
        if app_id == APPLICATION_ID:
            return
        if app_id == 0 and tables <= TABLES and {"orders", "fills", "meta"} <= tables:
            ours = _schema_columns()
            if all(_columns(db, t) == ours[t] for t in tables if t in ours):
                return
        raise JournalError(f"journal {self.path}: a SQLite database of something else "
                           f"(tables {', '.join(sorted(tables))}, application id {app_id}); "
                           "not touching it")

    # ------------------------------------------------------------------ lock
    def _lock(self) -> None:
        """flock on the database file (created empty if new): the lock is the inode's."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise JournalError(f"journal {self.path}: cannot open it: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _flock_holder(fd)
            os.close(fd)
            raise JournalError(f"journal {self.path} is in use by another daemon "
                               f"(pid {holder})") from None
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            # closing the descriptor releases the flock; SQLite's connection is closed
            # first (closing any descriptor of a file drops the process's POSIX locks)
            os.close(self._lock_fd)
            self._lock_fd = None

    # ------------------------------------------------------------------ read
    def load(self) -> JournalState:
        st = JournalState()
        st.symbols = [r[0] for r in self.db.execute("SELECT symbol FROM symbols ORDER BY idx")]
        st.orders = [
            Order(seq=r[0], ts=as_int(r[1]), symbol=r[2], order_id=r[0], side=as_int(r[3]),
                  quantity=as_float(r[4]), reason=r[5])
            for r in self.db.execute(
                "SELECT order_id, ts, symbol, side, quantity, reason FROM orders ORDER BY order_id")
        ]
        st.fills = [
            Fill(seq=r[0], ts=as_int(r[2]), symbol=r[3], order_id=as_int(r[1]),
                 side=as_int(r[4]), quantity=as_float(r[5]), price=as_float(r[6]),
                 commission=as_float(r[7]), fill_id=r[0])
            for r in self.db.execute(
                "SELECT fill_id, order_id, ts, symbol, side, quantity, price, commission "
                "FROM fills ORDER BY fill_id")
        ]
        st.last_seq = {bytes(r[0]): as_int(r[1]) for r in self.db.execute(
            "SELECT topic, seq FROM stream_seq")}
        self._seqs_written = dict(st.last_seq)
        meta = self.meta()
        st.session = int(meta["session"]) if "session" in meta else None
        st.kill_switch = meta.get("kill_switch") == "1"
        st.input_log = self.input_log()
        st.input_log_from = meta.get(INPUT_LOG_FROM)
        if "risk_day_pnl" in meta:  # ("risk_day", an equity, was before: not a P&L)
            day, pnl = meta["risk_day_pnl"].split()
            st.risk_day = (dt.date.fromisoformat(day), float(pnl))
        row = self.db.execute(
            "SELECT last_fill_id, last_order_id, state FROM snapshot WHERE id = 1").fetchone()
        if row is not None:
            st.snapshot = Snapshot(int(row[0]), int(row[1]), self._snapshot_state(row[2]))
        return st

    def _snapshot_state(self, blob: Any) -> dict[str, Any]:
        """The snapshot's state; a blob of another format is refused, never interpreted."""
        blob = bytes(blob) if isinstance(blob, (bytes, memoryview)) else b""
        drop = (f"`run_engine.py journal --journal {self.path} --drop-snapshot` drops it "
                "(the daemon then restarts from the journaled fills, indicators cold)")
        if blob[:1] == bytes([snapshot_format.PICKLE_START]):
            raise JournalError(f"journal {self.path}: its snapshot is in the old pickle format, "
                               f"which is never loaded (it could run code); {drop}")
        try:
            state = snapshot_format.decode(blob)
        except snapshot_format.BadSnapshot as exc:
            raise JournalError(f"journal {self.path}: unreadable snapshot ({exc}); "
                               f"{drop}") from None
        if not isinstance(state, dict):
            raise JournalError(f"journal {self.path}: unreadable snapshot (not a state "
                               f"table); {drop}")
        return state

    def meta(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.db.execute("SELECT key, value FROM meta")}

    def export(self) -> dict[str, Any]:
        """Everything in the journal as plain data (the `journal` command)."""
        q = self.db.execute
        orders = [dict(zip(("order_id", "ts", "symbol", "side", "quantity", "reason"),
                           map(_number, r), strict=True))
                  for r in q("SELECT order_id, ts, symbol, side, quantity, reason FROM orders "
                             "ORDER BY order_id")]
        fills = [dict(zip(("fill_id", "order_id", "ts", "symbol", "side", "quantity", "price",
                           "commission"), map(_number, r), strict=True))
                 for r in q("SELECT fill_id, order_id, ts, symbol, side, quantity, price, "
                            "commission FROM fills ORDER BY fill_id")]
        risk = [dict(zip(("event_id", "ts", "symbol", "side", "quantity", "limit", "detail"),
                         map(_number, r), strict=True))
                for r in q("SELECT event_id, ts, symbol, side, quantity, limit_name, detail "
                           "FROM risk_events ORDER BY event_id")]
        positions: dict[str, float] = {}
        cash_flow: dict[str, float] = {}
        for f in fills:
            s = f["symbol"]
            positions[s] = positions.get(s, 0.0) + f["side"] * f["quantity"]
            cash_flow[s] = cash_flow.get(s, 0.0) - (f["side"] * f["quantity"] * f["price"]
                                                    + f["commission"])
        streams = {bytes(t).decode(errors="replace"): as_int(s)
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
            "rule_versions": self.rule_versions(),
            "order_states": self.order_states(),
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

    def defer_checkpoints(self) -> None:
        """Checkpoints only when the caller asks (`checkpoint`), never inside a commit:
        SQLite's own, at the commit that takes the WAL past 1000 pages, copies the WAL
        into the database and syncs both files, milliseconds that would fall on whichever
        commit it is, an order's included (the live daemon checkpoints after publishing)."""
        self.db.execute("PRAGMA wal_autocheckpoint = 0")

    def checkpoint(self) -> None:
        """Copy the WAL's committed pages into the database, so the WAL starts over from
        its beginning (PASSIVE: a reader in the way is never waited for; what it holds is
        copied by the next checkpoint). Outside a transaction.

        The first write after a complete checkpoint starts the WAL over (200-250 us
        measured here, on whichever commit comes next, an order's included): a
        transaction that writes a meta row and deletes it again (nothing changes) pays
        that now, with the checkpoint."""
        self.db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        self.db.execute("BEGIN")
        self.db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, '')",
                        (WAL_RESTART_KEY,))
        self.db.execute("DELETE FROM meta WHERE key = ?", (WAL_RESTART_KEY,))
        self.db.execute("COMMIT")

    def rollback(self) -> None:
        """Undo the open batch. SQLite rolls a transaction back by itself after some
        errors (SQLITE_FULL, I/O errors): then there is nothing to undo, and the error that
        caused it is the one the caller reports (never "no transaction is active")."""
        if self._in_batch:
            self._in_batch = False
            self._seqs_written.clear()  # unknown again: the next batch writes every stream
            self._log_next = None  # the log's counters too: read again before the next step
            if self.db.in_transaction:
                # the cause is already propagating; nothing of the batch was committed
                with contextlib.suppress(sqlite3.Error):
                    self.db.execute("ROLLBACK")

    def record_symbol(self, symbol: str, idx: int) -> None:
        self.db.execute("INSERT OR IGNORE INTO symbols(symbol, idx) VALUES (?, ?)", (symbol, idx))

    def record_order(self, o: Order) -> None:
        self.db.execute(
            "INSERT INTO orders(order_id, ts, symbol, side, quantity, reason) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (o.order_id, cell(o.ts), o.symbol, cell(o.side), cell(o.quantity), o.reason))

    def record_fill(self, f: Fill) -> int:
        """Journal a fill; returns its fill_id (the row's id)."""
        cur = self.db.execute(
            "INSERT INTO fills(order_id, ts, symbol, side, quantity, price, commission) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (cell(f.order_id), cell(f.ts), f.symbol, cell(f.side), cell(f.quantity),
             cell(f.price), cell(f.commission)))
        return int(cur.lastrowid or 0)

    def record_order_state(self, c: Any) -> None:
        """One order's state change (engine.trading.orders.StateChange): accepted, filled,
        cancelled, expired or rejected, with what restores a working order."""
        def price(x: float) -> float | None:
            return None if x != x else cell(x)  # NaN: the type has no such price

        self.db.execute(
            "INSERT INTO order_states(order_id, ts, symbol, state, type, side, quantity, "
            "limit_price, stop_price, reason, tif, group_id, trail, best, expires_ns) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (cell(c.order_id), cell(c.ts), c.symbol, c.state.value, c.type.value,
             cell(c.side), cell(c.quantity), price(c.limit), price(c.stop), c.reason,
             c.tif.value, cell(c.group), cell(c.trail), price(c.best), cell(c.expires_ns)))

    def order_states(self) -> list[dict[str, Any]]:
        """The order state changes in the order they happened (plain data)."""
        return [dict(zip(ORDER_STATE_COLUMNS, map(_number, r), strict=True))
                for r in self.db.execute(
                    f"SELECT {', '.join(ORDER_STATE_COLUMNS)} FROM order_states "
                    "ORDER BY state_id")]

    def record_rejection(self, r: RiskRejection) -> int:
        cur = self.db.execute(
            "INSERT INTO risk_events(ts, symbol, side, quantity, limit_name, detail) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (cell(r.ts), r.symbol, cell(r.side), cell(r.quantity), r.limit, r.detail))
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
            "ON CONFLICT(topic) DO UPDATE SET seq = excluded.seq",
            [(t, cell(q)) for t, q in moved])
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

    def record_risk_day(self, day: dt.date, pnl: float) -> None:
        """The daily-loss baseline (in the batch's transaction, like every other state)."""
        self.set_meta("risk_day_pnl", f"{day.isoformat()} {pnl!r}")

    def record_snapshot(self, state: dict[str, Any], bar_events: int) -> None:
        last_fill = self.db.execute("SELECT COALESCE(MAX(fill_id), 0) FROM fills").fetchone()[0]
        last_order = self.db.execute(
            "SELECT COALESCE(MAX(order_id), 0) FROM orders").fetchone()[0]
        self.db.execute(
            "INSERT INTO snapshot(id, last_fill_id, last_order_id, bar_events, state) "
            "VALUES (1, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
            "last_fill_id = excluded.last_fill_id, last_order_id = excluded.last_order_id, "
            "bar_events = excluded.bar_events, state = excluded.state",
            (last_fill, last_order, bar_events, snapshot_format.encode(state)))
        self._empty_input_log()  # the snapshot holds what it rebuilt
        self.set_meta(INPUT_LOG_FROM, "snapshot")

    def record_rule_version(self, version: int, adopted_ts: int, body: dict[str, Any]) -> None:
        """A GP rule version the daemon adopted (engine/live/reevolution.py), as JSON: its rules,
        training window, seed and fitness. In the batch's transaction when a swap adopts it
        (the orders it places after are in the same or a later one)."""
        import json

        self.db.execute("INSERT OR REPLACE INTO rule_versions VALUES (?, ?, ?)",
                        (int(version), int(adopted_ts), json.dumps(body, sort_keys=True)))

    def rule_versions(self) -> list[dict[str, Any]]:
        """Every adopted rule version, oldest first, each with `adopted_ts` (ns)."""
        import json

        try:
            rows = self.db.execute("SELECT adopted_ts, body FROM rule_versions "
                                   "ORDER BY version").fetchall()
        except sqlite3.OperationalError:  # a journal from before the table, read-only
            return []
        return [{**json.loads(body), "adopted_ts": int(ts)} for ts, body in rows]

    def drop_snapshot(self) -> bool:
        """Delete the snapshot (the way past one this version cannot read); True if any.
        The input log after it is void with it."""
        self._empty_input_log()
        self.set_meta(INPUT_LOG_FROM, "cold")
        return self.db.execute("DELETE FROM snapshot").rowcount > 0

    # ------------------------------------------------------------------ input log
    def log_input(self, flags: int, frames: bytes) -> None:
        """One batch's input (inside the batch's transaction): the next slot's row
        rewritten in place, or a new row once every slot is in use."""
        if self._log_next is None:
            self._load_log_position()
        assert self._log_next is not None
        slot = self._log_next
        if slot < self._log_slots:
            self.db.execute("UPDATE input_steps SET gen = ?, flags = ?, frames = ? "
                            "WHERE slot = ?", (self._log_gen, flags, frames, slot))
        else:
            self.db.execute("INSERT INTO input_steps(slot, gen, flags, frames) "
                            "VALUES (?, ?, ?, ?)", (slot, self._log_gen, flags, frames))
            self._log_slots = slot + 1
        self._log_next = slot + 1

    def input_log(self) -> list[tuple[int, bytes]]:
        """The logged batches since the last snapshot, oldest first."""
        legacy = [(int(f), bytes(b)) for f, b in self.db.execute(
            "SELECT flags, frames FROM input_log ORDER BY step")]
        try:
            self._load_log_position()
        except sqlite3.OperationalError:  # a journal from before the table, read-only
            return legacy
        return legacy + [(int(f), bytes(b)) for f, b in self.db.execute(
            "SELECT flags, frames FROM input_steps WHERE gen = ? ORDER BY slot",
            (self._log_gen,))]

    def restart_input_log(self, origin: str) -> None:
        """Empty the log and say what it starts from (INPUT_LOG_FROM)."""
        self.db.execute("BEGIN")
        self._empty_input_log()
        self.set_meta(INPUT_LOG_FROM, origin)
        self.db.execute("COMMIT")

    def _empty_input_log(self) -> None:
        """A new generation of the log (in the caller's transaction): every row is stale,
        its slot free for reuse."""
        if self._log_next is None:
            self._load_log_position()
        self._log_gen += 1
        self._log_next = 0
        self.set_meta(INPUT_LOG_GEN, str(self._log_gen))
        self.db.execute("DELETE FROM input_log")  # the layout before (empty but once)

    def _load_log_position(self) -> None:
        """The log's generation, its next slot and the slots in the table, as committed
        (at open, and after a rollback left the counters unknown)."""
        row = self.db.execute("SELECT value FROM meta WHERE key = ?",
                              (INPUT_LOG_GEN,)).fetchone()
        self._log_gen = 0 if row is None else int(row[0])
        self._log_next = self.db.execute(
            "SELECT COALESCE(MAX(slot) + 1, 0) FROM input_steps WHERE gen = ?",
            (self._log_gen,)).fetchone()[0]
        self._log_slots = self.db.execute(
            "SELECT COALESCE(MAX(slot) + 1, 0) FROM input_steps").fetchone()[0]

    def close(self) -> None:
        self.rollback()
        self.db.close()
        self._unlock()


def _schema_columns() -> dict[str, list[str]]:
    """The columns of each table SCHEMA creates (in an in-memory database)."""
    mem = sqlite3.connect(":memory:")
    mem.executescript(SCHEMA)
    cols = {t: _columns(mem, t) for t in TABLES if t != "sqlite_sequence"}
    mem.close()
    return cols


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [str(r[1]) for r in db.execute(f"PRAGMA table_info('{table}')")]


def _flock_holder(fd: int) -> str:
    """The pid holding a flock on `fd`'s file, from /proc/locks (Linux); "?" elsewhere."""
    st = os.fstat(fd)
    dev_ino = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return "?"
    for line in lines:
        f = line.split()
        if len(f) > 5 and f[1] == "FLOCK" and f[5] == dev_ino:
            return f[4]
    return "?"
