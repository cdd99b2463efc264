"""ZeroMQ transport: a publisher of messages and an asyncio subscriber of validated batches.

Frames are `[topic, payload]` (topic = kind tag + "." + symbol). The publisher is an XPUB
socket with XPUB_NODROP so a replay never silently drops messages under load (a plain PUB
drops at the high-water mark); it waits for the first subscription before sending, which
also removes ZeroMQ's slow-joiner loss.

The subscriber awaits one message, then drains the socket without waiting (non-blocking
receives on a shadow of the same socket) and hands the whole batch to the consumer: one
`await` per message would cap the engine near 100k messages/s. Its validator
(`feeds.validation.Validator`, the one validation path) judges every frame.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any

import zmq
import zmq.asyncio

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
        """`max_message_bytes` > 0: ZeroMQ drops larger messages (MAXMSGSIZE, it closes
        the offending connection, which reconnects). `curve_client` = (public, secret,
        server public) keys: only a publisher holding the server's secret key gets in."""
        self.context = context or zmq.asyncio.Context.instance()
        self.socket = self.context.socket(zmq.SUB)
        self.socket.setsockopt(zmq.RCVHWM, rcvhwm)
        self.socket.setsockopt(zmq.LINGER, 0)
        if max_message_bytes > 0:
            self.socket.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
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
        Python, more than everything else the engine does. A frame pair that does not look
        like [topic, MessagePack array] takes a slow path that reads RCVMORE; a message with
        the wrong number of frames is counted as bad framing (a lone frame may take the
        message after it along). `counted`: the validator whose `received` counts the
        messages drained (where the consumer cannot take a length).
        """
        yield first
        n = 1
        sock = self._sync
        recv = sock.recv
        noblock = _NOBLOCK
        try:
            for _ in range(self.max_batch - 1):
                topic = recv(noblock)
                n += 1
                try:
                    payload = recv(noblock)
                except zmq.Again:
                    yield [topic]  # a lone frame: bad framing
                    break
                try:  # every payload is a MessagePack fixarray (0x90..0x9f)
                    aligned = payload[0] >> 4 == 9 and topic[1] == 46  # 46 = "."
                except IndexError:
                    aligned = False
                if aligned:
                    yield (topic, payload)
                    continue
                # unusual: read the rest of this message, so a wrong frame count is seen as
                # such and a two-frame message with a bad payload is judged by its content
                frames = [topic, payload]
                while sock.getsockopt(zmq.RCVMORE):
                    frames.append(recv(0))
                yield frames
        except zmq.Again:
            pass
        finally:
            if counted is not None:
                counted.received += n

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
