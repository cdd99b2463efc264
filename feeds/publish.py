"""Publish a Source's records as wire messages (the `feed` command and every replay).

Records come in numpy chunks, encoded a chunk at a time by a compiled encoder
(feeds/wire_encode.py) so the per-message Python work is two sends of ready frames.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import zmq

from feeds.messages import Heartbeat, encode
from feeds.records import KIND_TRADE, Source
from feeds.trade_batch import BATCH_TOPIC, encode_batches
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
    frame_ticks: int = 0,
) -> int:
    """Send the records of `source`, then a final heartbeat. Returns messages sent.

    `rate` > 0 paces the stream at that many messages per second (0 = as fast as possible).
    The stream opens with a heartbeat stamped with `session` (the feed's epoch; every
    heartbeat carries it) and, with `heartbeat_s` > 0, a heartbeat goes out at least that
    often while publishing. `skip` and `count` publish messages [skip, skip + count) of the
    stream with the sequence numbers they have in the whole stream, so a stream stopped
    after message N resumes exactly with `skip=N` and the same session; the final
    heartbeat says end of stream only when `count` did not stop the stream first.
    `frame_ticks` > 0 sends runs of trades as batches of that many rows per frame
    (`feeds.messages.TradeBatch`; quotes and bars still go one per message, in order), for
    an unpaced whole stream only (`rate`, `skip` and `count` keep one tick per message).
    Returns messages sent, a batch counting its rows.
    """
    encoder = ChunkEncoder(list(source.symbols), bar_duration_ns)
    stream = _Stream(publisher, encoder.topics, session, rate, heartbeat_s)
    if frame_ticks > 0 and rate <= 0 and skip == 0 and count is None:
        _send_batched(source, encoder, stream, frame_ticks, progress)
        stream.heartbeat(stream.last_ts, final=True)
        publisher.sent += stream.frames + stream.beats
        return stream.sent
    end = None if count is None else skip + count
    encoded = _encoded(source, encoder)
    ahead = _Prefetch(encoded) if rate > 0 else None
    try:
        complete = _send_all(ahead if ahead is not None else encoded, stream, skip, end,
                             progress)
    finally:
        if ahead is not None:
            ahead.close()
    stream.heartbeat(stream.last_ts, final=complete)
    publisher.sent += stream.sent + stream.beats
    return stream.sent


Encoded = tuple[np.ndarray, bytes, np.ndarray]


def _send_batched(source: Source, encoder: ChunkEncoder, stream: _Stream, frame_ticks: int,
                  progress: Callable[[int], None] | None) -> None:
    """Every record of `source`: each run of trades as batch frames of `frame_ticks`
    rows, the other records one per message, in the source's order; each trade stream's
    sequence numbers are the ones its one-tick messages would have."""
    symbols = list(source.symbols)
    for chunk in source.chunks():
        n = chunk.shape[0]
        if n == 0:
            continue
        is_trade = chunk["kind"] == KIND_TRADE
        # where a run of trades or of other records starts and ends
        cuts = np.flatnonzero(is_trade[1:] != is_trade[:-1]) + 1
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), n], strict=True):
            part = chunk[lo:hi]
            if not is_trade[lo]:
                payloads, offsets = encoder.encode(part)
                stream.send_chunk(part, payloads, offsets, 0, hi - lo)
                continue
            frames = encode_batches(symbols, part["sym"], part["ts"], part["f0"], part["f1"],
                                    encoder.counters[KIND_TRADE], frame_ticks)
            stream.send_batches(frames, int(part["ts"][0]))
        if progress is not None:
            progress(stream.sent)


def _encoded(source: Source, encoder: ChunkEncoder) -> Iterator[Encoded]:
    """Each non-empty chunk with its encoded messages (in order: the encoder numbers them)."""
    for chunk in source.chunks():
        if chunk.shape[0]:
            payloads, offsets = encoder.encode(chunk)
            yield chunk, payloads, offsets


class _Prefetch:
    """The next encoded chunk made on a thread while the current one is sent: a paced
    stream must not stop for the tens of milliseconds a chunk of 65,536 records takes to
    draw and encode (a replay paced at the data rate showed every option group waiting
    10-16 ms at once, at the first chunk boundary). The Python switch interval is cut to
    0.5 ms meanwhile, so the producer holds the sender off no longer than that."""

    def __init__(self, chunks: Iterator[Encoded]) -> None:
        self._q: queue.Queue[Encoded | BaseException | None] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        _short_switch_interval(+1)
        self._thread = threading.Thread(target=self._run, args=(chunks,),
                                        name="feed-prefetch", daemon=True)
        self._thread.start()

    def _put(self, item: Encoded | BaseException | None) -> bool:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, chunks: Iterator[Encoded]) -> None:
        try:
            for item in chunks:
                if not self._put(item):
                    return
            self._put(None)
        except BaseException as exc:  # noqa: BLE001 - raised again in the sender
            self._put(exc)

    def __iter__(self) -> Iterator[Encoded]:
        while True:
            item = self._q.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)
        _short_switch_interval(-1)


#: paced streams prefetching in this process, and the switch interval before the first
_switching: dict[str, float] = {"streams": 0, "before": 0.0}
_switching_lock = threading.Lock()


def _short_switch_interval(delta: int) -> None:
    """Count a paced stream in (+1) or out (-1): the first in shortens the interpreter's
    switch interval to 0.5 ms, the last out restores it (two feeds in one process, e.g. two
    inproc replays, must not leave it short or restore it early)."""
    with _switching_lock:
        if delta > 0 and _switching["streams"] == 0:
            _switching["before"] = sys.getswitchinterval()
            sys.setswitchinterval(min(_switching["before"], 0.0005))
        _switching["streams"] += delta
        if delta < 0 and _switching["streams"] == 0:
            sys.setswitchinterval(_switching["before"])


def _send_all(chunks: Iterable[Encoded], stream: _Stream, skip: int, end: int | None,
              progress: Callable[[int], None] | None) -> bool:
    """Send messages [skip, end) of the encoded chunks; False when `end` stopped it."""
    index = 0  # position in the whole stream of the chunk's first message
    for chunk, payloads, offsets in chunks:
        n = chunk.shape[0]
        lo = max(skip - index, 0)
        hi = n if end is None else min(end - index, n)
        index += n
        if lo < hi:
            stream.send_chunk(chunk, payloads, offsets, lo, hi)
            if progress is not None:
                progress(stream.sent)
        if end is not None and index >= end:
            return False  # stopped by `count`: the stream goes on elsewhere
    return True


class _Stream:
    """The sending side of one `publish_source`: frames, heartbeats and pacing."""

    def __init__(self, publisher: Publisher, topics: list[list[bytes]], session: int,
                 rate: float, heartbeat_s: float) -> None:
        self.send = publisher.socket.send
        self.topics = topics
        self.session = session
        self.rate = rate
        # a paced stream leaves in steps of about a millisecond (at most 64 messages): a
        # market played back at its own speed arrives tick by tick, not in 6 ms bursts
        self.pace_every = max(1, min(64, int(rate // 1000))) if rate > 0 else 64
        self.heartbeat_s = heartbeat_s
        self.sent = 0
        #: frames sent: one per message, or per batch of trades (`send_batches`)
        self.frames = 0
        self.beats = 0
        self.last_ts = 0
        self.opened = False
        self.t0 = self.last_beat = time.perf_counter()

    def heartbeat(self, ts: int, final: bool = False) -> None:
        self.beats += 1
        self.send(b"H.", int(zmq.SNDMORE))
        self.send(encode(Heartbeat(self.beats, ts, "", final, self.session)))

    def send_chunk(self, chunk: np.ndarray, payloads: bytes, offsets: np.ndarray, lo: int,
                   hi: int) -> None:
        """Messages [lo, hi) of an encoded chunk: two sends of ready frames each."""
        if not self.opened:  # the session opens before the first message
            self.heartbeat(int(chunk["ts"][lo]))
            self.opened = True
            # pacing starts now: the first chunk's encoding (compiling the encoder) must
            # not make the stream burst to catch up
            self.t0 = self.last_beat = time.perf_counter()
        send, topics, more = self.send, self.topics, int(zmq.SNDMORE)
        sent = self.sent
        bounds = offsets.tolist()[lo:hi + 1]
        for kind, sym, a, b in zip(chunk["kind"][lo:hi].tolist(), chunk["sym"][lo:hi].tolist(),
                                   bounds, bounds[1:], strict=False):
            send(topics[kind][sym], more)
            send(payloads[a:b])
            sent += 1
            if sent % self.pace_every == 0:
                self._pace(sent)
        self.frames += sent - self.sent
        self.sent = sent
        self.last_ts = int(chunk["ts"][hi - 1])

    def send_batches(self, frames: list[tuple[bytes, int, int]], first_ts: int) -> None:
        """Batch frames (payload, rows, last time) of `encode_batches`; `sent` counts rows."""
        if not self.opened:
            self.heartbeat(first_ts)
            self.opened = True
            self.t0 = self.last_beat = time.perf_counter()
        send, more = self.send, int(zmq.SNDMORE)
        for payload, n, last_ts in frames:
            send(BATCH_TOPIC, more)
            send(payload)
            self.sent += n
            self.frames += 1
            self.last_ts = last_ts
            self._pace(self.sent)

    def _pace(self, sent: int) -> None:
        """Every `pace_every` messages: a heartbeat when one is due, and a sleep when ahead
        of `rate`."""
        now = time.perf_counter()
        if self.heartbeat_s > 0 and now - self.last_beat >= self.heartbeat_s:
            self.heartbeat(self.last_ts)
            self.last_beat = now
        if self.rate > 0:
            ahead = sent / self.rate - (now - self.t0)
            if ahead > 0:
                time.sleep(ahead)


class LiveStream:
    """The sending side of a stream whose records arrive as they happen (a venue's feed).

    The same encoder, frames and heartbeats as `publish_source`; only the timing differs:
    the session opens at once (a heartbeat before any data, so the daemon learns the new
    session even while the market is quiet) and `beat` sends a heartbeat whenever one is
    due, data or not. A heartbeat carries the newest data time (before any data: the wall
    clock), so it never runs ahead of the stream.
    """

    def __init__(self, publisher: Publisher, symbols: list[str], session: int,
                 heartbeat_s: float) -> None:
        self.publisher = publisher
        self.encoder = ChunkEncoder(list(symbols), DAY_NS)  # no bars on a venue's feed
        self._stream = _Stream(publisher, self.encoder.topics, session, 0.0, heartbeat_s)
        self._stream.heartbeat(time.time_ns())
        self._stream.opened = True

    @property
    def sent(self) -> int:
        return self._stream.sent

    def send(self, chunk: np.ndarray) -> None:
        if chunk.shape[0]:
            payloads, offsets = self.encoder.encode(chunk)
            self._stream.send_chunk(chunk, payloads, offsets, 0, chunk.shape[0])

    def beat(self) -> None:
        """A heartbeat if `heartbeat_s` has passed since the last one."""
        s = self._stream
        now = time.perf_counter()
        if s.heartbeat_s > 0 and now - s.last_beat >= s.heartbeat_s:
            s.heartbeat(s.last_ts or time.time_ns())
            s.last_beat = now

    def close(self, final: bool = False) -> int:
        """The last heartbeat (`final`: end of stream); returns the messages sent."""
        s = self._stream
        s.heartbeat(s.last_ts or time.time_ns(), final=final)
        self.publisher.sent += s.sent + s.beats
        return s.sent
