"""ZeroMQ transport: a publisher of messages and an asyncio subscriber that validates them.

Frames are `[topic, payload]` (topic = kind tag + "." + symbol). The publisher is an XPUB
socket with XPUB_NODROP so a replay never silently drops messages under load (a plain PUB
drops at the high-water mark); it waits for the first subscription before sending, which
also removes ZeroMQ's slow-joiner loss.

The subscriber awaits one message, then drains the socket without waiting (non-blocking
receives on a shadow of the same socket) and hands the whole batch to the consumer: one
`await` per message would cap the engine near 100k messages/s.

Validation happens at decode (`Validator`): undecodable frames, unknown kinds, NaN/inf or
non-positive prices, sizes <= 0, timestamps going backwards per symbol, sequence gaps and
duplicates are counted by kind, logged once per kind with a sample, and skipped. A gap is
counted by the number of missing messages; the message after a gap is good data and kept.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import msgspec
import zmq
import zmq.asyncio

from feeds.messages import (
    Bar,
    Fill,
    Heartbeat,
    Message,
    OptionValue,
    Order,
    Quote,
    Trade,
    encode,
    make_decoder,
    topic_for,
)

log = logging.getLogger(__name__)

TRANSPORTS = ("inproc", "ipc", "tcp")
_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE = int(zmq.SNDMORE)


def default_endpoint(transport: str, name: str, tmpdir: str | None = None) -> str:
    """A fresh endpoint of the given transport for one replay (loopback only for tcp)."""
    if transport == "inproc":
        return f"inproc://{name}"
    if transport == "ipc":
        import os
        import tempfile

        base = tmpdir or tempfile.mkdtemp(prefix="engine-ipc-")
        return f"ipc://{os.path.join(base, name)}.sock"
    if transport == "tcp":
        return "tcp://127.0.0.1:*"
    raise ValueError(f"unknown transport {transport!r}: expected one of {', '.join(TRANSPORTS)}")


class SkipCounts:
    """Counts rejected input by kind; logs the first sample of each kind once."""

    def __init__(self, logger: logging.Logger = log) -> None:
        self.counts: dict[str, int] = {}
        self._log = logger

    def add(self, kind: str, sample: object, n: int = 1) -> None:
        c = self.counts.get(kind, 0)
        self.counts[kind] = c + n
        if c == 0:
            text = repr(sample)
            if len(text) > 200:
                text = text[:200] + "..."
            self._log.warning("skipping bad input (%s), first sample: %s", kind, text)

    def total(self) -> int:
        return sum(v for k, v in self.counts.items() if k != "sequence_gap")


class Publisher:
    """Sends messages as `[topic, payload]`, numbering each topic's stream from 1."""

    def __init__(
        self,
        endpoint: str,
        context: zmq.Context[Any] | None = None,
        *,
        nodrop: bool = True,
        sndhwm: int = 100_000,
    ) -> None:
        self.context = context or zmq.Context.instance()
        self.socket = self.context.socket(zmq.XPUB)
        self.socket.setsockopt(zmq.SNDHWM, sndhwm)
        self.socket.setsockopt(zmq.LINGER, 2000)
        if nodrop:
            self.socket.setsockopt(zmq.XPUB_NODROP, 1)
        self.socket.bind(endpoint)
        self.endpoint: str = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._seq: dict[bytes, int] = {}
        self.sent = 0

    def wait_for_subscriber(self, timeout_s: float = 10.0) -> None:
        """Block until a SUB subscribes (XPUB delivers its subscribe frame, first byte 1).

        Unsubscribe frames (first byte 0) of subscribers that went away are skipped, so a
        restarted subscriber is really waited for.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.socket.poll(int(left * 1000), zmq.POLLIN):
                raise TimeoutError(
                    f"no subscriber connected to {self.endpoint} in {timeout_s} s")
            if self.socket.recv()[:1] == b"\x01":
                return

    def next_seq(self, topic: bytes) -> int:
        s = self._seq.get(topic, 0) + 1
        self._seq[topic] = s
        return s

    def send(self, msg: Message) -> None:
        # two plain sends: send_multipart costs ~3.6 us per message in Python, these ~1 us
        self.socket.send(topic_for(msg), _SNDMORE)
        self.socket.send(encode(msg))
        self.sent += 1

    def send_raw(self, topic: bytes, payload: bytes) -> None:
        """Send pre-encoded frames (tests use this to inject malformed input)."""
        self.socket.send_multipart((topic, payload))
        self.sent += 1

    def close(self) -> None:
        self.socket.close()


class Validator:
    """Decodes and checks frames; returns good messages, counts and skips the rest."""

    def __init__(self) -> None:
        self.decoder = make_decoder()
        self.skipped = SkipCounts()
        self.last_ts: dict[str, int] = {}
        self.last_seq: dict[bytes, int] = {}
        self.received = 0

    def validate(self, frames: list[bytes] | tuple[bytes, ...]) -> Message | None:
        self.received += 1
        if len(frames) != 2:
            self.skipped.add("bad_framing", frames)
            return None
        topic, payload = frames
        try:
            msg = self.decoder.decode(payload)
        except msgspec.ValidationError as exc:
            # msgspec reports an unknown tag as an invalid value at the tag's position
            kind = "unknown_kind" if str(exc).endswith("at `$[0]`") else "wrong_schema"
            self.skipped.add(kind, payload)
            return None
        except msgspec.DecodeError:
            self.skipped.add("undecodable", payload)
            return None
        t = type(msg)
        # the sequence is checked first: a message with bad content still occupies its place
        # in the stream, so skipping it must not look like a gap
        seq = msg.seq
        expected = self.last_seq.get(topic, 0) + 1
        if seq < expected:
            self.skipped.add("duplicate", msg)
            return None
        if seq > expected:
            self.skipped.add("sequence_gap", msg, seq - expected)
        self.last_seq[topic] = seq
        if t is Trade:
            p = msg.price  # type: ignore[union-attr]
            if not (p > 0.0 and p != math.inf):  # NaN fails the comparison too
                self.skipped.add("bad_price", msg)
                return None
            if not msg.size > 0.0:  # type: ignore[union-attr]
                self.skipped.add("bad_size", msg)
                return None
        elif t is Quote:
            q: Quote = msg  # type: ignore[assignment]
            if not (
                q.bid >= 0.0 and q.ask >= 0.0 and q.bid != math.inf and q.ask != math.inf
                and (q.bid > 0.0 or q.ask > 0.0)
            ):
                self.skipped.add("bad_price", msg)
                return None
            if not (q.bid_size >= 0.0 and q.ask_size >= 0.0):
                self.skipped.add("bad_size", msg)
                return None
        elif t is Bar:
            b: Bar = msg  # type: ignore[assignment]
            if not (b.low > 0.0 and b.high >= b.low and b.high != math.inf
                    and b.low <= b.open <= b.high and b.low <= b.close <= b.high):
                self.skipped.add("bad_price", msg)
                return None
            if not b.volume >= 0.0:
                self.skipped.add("bad_size", msg)
                return None
        if t is not Heartbeat:
            sym = msg.symbol
            last = self.last_ts.get(sym)
            if last is not None and msg.ts < last:
                self.skipped.add("time_backwards", msg)
                return None
            self.last_ts[sym] = msg.ts
        return msg


class Subscriber:
    """Asyncio SUB socket: `await batch()` returns every message that is ready."""

    def __init__(
        self,
        endpoint: str,
        context: zmq.asyncio.Context | None = None,
        topics: Iterable[bytes] = (b"",),
        rcvhwm: int = 100_000,
        max_batch: int = 8192,
    ) -> None:
        self.context = context or zmq.asyncio.Context.instance()
        self.socket = self.context.socket(zmq.SUB)
        self.socket.setsockopt(zmq.RCVHWM, rcvhwm)
        self.socket.setsockopt(zmq.LINGER, 0)
        for t in topics:
            self.socket.setsockopt(zmq.SUBSCRIBE, t)
        self.socket.connect(endpoint)
        # a synchronous view of the same socket for the non-blocking drain
        self._sync: zmq.Socket[bytes] = zmq.Socket.shadow(self.socket.underlying)
        self.validator = Validator()
        self.max_batch = max_batch

    async def raw_batch(self) -> list[Any]:
        """One await for the first message, then non-blocking receives until empty.

        The drain calls `recv` twice per message with plain int flags: pyzmq's
        `recv_multipart` and the RCVMORE option cost several microseconds per message in
        Python, more than everything else the engine does. A frame pair that does not look
        like [topic, MessagePack array] takes a slow path that reads RCVMORE; a message with
        the wrong number of frames is counted as bad framing (a lone frame may take the
        message after it along).
        """
        first = await self.socket.recv_multipart()
        out: list[Any] = [first]
        append = out.append
        sock = self._sync
        recv = sock.recv
        noblock = _NOBLOCK
        try:
            for _ in range(self.max_batch - 1):
                topic = recv(noblock)
                try:
                    payload = recv(noblock)
                except zmq.Again:
                    append([topic])  # a lone frame: bad framing
                    break
                try:  # every payload is a MessagePack fixarray (0x90..0x9f)
                    aligned = payload[0] >> 4 == 9 and topic[1] == 46  # 46 = "."
                except IndexError:
                    aligned = False
                if aligned:
                    append((topic, payload))
                    continue
                # unusual: read the rest of this message, so a wrong frame count is seen as
                # such and a two-frame message with a bad payload is judged by its content
                frames = [topic, payload]
                while sock.getsockopt(zmq.RCVMORE):
                    frames.append(recv(0))
                append(frames)
        except zmq.Again:
            pass
        return out

    async def batch(self) -> list[Message]:
        """Every ready message, validated (the engine's hot path is Engine.consume, which
        inlines this validation for well-formed trades)."""
        validate = self.validator.validate
        return [m for f in await self.raw_batch() if (m := validate(f)) is not None]

    def close(self) -> None:
        self.socket.close()


def publish_in_thread(
    produce: Callable[[Publisher], None],
    publisher: Publisher,
    name: str = "feed-publisher",
) -> tuple[threading.Thread, list[BaseException]]:
    """Run `produce(publisher)` on a thread; exceptions are collected, not lost."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            publisher.wait_for_subscriber()
            produce(publisher)
        except BaseException as exc:  # reported by the caller after join
            errors.append(exc)

    th = threading.Thread(target=target, name=name, daemon=True)
    th.start()
    return th, errors


async def wait_thread(th: threading.Thread) -> None:
    """Await a thread's end without blocking the event loop."""
    while th.is_alive():
        await asyncio.sleep(0.005)


__all__ = [
    "Bar", "Fill", "Heartbeat", "Message", "OptionValue", "Order", "Quote", "Trade",
    "Publisher", "Subscriber", "Validator", "SkipCounts", "publish_in_thread", "default_endpoint",
]
