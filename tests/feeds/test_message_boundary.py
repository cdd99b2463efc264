"""The message boundary on real ZeroMQ sockets (tcp on loopback): a frame too large costs
only itself, a message of the wrong frame count never takes a valid one along, and a
sequence gap is one event whatever the peer's jump."""

from __future__ import annotations

import asyncio
import random

import zmq
import zmq.asyncio

from feeds.messages import Heartbeat, Trade, encode
from feeds.transport import Publisher, Subscriber, transport_cap
from feeds.validation import Validator

NS = 1_000_000_000
T0 = 1_700_000_000 * NS


async def _open(max_message_bytes: int = 0) -> tuple[Publisher, Subscriber,
                                                      zmq.asyncio.Context]:
    ctx = zmq.asyncio.Context()
    pub = Publisher("tcp://127.0.0.1:*", zmq.Context.shadow(ctx.underlying))
    sub = Subscriber(pub.endpoint, ctx, max_message_bytes=max_message_bytes)
    await asyncio.get_running_loop().run_in_executor(None, pub.wait_for_subscriber, 5.0)
    return pub, sub, ctx


async def _until_final(sub: Subscriber, timeout: float = 5.0) -> list[object]:
    got: list[object] = []

    async def loop() -> None:
        while True:
            for m in await sub.batch():
                got.append(m)
                if isinstance(m, Heartbeat) and m.final:
                    return

    await asyncio.wait_for(loop(), timeout)
    return got


def _close(pub: Publisher, sub: Subscriber, ctx: zmq.asyncio.Context) -> None:
    pub.close()
    sub.close()
    ctx.destroy(linger=0)


def _trade(seq: int) -> Trade:
    return Trade(seq, T0 + seq * NS, "A", 10.0 + (seq % 7) / 100, 1.0)


async def test_an_oversize_frame_costs_only_itself() -> None:
    """valid, oversize, valid, ...: every valid message arrives, every oversize one is
    counted (before: ZeroMQ's MAXMSGSIZE dropped the connection and every later message)."""
    limit = 4096
    pub, sub, ctx = await _open(max_message_bytes=limit)
    rng = random.Random(3)
    oversize = 0
    for seq in range(1, 201):
        pub.send(_trade(seq))
        if seq % 10 == 0:  # between the limit and the hard transport cap
            size = rng.randrange(limit + 1, 4 * limit)
            pub.send_raw(b"T.BIG", b"\x95" + rng.randbytes(size))
            oversize += 1
    pub.send(Heartbeat(1, T0 + 300 * NS, "", True))
    got = await _until_final(sub)
    assert [m.seq for m in got if isinstance(m, Trade)] == list(range(1, 201))
    assert sub.validator.skipped.counts == {"oversize": oversize}
    assert sub.validator.received == 200 + oversize + 1
    assert transport_cap(limit) >= 16 * limit  # the hard cap is far above the limit
    _close(pub, sub, ctx)


async def test_lone_frames_never_take_a_valid_message_along() -> None:
    """300 one-frame messages (topic-like, MessagePack-like, junk) interleaved with valid
    [topic, payload] messages: every valid message arrives and each lone frame is counted
    once as bad framing (before: a lone frame paired with the next message's topic)."""
    pub, sub, ctx = await _open()
    rng = random.Random(7)
    lone = [b"T.A", b"H.", b"\x95\x01\x02", b"", b"junk", b"Q.A"]
    n_valid = 600
    for seq in range(1, n_valid + 1):
        pub.send(_trade(seq))
        if seq % 2 == 0:
            pub.socket.send(rng.choice(lone))
    pub.send(Heartbeat(1, T0 + (n_valid + 1) * NS, "", True))
    got = await _until_final(sub)
    assert [m.seq for m in got if isinstance(m, Trade)] == list(range(1, n_valid + 1))
    assert sub.validator.skipped.counts == {"bad_framing": n_valid // 2}
    _close(pub, sub, ctx)


async def test_messages_of_three_or_more_frames_are_counted_and_skipped() -> None:
    """A message with extra frames is counted; the valid message after it arrives."""
    pub, sub, ctx = await _open()
    extra = 0
    for seq in range(1, 101):
        pub.send(_trade(seq))
        if seq % 5 == 0:
            pub.socket.send_multipart([b"X", b"\x95junk", b"T.A", b"more"])
            extra += 1
    pub.send(Heartbeat(1, T0 + 200 * NS, "", True))
    got = await _until_final(sub)
    assert [m.seq for m in got if isinstance(m, Trade)] == list(range(1, 101))
    counts = sub.validator.skipped.counts
    assert set(counts) <= {"bad_framing", "undecodable", "wrong_schema", "unknown_kind"}
    # each malformed message is counted, at most once per frame it spans
    assert extra <= sum(counts.values()) <= 4 * extra
    _close(pub, sub, ctx)


def test_a_sequence_gap_is_one_event_whatever_the_jump() -> None:
    """A peer that jumps to seq 2**64-1 (or any number) adds one gap, not the jump."""
    v = Validator()
    frames = [(b"T.A", encode(_trade(1))), (b"T.A", encode(Trade(2**64 - 1, T0 + 2 * NS,
                                                                     "A", 10.0, 1.0)))]
    frames += [(b"T.A", encode(Trade(s, T0 + 3 * NS, "A", 10.0, 1.0)))
               for s in (5, 2**40, 2**63, 2**64 - 1)]
    out = v.validate_many(frames)
    assert [m.seq for m in out] == [1, 2**64 - 1]
    assert v.skipped.counts == {"sequence_gap": 1, "duplicate": 4}
    assert v.skipped.total <= len(frames)
    w = Validator()
    jumps = [(b"T.B", encode(Trade(s, T0 + i * NS, "B", 10.0, 1.0)))
             for i, s in enumerate((1, 1000, 10**9, 10**15, 2**62, 2**64 - 1))]
    assert len(w.validate_many(jumps)) == 6
    assert w.skipped.counts == {"sequence_gap": 5}
