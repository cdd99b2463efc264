"""ZeroMQ transport: a publisher of messages and an asyncio subscriber that validates them.

Frames are `[topic, payload]` (topic = kind tag + "." + symbol). The publisher is an XPUB
socket with XPUB_NODROP so a replay never silently drops messages under load (a plain PUB
drops at the high-water mark); it waits for the first subscription before sending, which
also removes ZeroMQ's slow-joiner loss.

The subscriber awaits one message, then drains the socket without waiting (non-blocking
receives on a shadow of the same socket) and hands the whole batch to the consumer: one
`await` per message would cap the engine near 100k messages/s.

Validation happens at decode (`Validator`, the one validation path): undecodable frames
(invalid UTF-8 included), unknown kinds, NaN/inf, non-positive or absurd prices, price jumps
outside a band (`price_outlier`), sizes <= 0, timestamps out of range, ahead of the stream's
clock or going backwards per symbol, bad symbol names, symbols beyond the allow-list or the
table's maximum, sequence gaps and duplicates are counted by kind, logged once per kind with
a sample, and skipped (bounds in `ValidationLimits`). A gap is
counted by the number of missing messages; the message after a gap is good data and kept.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
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
from feeds.records import SkipCounter

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


NS = 1_000_000_000
#: a symbol name: letters, digits and the punctuation real tickers and option codes use
SYMBOL_CHARS = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._/:^=+#-]*")


class ValidationLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Sanity bounds on decoded messages: what a peer may not make the engine believe.

    Every bound is configurable (the `[validation]` table of the engine's TOML); the defaults
    accept every real feed and file the project reads.
    """

    #: a message may run ahead of the stream's clock (the newest time accepted so far, on
    #: any symbol) by at most this much; more is counted as `time_future`. Weekends and
    #: holidays of daily data need days, not seconds
    max_time_skew_seconds: float = 30 * 86400.0
    #: timestamps outside [earliest, latest) (ns since the epoch) are `time_out_of_range`
    earliest_ns: int = -2_208_988_800 * NS  # 1900-01-01
    latest_ns: int = 4_102_444_800 * NS  # 2100-01-01
    #: a price above this is `bad_price` (the dearest listed share trades near $1e6)
    max_price: float = 1e8
    #: a price outside [last / band, last * band] of the symbol's last accepted price is a
    #: `price_outlier` (a ratio > 1: 10 lets a 1:8 split through, stops a fat-finger 1e300)
    price_band: float = 10.0
    #: per-symbol bands overriding `price_band`
    price_band_by_symbol: dict[str, float] = {}
    #: the most distinct symbols a stream may introduce (`symbol_limit` beyond it)
    max_symbols: int = 10_000
    #: when not empty, only these symbols are accepted (`symbol_not_allowed` otherwise)
    allowed_symbols: list[str] = []
    #: the longest symbol name accepted (`bad_symbol` beyond it, or for odd characters)
    max_symbol_length: int = 32

    def __post_init__(self) -> None:
        if not self.max_time_skew_seconds > 0 or self.max_time_skew_seconds == math.inf:
            raise ValueError("validation.max_time_skew_seconds must be a positive number")
        if not self.earliest_ns < self.latest_ns:
            raise ValueError("validation.earliest_ns must be before latest_ns")
        if not (self.max_price > 0 and math.isfinite(self.max_price)):
            raise ValueError("validation.max_price must be a positive number")
        for name, band in (("price_band", self.price_band),
                           *((f"price_band_by_symbol.{k}", v)
                             for k, v in self.price_band_by_symbol.items())):
            if not (band > 1.0):  # NaN fails too
                raise ValueError(f"validation.{name} must be a ratio > 1, got {band}")
        if self.max_symbols < 1 or self.max_symbol_length < 1:
            raise ValueError("validation.max_symbols and max_symbol_length must be >= 1")


class Validator:
    """Decodes and checks frames; returns good messages, counts and skips the rest.

    The one validation path of the engine: the subscriber's `batch`, the engine's `consume`
    and the daemon all call `validate`. Nothing a peer sends makes it raise; every frame is
    either returned or counted under one kind (a sequence gap is counted besides the
    message after it, which is kept).
    """

    def __init__(self, limits: ValidationLimits | None = None) -> None:
        self.limits = limits = limits or ValidationLimits()
        self.decoder = make_decoder()
        self.skipped = SkipCounter(what="skipped")
        self.last_ts: dict[str, int] = {}
        self.last_seq: dict[bytes, int] = {}
        #: the last accepted price of each symbol (trade, bar close or quote mid)
        self.last_price: dict[str, float] = {}
        #: symbols accepted so far, with their price band (checked once each)
        self._band: dict[str, float] = {}
        #: the stream's clock: the newest timestamp accepted on any symbol (None: no message)
        self.clock: int | None = None
        self.received = 0
        #: the feed session (epoch) of the stream, from its heartbeats; None: none seen yet
        self.session: int | None = None
        #: feed sessions that replaced another one
        self.session_changes = 0
        #: after a session change, a stream's first sequence number is accepted as it is
        self._fresh = False
        self._skew_ns = int(limits.max_time_skew_seconds * NS)
        self._allowed = frozenset(limits.allowed_symbols)
        self._max_price = limits.max_price
        self._earliest = limits.earliest_ns
        self._latest = limits.latest_ns

    def new_session(self, session: int) -> None:
        """A publisher announced session `session`: a new epoch of its streams restarts
        their sequence numbers, so the sequence check starts over (logged). The first
        session seen is adopted as it is (the stream positions restored from a journal
        belong to it)."""
        if self.session is not None:
            log.warning("feed session changed %d -> %d: sequence check reset for %d streams",
                        self.session, session, len(self.last_seq))
            self.last_seq.clear()
            self._fresh = True
            self.session_changes += 1
        self.session = session

    @property
    def known(self) -> set[str]:
        """Symbols accepted so far."""
        return set(self._band)

    def _symbol_ok(self, sym: str, msg: Message) -> bool:
        """A symbol seen for the first time: name, allow-list and table size."""
        lim = self.limits
        if len(sym) > lim.max_symbol_length or SYMBOL_CHARS.fullmatch(sym) is None:
            self.skipped.add("bad_symbol", 1, msg)
            return False
        if self._allowed and sym not in self._allowed:
            self.skipped.add("symbol_not_allowed", 1, msg)
            return False
        if len(self._band) >= lim.max_symbols:
            self.skipped.add("symbol_limit", 1, msg)
            return False
        self._band[sym] = lim.price_band_by_symbol.get(sym, lim.price_band)
        return True

    def validate(self, frames: list[bytes] | tuple[bytes, ...]) -> Message | None:
        """The message of one frame pair if it passes every check, else None (counted)."""
        out = self.validate_many((frames,))
        return out[0] if out else None

    def validate_many(self, batch: Sequence[Any]) -> list[Message]:
        """The messages of a batch of frame pairs that pass every check, in order; every
        other frame is counted under one kind and skipped. Nothing a peer sends raises.

        The one implementation of the checks (`validate` is this for one frame). Written
        for the common case, a trade in sequence, in time and in its band: locals, a few
        comparisons and dict lookups per tick (it is the engine's hot path); other kinds and
        every rejection leave the fast branch.
        """
        out: list[Message] = []
        append = out.append
        skip = self.skipped.add
        decode = self.decoder.decode
        last_seq = self.last_seq
        seq_get = last_seq.get
        band_get = self._band.get
        last_price = self.last_price
        price_get = last_price.get
        last_ts = self.last_ts
        ts_get = last_ts.get
        max_price, earliest, latest = self._max_price, self._earliest, self._latest
        skew = self._skew_ns
        inf = math.inf
        clock = self.clock
        for frames in batch:
            if len(frames) != 2:
                skip("bad_framing", 1, frames)
                continue
            topic, payload = frames
            try:
                msg = decode(payload)
            except msgspec.ValidationError as exc:
                # msgspec reports an unknown tag as an invalid value at the tag's position
                kind = "unknown_kind" if str(exc).endswith("at `$[0]`") else "wrong_schema"
                skip(kind, 1, payload)
                continue
            except Exception:  # noqa: BLE001 - MsgspecError, invalid UTF-8, anything else
                # a peer's bytes must never stop the engine: whatever the decoder raises on
                # (invalid UTF-8 in a string raises UnicodeDecodeError) is undecodable
                skip("undecodable", 1, payload)
                continue
            # the sequence is checked first: a message with bad content still occupies its
            # place in the stream, so skipping it must not look like a gap
            seq = msg.seq
            expected = seq_get(topic, 0) + 1
            if seq != expected:
                if type(msg) is Heartbeat:
                    pass  # liveness only: a heartbeat is never a gap or a duplicate
                elif self._fresh and topic not in last_seq:
                    pass  # first message of a stream of a new feed session: no gap
                elif seq < expected:
                    skip("duplicate", 1, msg)
                    continue
                else:
                    skip("sequence_gap", seq - expected, msg)
            last_seq[topic] = seq
            sym = msg.symbol
            band = band_get(sym)
            if band is None:
                if type(msg) is Heartbeat and sym == "":
                    band = 0.0
                elif not self._symbol_ok(sym, msg):
                    continue
                else:
                    band = self._band[sym]
            if type(msg) is Trade:  # the hot path
                p = msg.price
                if not (0.0 < p <= max_price):  # NaN fails the comparison too
                    skip("bad_price", 1, msg)
                    continue
                if not (0.0 < msg.size < inf):
                    skip("bad_size", 1, msg)
                    continue
                last = price_get(sym)
                if last is not None and not (last <= p * band and p <= last * band):
                    skip("price_outlier", 1, msg)
                    continue
                ts = msg.ts
                if not earliest <= ts < latest:
                    skip("time_out_of_range", 1, msg)
                    continue
                if clock is not None and ts > clock + skew:
                    skip("time_future", 1, msg)
                    continue
                prev = ts_get(sym)
                if prev is not None and ts < prev:
                    skip("time_backwards", 1, msg)
                    continue
                last_ts[sym] = ts
                if clock is None or ts > clock:
                    clock = ts
                last_price[sym] = p
                append(msg)
                continue
            self.clock = clock
            if type(msg) is Heartbeat and msg.session != self.session:
                self.new_session(msg.session)  # clears last_seq in place (alias stays valid)
            if self._check_other(msg, sym, band):
                append(msg)
            clock = self.clock
        self.clock = clock
        self.received += len(batch)
        return out

    def _check_other(self, msg: Message, sym: str, band: float) -> bool:
        """Quotes, bars and the rest (not market-data hot path): content, band, time."""
        t = type(msg)
        mx = self._max_price
        ref = 0.0  # orders, fills, heartbeats, option values: no market price
        if t is Quote:
            q: Quote = msg  # type: ignore[assignment]
            if not (0.0 <= q.bid <= mx and 0.0 <= q.ask <= mx and (q.bid > 0.0 or q.ask > 0.0)):
                self.skipped.add("bad_price", 1, msg)
                return False
            if not (0.0 <= q.bid_size < math.inf and 0.0 <= q.ask_size < math.inf):
                self.skipped.add("bad_size", 1, msg)
                return False
            ref = (q.bid + q.ask) / 2.0 if q.bid > 0.0 and q.ask > 0.0 else max(q.bid, q.ask)
        elif t is Bar:
            b: Bar = msg  # type: ignore[assignment]
            if not (b.low > 0.0 and b.high >= b.low and b.high <= mx
                    and b.low <= b.open <= b.high and b.low <= b.close <= b.high):
                self.skipped.add("bad_price", 1, msg)
                return False
            if not 0.0 <= b.volume < math.inf:
                self.skipped.add("bad_size", 1, msg)
                return False
            ref = b.close
            last = self.last_price.get(sym)
            if last is not None and not (last <= b.low * band and b.high <= last * band):
                self.skipped.add("price_outlier", 1, msg)
                return False
        if ref > 0.0:
            last = self.last_price.get(sym)
            if last is not None and not (last <= ref * band and ref <= last * band):
                self.skipped.add("price_outlier", 1, msg)
                return False
        ts = msg.ts
        if not self._earliest <= ts < self._latest:
            self.skipped.add("time_out_of_range", 1, msg)
            return False
        clock = self.clock
        if clock is not None and ts > clock + self._skew_ns:
            self.skipped.add("time_future", 1, msg)
            return False
        if t is not Heartbeat:
            prev = self.last_ts.get(sym)
            if prev is not None and ts < prev:
                self.skipped.add("time_backwards", 1, msg)
                return False
            self.last_ts[sym] = ts
        if clock is None or ts > clock:
            self.clock = ts
        if ref > 0.0:
            self.last_price[sym] = ref
        return True


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
        self.monitor: zmq.Socket[bytes] | None = None
        if monitor:
            self._monitor_owner = self.socket.get_monitor_socket()  # owns the PAIR socket
            self.monitor = zmq.Socket.shadow(self._monitor_owner.underlying)
        self.socket.connect(endpoint)
        # a synchronous view of the same socket for the non-blocking drain
        self._sync: zmq.Socket[bytes] = zmq.Socket.shadow(self.socket.underlying)
        self.validator = Validator(limits)
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
        validates with the same `Validator.validate`)."""
        return self.validator.validate_many(await self.raw_batch())

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
    "Publisher", "Subscriber", "Validator", "ValidationLimits",
    "publish_in_thread", "default_endpoint",
]
