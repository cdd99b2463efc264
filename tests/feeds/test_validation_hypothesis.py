"""Totality of the message path, as a class: every value a message can decode to (the
whole integer range of every field, any float, any string, any session) is accepted,
bounded or counted, and never raises; over real ZeroMQ, interleaved with feed sessions,
heartbeats, oversize and lone frames, every valid message is delivered and no counter
exceeds the messages sent."""

from __future__ import annotations

import math
import time
from typing import Any

import msgspec
import zmq
import zmq.asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from feeds.messages import (
    KIND_OF,
    Bar,
    Fill,
    Heartbeat,
    Message,
    OptionGroupValues,
    OptionValue,
    Order,
    Quote,
    RiskRejection,
    Trade,
    encode,
)
from feeds.transport import Publisher, Subscriber
from feeds.validation import SYMBOL_CHARS, ValidationLimits, Validator

NS = 1_000_000_000
T0 = 1_700_000_000 * NS
#: every integer MessagePack carries
INTS = st.one_of(st.integers(-(2**63), 2**64 - 1),
                 st.sampled_from([0, 1, -1, 2**63 - 1, -(2**63), 2**64 - 1, 2**32, T0]))
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True),
                   st.sampled_from([0.0, -0.0, math.nan, math.inf, -math.inf, 5e-324,
                                    1e-300, 1e308, 10.0]))
#: hostile symbols: never one of the valid streams' (A, B, C)
TEXT = st.one_of(st.text(max_size=40), st.sampled_from(["", "Z", "ZZ.Q", "Z\x00", "Z\n",
                                                        "Ž€😀", "Z" * 5000, "Z" * 32]))
HOSTILE_SYMBOL = TEXT.filter(lambda s: s not in ("A", "B", "C"))
BLOBS = st.binary(max_size=64)


def _kinds(symbol: st.SearchStrategy[str]) -> st.SearchStrategy[Message]:
    return st.one_of(
        st.builds(Trade, INTS, INTS, symbol, FLOATS, FLOATS),
        st.builds(Quote, INTS, INTS, symbol, FLOATS, FLOATS, FLOATS, FLOATS),
        st.builds(Bar, INTS, INTS, symbol, FLOATS, FLOATS, FLOATS, FLOATS, FLOATS, INTS),
        st.builds(Order, INTS, INTS, symbol, INTS, INTS, FLOATS, TEXT),
        st.builds(Fill, INTS, INTS, symbol, INTS, INTS, FLOATS, FLOATS, FLOATS, INTS),
        st.builds(Heartbeat, INTS, INTS, symbol, st.booleans(), INTS),
        st.builds(OptionValue, INTS, INTS, symbol, TEXT, FLOATS, FLOATS, FLOATS, FLOATS),
        st.builds(OptionGroupValues, INTS, INTS, symbol, FLOATS,
                  st.lists(TEXT, max_size=3).map(tuple), BLOBS, BLOBS, BLOBS),
        st.builds(RiskRejection, INTS, INTS, symbol, INTS, FLOATS, TEXT, TEXT),
    )


#: messages of every kind with extreme values, near the stream's time or anywhere
EXTREME = _kinds(HOSTILE_SYMBOL).map(
    lambda m: m if m.ts % 3 else msgspec.structs.replace(m, ts=T0 + m.ts % (10**6 * NS)))


def _frame(msg: Message) -> tuple[bytes, bytes]:
    return KIND_OF[type(msg)] + b"." + msg.symbol.encode("utf-8", "surrogatepass"), encode(msg)


def _sane(v: Validator, msg: Message) -> None:
    """What validation lets through is believable."""
    lim = v.limits
    assert lim.earliest_ns <= msg.ts < lim.latest_ns
    if not (type(msg) is Heartbeat and msg.symbol == ""):
        assert len(msg.symbol) <= lim.max_symbol_length and SYMBOL_CHARS.fullmatch(msg.symbol)
    if type(msg) is Trade:
        assert 0.0 < msg.price <= lim.max_price and 0.0 < msg.size < math.inf
    elif type(msg) is Quote:
        assert 0.0 <= msg.bid <= lim.max_price and 0.0 <= msg.ask <= lim.max_price
    elif type(msg) is Bar:
        assert 0.0 < msg.low <= min(msg.open, msg.close) <= msg.high <= lim.max_price


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(EXTREME, min_size=1, max_size=12))
def test_every_decodable_value_is_accepted_bounded_or_counted(msgs: list[Message]) -> None:
    v = Validator(ValidationLimits(max_symbols=50))
    warm = [Trade(i + 1, T0 + i * NS, "A", 10.0, 1.0) for i in range(3)]
    frames: list[Any] = [_frame(m) for m in warm + msgs]
    out = v.validate_many(frames)
    for m in out:
        _sane(v, m)
    # every frame is returned, counted under one kind, or held ahead of the clock
    assert len(out) + v.skipped.total_except("sequence_gap") + v.held == len(frames)
    for kind, n in v.skipped.counts.items():
        assert 0 < n <= len(frames), kind  # no counter beyond the messages sent
    assert v.received == len(frames)


class WireMachine(RuleBasedStateMachine):
    """A publisher and the subscriber's real receive path (its drain and validator) over
    tcp on loopback: valid streams A, B, C interleaved with feed sessions, heartbeats,
    extreme values, oversize, lone and multi-frame messages."""

    LIMIT = 2048

    def __init__(self) -> None:
        super().__init__()
        self.ctx = zmq.asyncio.Context()
        self.pub = Publisher("tcp://127.0.0.1:*", zmq.Context.shadow(self.ctx.underlying))
        self.sub = Subscriber(self.pub.endpoint, self.ctx, max_message_bytes=self.LIMIT)
        self.pub.wait_for_subscriber(10.0)
        self.seq = {"A": 0, "B": 0, "C": 0}
        self.own_sessions = 10**15
        self.session = self.own_sessions
        self.t = T0
        self.sent_valid: list[Message] = []
        self.got: list[Message] = []
        self.messages_sent = 0
        self.frames_sent = 0
        self.beats = 0
        self._send_beat(final=False)

    def _send(self, frames: list[bytes]) -> None:
        self.pub.socket.send_multipart(frames)
        self.messages_sent += 1
        self.frames_sent += len(frames)

    def _send_beat(self, final: bool) -> None:
        self.beats += 1
        self._send([b"H.", encode(Heartbeat(self.beats, self.t, "", final, self.session))])

    def _receive(self, until: float = 0.0) -> None:
        """Everything ready; with `until` (s), wait at most that long for every valid
        message sent: the subscriber's drain and validator, as a batch receives them."""
        sock = self.sub._sync
        deadline = time.monotonic() + until
        while True:
            if sock.poll(0 if not until else 20):
                first = sock.recv_multipart()
                self.got.extend(self.sub.validator.validate_many(list(self.sub._drain(first))))
            elif not until or self._delivered() or time.monotonic() > deadline:
                return

    def _delivered(self) -> bool:
        valid = [m for m in self.got if m.symbol in ("A", "B", "C") and type(m) is Trade]
        return len(valid) == len(self.sent_valid)

    @rule(symbol=st.sampled_from(["A", "B", "C"]), step=st.integers(0, 2 * NS))
    def valid_trade(self, symbol: str, step: int) -> None:
        self.t += step
        self.seq[symbol] += 1
        t = Trade(self.seq[symbol], self.t, symbol, 10.0 + self.seq[symbol] % 5 / 10, 1.0)
        self._send([f"T.{symbol}".encode(), encode(t)])
        self.sent_valid.append(t)

    @rule()
    def heartbeat(self) -> None:
        self._send_beat(final=False)

    @rule()
    def new_feed_session(self) -> None:
        """A restarted feed: a new session numbers its streams from 1 again (a session
        number no extreme heartbeat draws)."""
        self.session = self.own_sessions = self.own_sessions + 1
        self.seq = dict.fromkeys(self.seq, 0)
        self.beats = 0
        self._send_beat(final=False)

    @rule(msg=EXTREME)
    def extreme(self, msg: Message) -> None:
        """A peer's message; a heartbeat of another session resets the sequence check, and
        the valid streams' next messages are each accepted as a stream's first."""
        topic, payload = _frame(msg)
        self._send([topic, payload])

    @rule(size=st.integers(LIMIT + 1, 8 * LIMIT))
    def oversize(self, size: int) -> None:
        self._send([b"T.BIG", b"\x95" + bytes(size)])

    @rule(frame=st.one_of(BLOBS, st.sampled_from([b"T.A", b"H.", b"T.", b"\x95"])))
    def lone_frame(self, frame: bytes) -> None:
        self._send([frame])

    @rule(frames=st.lists(BLOBS, min_size=3, max_size=5))
    def multi_frame(self, frames: list[bytes]) -> None:
        self._send([b"Z." + frames[0], *frames[1:]])

    @precondition(lambda self: self.messages_sent > 0)
    @invariant()
    def nothing_raises_and_no_counter_exceeds_the_messages_sent(self) -> None:
        self._receive()
        v = self.sub.validator
        # a gap is one event: never more than the messages sent, whatever the jumps
        assert v.skipped.counts.get("sequence_gap", 0) <= self.messages_sent
        # a malformed multipart message may count once per frame it spans, never more
        for kind, n in v.skipped.counts.items():
            assert n <= self.frames_sent, kind
        assert v.received <= self.frames_sent
        for m in self.got:
            _sane(v, m)

    def teardown(self) -> None:
        try:
            self._receive(until=5.0)
            valid = [m for m in self.got if m.symbol in ("A", "B", "C") and type(m) is Trade]
            assert valid == self.sent_valid  # every valid message, in order
        finally:
            self.pub.close()
            self.sub.close()
            self.ctx.destroy(linger=0)


WireMachine.TestCase.settings = settings(
    max_examples=25, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_wire_machine = WireMachine.TestCase



#: trades of streams A, B, C in and out of sequence, time and band, among extreme messages
STREAM_TRADES = st.builds(
    lambda sym, seq, dt, price: Trade(seq, T0 + dt * NS // 10, sym, price, 1.0),
    st.sampled_from(["A", "B", "C"]), st.integers(1, 40), st.integers(-5, 400),
    st.sampled_from([10.0, 10.1, 9.9, 10.0, 30.0, -1.0, math.nan]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(STREAM_TRADES, STREAM_TRADES, EXTREME), min_size=1, max_size=40),
       st.integers(0, 450))
def test_a_stop_splits_a_batch_into_calls_that_judge_it_as_one(msgs: list[Message],
                                                                stop_dt: int) -> None:
    """`validate_many(frames, stop_ts)` (the daemon's step ending at a bar close), called
    again on the frames it left, gives the messages, counts and state one call gives."""
    frames: list[Any] = [_frame(m) for m in msgs]
    whole = Validator(ValidationLimits(max_symbols=50))
    want = whole.validate_many(frames)
    split = Validator(ValidationLimits(max_symbols=50))
    got: list[Message] = []
    at, calls = 0, 0
    stop = T0 + stop_dt * NS // 10
    while at < len(frames):
        out = split.validate_many(frames[at:], stop)
        assert 1 <= split.consumed <= len(frames) - at
        # a call stops only right after an accepted trade at or past the stop
        if split.consumed < len(frames) - at:
            assert out and type(out[-1]) is Trade and out[-1].ts >= stop
        got += out
        at += split.consumed
        calls += 1
    assert [encode(m) for m in got] == [encode(m) for m in want]  # NaN fields too
    assert split.skipped.counts == whole.skipped.counts
    assert split.received == whole.received == len(frames)
    assert split.last_seq == whole.last_seq and split.held == whole.held
    assert split.clock == whole.clock
