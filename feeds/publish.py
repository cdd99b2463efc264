"""Publish a Source's records as wire messages (the `feed` command and every replay).

Records come in numpy chunks; columns are turned into Python lists once per chunk (C speed)
so the per-message work is one Struct construction, one encode and one send.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import zmq

from feeds.messages import Bar, Heartbeat, Quote, Trade, encode
from feeds.records import KIND_BAR, KIND_QUOTE, KIND_TRADE, Source
from feeds.transport import Publisher

DAY_NS = 86_400 * 1_000_000_000


def publish_source(
    source: Source,
    publisher: Publisher,
    rate: float = 0.0,
    progress: Callable[[int], None] | None = None,
    bar_duration_ns: int = DAY_NS,
) -> int:
    """Send every record of `source`, then a final heartbeat. Returns messages sent.

    `rate` > 0 paces the stream at that many messages per second (0 = as fast as possible).
    """
    names = list(source.symbols)
    seq: dict[bytes, int] = {}
    topics: dict[tuple[int, int], bytes] = {}
    send = publisher.socket.send
    more = int(zmq.SNDMORE)
    sent = 0
    t0 = time.perf_counter()
    last_ts = 0
    for chunk in source.chunks():
        cols = (
            chunk["ts"].tolist(), chunk["sym"].tolist(), chunk["kind"].tolist(),
            chunk["f0"].tolist(), chunk["f1"].tolist(), chunk["f2"].tolist(),
            chunk["f3"].tolist(), chunk["f4"].tolist(),
        )
        for ts, sym, kind, f0, f1, f2, f3, f4 in zip(*cols, strict=True):
            key = (kind, sym)
            topic = topics.get(key)
            if topic is None:
                tag = {KIND_TRADE: b"T", KIND_QUOTE: b"Q", KIND_BAR: b"B"}[kind]
                topic = topics[key] = tag + b"." + names[sym].encode()
            s = seq.get(topic, 0) + 1
            seq[topic] = s
            if kind == KIND_TRADE:
                msg: Trade | Quote | Bar = Trade(s, ts, names[sym], f0, f1)
            elif kind == KIND_QUOTE:
                msg = Quote(s, ts, names[sym], f0, f1, f2, f3)
            else:
                msg = Bar(s, ts, names[sym], f0, f1, f2, f3, f4, bar_duration_ns)
            send(topic, more)
            send(encode(msg))
            sent += 1
            last_ts = ts
            if rate > 0 and sent % 64 == 0:
                ahead = sent / rate - (time.perf_counter() - t0)
                if ahead > 0:
                    time.sleep(ahead)
        if progress is not None:
            progress(sent)
    hb_topic = b"H."
    send(hb_topic, more)
    send(encode(Heartbeat(seq.get(hb_topic, 0) + 1, last_ts, "", True)))
    publisher.sent += sent + 1
    return sent
