"""Trade batches (feeds/trade_batch.py) are judged as the same trades sent one per message.

A seeded stream of trades with hostile rows (NaN, negative and huge prices, bad sizes,
times backwards, far ahead and at the int64 limits, sequence gaps, duplicates and extreme
sequence numbers, bad symbol names) goes through the validator and the engine once as
one-tick messages and once cut into batches of random sizes: the same skip counts, the same
accepted trades in the same order, the same bars, fills and equity. Malformed frames
(truncated or mismatched columns, unknown symbol ids, oversize) are counted and skipped
whole, and the engine goes on.
"""

from __future__ import annotations

import asyncio
import math
import random

import msgspec
import numpy as np
import pytest

from engine.settings.config import BrokerConfig, EngineConfig
from engine.trading.core import Engine
from feeds.messages import Heartbeat, Message, Trade, TradeBatch, encode
from feeds.trade_batch import BATCH_TOPIC, MAX_BATCH_ROWS, batch_columns
from feeds.validation import ValidationLimits, Validator
from strategies.sma_cross import SmaCross

NS = 1_000_000_000
T0 = 1_381_152_600 * NS  # 2013-10-07 13:30 UTC, 09:30 New York
SYMBOLS = ["SPY", "BAC", "IBM", "X Y", "GE"]  # "X Y" is a legal name; "B!D" is not
I64 = (1 << 63) - 1


class RowStream:
    """Seeded trades, mostly good, with every hostile class of a row."""

    def __init__(self, seed: int, time_faults: float = 0.02, extreme_seqs: bool = True) -> None:
        self.r = random.Random(seed)
        self.time_faults = time_faults
        # a gap to 2**63 - 1 is kept: every later row of that symbol is a duplicate
        self.seq_faults = (-I64 - 1, I64) if extreme_seqs else ()
        self.seq: dict[str, int] = {}
        self.price = {s: 100.0 for s in SYMBOLS}
        self.ts = T0

    def row(self) -> Trade:
        r = self.r
        sym = r.choice(SYMBOLS) if r.random() < 0.995 else r.choice(("B!D", "Z" * 40))
        nxt = self.seq.get(sym, 0) + 1
        x = r.random()
        if x < 0.97:
            seq = self.seq[sym] = nxt
        else:
            seq = r.choice((nxt - 1, nxt + 2, 0, -5, *self.seq_faults))
            if nxt < seq < 2**40:  # a gap the stream goes on from (an extreme one the
                self.seq[sym] = seq  # validator keeps too: the next rows are duplicates)
        self.ts += r.randrange(0, 50_000_000)
        ts = self.ts
        if r.random() < self.time_faults:
            ts = r.choice((ts - 600 * NS, ts + 7200 * NS, ts + 40 * 86400 * NS, 2**62,
                           I64, -I64 - 1, 0))
        p = self.price[sym] = self.price.get(sym, 50.0) * (1.0 + r.gauss(0.0, 0.001))
        if r.random() < 0.02:
            p = r.choice((math.nan, math.inf, -1.0, 0.0, 1e300, 1e-300, 5e7, p * 20))
        size = 100.0 if r.random() < 0.99 else r.choice((0.0, -5.0, math.nan, math.inf))
        return Trade(seq, ts, sym, p, size)

    def rows(self, n: int) -> list[Trade]:
        return [self.row() for _ in range(n)]


def batch_frame(trades: list[Trade]) -> list[bytes]:
    """The batch frame of these trades (its symbol table in order of first appearance)."""
    names = list(dict.fromkeys(t.symbol for t in trades))
    ids = np.array([names.index(t.symbol) for t in trades], "<i4")
    col = lambda f, dt: np.array([getattr(t, f) for t in trades], dt).tobytes()  # noqa: E731
    b = TradeBatch(0, trades[-1].ts, "", tuple(names), ids.tobytes(), col("seq", "<i8"),
                   col("ts", "<i8"), col("price", "<f8"), col("size", "<f8"))
    return [BATCH_TOPIC, encode(b)]


def one_tick_frames(trades: list[Trade]) -> list[list[bytes]]:
    return [[b"T." + t.symbol.encode(), encode(t)] for t in trades]


def as_trades(msgs: list[Message]) -> list[Message]:
    """Accepted messages with every batch expanded into its trades."""
    out: list[Message] = []
    for m in msgs:
        if type(m) is TradeBatch:
            c = batch_columns(m)
            assert not isinstance(c, str)
            out += [Trade(int(q), int(t), m.symbols[int(s)], float(p), float(z))
                    for s, q, t, p, z in zip(c.sym, c.seqs, c.times, c.prices, c.sizes,
                                             strict=True)]
        else:
            out.append(m)
    return out


def _receive(frames: list[list[bytes]], chunk: int, engine: Engine | None,
             limits: ValidationLimits) -> tuple[Validator, list[Message]]:
    """The frames through one validator (and the engine), `chunk` frames per batch."""
    v = Validator(limits)
    accepted: list[Message] = []

    async def run() -> None:
        for k in range(0, len(frames), chunk):
            part = frames[k:k + chunk]
            if engine is not None:
                await engine.consume(part, v)
            else:
                accepted.extend(v.validate_many(part))

    asyncio.run(run())
    return v, accepted


def _frames(trades: list[Trade], seed: int, batched: bool) -> list[list[bytes]]:
    """The trades in runs of random sizes, each run one batch frame (`batched`) or one
    message per trade, with the same heartbeats between runs now and then."""
    r = random.Random(seed)
    frames, i, beat = [], 0, 0
    while i < len(trades):
        part = trades[i:i + r.choice((1, 2, 7, 50, 300))]
        frames += [batch_frame(part)] if batched else one_tick_frames(part)
        i += len(part)
        if r.random() < 0.05:
            beat += 1
            frames.append([b"H.", encode(Heartbeat(beat, part[-1].ts, "", False, 0))])
    return frames


def _cut(trades: list[Trade], seed: int) -> list[list[bytes]]:
    return _frames(trades, seed, batched=True)


def _one_tick_with_beats(trades: list[Trade], seed: int) -> list[list[bytes]]:
    return _frames(trades, seed, batched=False)


LIMITS = [ValidationLimits(), ValidationLimits(max_time_lead_seconds=60.0, max_symbols=4)]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("limits", LIMITS, ids=["default", "tight"])
def test_batches_are_judged_as_their_trades_one_by_one(seed: int,
                                                       limits: ValidationLimits) -> None:
    trades = RowStream(seed).rows(20_000)
    one_v, one = _receive(_one_tick_with_beats(trades, seed), 512, None, limits)
    bat_v, bat = _receive(_cut(trades, seed), 64, None, limits)
    assert bat_v.skipped.counts == one_v.skipped.counts
    assert as_trades(bat) == one
    assert (bat_v.received, bat_v.clock, bat_v.held, bat_v.held_ahead) == \
        (one_v.received, one_v.clock, one_v.held, one_v.held_ahead)
    assert bat_v.last_seq == one_v.last_seq
    # every hostile class was generated and judged
    for kind in ("bad_price", "bad_size", "price_outlier", "time_out_of_range",
                 "time_backwards", "duplicate", "sequence_gap", "bad_symbol"):
        assert one_v.skipped.counts.get(kind, 0) > 0, kind
    assert any(type(m) is TradeBatch for m in bat)  # most rows took the compiled branch


@pytest.mark.parametrize("fill", ["next-tick", "signal-close"])
def test_engine_gives_the_same_bars_fills_and_equity_from_batches(fill: str) -> None:
    # few bad times: a trade hours ahead that the stream agrees to moves every clock on
    trades = RowStream(11, time_faults=0.0005, extreme_seqs=False).rows(30_000)
    cfg = EngineConfig(bar_seconds=5.0, broker=BrokerConfig(fill=fill))  # type: ignore[arg-type]
    engines = []
    for frames, chunk in ((_one_tick_with_beats(trades, 11), 700), (_cut(trades, 11), 40)):
        eng = Engine(list(SYMBOLS), SmaCross(fast=3, slow=8), cfg)
        _receive(frames, chunk, eng, cfg.validation)
        asyncio.run(eng.finish())
        engines.append(eng)
    one, bat = engines
    assert one.stats.fills > 10 and one.stats.bars > 100
    assert (bat.stats.trades, bat.stats.bars, bat.stats.bar_events, bat.stats.fills) == \
        (one.stats.trades, one.stats.bars, one.stats.bar_events, one.stats.fills)
    assert bat.broker.fills == one.broker.fills
    assert bat.equity_curve == one.equity_curve
    bars = lambda e: repr([e.bars.o, e.bars.h, e.bars.l, e.bars.c, e.bars.v,  # noqa: E731
                           e.bars.first_price, e.symbols])  # repr: NaN equals NaN
    assert bars(bat) == bars(one)


def _hostile(r: random.Random, good: TradeBatch) -> tuple[list[bytes], str]:
    """A malformed frame made from a good batch, and the kind it must be counted under."""
    cols = ["sym_ids", "seqs", "times", "prices", "sizes"]
    x = r.randrange(8)
    if x == 0:  # a column cut short, or one byte too many
        f = r.choice(cols)
        raw = getattr(good, f)
        raw = raw[:r.randrange(len(raw))] if r.random() < 0.7 else raw + b"\x00"
        return [BATCH_TOPIC, encode(msgspec.structs.replace(good, **{f: raw}))], "bad_batch"
    if x == 1:  # columns of whole values but different lengths
        f = r.choice(cols)
        raw = getattr(good, f)
        size = 4 if f == "sym_ids" else 8
        return [BATCH_TOPIC, encode(msgspec.structs.replace(good, **{f: raw[size:]}))], \
            "bad_batch"
    if x == 2:  # a symbol id outside the table
        ids = np.frombuffer(good.sym_ids, "<i4").copy()
        ids[r.randrange(ids.size)] = r.choice((-1, len(good.symbols), 2**31 - 1, -2**31))
        return [BATCH_TOPIC, encode(msgspec.structs.replace(good, sym_ids=ids.tobytes()))], \
            "bad_batch"
    if x == 3:  # no symbols, or one twice
        names = () if r.random() < 0.5 else (good.symbols[0], good.symbols[0])
        return [BATCH_TOPIC, encode(msgspec.structs.replace(good, symbols=names))], "bad_batch"
    if x == 4:  # no rows
        return [BATCH_TOPIC, encode(msgspec.structs.replace(
            good, sym_ids=b"", seqs=b"", times=b"", prices=b"", sizes=b""))], "bad_batch"
    if x == 5:  # more rows than a frame may have
        n = MAX_BATCH_ROWS + 1
        z8, z4 = bytes(8 * n), bytes(4 * n)
        return [BATCH_TOPIC, encode(TradeBatch(0, 0, "", ("A",), z4, z8, z8, z8, z8))], \
            "oversize_batch"
    if x == 6:  # a column of the wrong type
        fields = list(msgspec.structs.astuple(good))
        fields[r.randrange(3, 9)] = r.choice((1.5, "text", None, [1, 2]))
        return [BATCH_TOPIC, msgspec.msgpack.encode(["C", *fields])], "wrong_schema"
    payload = encode(good)  # truncated bytes
    return [BATCH_TOPIC, payload[:r.randrange(1, len(payload))]], "undecodable"


def test_malformed_frames_are_counted_whole_and_the_engine_goes_on() -> None:
    """Each malformed frame between good ones: counted once under its kind, nothing of it
    applied, and the good frame after it applied in full."""
    r = random.Random(5)
    rows = RowStream(99, time_faults=0.0, extreme_seqs=False)
    eng = Engine(list(SYMBOLS), SmaCross(), EngineConfig(bar_seconds=5.0))
    v = Validator()
    expected: dict[str, int] = {}
    for _ in range(400):
        good = [t for t in rows.rows(40) if t.symbol in SYMBOLS]
        payload = batch_frame(good)[1]
        bad, kind = _hostile(r, msgspec.msgpack.decode(payload, type=TradeBatch))
        before = eng.stats.trades
        counts_before = dict(v.skipped.counts)
        asyncio.run(eng.consume([bad], v))
        assert eng.stats.trades == before, kind  # nothing of a malformed frame applied
        got = {k: n - counts_before.get(k, 0) for k, n in v.skipped.counts.items()
               if n != counts_before.get(k, 0)}
        if kind == "undecodable" and got.keys() == {"wrong_schema"}:
            kind = "wrong_schema"  # a cut that still decodes as a shorter array
        assert got == {kind: 1}
        expected[kind] = expected.get(kind, 0) + 1
        accepted = v.validate_many([[BATCH_TOPIC, payload]])
        asyncio.run(eng.process(accepted))
        assert eng.stats.trades == before + len(as_trades(accepted))
    assert set(expected) >= {"bad_batch", "oversize_batch", "wrong_schema", "undecodable"}
    assert eng.stats.trades > 10_000 and not eng.finished


def test_a_trade_sent_alone_still_works_after_batches() -> None:
    """One-tick messages (a live venue's) and batches on the same validator and engine:
    a stream may switch between them, the sequence numbers carrying on."""
    trades = RowStream(3).rows(2_000)
    good = [t for t in trades if t.symbol in SYMBOLS]
    mixed: list[list[bytes]] = []
    r = random.Random(3)
    i = 0
    while i < len(good):
        n = r.choice((1, 5, 40))
        part = good[i:i + n]
        mixed += [batch_frame(part)] if r.random() < 0.5 else one_tick_frames(part)
        i += n
    one_v, one = _receive(one_tick_frames(good), 100, None, ValidationLimits())
    mix_v, mix = _receive(mixed, 100, None, ValidationLimits())
    assert as_trades(mix) == one and mix_v.skipped.counts == one_v.skipped.counts
