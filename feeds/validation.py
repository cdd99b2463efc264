"""Validation of decoded market messages: the one path that every subscriber, the engine and
the daemon use.

Undecodable frames (invalid UTF-8 included), unknown kinds, NaN/inf, non-positive or absurd
prices, price jumps outside a band (`price_outlier`), sizes <= 0, timestamps out of range,
ahead of the stream's clock or going backwards per symbol, bad symbol names, symbols beyond
the allow-list or the table's maximum, sequence gaps and duplicates are counted by kind
(`feeds.records.SkipCounter`), logged once per kind with a sample, and skipped (bounds in
`ValidationLimits`). A gap is counted by the number of missing messages; the message after
a gap is good data and kept.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from typing import Any

import msgspec

from feeds.messages import (
    Bar,
    Heartbeat,
    Message,
    Quote,
    Trade,
    make_decoder,
)
from feeds.records import SkipCounter

log = logging.getLogger(__name__)

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
