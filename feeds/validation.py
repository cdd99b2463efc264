"""Validation of received market messages: the one path of every subscriber and the engine.

The daemon, the replay and the subscriber's `batch` all use `Validator.validate_many`.

Undecodable frames (invalid UTF-8 included), unknown kinds, NaN/inf, non-positive or absurd
prices, price jumps outside a band (`price_outlier`), sizes <= 0, timestamps out of range,
ahead of the stream's clock or going backwards per symbol, bad symbol names, symbols beyond
the allow-list or the table's maximum, sequence gaps and duplicates are counted by kind
(`feeds.records.SkipCounter`), logged once per kind with a sample, and skipped (bounds in
`ValidationLimits`). A gap is counted once (`sequence_gap`, one event per gap, never the
size of the jump, which the peer chooses); the message after a gap is good data and kept.

Speed: it is most of the engine's per-tick time. Each symbol's state (band, last price,
last time) is one list behind one dict lookup, and a trade passes every rule in one
combined test; only a rejected trade is examined again to name its first failed rule.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Collection, Iterable, Sized
from operator import length_hint
from typing import TYPE_CHECKING, Any

import msgspec

from feeds.messages import (
    Bar,
    Heartbeat,
    Message,
    Quote,
    Trade,
    TradeBatch,
    encode,
    make_decoder,
)
from feeds.records import SkipCounter

if TYPE_CHECKING:
    from feeds.trade_batch import Columns, StreamState

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
    #: a message further ahead of the stream's clock than this (but within the skew) is
    #: held, not believed, until the stream agrees (`Validator`'s docstring): one symbol's
    #: time never moves the clock of the others. Counted in `Validator.held_ahead`; one
    #: dropped unagreed is `time_ahead` (a heartbeat that far ahead is `time_ahead` at once)
    max_time_lead_seconds: float = 3600.0
    #: a run of this many held messages with nothing between that moved the clock is the
    #: stream's agreement too (a stream whose other symbols have gone quiet)
    time_lead_run: int = 8
    #: the most messages held at once; beyond it the oldest is dropped (`time_ahead`)
    max_held_messages: int = 256
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
        if not (self.max_time_lead_seconds > 0 and math.isfinite(self.max_time_lead_seconds)):
            raise ValueError("validation.max_time_lead_seconds must be a positive number")
        if not (1 <= self.time_lead_run <= 1_000_000 and 1 <= self.max_held_messages <= 1_000_000):
            raise ValueError("validation.time_lead_run and max_held_messages must be in "
                             "[1, 1000000]")
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


#: the clock before any message
_NO_TS = -(1 << 63)
#: `validate_many`'s stop when none is asked for: after every data time
_NO_STOP = 1 << 64


#: what a tap is handed: a trade's symbol, price and time
Tap = Callable[[str, float, int], object]


def _no_tap(symbol: str, price: float, ts: int) -> None:
    """The tap while none is set (never called: no symbol is tapped)."""


def _symbol_state(band: float, earliest: int) -> list[Any]:
    """One symbol's state, one list so the hot path pays one dict lookup per tick:
    [band, last accepted price (0.0: none), last price x band (inf: none), the earliest
    time its next message may have: its last time, `earliest` before any]. A new symbol's
    band admits every price."""
    return [band, 0.0, math.inf, earliest]


BAND, LAST_PRICE, HIGH, LAST_TS = 0, 1, 2, 3
#: the state of the feed's heartbeats, which carry no symbol (never written: heartbeats have
#: no price and no time of their own)
_NO_SYMBOL = _symbol_state(0.0, _NO_TS)


class StreamSkips(SkipCounter):
    """The validator's skip counter: a stream has no end to wait for, so the first
    message of each kind is logged at once with a sample, in words that claim no count
    (the first batch's count was read as the total); the running totals are the daemon's
    status (`skipped`), and `log_totals` logs each kind's true count when the stream's
    reader stops."""

    def __init__(self) -> None:
        super().__init__(what="skipped", log_at_end=True)

    def add(self, kind: str, n: int = 1, sample: object = None) -> None:
        first = kind not in self.counts
        super().add(kind, n, sample)
        if first and n > 0:
            log.warning("skipping %s messages, counted from here on (this is the first; "
                        "the daemon's status has the running count), e.g. %s",
                        kind, self.samples[kind])

    def log_totals(self) -> None:
        """Each kind's count so far, one warning each; later skips keep counting quietly
        (the first of a new kind is still logged at once)."""
        super().log_totals()
        self.log_at_end = True


class Validator:
    """Decodes and checks frames; returns good messages, counts and skips the rest.

    The one validation path of the engine: the subscriber's `batch`, the engine's `consume`
    and the daemon all call `validate`. Nothing a peer sends makes it raise; every frame is
    either returned or counted under one kind (a sequence gap is counted besides the
    message after it, which is kept; a message held ahead of the clock is returned once
    the stream agrees, or counted when dropped).

    The stream's clock (`clock`) is the newest time accepted on any symbol; every bar and
    day boundary of the engine follows the accepted messages, so the clock must move only
    by time the stream agrees on. A message ahead of the clock by more than the lead
    (`max_time_lead_seconds`) is therefore held, not accepted, until one of:

    - a held message of another symbol claims as much: the stream agrees on the second
      newest time that held messages of distinct symbols claim, and every held message
      up to that time plus the lead is released, in time order (a weekend or a new day:
      the first symbols to arrive agree at once);
    - `time_lead_run` messages in a row are held with nothing between that moved the
      clock (the stream's other symbols went quiet: a symbol that trades on alone);
    - the stream's final heartbeat (its tail is released before the end);
    - the stream has one symbol only (it is its own clock).

    A released message is judged again by its symbol's rules (band, time backwards). So
    one trade of a new symbol 29 days ahead waits, held and counted (`held_ahead`, logged
    once with a sample), while the others trade on; when `max_held_messages` are waiting,
    the oldest is dropped as `time_ahead`. A heartbeat (no market time of its own) that
    far ahead is refused as `time_ahead` at once. Beyond the skew a message is refused
    (`time_future`). Limit: a peer that sends a run of `time_lead_run` messages while the
    stream is silent, or messages of two symbols agreeing, moves the clock.
    """

    def __init__(self, limits: ValidationLimits | None = None) -> None:
        self.limits = limits = limits or ValidationLimits()
        self.decoder = make_decoder()
        self.skipped: SkipCounter = StreamSkips()
        #: each stream (topic) seen: [its last sequence number, the symbol of its last
        #: message, that symbol's state, that symbol's tap record (`tap_trades`) or None
        #: when the symbol is not tapped]; the symbol saves the per-symbol lookup while a
        #: stream carries one symbol, as a feed's streams do
        self._topics: dict[bytes, list[Any]] = {}
        #: `tap_trades`: the symbols whose accepted trades are handed out, how often, to whom
        self._tap: Tap = _no_tap
        self._tap_every = 0
        #: per tapped symbol: [trades still to accept before the next is handed to the tap,
        #: its newest accepted trade not handed to the tap (None: there is none)]
        self._tap_records: dict[str, list[Any]] = {}
        #: symbols accepted so far (checked once each), with their state (`_symbol_state`)
        self._sym: dict[str, list[Any]] = {}
        #: the stream's clock: the newest timestamp accepted on any symbol (None: no message)
        self.clock: int | None = None
        self.received = 0
        #: the frames the last `validate_many` of a sized batch took (its `stop_ts`)
        self.consumed = 0
        #: the feed session (epoch) of the stream, from its heartbeats; None: none seen yet
        self.session: int | None = None
        #: feed sessions that replaced another one
        self.session_changes = 0
        #: after a session change, a stream's first sequence number is accepted as it is
        self._fresh = False
        self._skew_ns = int(limits.max_time_skew_seconds * NS)
        self._lead_ns = min(int(limits.max_time_lead_seconds * NS), self._skew_ns)
        #: messages ahead of the clock by more than the lead, waiting for the stream to
        #: agree, with their symbol's state, in arrival order (bounded: max_held_messages)
        self._held: list[tuple[Message, list[Any]]] = []
        #: held messages in a row with nothing between that moved the clock, and the clock
        #: at the last hold
        self._run = 0
        self._clock_at_hold: int | None = None
        #: messages held ahead of the clock so far (events; each is delivered once the
        #: stream agrees, or dropped and counted as `time_ahead`)
        self.held_ahead = 0
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
                        self.session, session, len(self._topics))
            self._topics.clear()
            self._fresh = True
            self.session_changes += 1
        self.session = session

    @property
    def last_seq(self) -> dict[bytes, int]:
        """The last sequence number of each stream (topic): the journal's stream positions."""
        return {t: r[0] for t, r in self._topics.items()}

    @last_seq.setter
    def last_seq(self, positions: dict[bytes, int]) -> None:
        """Stream positions restored (the journal's); streams not in `positions` are new."""
        self._topics = {t: [int(s), None, None, None] for t, s in positions.items()}

    @property
    def held(self) -> int:
        """Messages held ahead of the clock now, waiting for the stream to agree."""
        return len(self._held)

    def held_state(self) -> dict[str, Any]:
        """The messages held now and what decides their release, as plain data: a
        snapshot taken while a daily stream's new day waits for its second symbol must
        keep them, or a restart from it loses that bar (kill -9 would then differ from
        SIGTERM). Their symbols' states are the snapshot's `_sym`."""
        return {"messages": [m for m, _ in self._held], "run": self._run,
                "clock_at_hold": self._clock_at_hold, "held_ahead": self.held_ahead}

    def load_held(self, state: dict[str, Any]) -> None:
        """Held messages restored (`held_state`, after the symbol table): each is bound
        to its symbol's state again, as it was when it was held."""
        self._held = [(m, self._sym[m.symbol]) for m in state["messages"]
                      if m.symbol in self._sym]
        self._run = int(state["run"])
        at = state["clock_at_hold"]
        self._clock_at_hold = None if at is None else int(at)
        self.held_ahead = int(state["held_ahead"])

    @property
    def known(self) -> set[str]:
        """Symbols accepted so far."""
        return set(self._sym)

    @property
    def last_price(self) -> dict[str, float]:
        """The last accepted price of each symbol (trade, bar close or quote mid)."""
        return {s: st[LAST_PRICE] for s, st in self._sym.items() if st[LAST_PRICE] > 0.0}

    @property
    def last_ts(self) -> dict[str, int]:
        """The time of each symbol's last accepted message (heartbeats aside; a symbol whose
        last time is the `earliest` bound itself is not told from one without any)."""
        return {s: st[LAST_TS] for s, st in self._sym.items() if st[LAST_TS] != self._earliest}

    def load_symbols(self, band: dict[str, float], last_price: dict[str, float],
                     last_ts: dict[str, int]) -> None:
        """Symbol state from separate tables (a snapshot of an earlier layout)."""
        self._sym = {}
        for r in self._topics.values():  # their cached states were of the old table
            r[1] = r[2] = None
        for s, b in band.items():
            st = self._sym[s] = _symbol_state(b, self._earliest)
            if s in last_price:
                st[LAST_PRICE], st[HIGH] = last_price[s], last_price[s] * b
            st[LAST_TS] = last_ts.get(s, self._earliest)

    def _new_symbol(self, sym: str, msg: Message) -> list[Any] | None:
        """A symbol seen for the first time: name, allow-list and table size. Its state,
        or None (counted) when it is refused. The feed's own heartbeats carry no symbol."""
        if type(msg) is Heartbeat and sym == "":
            return _NO_SYMBOL  # the feed's own: nothing to remember
        lim = self.limits
        if len(sym) > lim.max_symbol_length or SYMBOL_CHARS.fullmatch(sym) is None:
            self.skipped.add("bad_symbol", 1, msg)
            return None
        if self._allowed and sym not in self._allowed:
            self.skipped.add("symbol_not_allowed", 1, msg)
            return None
        if len(self._sym) >= lim.max_symbols:
            self.skipped.add("symbol_limit", 1, msg)
            return None
        band = lim.price_band_by_symbol.get(sym, lim.price_band)
        st = self._sym[sym] = _symbol_state(band, self._earliest)
        return st

    def tap_trades(self, symbols: Collection[str], every: int, tap: Tap) -> None:
        """Hand every `every`-th trade of `symbols` that `validate_many` accepts to `tap`
        (its symbol, price and time), at once, while the rest of the batch is still being
        validated (and, where the frames come from a lazy drain, received): the option
        book's newest spots reach the GPU worker during the whole batch, not only once the
        engine applies it. Counted per symbol, over every stream and session; the newest
        accepted trade of each that the tap did not get is kept for `untapped_newest`.
        Only trades that passed every check are handed out; `every` = 0 (or no symbols)
        stops the tap. A tap that raises is a bug of the caller's and propagates."""
        if every < 0:
            raise ValueError(f"every must be >= 0, got {every}")
        self._tap_records = {s: [every, None] for s in symbols} if every else {}
        self._tap_every = every
        self._tap = tap if every else _no_tap
        for tr in self._topics.values():
            tr[3] = self._tap_records.get(tr[1]) if tr[1] is not None else None

    def untapped_newest(self) -> list[Trade]:
        """Per tapped symbol, its newest accepted trade if the tap has not had it (one
        accepted after the symbol's last tapped trade), then forgotten: after a batch, the
        spots still to send so that every symbol's newest is priced."""
        out = []
        for record in self._tap_records.values():
            newest = record[1]
            if newest is not None:
                record[1] = None
                out.append(newest)
        return out

    def validate(self, frames: list[bytes] | tuple[bytes, ...]) -> Message | None:
        """The message of one frame pair if it passes every check, else None (counted or
        held). A frame that lets held messages go returns the first of them only: where
        that matters, call `validate_many((frames,))`."""
        out = self.validate_many((frames,))
        return out[0] if out else None

    def validate_many(self, batch: Iterable[Any], stop_ts: int | None = None) -> list[Message]:
        """The messages of a batch of frame pairs that pass every check, in order; every
        other frame is counted under one kind and skipped. Nothing a peer sends raises.
        The one implementation of the checks (`validate` is this for one frame), written
        for the engine's hot path: a trade in sequence, in time and in its band passes one
        test of every rule at once (two dict lookups on the topic, one on the symbol); other
        kinds (a trade batch: `_batch`) and every rejection (`_trade_rejection` names its
        reason) leave the fast branch. `batch` may be a lazy drain of the socket: frames are
        then received as they are validated, and the drain counts them into `received`.
        `stop_ts` (a list `batch`): stop after the first trade the fast branch accepts at or
        after it, `consumed` frames taken (the rest, validated later, is judged the same)."""
        out: list[Message] = []
        append = out.append
        decode = self.decoder.decode
        topic_get = self._topics.get
        max_price, latest = self._max_price, self._latest
        lead = self._lead_ns
        inf = math.inf
        clock = _NO_TS if self.clock is None else self.clock
        # a message further ahead of the clock than the lead leaves the fast branch: it is
        # held until the stream agrees (`_refused`) or refused beyond the skew (no clock:
        # no bound)
        horizon = latest if self.clock is None else clock + lead
        stop = _NO_STOP if stop_ts is None else stop_ts
        it = iter(batch)
        for frames in it:
            try:
                topic, payload = frames  # a frame pair, else bad framing
                msg = decode(payload)
            except Exception as exc:  # noqa: BLE001 - a peer's bytes never stop the engine
                self._undecodable(exc, frames)
                continue
            # the sequence is checked first: a message with bad content still occupies its
            # place in the stream, so skipping it must not look like a gap
            tr = topic_get(topic)
            seq = msg.seq
            if tr is None or seq != tr[0] + 1:
                if type(msg) is TradeBatch:  # never a stream of its own: off the hot path
                    clock = self._batch(msg, clock, out)
                    horizon = latest if clock == _NO_TS else clock + lead
                    continue
                tr = self._out_of_sequence(msg, topic, tr)
                if tr is None:
                    continue
            tr[0] = seq
            if msg.symbol == tr[1]:
                st = tr[2]
            else:
                st = self._symbol_state(msg, tr)
                if st is None:
                    continue
            if type(msg) is Trade:  # the hot path
                p = msg.price
                ts = msg.ts
                band = st[0]
                if (0.0 < p <= max_price and 0.0 < msg.size < inf  # NaN fails too
                        and st[1] <= p * band and p <= st[2]
                        and st[3] <= ts < latest and ts <= horizon):  # st[3] >= earliest
                    st[1] = p
                    st[2] = p * band
                    st[3] = ts
                    if ts > clock:
                        clock = ts
                        horizon = ts + lead
                    append(msg)
                    if tr[3] is not None:  # a tapped symbol (an option underlying)
                        self._tapped(tr[3], msg)
                    if ts >= stop:  # the caller's stop: the frames behind wait
                        break
                else:
                    clock = self._refused(msg, st, clock, out)
                    horizon = latest if clock == _NO_TS else clock + lead
                continue
            clock = self._other(msg, st, clock, out)  # `tr` stays usable after a new session
            horizon = latest if clock == _NO_TS else clock + lead
        self.clock = None if clock == _NO_TS else clock
        if isinstance(batch, Sized):  # all frames, or up to the stop (what `it` has left)
            self.consumed = len(batch) - length_hint(it)
            self.received += self.consumed
        return out

    def _tapped(self, record: list[Any], msg: Trade) -> None:
        """An accepted trade of a tapped symbol: every `tap_every`-th goes to the tap at
        once; the others wait as the symbol's newest untapped trade (`untapped_newest`)."""
        k = record[0]
        if k == 1:
            record[0] = self._tap_every
            record[1] = None
            self._tap(msg.symbol, msg.price, msg.ts)
        else:
            record[0] = k - 1
            record[1] = msg

    def _batch(self, batch: TradeBatch, clock: int, out: list[Message]) -> int:
        """A batch of trades (feeds/trade_batch.py): its rows judged as the same trades
        sent one per message would be, with the same counts. Rows pass the fast branch's
        test in compiled code, in runs that go out as batches; a row that fails it (or
        whose stream is new, tapped or out of sequence) goes through `validate_many` as
        the one-tick trade it stands for. A malformed frame is counted once and skipped.
        `received` counts the rows. Returns the clock."""
        # the compiled branch's module imports numba: loaded with the first batch, not by
        # every reader of ValidationLimits (the engine's config, which every command reads;
        # issue 27: a cold `select` imported numba through it)
        from feeds.trade_batch import (
            StreamState,
            accept_rows,
            batch_columns,
            batch_slice,
            fits_int64,
        )

        cols = batch_columns(batch)
        if isinstance(cols, str):
            self.skipped.add(cols, 1, f"TradeBatch of {len(batch.times)} time bytes, "
                                      f"{len(batch.symbols)} symbols")
            return clock
        n = cols.times.shape[0]
        self.received += n - 1  # the frame itself is counted by the caller
        topics = [b"T." + s.encode() for s in batch.symbols]
        state = StreamState.empty(len(topics))
        lead, latest = self._lead_ns, self._latest
        compiled = fits_int64(latest) and fits_int64(2 * lead)
        i = 0
        while i < n:
            if compiled:
                self._load_state(topics, batch.symbols, state)
                horizon = latest if clock == _NO_TS else clock + lead
                stop, clock, _ = accept_rows(
                    cols.sym, cols.seqs, cols.times, cols.prices, cols.sizes, i, *state,
                    self._max_price, latest, lead, clock, horizon)
                self._store_state(topics, state)
                if stop > i:
                    out.append(batch_slice(batch, cols, i, stop))
                i = stop
                if i == n:
                    break
            self.clock = None if clock == _NO_TS else clock
            out.extend(self._row_alone(batch, cols, i, topics))
            clock = _NO_TS if self.clock is None else self.clock
            i += 1
        return clock

    def _load_state(self, topics: list[bytes], symbols: tuple[str, ...],
                    state: StreamState) -> None:
        """Each batch symbol's stream and symbol state into `state`'s arrays; a stream
        not yet known, not carrying that symbol, tapped, or whose last sequence number
        does not fit the compiled branch takes the Python path (`fast` 0)."""
        from feeds.trade_batch import fits_int64  # (see `_batch`)

        for j, topic in enumerate(topics):
            tr = self._topics.get(topic)
            if (tr is None or tr[1] != symbols[j] or tr[2] is None or tr[3] is not None
                    or not fits_int64(tr[0])):
                state.fast[j] = 0
                continue
            st = tr[2]
            state.fast[j] = 1
            state.last_seq[j] = tr[0]
            state.band[j], state.last_price[j], state.high[j] = st[BAND], st[LAST_PRICE], st[HIGH]
            state.last_ts[j] = st[LAST_TS]

    def _store_state(self, topics: list[bytes], state: StreamState) -> None:
        """`_load_state`'s arrays back into the streams' and symbols' lists, as the
        Python types the one-tick path keeps there."""
        fast = state.fast.tolist()
        last_seq, last_price = state.last_seq.tolist(), state.last_price.tolist()
        high, last_ts = state.high.tolist(), state.last_ts.tolist()
        for j, topic in enumerate(topics):
            if fast[j]:
                tr = self._topics[topic]
                tr[0] = last_seq[j]
                st = tr[2]
                st[LAST_PRICE], st[HIGH], st[LAST_TS] = last_price[j], high[j], last_ts[j]

    def _row_alone(self, batch: TradeBatch, cols: Columns, i: int,
                   topics: list[bytes]) -> list[Message]:
        """Row `i` of a batch through `validate_many` as the one trade message it stands
        for (the same frame the one-tick feed sends); what it accepts or releases."""
        s = int(cols.sym[i])
        trade = Trade(int(cols.seqs[i]), int(cols.times[i]), batch.symbols[s],
                      float(cols.prices[i]), float(cols.sizes[i]))
        return self.validate_many(iter(((topics[s], encode(trade)),)))

    def _undecodable(self, exc: Exception, frames: Any) -> None:
        """Count frames that are not a pair, or a payload the decoder refused, by why."""
        try:
            _topic, payload = frames
        except Exception:  # noqa: BLE001 - not two frames (or not even a sequence)
            self.skipped.add("bad_framing", 1, frames)
            return
        if isinstance(exc, msgspec.ValidationError):
            # msgspec reports an unknown tag as an invalid value at the tag's position
            kind = "unknown_kind" if str(exc).endswith("at `$[0]`") else "wrong_schema"
        else:
            # MsgspecError, invalid UTF-8 in a string (UnicodeDecodeError), anything else
            kind = "undecodable"
        self.skipped.add(kind, 1, payload)

    def _out_of_sequence(self, msg: Message, topic: bytes,
                         tr: list[Any] | None) -> list[Any] | None:
        """A message of a new stream, or whose sequence number is not its stream's next.
        Its stream's record keeps it (a stream's first message, a heartbeat, a new
        session's first message, the message after a gap: the gap is counted); None drops
        it (a duplicate, counted)."""
        expected = 1 if tr is None else tr[0] + 1
        if msg.seq == expected or type(msg) is Heartbeat:
            pass  # in sequence; a heartbeat (liveness only) is never a gap or a duplicate
        elif self._fresh and tr is None:
            pass  # first message of a stream of a new feed session: no gap
        elif msg.seq < expected:
            self.skipped.add("duplicate", 1, msg)
            return None
        else:
            # one event per gap: the size of a jump is the peer's to choose (seq 2**64-1
            # after seq 1), so it is never added up into a counter
            self.skipped.add("sequence_gap", 1, msg)
        if tr is None:
            tr = self._topics[topic] = [0, None, None, None]
        return tr

    def _symbol_state(self, msg: Message, tr: list[Any]) -> list[Any] | None:
        """The state of a message's symbol when its stream's last message had another one:
        found, or made for a symbol seen the first time (None: refused, counted)."""
        sym = msg.symbol
        st = self._sym.get(sym)
        if st is None:
            st = self._new_symbol(sym, msg)
            if st is None or st is _NO_SYMBOL:
                return st  # not remembered for the stream: a non-heartbeat "" is refused
        tr[1], tr[2] = sym, st
        tr[3] = self._tap_records.get(sym)
        return st

    def _trade_rejection(self, t: Trade, st: list[Any], horizon: int) -> str:
        """Why a trade failed the fast branch's test: its first failed rule, in order."""
        p = t.price
        if not (0.0 < p <= self._max_price):
            return "bad_price"
        if not (0.0 < t.size < math.inf):
            return "bad_size"
        if not (st[LAST_PRICE] <= p * st[BAND] and p <= st[HIGH]):
            return "price_outlier"
        if not self._earliest <= t.ts < self._latest:
            return "time_out_of_range"
        if t.ts > horizon:
            return "time_future"
        return "time_backwards"

    def _refused(self, msg: Trade, st: list[Any], clock: int, out: list[Message]) -> int:
        """A trade that failed the fast branch: counted under its first failed rule, or,
        when its only fault is being ahead of the clock by more than the lead, held until
        the stream agrees. Returns the clock (a release may move it)."""
        self.clock = None if clock == _NO_TS else clock
        why = self._trade_rejection(
            msg, st, self._latest if clock == _NO_TS else clock + self._skew_ns)
        if why == "time_backwards" and msg.ts >= st[LAST_TS]:  # only ahead of the lead
            self._ahead(msg, st, out)
        else:
            self.skipped.add(why, 1, msg)
        return _NO_TS if self.clock is None else self.clock

    def _other(self, msg: Message, st: list[Any], clock: int, out: list[Message]) -> int:
        """Every kind but trades (not the hot path): a new session, the final heartbeat's
        release of held messages, then the checks of `_check_other`. Returns the clock."""
        if type(msg) is TradeBatch:  # on a topic a peer made a stream of (not "C.")
            return self._batch(msg, clock, out)
        self.clock = None if clock == _NO_TS else clock
        if type(msg) is Heartbeat:
            if msg.session != self.session:
                self.new_session(msg.session)  # clears the streams
            if msg.final and self._held:  # the stream ends: its tail is agreed
                self._release(out, None)
        ok = self._check_other(msg, st, self._lead_ns)
        if ok is None:
            self._ahead(msg, st, out)
        elif ok:
            out.append(msg)
        return _NO_TS if self.clock is None else self.clock

    def _ahead(self, msg: Message, st: list[Any], out: list[Message]) -> None:
        """A message ahead of the clock by more than the lead (within the skew): accepted
        when its symbol is the stream's only one, else held (see the class docstring)."""
        if len(self._sym) <= 1:
            self._admit(msg, st, out)
            return
        self._run = self._run + 1 if self.clock == self._clock_at_hold else 1
        self._clock_at_hold = self.clock
        self._held.append((msg, st))
        self.held_ahead += 1
        if self.held_ahead == 1:  # info: a new day of daily bars is held too, at once agreed
            log.info("held a message ahead of the stream's clock (%s) by more than "
                        "max_time_lead_seconds until the stream agrees, e.g. %.200r",
                        self.clock, msg)
        if len(self._held) > self.limits.max_held_messages:
            self.skipped.add("time_ahead", 1, self._held.pop(0)[0])
        self._release_agreed(out)

    def _release_agreed(self, out: list[Message]) -> None:
        """Release the held messages up to the time the stream agrees on, if it does."""
        claims: dict[int, int] = {}  # the newest time each symbol's held messages claim
        for m, st in self._held:
            claims[id(st)] = max(claims.get(id(st), m.ts), m.ts)
        agreed = sorted(claims.values())[-2] if len(claims) >= 2 else None
        if self._run >= self.limits.time_lead_run:
            run = max(m.ts for m, _ in self._held[-self._run:])
            agreed = run if agreed is None else max(agreed, run)
        if agreed is not None:
            self._release(out, agreed + self._lead_ns)

    def _release(self, out: list[Message], until: int | None) -> None:
        """Admit the held messages up to `until` (None: all), in time order."""
        ready = sorted((x for x in self._held if until is None or x[0].ts <= until),
                       key=lambda x: x[0].ts)
        if not ready:
            return
        self._held = [x for x in self._held if until is not None and x[0].ts > until]
        self._run = 0
        for m, st in ready:
            self._admit(m, st, out)

    def _admit(self, msg: Message, st: list[Any], out: list[Message]) -> None:
        """A message whose time the stream agreed to: judged by its symbol's rules (band,
        time backwards; its content passed before it was held), then accepted."""
        if type(msg) is not Trade:
            if self._check_other(msg, st, self._skew_ns):
                out.append(msg)
            return
        t: Trade = msg
        p, ts = t.price, t.ts
        if not (st[LAST_PRICE] <= p * st[BAND] and p <= st[HIGH]):
            self.skipped.add("price_outlier", 1, t)
            return
        if ts < st[LAST_TS]:
            self.skipped.add("time_backwards", 1, t)
            return
        st[LAST_PRICE], st[HIGH], st[LAST_TS] = p, p * st[BAND], ts
        if self.clock is None or ts > self.clock:
            self.clock = ts
        out.append(t)
        record = self._tap_records.get(t.symbol)
        if record is not None:  # as the fast branch's tap
            self._tapped(record, t)

    def _check_other(self, msg: Message, st: list[Any], lead: int) -> bool | None:
        """Quotes, bars and the rest (not market-data hot path): content, band, time.
        None: a quote or bar ahead of the clock by more than `lead` (to hold)."""
        t = type(msg)
        why, ref = self._content(msg, st)
        if not why and ref > 0.0 and not (st[LAST_PRICE] <= ref * st[BAND]
                                          and ref <= st[HIGH]):
            why = "price_outlier"
        ts = msg.ts
        clock = self.clock
        if why:
            pass
        elif not self._earliest <= ts < self._latest:
            why = "time_out_of_range"
        elif clock is not None and ts > clock + self._skew_ns:
            why = "time_future"
        elif t is not Heartbeat and ts < st[LAST_TS]:
            why = "time_backwards"
        elif clock is not None and ts > clock + lead:
            if t is not Heartbeat and st is not _NO_SYMBOL:
                return None
            why = "time_ahead"
        if why:
            self.skipped.add(why, 1, msg)
            return False
        if t is not Heartbeat:
            st[LAST_TS] = ts
        if clock is None or ts > clock:
            self.clock = ts
        if ref > 0.0:
            st[LAST_PRICE], st[HIGH] = ref, ref * st[BAND]
        return True

    def _content(self, msg: Message, st: list[Any]) -> tuple[str, float]:
        """A quote's or bar's prices and sizes: (why refused or "", its reference price:
        quote mid or bar close, 0.0 for kinds without a market price)."""
        mx = self._max_price
        if type(msg) is Quote:
            q: Quote = msg
            if not (0.0 <= q.bid <= mx and 0.0 <= q.ask <= mx and (q.bid > 0.0 or q.ask > 0.0)):
                return "bad_price", 0.0
            if not (0.0 <= q.bid_size < math.inf and 0.0 <= q.ask_size < math.inf):
                return "bad_size", 0.0
            # both sides within the band of each other: a bid of 1e-300 under an ask of 88
            # is no market (its spread would size and cost absurd amounts)
            if q.bid > 0.0 and q.ask > 0.0 and not (q.ask <= q.bid * st[BAND]
                                                    and q.bid <= q.ask * st[BAND]):
                return "price_outlier", 0.0
            return "", ((q.bid + q.ask) / 2.0 if q.bid > 0.0 and q.ask > 0.0
                        else max(q.bid, q.ask))
        if type(msg) is Bar:
            b: Bar = msg
            if not (b.low > 0.0 and b.high >= b.low and b.high <= mx
                    and b.low <= b.open <= b.high and b.low <= b.close <= b.high):
                return "bad_price", 0.0
            if not 0.0 <= b.volume < math.inf:
                return "bad_size", 0.0
            last = st[LAST_PRICE]
            if last > 0.0 and not (last <= b.low * st[BAND] and b.high <= st[HIGH]):
                return "price_outlier", 0.0
            return "", b.close
        return "", 0.0  # orders, fills, heartbeats, option values: no market price
