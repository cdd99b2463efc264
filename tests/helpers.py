"""Small builders shared by tests."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import zmq
from zmq.utils.monitor import recv_monitor_message

from feeds.messages import Bar, Message, Trade
from feeds.records import Source
from gpu.gp.core import CASH0, CODE_BUY, CODE_SELL, COMMISSION


def trade_messages(source: Source) -> list[Trade]:
    """Every trade record of `source` as a wire message, numbered per symbol from 1."""
    seq: dict[str, int] = {}
    out: list[Trade] = []
    for chunk in source.chunks():
        for ts, sym, p, q in zip(chunk["ts"].tolist(), chunk["sym"].tolist(),
                                 chunk["f0"].tolist(), chunk["f1"].tolist(), strict=True):
            name = source.symbols[sym]
            seq[name] = seq.get(name, 0) + 1
            out.append(Trade(seq[name], ts, name, p, q))
    return out


def bar_messages(source: Source, seconds: int = 60) -> list[Message]:
    """`source`'s trades as Bar messages of `seconds` (a bar feed), in close-time order,
    numbered from 1: each bar's open, high, low, close and volume over its trades."""
    ns = seconds * 1_000_000_000
    bars: dict[tuple[int, str], list[float]] = {}
    for t in trade_messages(source):
        key = ((t.ts // ns + 1) * ns, t.symbol)
        b = bars.get(key)
        if b is None:
            bars[key] = [t.price, t.price, t.price, t.price, t.size]
        else:
            b[1], b[2], b[3] = max(b[1], t.price), min(b[2], t.price), t.price
            b[4] += t.size
    return [Bar(k, ts, sym, v[0], v[1], v[2], v[3], v[4], duration_ns=ns)
            for k, ((ts, sym), v) in enumerate(sorted(bars.items()), 1)]


def daily_csv(path: Path, n: int, seed: int, drift: float = 0.0) -> Path:
    """A daily OHLCV file of three random-walk stocks (AAA, BBB, CCC) over n business days."""
    rng = np.random.default_rng(seed)
    days = np.busday_offset("2015-01-02", np.arange(n), roll="forward")
    rows = ["date,open,high,low,close,volume,Name"]
    for sym in ("AAA", "BBB", "CCC"):
        c = 50.0
        for d in days:
            o = c * math.exp(rng.normal(0, 0.01))
            c = o * math.exp(rng.normal(drift, 0.015))
            rows.append(f"{d},{o:.2f},{max(o, c) * 1.01:.2f},{min(o, c) * 0.99:.2f},"
                        f"{c:.2f},1000,{sym}")
    path.write_text("\n".join(rows) + "\n")
    return path


def paper_money(codes: Iterable[int], fill_prices: Iterable[float], final_price: float) -> float:
    """The GP paper's money rules written out as a plain loop (the tests' reference): all-in
    buy on BUY when flat, sell all on SELL when long, $1 a trade, liquidate at the end."""
    cash, shares, long = CASH0, 0.0, False
    for code, px in zip(codes, fill_prices, strict=True):
        if code == CODE_BUY and not long:
            long = True
            n = math.floor((cash - COMMISSION) / px)
            if n >= 1:
                cash -= n * px + COMMISSION
                shares = n
        elif code == CODE_SELL and long:
            long = False
            if shares > 0:
                cash += shares * px - COMMISSION
                shares = 0.0
    if shares > 0:
        cash += shares * final_price - COMMISSION
    return cash


def handshake_watch(sock: zmq.Socket[bytes]) -> Callable[[float], None]:
    """Call before `sock.connect`; returns `wait(timeout_s)`, which blocks until `sock` has
    completed a ZeroMQ handshake with its peer, the moment a SUB's subscription goes out.
    A fixed sleep after `connect` is a race a loaded machine loses (the peer's process may
    not have bound yet); the monitor attached first misses no event."""
    monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)

    def wait(timeout_s: float = 30.0) -> None:
        try:
            if not monitor.poll(int(timeout_s * 1000)):
                raise TimeoutError(f"no handshake on {sock.LAST_ENDPOINT!r} in {timeout_s} s")
            recv_monitor_message(monitor)
        finally:
            sock.disable_monitor()
            monitor.close(linger=0)

    return wait
