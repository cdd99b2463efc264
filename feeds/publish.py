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
    *,
    session: int = 0,
    skip: int = 0,
    count: int | None = None,
    heartbeat_s: float = 0.0,
) -> int:
    """Send the records of `source`, then a final heartbeat. Returns messages sent.

    `rate` > 0 paces the stream at that many messages per second (0 = as fast as possible).
    The stream opens with a heartbeat stamped with `session` (the feed's epoch; every
    heartbeat carries it) and, with `heartbeat_s` > 0, a heartbeat goes out at least that
    often while publishing. `skip` and `count` publish messages [skip, skip + count) of the
    stream with the sequence numbers they have in the whole stream, so a stream stopped
    after message N resumes exactly with `skip=N` and the same session; the final
    heartbeat says end of stream only when `count` did not stop the stream first.
    """
    encoder = ChunkEncoder(list(source.symbols), bar_duration_ns)
    topics = encoder.topics
    send = publisher.socket.send
    more = int(zmq.SNDMORE)
    end = None if count is None else skip + count
    sent = 0
    index = 0  # position in the whole stream of the chunk's first message
    beats = 0
    t0 = time.perf_counter()
    last_beat = t0
    last_ts = 0
    opened = False
    complete = True

    def heartbeat(ts: int, final: bool = False) -> None:
        nonlocal beats
        beats += 1
        send(b"H.", more)
        send(encode(Heartbeat(beats, ts, "", final, session)))

    for chunk in source.chunks():
        n = chunk.shape[0]
        if n == 0:
            continue
        payloads, offsets = encoder.encode(chunk)  # every chunk: keeps the sequence numbers
        lo = max(skip - index, 0)
        hi = n if end is None else min(end - index, n)
        index += n
        if lo >= hi:
            if end is not None and index >= end:
                complete = False
                break
            continue
        if not opened:  # the session opens before the first message
            heartbeat(int(chunk["ts"][lo]))
            opened = True
            # pacing starts now: the first chunk's encoding (compiling the encoder) must
            # not make the stream burst to catch up
            t0 = last_beat = time.perf_counter()
        bounds = offsets.tolist()[lo:hi + 1]
        for kind, sym, a, b in zip(chunk["kind"][lo:hi].tolist(), chunk["sym"][lo:hi].tolist(),
                                   bounds, bounds[1:], strict=False):
            send(topics[kind][sym], more)
            send(payloads[a:b])
            sent += 1
            if sent % 64 == 0:
                now = time.perf_counter()
                if heartbeat_s > 0 and now - last_beat >= heartbeat_s:
                    heartbeat(last_ts)
                    last_beat = now
                if rate > 0:
                    ahead = sent / rate - (now - t0)
                    if ahead > 0:
                        time.sleep(ahead)
        last_ts = int(chunk["ts"][hi - 1])
        if progress is not None:
            progress(sent)
        if end is not None and index >= end:
            complete = False  # stopped by `count`: the stream goes on elsewhere
            break
    heartbeat(last_ts, final=complete)
    publisher.sent += sent + beats
    return sent

