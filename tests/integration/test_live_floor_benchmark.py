"""`benchmarks/live_floor.py`'s floor process keeps the contract its numbers are quoted
under: at every bar close of the stream it publishes two orders, and each published order
is already in its journal (SQLite rows, or an appended record) when it is received."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

import msgspec
import pytest
import zmq

from benchmarks.live_floor import Floor
from feeds.messages import Heartbeat, Order, Quote, Trade, encode, topic_for
from tests.live_procs import endpoints

MINUTE = 60_000_000_000
T0 = 1_700_000_000 * 1_000_000_000 // MINUTE * MINUTE


def _stream() -> tuple[list[Trade | Quote | Heartbeat], int]:
    """Two symbols' trades and one's quotes, 7 s of data time apart over 7 minutes, then
    the final heartbeat; and the number of bar closes the floor must see in them."""
    msgs: list[Trade | Quote | Heartbeat] = []
    for k in range(60):
        ts = T0 + k * 7_000_000_000 + 5
        msgs.append(Trade(seq=k + 1, ts=ts, symbol="AAA", price=10.0 + k % 3, size=1.0))
        msgs.append(Quote(seq=k + 1, ts=ts, symbol="AAA", bid=9.9, bid_size=1.0, ask=10.1,
                          ask_size=1.0))
        msgs.append(Trade(seq=k + 1, ts=ts, symbol="BBB", price=20.0, size=2.0))
    msgs.append(Heartbeat(seq=1, ts=msgs[-1].ts, final=True))
    minutes = {m.ts // MINUTE for m in msgs if type(m) is Trade}
    return msgs, len(minutes) - 1  # the first trade opens the clock; each new minute closes


def _appended_order_ids(path: Path) -> set[int]:
    return _record_order_ids(path.read_bytes())


def _record_order_ids(data: bytes) -> set[int]:
    """The order ids in the floor's append-only records (a 4-byte length, then msgpack:
    step number, the step's frames, its orders)."""
    ids: set[int] = set()
    i = 0
    while i < len(data):
        n = int.from_bytes(data[i:i + 4], "little")
        _, _, made = msgspec.msgpack.decode(data[i + 4:i + 4 + n])
        ids.update(row[4] for row in made)  # Order is array-like: tag, seq, ts, symbol, id
        i += 4 + n
    return ids


class _SendLog:
    """The floor's orders socket, each payload frame sent noted in `events` first."""

    def __init__(self, sock: zmq.Socket[bytes], events: list[tuple[str, object]]) -> None:
        self.sock, self.events = sock, events

    def send(self, frame: bytes, flags: int = 0) -> None:
        if not flags & zmq.SNDMORE:
            self.events.append(("send", msgspec.msgpack.decode(frame, type=Order).order_id))
        self.sock.send(frame, flags)

    def close(self, linger: int | None = None) -> None:
        self.sock.close(linger)


def _durable_before_sent(events: list[tuple[str, object]], append: bool) -> list[int]:
    """The order ids whose send came before the journal held them: for SQLite, an insert of
    the id and a COMMIT after it; for the records, a write(2) holding the id."""
    durable: set[int] = set()
    inserted: set[int] = set()
    early = []
    for kind, what in events:
        if kind == "send":
            if what not in durable:
                early.append(int(what))  # type: ignore[call-overload]
        elif kind == "write":
            durable.update(what)  # type: ignore[arg-type]
        elif str(what).startswith("INSERT INTO orders VALUES ("):
            inserted.add(int(str(what).split("(")[1].split(",")[0]))
        elif what == "COMMIT":
            durable |= inserted
    assert append or inserted, "no order rows traced"
    return early


@pytest.mark.parametrize("append", [False, True])
def test_every_order_the_floor_publishes_is_journaled_first(
        tmp_path: Path, append: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    msgs, closes = _stream()
    ticks, out = endpoints()
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.bind(ticks)
    journal = tmp_path / ("floor.log" if append else "floor.db")
    floor = Floor(ticks, out, journal, bar_seconds=60.0, append=append)
    seen_at_receipt: list[bool] = []
    received: list[Order] = []
    decode = msgspec.msgpack.Decoder(Order).decode

    def journaled(o: Order) -> bool:
        if append:
            return o.order_id in _appended_order_ids(journal)
        with sqlite3.connect(journal) as db:
            return db.execute("SELECT count(*) FROM orders WHERE order_id=?",
                              (o.order_id,)).fetchone()[0] == 1

    events: list[tuple[str, object]] = []  # in the floor's order: SQL, records, sends
    floor.pub = _SendLog(floor.pub, events)  # type: ignore[assignment]
    if append:
        real_write = os.write

        def write(fd: int, data: bytes) -> int:
            if fd == floor.append_fd:
                events.append(("write", _record_order_ids(data)))
            return real_write(fd, data)

        monkeypatch.setattr(os, "write", write)
    else:
        assert floor.db is not None
        floor.db.set_trace_callback(lambda sql: events.append(("sql", sql)))
    sub = ctx.socket(zmq.SUB)
    runner = threading.Thread(target=floor.run, args=(len(msgs),), daemon=True)
    try:
        sub.connect(out)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        runner.start()
        time.sleep(0.5)  # both subscriptions reach their publishers
        boundary = -1
        for m in msgs:
            pub.send_multipart([topic_for(m), encode(m)])
            if type(m) is not Trade:
                continue
            if boundary >= 0 and m.ts >= boundary:  # a close: its two orders, checked on arrival
                for _ in range(2):
                    assert sub.poll(10_000), "no order after a bar close"
                    o = decode(sub.recv_multipart()[1])
                    received.append(o)
                    seen_at_receipt.append(journaled(o))
            if boundary < 0 or m.ts >= boundary:
                boundary = (m.ts // MINUTE + 1) * MINUTE
        runner.join(30)
        assert not runner.is_alive()
        assert not sub.poll(100)  # nothing published but at the closes
        assert closes >= 6
        assert len(received) == 2 * closes == len(floor.latency_us)
        assert [o.order_id for o in received] == list(range(1, 2 * closes + 1))
        assert all(seen_at_receipt)
        assert [e for e in events if e[0] == "send"] == [("send", o.order_id) for o in received]
        assert _durable_before_sent(events, append) == []
        if not append:
            with sqlite3.connect(journal) as db:
                positions = dict(db.execute("SELECT topic, seq FROM stream_seq"))
            assert positions == {b"T.AAA": 60, b"Q.AAA": 60, b"T.BBB": 60, b"H.": 1}
    finally:
        floor.final = True  # a failed check still ends the floor's loop
        runner.join(5)
        ctx.destroy(linger=0)
