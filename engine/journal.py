"""Append-only SQLite journal (WAL) of everything that costs money or must survive a crash.

Orders and fills are written and committed before they are published; the last processed
sequence number of every stream is committed after each batch. On start the daemon rebuilds
cash, positions, order ids and stream positions from the journal, so a killed daemon loses
nothing that it had acted on. Indicator state is not journaled: after a restart the
indicators warm up again from the live stream (documented in `live`).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from feeds.messages import Fill, Order

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
"""


@dataclass
class JournalState:
    symbols: list[str] = field(default_factory=list)
    orders: list[Order] = field(default_factory=list)
    fills: list[Fill] = field(default_factory=list)
    last_seq: dict[bytes, int] = field(default_factory=dict)


class Journal:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"journal {self.path}: cannot create its folder: "
                             f"{exc.strerror}") from None
        try:
            self.db = sqlite3.connect(str(self.path), isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a commit survives a killed process (not a power cut)
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise ValueError(f"journal {self.path}: not a usable SQLite database ({exc})") from None

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
                 price=r[6], commission=r[7])
            for r in self.db.execute(
                "SELECT fill_id, order_id, ts, symbol, side, quantity, price, commission "
                "FROM fills ORDER BY fill_id")
        ]
        st.last_seq = {bytes(r[0]): int(r[1]) for r in self.db.execute(
            "SELECT topic, seq FROM stream_seq")}
        return st

    def record_symbol(self, symbol: str, idx: int) -> None:
        self.db.execute("INSERT OR IGNORE INTO symbols(symbol, idx) VALUES (?, ?)", (symbol, idx))

    def record_order(self, o: Order) -> None:
        self.db.execute(
            "INSERT INTO orders(order_id, ts, symbol, side, quantity, reason) "
            "VALUES (?, ?, ?, ?, ?, ?)", (o.order_id, o.ts, o.symbol, o.side, o.quantity, o.reason))

    def record_fill(self, f: Fill) -> None:
        self.db.execute(
            "INSERT INTO fills(order_id, ts, symbol, side, quantity, price, commission) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (f.order_id, f.ts, f.symbol, f.side, f.quantity, f.price, f.commission))

    def record_seqs(self, seqs: dict[bytes, int]) -> None:
        self.db.execute("BEGIN")
        self.db.executemany(
            "INSERT INTO stream_seq(topic, seq) VALUES (?, ?) "
            "ON CONFLICT(topic) DO UPDATE SET seq = excluded.seq", list(seqs.items()))
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()
