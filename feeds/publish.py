"""Publish a Source's records as wire messages (the `feed` command and every replay).

Records come in numpy chunks, encoded a chunk at a time by a compiled encoder
(feeds/wire_encode.py) so the per-message Python work is two sends of ready frames.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import zmq

from feeds.messages import Heartbeat, encode
from feeds.records import Source
from feeds.transport import Publisher
from feeds.wire_encode import ChunkEncoder

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
    encoder = ChunkEncoder(list(source.symbols), bar_duration_ns)
    topics = encoder.topics
    send = publisher.socket.send
    more = int(zmq.SNDMORE)
    sent = 0
    t0 = time.perf_counter()
    last_ts = 0
    for chunk in source.chunks():
        if chunk.shape[0] == 0:
            continue
        payloads, offsets = encoder.encode(chunk)
        bounds = offsets.tolist()
        for kind, sym, a, b in zip(chunk["kind"].tolist(), chunk["sym"].tolist(), bounds,
                                   bounds[1:], strict=False):
            send(topics[kind][sym], more)
            send(payloads[a:b])
            sent += 1
            if rate > 0 and sent % 64 == 0:
                ahead = sent / rate - (time.perf_counter() - t0)
                if ahead > 0:
                    time.sleep(ahead)
        last_ts = int(chunk["ts"][-1])
        if progress is not None:
            progress(sent)
    send(b"H.", more)
    send(encode(Heartbeat(1, last_ts, "", True)))
    publisher.sent += sent + 1
    return sent
