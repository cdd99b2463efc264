"""Binance public market-data streams: frames normalised to records, and a websocket client.

Two parts, kept apart so that a recording replays through exactly the code the live feed ran:

- `FrameNormaliser` turns raw text frames (with their local receive time) into records of
  `feeds.records.RECORD_DTYPE`: trades (`trade`, `aggTrade` events) and best bid/offer
  (`bookTicker`), plain or wrapped by a combined stream (`{"stream": ..., "data": ...}`).
  It is a pure function of the sequence of (receive ns, text) pairs, so the recording
  reader (`feeds.recording`) reproduces the live session record for record.
- `BinanceClient` keeps one websocket connection up: subscribes, reconnects with bounded
  exponential backoff and resubscribes, reconnects on its own before the venue's 24-hour
  cut, leaves ping/pong to the websockets library (it answers the venue's pings and sends
  its own, so a dead link is noticed within `ping_interval + ping_timeout`), and marks
  streams that went quiet.

Time: a record's `ts` is the venue's event time `E` (ms) where the frame has one (trades;
USDⓈ-M bookTicker); spot bookTicker frames carry no time at all, so their `ts` is the local
receive time. Streams interleave on one connection and the two clocks differ, so `ts` is
made non-decreasing over the whole feed (a record older than the newest one gets the newest
one's time): the engine requires time order per symbol and a Source across symbols. The
exact venue times stay in the recorded frames. Trade and Quote messages have no field for
the receive time; it is kept in the recording ("<receive ns> <frame>").

Bad input never stops the feed: undecodable JSON, frames that are not objects, unknown
events, missing or ill-typed fields, non-finite or negative numbers, times far from the
receive time, symbols not subscribed, repeated or backward trade ids are counted by kind
(`FeedCounters.skipped`, first of each kind logged with a sample) and skipped. A forward
jump in a stream's trade ids is a gap: counted once per jump (events, not missing trades),
per symbol, and the trade after it is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import msgspec
import numpy as np

from feeds.records import (
    KIND_QUOTE,
    KIND_TRADE,
    NS_PER_MS,
    NS_PER_SECOND,
    RECORD_DTYPE,
    SkipCounter,
)

log = logging.getLogger(__name__)

MARKET_URLS = {"spot": "wss://stream.binance.com:9443", "usdm": "wss://fstream.binance.com"}
#: stream names as Binance spells them (the `e` of their events)
STREAM_KINDS = ("trade", "aggTrade", "bookTicker")
#: the id field whose sequence each trade stream numbers without holes
_TRADE_ID = {"trade": "t", "aggTrade": "a"}
#: an event time further than this from the receive time is not believed (a bogus time
#: would otherwise hold the feed's monotone clock in the future); a local clock this far
#: off makes every timed frame count as `time_far_from_receipt`: fix the clock (NTP)
MAX_TIME_DISTANCE_NS = 300 * NS_PER_SECOND
_MAX_ID = (1 << 63) - 1
#: the most streams Binance lets one connection listen to
MAX_STREAMS = 1024
#: the event a Binance server sends before it shuts down: reconnect at once
SERVER_SHUTDOWN = "serverShutdown"
_SYMBOL_OK = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


# ---------------------------------------------------------------- options


def parse_market(text: str) -> str:
    market = text.strip().lower()
    if market not in MARKET_URLS:
        raise ValueError(f"--market {text!r}: expected one of {', '.join(MARKET_URLS)}")
    return market


def parse_symbols(text: str | None) -> list[str]:
    """Upper-case symbols of a comma-separated list (Binance's `s` is upper case)."""
    names = [s.strip().upper() for s in (text or "").split(",") if s.strip()]
    if not names:
        raise ValueError("--symbols: give at least one symbol, e.g. btcusdt,ethusdt")
    bad = [s for s in names if not set(s) <= _SYMBOL_OK or len(s) > 20]
    if bad:
        raise ValueError(f"--symbols: {bad[0]!r} is not a Binance symbol (letters and digits)")
    return list(dict.fromkeys(names))


def parse_streams(text: str) -> list[str]:
    by_lower = {k.lower(): k for k in STREAM_KINDS}
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise ValueError(f"--streams: give at least one of {', '.join(STREAM_KINDS)}")
    bad = [s for s in names if s.lower() not in by_lower]
    if bad:
        raise ValueError(f"--streams {bad[0]!r}: expected some of {', '.join(STREAM_KINDS)}")
    return list(dict.fromkeys(by_lower[s.lower()] for s in names))


def stream_url(base: str) -> str:
    """The combined-stream endpoint of a base URL (`wss://host:port` -> `.../stream`);
    a URL that already names a path is used as it is."""
    parts = urlsplit(base)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ValueError(f"--url {base!r}: expected ws://HOST[:PORT][/PATH] or wss://...")
    try:
        parts.port  # noqa: B018 - raises for a port out of range or not a number
    except ValueError:
        raise ValueError(f"--url {base!r}: bad port") from None
    return base if parts.path not in ("", "/") else base.rstrip("/") + "/stream"


def stream_names(symbols: Sequence[str], streams: Sequence[str]) -> list[str]:
    """Subscription names, symbol by symbol: `btcusdt@trade`, `btcusdt@bookTicker`, ..."""
    return [f"{s.lower()}@{k}" for s in symbols for k in streams]


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# ---------------------------------------------------------------- normalisation


@dataclass
class FeedCounters:
    """What happened on the feed, by kind of event (never by values a peer chose)."""

    frames: int = 0
    trades: int = 0
    quotes: int = 0
    #: subscription replies `{"result": null, "id": n}`
    acks: int = 0
    #: `serverShutdown` notices (each is followed by a reconnect)
    shutdown_notices: int = 0
    #: per symbol: forward jumps of a trade stream's ids (one per jump)
    gaps: dict[str, int] = field(default_factory=dict)
    skipped: SkipCounter = field(default_factory=lambda: SkipCounter("binance"))
    connections: int = 0
    connect_failures: int = 0
    #: connections that ended without our asking (the venue's 24-hour cut included)
    disconnects: int = 0
    #: connections we closed ourselves before the venue's 24-hour cut
    scheduled_reconnects: int = 0
    #: per stream name: times it went quiet for longer than the stale limit
    stale_marks: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"frames": self.frames, "trades": self.trades, "quotes": self.quotes,
                "acks": self.acks, "shutdown_notices": self.shutdown_notices,
                "gaps": dict(self.gaps), "skipped": dict(self.skipped.counts),
                "connections": self.connections, "connect_failures": self.connect_failures,
                "disconnects": self.disconnects,
                "scheduled_reconnects": self.scheduled_reconnects,
                "stale_marks": dict(self.stale_marks)}


class _Bad(Exception):
    """A frame that cannot be used; `kind` names why (the skip counter's kind)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def _number(data: dict[str, Any], key: str) -> float:
    """A finite number >= 0 from a decimal string (Binance's prices and sizes) or a number."""
    value = data.get(key)
    if isinstance(value, str):
        try:
            x = float(value)
        except ValueError:
            raise _Bad("bad_number") from None
    elif isinstance(value, int | float) and not isinstance(value, bool):
        x = float(value)
    else:
        raise _Bad("missing_field" if value is None else "bad_number")
    if not (0.0 <= x < math.inf):
        raise _Bad("bad_number")
    return x


def _integer(data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    if value is None:
        raise _Bad("missing_field")
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _MAX_ID:
        raise _Bad("bad_id_or_time")
    return value


def sanitise(text: str) -> str:
    """One frame on one line: JSON allows line breaks only between tokens, where a space
    means the same, so the recording's one-frame-per-line format loses nothing."""
    if "\n" in text or "\r" in text:
        return text.replace("\r", " ").replace("\n", " ")
    return text


class FrameNormaliser:
    """Raw frames in, records out (see the module docstring for time, gaps and skips).

    `symbols` is the symbol table (records' `sym` indexes it); frames of other symbols are
    counted as `symbol_not_subscribed`, or silently dropped when in `ignore` (symbols a
    reader was told to leave out).
    """

    def __init__(self, symbols: Sequence[str], counters: FeedCounters | None = None,
                 ignore: Sequence[str] = ()) -> None:
        self.symbols = [s.upper() for s in symbols]
        self.index = {s: i for i, s in enumerate(self.symbols)}
        self.ignore = frozenset(s.upper() for s in ignore)
        self.counters = counters or FeedCounters()
        #: the newest ts given out (records are never older: see the module docstring)
        self.clock = 0
        #: per (sym, event): the last trade id (trades) or update id (bookTicker)
        self._last_id: dict[tuple[int, str], int] = {}
        #: per stream name (`btcusdt@trade`): local receive time (ns) of its last event
        self.last_seen: dict[str, int] = {}
        self._stream_name: dict[tuple[int, str], str] = {}
        #: records made and not yet taken, as tuples of RECORD_DTYPE's fields (one numpy
        #: array per take() is cheaper than a numpy write per field and frame)
        self._rows: list[tuple[int, int, int, float, float, float, float, float]] = []
        self._decode = msgspec.json.Decoder().decode

    @property
    def pending(self) -> int:
        return len(self._rows)

    def take(self) -> np.ndarray:
        """The records made since the last call, in order."""
        out = np.array(self._rows, RECORD_DTYPE) if self._rows else np.zeros(0, RECORD_DTYPE)
        self._rows = []
        return out

    def add(self, recv_ns: int, text: str | bytes) -> None:
        """One received frame. Never raises for anything a peer sends; at most one record
        is added (a reader takes them every CHUNK_RECORDS)."""
        self.counters.frames += 1
        try:
            self._frame(recv_ns, text)
        except _Bad as bad:
            self.counters.skipped.add(bad.kind, 1, text)

    def _frame(self, recv_ns: int, text: str | bytes) -> None:
        try:
            obj = self._decode(text)
        except (msgspec.DecodeError, UnicodeDecodeError):
            raise _Bad("malformed_json") from None
        if not isinstance(obj, dict):
            raise _Bad("not_an_object")
        data = obj.get("data") if "stream" in obj else obj
        if not isinstance(data, dict):
            raise _Bad("not_an_object")
        if "result" in data and "id" in data:
            if data["result"] is not None:
                raise _Bad("subscription_refused")
            self.counters.acks += 1
            return
        if "code" in data and "msg" in data:
            raise _Bad("venue_error")
        event = data.get("e")
        if event is None and {"u", "s", "b", "a"} <= data.keys():
            event = "bookTicker"  # spot bookTicker frames carry no event type
        if not isinstance(event, str):
            raise _Bad("unknown_event")
        if event == SERVER_SHUTDOWN:
            self.counters.shutdown_notices += 1
        elif event in _TRADE_ID:
            self._trade(recv_ns, data, event)
        elif event == "bookTicker":
            self._quote(recv_ns, data)
        else:
            raise _Bad("unknown_event")

    def _symbol(self, data: dict[str, Any]) -> int | None:
        name = data.get("s")
        if not isinstance(name, str):
            raise _Bad("missing_field" if name is None else "bad_symbol")
        sym = self.index.get(name)
        if sym is None:
            if name in self.ignore:
                return None
            raise _Bad("symbol_not_subscribed")
        return sym

    def _event_ns(self, recv_ns: int, data: dict[str, Any], keys: Sequence[str]) -> int:
        """The first of the venue's ms times `keys` the frame has, in ns; without any, the
        receive time."""
        for key in keys:
            if key in data:
                ns = _integer(data, key) * NS_PER_MS
                if abs(ns - recv_ns) > MAX_TIME_DISTANCE_NS:
                    raise _Bad("time_far_from_receipt")
                return ns
        return recv_ns

    def _trade(self, recv_ns: int, data: dict[str, Any], event: str) -> None:
        sym = self._symbol(data)
        price, size = _number(data, "p"), _number(data, "q")
        ident = _integer(data, _TRADE_ID[event])
        ts = self._event_ns(recv_ns, data, ("E", "T"))
        if sym is None:
            return
        if price <= 0.0 or size <= 0.0:
            raise _Bad("non_positive_price_or_size")
        key = (sym, event)
        last = self._last_id.get(key)
        if last is not None:
            if ident <= last:
                raise _Bad("trade_id_repeated_or_backwards")
            if ident > last + 1:
                name = self.symbols[sym]
                self.counters.gaps[name] = self.counters.gaps.get(name, 0) + 1
        self._last_id[key] = ident
        self.counters.trades += 1
        self._emit(recv_ns, sym, event, ts, KIND_TRADE, price, size, 0.0, 0.0)

    def _quote(self, recv_ns: int, data: dict[str, Any]) -> None:
        sym = self._symbol(data)
        bid, bid_size = _number(data, "b"), _number(data, "B")
        ask, ask_size = _number(data, "a"), _number(data, "A")
        update = _integer(data, "u")
        ts = self._event_ns(recv_ns, data, ("E", "T"))
        if sym is None:
            return
        if bid > 0.0 and 0.0 < ask < bid:
            raise _Bad("crossed_quote")
        key = (sym, "bookTicker")
        last = self._last_id.get(key)
        if last is not None and update < last:
            raise _Bad("quote_update_backwards")
        self._last_id[key] = update
        self.counters.quotes += 1
        self._emit(recv_ns, sym, "bookTicker", ts, KIND_QUOTE, bid, bid_size, ask, ask_size)

    def _emit(self, recv_ns: int, sym: int, event: str, ts: int, kind: int, f0: float,
              f1: float, f2: float, f3: float) -> None:
        if ts < self.clock:
            ts = self.clock
        else:
            self.clock = ts
        name = self._stream_name.get((sym, event))
        if name is None:
            name = self._stream_name[sym, event] = f"{self.symbols[sym].lower()}@{event}"
        self.last_seen[name] = recv_ns
        self._rows.append((ts, sym, kind, f0, f1, f2, f3, 0.0))


# ---------------------------------------------------------------- the websocket client


class ClientSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How the client connects and keeps the connection (times in seconds)."""

    url: str
    streams: tuple[str, ...]
    #: first reconnect delay after a failure; doubles per failure up to `backoff_max`
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    #: a connection that lived this long ends the run of failures: the next reconnect is
    #: immediate (the venue's daily cut); shorter ones back off, so a venue that accepts
    #: and drops at once is not hammered
    healthy_after: float = 5.0
    #: the venue cuts a connection after 24 h: reconnect on our own a little before
    reconnect_after: float = 23.5 * 3600
    #: a subscribed stream without an event for this long is marked stale
    stale_after: float = 60.0
    ping_interval: float = 20.0
    ping_timeout: float = 20.0
    open_timeout: float = 10.0
    #: the largest frame used (a market-data frame is a few hundred bytes): a bigger one
    #: is counted as `frame_too_large` and skipped, and costs only itself...
    max_frame_bytes: int = 1 << 16
    #: ...up to this size; beyond it the library closes the connection (a reconnect)
    #: rather than hold an unbounded frame in memory
    max_message_bytes: int = 1 << 24


#: frame sinks: (local receive ns, text) of a frame received, and of one we sent
FrameSink = Callable[[int, str], None]


class BinanceClient:
    """Keeps a subscribed connection up until `stop` is set (see the module docstring).

    Every text frame received goes to `on_frame` with its local receive time; the
    subscription request goes to `on_sent` (a recording keeps it: the replay learns the
    subscribed symbols from it). Binary frames are counted and skipped.
    """

    def __init__(self, settings: ClientSettings, on_frame: FrameSink,
                 counters: FeedCounters, on_sent: FrameSink | None = None) -> None:
        self.settings = settings
        self.on_frame = on_frame
        self.on_sent = on_sent
        self.counters = counters
        self._request_id = 0

    async def run(self, stop: asyncio.Event) -> None:
        failures = 0
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            began = loop.time()
            how = await self._connection(stop)
            if how == "stopped":
                return
            # a connection that lived (the venue's daily cut, our own scheduled one) is a
            # normal reconnect; one that failed or died young backs off
            healthy = how == "scheduled" or (
                how == "closed" and loop.time() - began >= self.settings.healthy_after)
            failures = 0 if healthy else failures + 1
            if failures:
                delay = min(self.settings.backoff_max,
                            self.settings.backoff_initial * 2.0 ** (failures - 1))
                log.warning("binance: reconnecting in %.1f s (failure %d)", delay, failures)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)

    async def _connection(self, stop: asyncio.Event) -> str:
        """One connection: 'stopped', 'scheduled' (we closed it), 'closed' or 'failed'."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import WebSocketException

        s = self.settings
        opened = False
        try:
            async with connect(s.url, ping_interval=s.ping_interval,
                               ping_timeout=s.ping_timeout, open_timeout=s.open_timeout,
                               close_timeout=2.0, max_size=s.max_message_bytes,
                               proxy=None if is_loopback(s.url) else True) as ws:
                opened = True
                self.counters.connections += 1
                return await self._session(ws, stop)
        except (OSError, TimeoutError, WebSocketException) as exc:
            if opened:
                self.counters.disconnects += 1
                log.warning("binance: connection lost: %s", exc)
                return "closed"
            self.counters.connect_failures += 1
            log.warning("binance: cannot connect to %s: %s", s.url, exc)
            return "failed"

    async def _session(self, ws: Any, stop: asyncio.Event) -> str:
        self._request_id += 1
        request = json.dumps({"method": "SUBSCRIBE", "params": list(self.settings.streams),
                              "id": self._request_id}, separators=(",", ":"))
        if self.on_sent is not None:
            self.on_sent(time.time_ns(), request)
        await ws.send(request)
        reader = asyncio.ensure_future(self._read(ws))
        stopper = asyncio.ensure_future(stop.wait())
        try:
            done, _ = await asyncio.wait({reader, stopper}, timeout=self.settings.reconnect_after,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (reader, stopper):
                task.cancel()
        if stopper in done:
            return "stopped"
        if reader not in done:
            self.counters.scheduled_reconnects += 1
            log.info("binance: reconnecting before the venue's 24-hour cut")
            return "scheduled"
        reader.result()  # a connection error is raised here, counted by the caller
        self.counters.disconnects += 1
        log.warning("binance: the venue closed the connection (code %s)", ws.close_code)
        return "closed"

    async def _read(self, ws: Any) -> None:
        async for frame in ws:
            recv_ns = time.time_ns()
            if isinstance(frame, bytes) or len(frame) > self.settings.max_frame_bytes:
                self.counters.frames += 1
                self.counters.skipped.add(
                    "binary_frame" if isinstance(frame, bytes) else "frame_too_large", 1,
                    frame[:64])
                continue
            self.on_frame(recv_ns, sanitise(frame))
            if SERVER_SHUTDOWN in frame and frame.lstrip().startswith("{"):
                # the server is about to go: leave now and reconnect to another
                log.warning("binance: the server announced its shutdown: reconnecting")
                return


class StaleWatch:
    """Marks subscribed streams that went quiet (no event for `after_s`), once per spell.

    `last_seen` is the normaliser's per-stream receive time; a stream never heard from
    counts from the watch's start."""

    def __init__(self, names: Sequence[str], last_seen: dict[str, int],
                 counters: FeedCounters, after_s: float) -> None:
        self.names = [n.lower() for n in names]
        self._keys = {n.lower(): n for n in names}
        self.last_seen = last_seen
        self.counters = counters
        self.after_ns = int(after_s * NS_PER_SECOND)
        self.since = time.time_ns()
        self.stale: set[str] = set()

    def check(self, now_ns: int) -> None:
        seen = {k.lower(): v for k, v in self.last_seen.items()}
        for low in self.names:
            name = self._keys[low]
            quiet = now_ns - seen.get(low, self.since)
            if quiet > self.after_ns and name not in self.stale:
                self.stale.add(name)
                self.counters.stale_marks[name] = self.counters.stale_marks.get(name, 0) + 1
                log.warning("binance: stream %s stale: no event for %.0f s", name,
                            quiet / NS_PER_SECOND)
            elif quiet <= self.after_ns and name in self.stale:
                self.stale.discard(name)
                log.info("binance: stream %s resumed", name)

    async def run(self, stop: asyncio.Event, every_s: float = 1.0) -> None:
        while not stop.is_set():
            self.check(time.time_ns())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)
