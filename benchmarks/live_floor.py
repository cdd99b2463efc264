#!/usr/bin/env python3
"""The floor under the live daemon's receive-to-order latency on this machine (issue 27,
goal 2): the least a process must do between receiving a bar close's trade and publishing
its orders while keeping the daemon's contract, timed exactly as the daemon times itself,
beside the daemon itself, on the same feed.

The floor process (`serve`) is no engine: a blocking poll on a SUB socket, the waiting
messages drained with non-blocking receives, the receive time taken after the drain (the
daemon's `t_recv`), each message decoded by msgspec into the wire structs, a bar clock
(every `bar_seconds` of data time, as the engine's). A step is the messages up to and
including the first trade at or past the bar's end (the daemon's `split`). Its journal work
is the daemon's minimum: the step's stream positions upserted, its frames logged (the input
log), at a close two order rows inserted; a step without orders leaves the transaction open
(the daemon's held commit, committed when the socket is idle or 2 ms old); a step with
orders commits, then publishes the two orders (msgpack, `[topic, payload]` on a PUB socket)
and records receive-to-published in microseconds. `--journal off` drops the journal (the
bare receive, decode and publish).

The driver runs, per round, in turn: the real daemon (`live_latency.latency_run`: the SMA
strategy, fixed size 10, the input log on), the floor with the journal, the floor without
it; the feed is the same synthetic market (10 symbols) at `--rate` messages/s over TCP on
loopback, published from the driver's process as the daemon benchmark does.

    python benchmarks/live_floor.py [--rounds 3] [--ticks 200000] [--rate 20000] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HOLD_S = 0.002  # the daemon's default [live] commit_within_ms

SCHEMA = """
CREATE TABLE orders (order_id INTEGER PRIMARY KEY, ts INTEGER NOT NULL,
    symbol TEXT NOT NULL, side INTEGER NOT NULL, quantity REAL NOT NULL,
    reason TEXT NOT NULL);
CREATE TABLE stream_seq (topic BLOB PRIMARY KEY, seq INTEGER NOT NULL);
CREATE TABLE input_log (step INTEGER PRIMARY KEY, flags INTEGER NOT NULL,
    frames BLOB NOT NULL);
"""


class Floor:
    """The floor process's state: sockets, journal, bar clock, the open transaction."""

    def __init__(self, ticks: str, orders_ep: str, journal: Path | None,
                 bar_seconds: float, spin_s: float = 0.0, append: bool = False) -> None:
        import msgspec
        import zmq

        from feeds.messages import make_decoder

        self.decode = make_decoder().decode
        self.encode = msgspec.msgpack.Encoder().encode
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.RCVHWM, 0)
        self.sub.connect(ticks)
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.bind(orders_ep)
        self.db: sqlite3.Connection | None = None
        self.append_fd = -1
        if journal is not None and append:  # one record a step, one write(2): no SQLite
            self.append_fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        elif journal is not None:
            self.db = sqlite3.connect(journal, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.bar_ns = int(bar_seconds * 1e9)
        self.boundary = -1
        self.order_id = 0
        self.step_no = 0
        self.seen = 0
        self.final = False
        self.latency_us: list[float] = []
        self.held_since: float | None = None
        self.in_txn = False
        self.last_seq: dict[bytes, int] = {}
        self.spin_s = spin_s
        self.pending: list[bytes] = []

    def commit(self) -> None:
        if self.pending:
            os.write(self.append_fd, b"".join(self.pending))
            self.pending.clear()
        if self.db is not None and self.in_txn:
            self.db.execute("COMMIT")
        self.in_txn = False
        self.held_since = None

    def drain(self) -> list[tuple[bytes, bytes]]:
        import zmq

        raw: list[tuple[bytes, bytes]] = []
        recv = self.sub.recv
        while len(raw) < 4096:
            try:
                topic = recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            raw.append((topic, recv()))
        return raw

    def split(self, raw: list[tuple[bytes, bytes]], i: int) -> tuple[int, Any]:
        """The end of the step from `i` (the daemon's `split`) and the closing trade, if
        the step ends at a bar close."""
        from feeds.messages import Heartbeat, Trade

        while i < len(raw):
            topic, payload = raw[i]
            m = self.decode(payload)
            i += 1
            self.last_seq[topic] = m.seq
            if type(m) is Heartbeat and m.final:
                self.final = True
            elif type(m) is Trade:
                if self.boundary < 0:
                    self.boundary = (m.ts // self.bar_ns + 1) * self.bar_ns
                elif m.ts >= self.boundary:
                    self.boundary = (m.ts // self.bar_ns + 1) * self.bar_ns
                    return i, m
        return i, None

    def step(self, step: list[tuple[bytes, bytes]], close: Any, t_recv: float) -> None:
        """The step's journal writes, and at a close its two orders: committed, then
        published."""
        import zmq

        from feeds.messages import Order

        made = []
        if close is not None:
            for side in (1, -1):
                self.order_id += 1
                made.append(Order(seq=self.order_id, ts=close.ts, symbol=close.symbol,
                                  order_id=self.order_id, side=side, quantity=10.0,
                                  reason="floor"))
        db = self.db
        if self.append_fd >= 0:
            self.step_no += 1
            body = self.encode((self.step_no, step, made))
            rec = len(body).to_bytes(4, "little") + body  # a length first: records parse
            self.pending.append(rec)  # written by `commit`: one write(2) for the held steps
        elif db is not None:
            if not self.in_txn:
                db.execute("BEGIN")
                self.in_txn = True
            for o in made:
                db.execute("INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?)",
                           (o.order_id, o.ts, o.symbol, o.side, o.quantity, o.reason))
            db.executemany("INSERT INTO stream_seq VALUES (?, ?) "
                           "ON CONFLICT(topic) DO UPDATE SET seq=excluded.seq",
                           [(t, self.last_seq[t]) for t in {t for t, _ in step}])
            self.step_no += 1
            db.execute("INSERT INTO input_log VALUES (?, 0, ?)",
                       (self.step_no, self.encode(step)))
        if made:
            self.commit()  # published only after commit
            send = self.pub.send
            for o in made:
                send(b"O." + o.symbol.encode(), zmq.SNDMORE)
                send(self.encode(o))
            us = (time.perf_counter() - t_recv) * 1e6
            self.latency_us.extend(us for _ in made)  # a sample an order, as the daemon
        elif self.held_since is None:
            self.held_since = time.perf_counter()
        elif time.perf_counter() - self.held_since >= HOLD_S:
            self.commit()

    def spin(self) -> bool:
        """Busy-poll up to `spin_s` (the process stays on its core, its caches warm)."""
        if self.spin_s <= 0:
            return False
        end = time.perf_counter() + self.spin_s
        poll = self.sub.poll
        while time.perf_counter() < end:
            if poll(0):
                return True
        return False

    def run(self, n: int) -> None:
        """Until `n` messages or the feed's final heartbeat."""
        while not self.final and self.seen < n:
            if not self.sub.poll(0):
                self.commit()  # idle: the held steps commit off any order's path
                if not self.spin() and not self.sub.poll(50):
                    continue
            raw = self.drain()
            t_recv = time.perf_counter()
            i = 0
            while i < len(raw):
                j, close = self.split(raw, i)
                self.step(raw[i:j], close, t_recv)
                self.seen += j - i
                i = j
        self.commit()
        self.sub.close(0)
        self.pub.close(1000)  # the last orders still reach a subscriber
        self.ctx.term()


def summary(lat: list[float]) -> dict[str, float]:
    s = sorted(lat)

    def pct(q: float) -> float:
        return round(s[min(len(s) - 1, int(q * len(s)))], 1)

    return {"n": len(s), "p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99),
            "max": round(s[-1], 1)}


def floor_run(tmp: Path, n: int, rate: float, journal: bool, spin_ms: float = 0.0,
              append: bool = False) -> dict[str, Any]:
    from tests.live_procs import endpoints, run_feed

    ticks, out = endpoints()
    res = tmp / f"floor-{time.monotonic_ns()}.json"
    j = tmp / f"floor-{time.monotonic_ns()}.db"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, __file__, "serve", "--ticks", ticks, "--orders", out,
                          "--journal", str(j) if journal else "off", "--n", str(n),
                          "--out", str(res), "--spin-ms", str(spin_ms),
                          *(["--append"] if append else [])], env=env)
    time.sleep(1.0)  # connected and subscribed (the feed also waits for a subscriber)
    run_feed(ticks, "--ticks", str(n), "--n-symbols", "10", "--rate", str(rate),
             "--feed-session", "1", timeout=3600)
    p.wait(timeout=120)
    if p.returncode != 0:
        raise SystemExit(f"floor process exited {p.returncode}")
    r = json.loads(res.read_text())
    return {"orders": r["orders"], "messages": r["messages"], "latency": summary(r["latency_us"])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd")
    s = sub.add_parser("serve")
    s.add_argument("--ticks", required=True)
    s.add_argument("--orders", required=True)
    s.add_argument("--journal", required=True)
    s.add_argument("--n", type=int, required=True)
    s.add_argument("--bar-seconds", type=float, default=60.0)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--spin-ms", type=float, default=0.0)
    s.add_argument("--append", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ticks", type=int, default=200_000)
    ap.add_argument("--rate", type=float, default=20_000.0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--settings", default="daemon,floor+journal,floor",
                    help="comma-separated, in turn each round: daemon, floor+journal, floor, "
                         "floor+append (the step as one record appended with one write, no "
                         "SQLite), and either floor with '-spin' (busy-polls 2 ms first)")
    a = ap.parse_args(argv)
    if a.cmd == "serve":
        f = Floor(a.ticks, a.orders, None if a.journal == "off" else Path(a.journal),
                  a.bar_seconds, a.spin_ms / 1e3, a.append)
        f.run(a.n)
        a.out.write_text(json.dumps({"orders": len(f.latency_us), "messages": f.seen,
                                     "latency_us": f.latency_us}))
        return 0
    from benchmarks.live_latency import latency_run

    settings = a.settings.split(",")
    bad = set(settings) - {"daemon", "floor+journal", "floor", "floor+journal-spin",
                           "floor-spin", "floor+append"}
    if bad:
        ap.error(f"--settings: unknown {sorted(bad)}")

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for r in range(a.rounds):
            for name in settings:
                load = os.getloadavg()
                t = time.strftime("%H:%M:%S", time.gmtime())
                if name == "daemon":
                    res = latency_run(tmp, a.ticks, a.rate)
                    lat = {k.removesuffix("_us"): v for k, v in res["latency"].items()
                           if k != "buckets"}
                else:
                    res = floor_run(tmp, a.ticks, a.rate,
                                    journal="journal" in name or "append" in name,
                                    spin_ms=2.0 if name.endswith("-spin") else 0.0,
                                    append="append" in name)
                    lat = res["latency"]
                row = {"round": r + 1, "setting": name, "start_utc": t,
                       "load": [round(x, 2) for x in load], "orders": res["orders"],
                       "latency_us": lat}
                rows.append(row)
                print(f"{t} load {load[0]:.2f} {name:14s} orders {res['orders']:5d} "
                      f"p50 {lat.get('p50')} p90 {lat.get('p90')} p99 {lat.get('p99')} "
                      f"max {lat.get('max')}", flush=True)
    for name in settings:
        p50 = [r["latency_us"]["p50"] for r in rows if r["setting"] == name]
        p99 = [r["latency_us"]["p99"] for r in rows if r["setting"] == name]
        print(f"median {name:14s} p50 {statistics.median(p50):.1f} "
              f"p99 {statistics.median(p99):.1f}")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
