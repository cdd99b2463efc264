"""ZeroMQ transport: a publisher of messages and an asyncio subscriber of validated batches.

Frames are `[topic, payload]` (topic = kind tag + "." + symbol). The publisher is an XPUB
socket with XPUB_NODROP so a replay never silently drops messages under load (a plain PUB
drops at the high-water mark); it waits for the first subscription before sending, which
also removes ZeroMQ's slow-joiner loss.

The subscriber awaits one message, then drains the socket without waiting (non-blocking
receives on a shadow of the same socket) and hands the whole batch to the consumer: one
`await` per message would cap the engine near 100k messages/s. Its validator
(`feeds.validation.Validator`, the one validation path) judges every frame.

Message size: `max_message_bytes` is enforced after receive, per message: a larger one is
counted (`oversize`) and skipped, and costs nothing else. ZeroMQ's own MAXMSGSIZE drops the
whole connection (and every message queued behind it until the reconnect), so it is set
only as a hard cap `TRANSPORT_CAP_FACTOR` times larger: it still bounds what one frame may
make the receiver allocate (the memory held is at most the receive high-water mark times
that cap), while a frame between the two limits costs only itself.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any

import zmq
import zmq.asyncio
import zmq.backend

from feeds.messages import (
    Message,
    encode,
    topic_for,
)
from feeds.validation import ValidationLimits, Validator

log = logging.getLogger(__name__)

TRANSPORTS = ("inproc", "ipc", "tcp")
_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE = int(zmq.SNDMORE)
#: a frame's send without pyzmq's Python wrapper (`zmq.Socket.send` only adds routing ids
#: and groups before calling it); the wrapper where a pyzmq backend has no such class
_frame_send = getattr(getattr(zmq.backend, "Socket", None), "send", None) or zmq.Socket.send
#: ZeroMQ's MAXMSGSIZE (which drops the connection) is this many times `max_message_bytes`
TRANSPORT_CAP_FACTOR = 64
#: the smallest hard cap: frames of a few MB (a fuzzer's, a wrong feed's) cost only themselves
MIN_TRANSPORT_CAP = 4 << 20


class Publisher:
    """Sends messages as `[topic, payload]`, numbering each topic's stream from 1."""

    def __init__(
        self,
        endpoint: str,
        context: zmq.Context[Any] | None = None,
        *,
        nodrop: bool = True,
        sndhwm: int = 100_000,
        curve_server: tuple[bytes, bytes] | None = None,
    ) -> None:
        """`curve_server` = (public, secret) key of a CURVE server: peers without the
        server's public key (and, with a ZAP authenticator, an allowed key) get nothing."""
        self.context = context or zmq.Context.instance()
        self.socket = self.context.socket(zmq.XPUB)
        self.socket.setsockopt(zmq.SNDHWM, sndhwm)
        self.socket.setsockopt(zmq.LINGER, 2000)
        if nodrop:
            self.socket.setsockopt(zmq.XPUB_NODROP, 1)
        if curve_server is not None:
            self.socket.curve_publickey, self.socket.curve_secretkey = curve_server
            self.socket.curve_server = True
        try:
            self.socket.bind(endpoint)
        except zmq.ZMQError:
            # closed at once: with its linger, the context's term() would wait on it forever
            self.socket.close(linger=0)
            raise
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
        # two plain sends: send_multipart costs ~3.6 us per message in Python, these ~1 us;
        # libzmq's send itself (the compiled base class's), past pyzmq's Python wrapper that
        # only handles routing ids and groups (which an XPUB never uses): less Python on a
        # live order's path, where every call runs with cold caches
        sock = self.socket
        _frame_send(sock, topic_for(msg), _SNDMORE)
        _frame_send(sock, encode(msg))
        self.sent += 1

    def send_raw(self, topic: bytes, payload: bytes) -> None:
        """Send pre-encoded frames (tests use this to inject malformed input)."""
        self.socket.send_multipart((topic, payload))
        self.sent += 1

    def close(self) -> None:
        self.socket.close()


def transport_cap(max_message_bytes: int) -> int:
    """ZeroMQ's MAXMSGSIZE for a per-message limit: far above it (a frame between the two
    is counted and skipped), still a bound on one frame's memory."""
    return max(max_message_bytes * TRANSPORT_CAP_FACTOR, MIN_TRANSPORT_CAP)


class Subscriber:
    """Asyncio SUB socket: `await batch()` returns every message that is ready."""

    def __init__(
        self,
        endpoint: str,
        context: zmq.asyncio.Context | None = None,
        topics: Iterable[bytes] = (b"",),
        rcvhwm: int = 100_000,
        max_batch: int = 8192,
        limits: ValidationLimits | None = None,
        max_message_bytes: int = 0,
        curve_client: tuple[bytes, bytes, bytes] | None = None,
        monitor: bool = False,
    ) -> None:
        """`max_message_bytes` > 0: a larger message is counted (`oversize`) and skipped
        after receive; ZeroMQ's MAXMSGSIZE, which closes the offending connection (it
        reconnects), is only a hard cap far above it (`transport_cap`, see the module's
        docstring). `curve_client` = (public, secret, server public) keys: only a
        publisher holding the server's secret key gets in."""
        self.context = context or zmq.asyncio.Context.instance()
        self.socket = self.context.socket(zmq.SUB)
        self.socket.setsockopt(zmq.RCVHWM, rcvhwm)
        self.socket.setsockopt(zmq.LINGER, 0)
        #: the per-message limit enforced after receive (no limit: the largest int)
        self.max_message_bytes = max_message_bytes if max_message_bytes > 0 else 1 << 62
        if max_message_bytes > 0:
            self.socket.setsockopt(zmq.MAXMSGSIZE, transport_cap(max_message_bytes))
        if curve_client is not None:
            (self.socket.curve_publickey, self.socket.curve_secretkey,
             self.socket.curve_serverkey) = curve_client
        for t in topics:
            self.socket.setsockopt(zmq.SUBSCRIBE, t)
        #: with `monitor`, a PAIR socket of the connection's events, from before connecting
        #: (a synchronous view for non-blocking reads; `close_monitor` closes it)
        self.monitor: zmq.Socket[bytes] | None = None
        self._monitor_owner: zmq.asyncio.Socket | None = None
        if monitor:
            self._monitor_owner = self.socket.get_monitor_socket()
            self.monitor = zmq.Socket.shadow(self._monitor_owner.underlying)
        self.socket.connect(endpoint)
        # a synchronous view of the same socket for the non-blocking drain
        self._sync: zmq.Socket[bytes] = zmq.Socket.shadow(self.socket.underlying)
        self.validator = Validator(limits)
        self.max_batch = max_batch

    async def raw_batch(self) -> list[Any]:
        """One await for the first message, then non-blocking receives until empty (or
        `max_batch` messages): the frames of every message that is ready (`_drain`)."""
        return list(self._drain(await self.socket.recv_multipart()))

    async def lazy_batch(self) -> Iterator[Any]:
        """As `raw_batch`, but the frames after the first are received as they are
        consumed: `Validator.validate_many(await sub.lazy_batch())` receives and validates
        in one pass, so a tapped trade (`Validator.tap_trades`) is handed out while the
        rest of the batch is still on the socket. The drain counts its messages into the
        validator's `received` when it ends."""
        return self._drain(await self.socket.recv_multipart(), self.validator)

    def _drain(self, first: list[bytes], counted: Validator | None = None) -> Iterator[Any]:
        """`first`, then non-blocking receives until the socket is empty.

        The drain calls `recv` twice per message with plain int flags: pyzmq's
        `recv_multipart` and the RCVMORE option cost several microseconds per message in
        Python, more than everything else the engine does. Frame boundaries are still kept:
        a valid message's first frame is a topic ("T.BAC": a letter, a dot) and its second
        a MessagePack array, so a pair that does not look like that is the only place where
        a message of the wrong frame count can be; there the slow path (`_realign`) reads
        RCVMORE and finds the boundary. A frame with no more after it (a one-frame message)
        never takes the next message along: every valid message after it is delivered.
        Extra frames after a message that looks whole are counted as bad framing on their
        own (a malformed message counts at most once per frame). A message above
        `max_message_bytes` is counted (`oversize`) and skipped. `counted`: the validator
        whose `received` counts the messages drained (where the consumer cannot take a
        length).
        """
        n = 0
        sock = self._sync
        recv = sock.recv
        noblock = _NOBLOCK
        limit = self.max_message_bytes
        try:
            if sum(len(f) for f in first) > limit:
                self._oversize(first)
            else:
                n += 1
                yield first
            for _ in range(self.max_batch - 1):
                topic = recv(noblock)
                try:
                    payload = recv(noblock)
                except zmq.Again:
                    n += 1
                    yield [topic]  # a lone frame: bad framing
                    break
                try:  # every payload is a MessagePack fixarray (0x90..0x9f)
                    aligned = (payload[0] >> 4 == 9 and topic[1] == 46  # 46 = "."
                               and len(payload) <= limit)
                except IndexError:
                    aligned = False
                if aligned:
                    n += 1
                    yield (topic, payload)
                    continue
                for frames in self._realign(topic, payload):
                    n += 1
                    yield frames
        except zmq.Again:
            pass
        finally:
            if counted is not None:
                counted.received += n

    def _realign(self, first: bytes, second: bytes) -> list[Any]:
        """Two frames that are not [topic, MessagePack array] (or too large): find where
        the messages they belong to end (RCVMORE). Returns the messages to judge (an
        oversize one is counted here instead).

        When `second` looks like a topic (a kind tag A-Z, a dot), has one frame after it
        that looks like a payload and no more, `first` was a message of its own (a lone
        frame) and [second, third] the next message. Otherwise the frames up to the
        message's last are one message: two frames are judged by their content, any other
        count as bad framing."""
        sock = self._sync
        more = sock.getsockopt(zmq.RCVMORE)
        frames = [first, second]
        if more and len(second) >= 2 and second[1] == 46 and 65 <= second[0] <= 90:
            third = sock.recv(0)
            more = sock.getsockopt(zmq.RCVMORE)
            if not more and third[:1] and third[0] >> 4 == 9:
                return [[first], *self._sized([second, third])]
            frames.append(third)
        while more:
            frames.append(sock.recv(0))
            more = sock.getsockopt(zmq.RCVMORE)
        return self._sized(frames)

    def _sized(self, frames: list[bytes]) -> list[Any]:
        """`frames` as a message to judge, or none when above `max_message_bytes`."""
        if sum(len(f) for f in frames) > self.max_message_bytes:
            self._oversize(frames)
            return []
        return [frames]

    def _oversize(self, frames: list[bytes]) -> None:
        """A message above `max_message_bytes`: counted and skipped, the stream goes on."""
        v = self.validator
        size = sum(len(f) for f in frames)
        v.skipped.add("oversize", 1, f"{frames[0][:40]!r}: {len(frames)} frame(s), "
                                     f"{size} bytes (max_message_bytes {self.max_message_bytes})")
        v.received += 1

    async def batch(self) -> list[Message]:
        """Every ready message, validated (the engine's hot path is Engine.consume, which
        validates with the same `Validator.validate`)."""
        return self.validator.validate_many(await self.raw_batch())

    def close_monitor(self) -> None:
        """Stop the connection-event monitor and close its PAIR socket through the object
        that owns it. Closing the shadow in `monitor` instead frees the socket while its
        owner still counts it open; when the owner is garbage-collected later it closes
        whatever socket then lives at the freed address (a replay's SUB socket, seen as
        "closed" in the middle of its run)."""
        owner, self._monitor_owner, self.monitor = self._monitor_owner, None, None
        if owner is None:
            return
        with contextlib.suppress(zmq.ZMQError):  # the socket may be closed already
            self.socket.disable_monitor()
        owner.close(0)

    def close(self) -> None:
        self.close_monitor()
        self.socket.close()
