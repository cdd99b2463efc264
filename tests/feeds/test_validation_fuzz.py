"""Nothing a peer sends stops or poisons the engine: seeded fuzzing of raw frames.

A seeded generator writes raw `[topic, payload]` frames of every message kind: mostly
well-formed, the rest hostile (invalid UTF-8, wrong types, NaN/inf/1e300 prices, timestamps
at 2**62, huge or odd symbol names, thousands of new symbols, truncated or mangled bytes,
wrong frame counts). They go straight into the one validation path (`Validator.validate`)
and through `Engine.consume`; no sockets are needed.
"""

from __future__ import annotations

import asyncio
import math
import random
from typing import Any

import msgspec
import pytest

from engine.settings.config import EngineConfig
from engine.trading.core import Engine
from feeds.messages import MESSAGE_TYPES, Bar, Heartbeat, Quote, Trade, TradeBatch, encode
from feeds.validation import SYMBOL_CHARS, ValidationLimits, Validator
from strategies.sma_cross import SmaCross

NS = 1_000_000_000
T0 = 1_700_000_000 * NS  # 2023-11-14
KINDS = "TQBOFHVGR"
# the fields after (seq, ts) of each kind, by type
FIELDS = {
    "T": "sff", "Q": "sffff", "B": "sfffffi", "O": "siifs", "F": "siifff", "H": "sb",
    "V": "ssffff", "G": "sfLyyy", "R": "sifss",
}
SYMBOLS = ["AAA", "BBB", "CCC", "DDD"]


class FrameFuzzer:
    """Seeded raw frames: about three quarters well-formed, the rest hostile."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.seq: dict[bytes, int] = {}
        self.ts = T0
        self.price = {s: 100.0 for s in SYMBOLS}

    def _symbol(self) -> Any:
        r = self.r
        x = r.random()
        if x < 0.93:
            return r.choice(SYMBOLS)
        if x < 0.95:
            return f"N{r.randrange(10**6)}"  # a new symbol (a flood of them over the run)
        if x < 0.96:
            return msgspec.Raw(b"\xa3\xff\xfeA")  # str of invalid UTF-8
        if x < 0.97:
            return "X" * r.choice((33, 1000, 100_000))
        if x < 0.98:
            return r.choice(("", " A", "A\x00B", "A\nB", "ÄÖÜ", "💥", "A;DROP"))
        return r.choice((1, 2.5, None, b"AB", [1]))

    def _float(self, sym: str) -> Any:
        r = self.r
        x = r.random()
        if x < 0.95:
            p = self.price.get(sym, 50.0) * (1.0 + r.gauss(0.0, 0.002))
            if sym in self.price:
                self.price[sym] = p
            return p
        return r.choice((math.nan, math.inf, -math.inf, -1.0, 0.0, 1e300, 1e-300, 5e7,
                         "1.0", None, 2**64 - 1))

    def _ts(self) -> Any:
        r = self.r
        x = r.random()
        if x < 0.97:
            self.ts += r.randrange(0, 2 * NS)
            return self.ts
        return r.choice((2**62, 2**63 - 1, -(2**63), 0, self.ts - 3600 * NS,
                         self.ts + 10**18, 1.5, "now", 2**64 - 5))

    def _seq(self, topic: bytes) -> Any:
        r = self.r
        nxt = self.seq.get(topic, 0) + 1
        x = r.random()
        if x < 0.97:
            self.seq[topic] = nxt
            return nxt
        return r.choice((nxt - 1, nxt + 3, 0, -5, 2**63 - 1, "1"))

    def frame(self) -> list[bytes]:
        r = self.r
        kind = r.choice(KINDS)
        sym = self._symbol()
        sym_txt = sym if isinstance(sym, str) else "?"
        topic = f"{kind}.{sym_txt}".encode(errors="replace")
        if r.random() < 0.01:
            topic = bytes(r.randrange(256) for _ in range(r.randrange(0, 8)))
        fields: list[Any] = [kind, self._seq(topic), self._ts(), sym]
        if kind == "B" and r.random() < 0.8:  # mostly a consistent bar
            c = self._float(sym_txt)
            if isinstance(c, float) and c > 0:
                fields += [c, c * 1.01, c * 0.99, c, 1000.0, 60 * NS]
            else:
                fields += [c, c, c, c, 1000.0, 60 * NS]
        else:
            for f in FIELDS[kind][1:]:
                if f == "f":
                    fields.append(self._float(sym_txt))
                elif f == "i":
                    fields.append(r.choice((1, 2, 7, -1, 2**40)))
                elif f == "b":
                    fields.append(r.random() < 0.01)
                elif f == "L":  # contract names of an option group
                    fields.append(r.choice(([], ["AAA+30DC00100000"], ["X", "Y", "Z"])))
                elif f == "y":  # float64 arrays as bytes
                    fields.append(r.choice((b"", bytes(8), bytes(24), b"\x01")))
                else:
                    fields.append(r.choice(("enter", "close", "AAA", "")))
        x = r.random()
        if x < 0.02:
            fields = fields[: r.randrange(len(fields))]  # too short
        elif x < 0.03:
            fields.append(1)  # too long
        elif x < 0.04:
            fields[0] = r.choice(("Z", "", 1, "TT"))  # unknown kind
        payload = msgspec.msgpack.encode(fields)
        x = r.random()
        if x < 0.02:
            payload = payload[: r.randrange(len(payload))]
        elif x < 0.04:
            i = r.randrange(len(payload))
            payload = payload[:i] + bytes([r.randrange(256)]) + payload[i + 1:]
        elif x < 0.05:
            payload = bytes(r.randrange(256) for _ in range(r.randrange(1, 40)))
        y = r.random()
        if y < 0.01:
            return [topic]
        if y < 0.02:
            return [topic, payload, b"extra"]
        return [topic, payload]

    def frames(self, n: int) -> list[list[bytes]]:
        return [self.frame() for _ in range(n)]


def _check_accepted(v: Validator, msg: Any, clock_before: int | None) -> None:
    """What an accepted message may be: the invariants the engine relies on."""
    lim = v.limits
    assert type(msg) in MESSAGE_TYPES
    assert isinstance(msg.ts, int) and lim.earliest_ns <= msg.ts < lim.latest_ns
    if clock_before is not None:
        assert msg.ts <= clock_before + lim.max_time_skew_seconds * NS
    if not (type(msg) is Heartbeat and msg.symbol == ""):
        assert len(msg.symbol) <= lim.max_symbol_length
        assert SYMBOL_CHARS.fullmatch(msg.symbol)
        msg.symbol.encode()  # valid text
    if type(msg) is Trade:
        assert 0.0 < msg.price <= lim.max_price and 0.0 < msg.size < math.inf
    elif type(msg) is Bar:
        assert 0.0 < msg.low <= min(msg.open, msg.close) <= msg.high <= lim.max_price
    elif type(msg) is Quote:
        assert 0.0 <= msg.bid <= lim.max_price and 0.0 <= msg.ask <= lim.max_price


FUZZ_FRAMES = 100_000


def test_validator_survives_and_accounts_for_100k_fuzzed_frames() -> None:
    """Every frame is either returned or counted by kind; nothing raises; what passes is
    sane; the symbol table stays within its maximum."""
    limits = ValidationLimits(max_symbols=500)
    v = Validator(limits)
    fz = FrameFuzzer(seed=7)
    accepted = 0
    kinds_seen: set[str] = set()
    for frames in fz.frames(FUZZ_FRAMES):
        clock = v.clock
        for msg in v.validate_many((frames,)):  # a release may return held messages too
            accepted += 1
            kinds_seen.add(type(msg).__name__)
            _check_accepted(v, msg, clock)
    counts = v.skipped.counts
    assert v.received == FUZZ_FRAMES
    # every frame is returned, counted, or still held ahead of the clock
    assert accepted + v.skipped.total_except("sequence_gap") + v.held == FUZZ_FRAMES
    # trade batches have their own fuzz (tests/feeds/test_trade_batch.py)
    assert kinds_seen == {t.__name__ for t in MESSAGE_TYPES if t is not TradeBatch}
    assert len(v.known) <= 500
    # the hostile classes were generated and each was judged under its own kind
    for kind in ("undecodable", "wrong_schema", "unknown_kind", "bad_framing", "bad_price",
                 "price_outlier", "bad_symbol", "symbol_limit", "time_future",
                 "time_out_of_range", "time_backwards", "duplicate", "sequence_gap"):
        assert counts.get(kind, 0) > 0, kind


def test_invalid_utf8_is_counted_not_raised() -> None:
    """Fails on the old inlined validation: UnicodeDecodeError escaped Engine.consume."""
    bad = msgspec.msgpack.encode(["T", 1, T0, msgspec.Raw(b"\xa2\xff\xfe"), 10.0, 1.0])
    good = encode(Trade(1, T0, "AAA", 10.0, 1.0))
    v = Validator()
    eng = Engine(["AAA"], SmaCross(), EngineConfig())
    asyncio.run(eng.consume([(b"T.AAA", good), (b"T.??", bad)], v))
    assert v.skipped.counts == {"undecodable": 1}
    assert eng.stats.trades == 1 and v.received == 2


def test_engine_consumes_fuzzed_frames_like_validate_then_process() -> None:
    """The engine's hot path and validate + process end in the same state on hostile
    input, and the engine keeps trading afterwards (no poisoned clock, no absurd equity)."""
    frames = FrameFuzzer(seed=11).frames(30_000)
    cfg = EngineConfig(bar_seconds=60, validation=ValidationLimits(max_symbols=50))
    ref_v, fus_v = Validator(cfg.validation), Validator(cfg.validation)
    ref_e = Engine(list(SYMBOLS), SmaCross(5, 25), cfg)
    fus_e = Engine(list(SYMBOLS), SmaCross(5, 25), cfg)

    async def go() -> None:
        for i in range(0, len(frames), 512):
            batch = frames[i:i + 512]
            await fus_e.consume(batch, fus_v)
            await ref_e.process([m for f in batch for m in ref_v.validate_many((f,))])
        await fus_e.finish()
        await ref_e.finish()

    asyncio.run(go())
    assert vars(fus_e.stats) == vars(ref_e.stats)
    assert fus_v.skipped.counts == ref_v.skipped.counts
    assert fus_e.broker.equity() == ref_e.broker.equity()
    assert len(fus_e.symbols) <= 50
    assert fus_e.stats.orders > 0  # it kept trading through the hostile input
    assert math.isfinite(fus_e.broker.equity())
    assert 0.5 < fus_e.broker.equity() / fus_e.broker.initial_capital() < 2.0


def _frames(msgs: list[Any]) -> list[tuple[bytes, bytes]]:
    from feeds.messages import topic_for

    return [(topic_for(m), encode(m)) for m in msgs]


def _trades(sym: str, n: int, t0: int = T0, price: float = 100.0) -> list[Trade]:
    return [Trade(i + 1, t0 + i * 10 * NS, sym, price * (1 + 0.001 * (i % 7)), 1.0)
            for i in range(n)]


@pytest.mark.parametrize("bad_ts", [2**62, T0 + 10**18, 4_200_000_000 * NS])
def test_a_trade_far_in_the_future_does_not_stop_later_orders(bad_ts: int) -> None:
    """Old behaviour: one trade at ts = 2**62 moved the bar boundary past all later data,
    so no bar closed and no order was placed again, on any symbol."""
    good = _trades("AAA", 400)
    bad = Trade(401, bad_ts, "AAA", 100.0, 1.0)
    later = [Trade(402 + i, good[-1].ts + (i + 1) * 10 * NS, "AAA", 100.0 + (i % 40) - 20, 1.0)
             for i in range(2000)]
    v = Validator()
    eng = Engine(["AAA"], SmaCross(5, 10), EngineConfig(bar_seconds=60))
    frames = _frames([*good, bad, *later])
    asyncio.run(eng.consume(frames[:401], v))
    orders_before = eng.stats.orders
    asyncio.run(eng.consume(frames[401:], v))
    assert sum(v.skipped.counts.get(k, 0) for k in ("time_future", "time_out_of_range")) == 1
    assert eng.clock.next_boundary < T0 + 10**15
    assert eng.stats.orders > orders_before  # later bars still trade


@pytest.mark.parametrize("bad_price", [1e300, 1e9, 100.0 * 11, 100.0 / 11])
def test_price_jumps_outside_the_band_are_counted_not_bought(bad_price: float) -> None:
    msgs: list[Any] = [*_trades("AAA", 50), Trade(51, T0 + 600 * NS, "AAA", bad_price, 1.0)]
    v = Validator()
    got = [m for f in _frames(msgs) for m in v.validate_many((f,))]
    assert len(got) == 50
    kind = "bad_price" if bad_price > v.limits.max_price else "price_outlier"
    assert v.skipped.counts == {kind: 1}


def test_price_band_per_symbol_is_configurable() -> None:
    lim = ValidationLimits(price_band=10.0, price_band_by_symbol={"AAA": 1.05})
    v = Validator(lim)
    ok = [v.validate(f) for f in _frames([Trade(1, T0, "AAA", 100.0, 1.0),
                                           Trade(2, T0 + 1, "AAA", 104.0, 1.0),
                                           Trade(3, T0 + 2, "AAA", 120.0, 1.0),
                                           Trade(1, T0 + 3, "BBB", 100.0, 1.0),
                                           Trade(2, T0 + 4, "BBB", 120.0, 1.0)])]
    assert [m is not None for m in ok] == [True, True, False, True, True]
    assert v.skipped.counts == {"price_outlier": 1}


def test_a_flood_of_new_symbols_stops_at_the_maximum() -> None:
    """Old behaviour: 50,000 new symbols each got an account with $10,000 of paper cash."""
    n_new = 50_000
    msgs = [Trade(1, T0 + i, f"S{i}", 10.0, 1.0) for i in range(n_new)]
    cfg = EngineConfig(validation=ValidationLimits(max_symbols=1000))
    v = Validator(cfg.validation)
    eng = Engine([], SmaCross(), cfg)
    asyncio.run(eng.consume(_frames(msgs), v))
    assert len(eng.symbols) == 1000
    # one account: a symbol appearing adds no money (once, each brought $10,000)
    assert eng.broker.initial_capital() == Engine([], SmaCross(), cfg).broker.initial_capital()
    assert v.skipped.counts == {"symbol_limit": n_new - 1000}


def test_allow_list_rejects_other_symbols() -> None:
    v = Validator(ValidationLimits(allowed_symbols=["AAA"]))
    got = [v.validate(f) for f in _frames([Trade(1, T0, "AAA", 1.0, 1.0),
                                            Trade(1, T0, "ZZZ", 1.0, 1.0)])]
    assert got[0] is not None and got[1] is None
    assert v.skipped.counts == {"symbol_not_allowed": 1}


@pytest.mark.parametrize("name", ["X" * 1_000_000, "X" * 33, "", "A B\n", "A\x00", "Ä", "-A"])
def test_bad_symbol_names_are_refused(name: str) -> None:
    """A 1 MB symbol name went into the journal; control characters and odd text too."""
    v = Validator()
    assert v.validate((b"T.X", encode(Trade(1, T0, name, 10.0, 1.0)))) is None
    assert v.skipped.counts == {"bad_symbol": 1}
    assert name not in v.known


def test_bad_validation_limits_are_refused() -> None:
    for kw in ({"price_band": 1.0}, {"price_band": math.nan}, {"max_symbols": 0},
               {"max_time_skew_seconds": -1.0}, {"max_price": math.inf},
               {"price_band_by_symbol": {"A": 0.5}}):
        with pytest.raises((ValueError, msgspec.ValidationError)):
            msgspec.convert(kw, ValidationLimits)


def test_batches_judge_like_single_frames() -> None:
    """validate_many (the engine's and the subscriber's path) keeps the stream's state
    across a batch exactly as frame-by-frame validation does."""
    frames = FrameFuzzer(seed=3).frames(20_000)
    one, many = Validator(), Validator()
    singles = [m for f in frames for m in one.validate_many((f,))]
    batched = [m for i in range(0, len(frames), 333) for m in many.validate_many(frames[i:i + 333])]
    assert [encode(m) for m in batched] == [encode(m) for m in singles]  # NaN-safe
    assert many.skipped.counts == one.skipped.counts
    assert (many.clock, many.received, many.last_price) == (one.clock, one.received, one.last_price)


def test_a_stream_carrying_several_symbols_checks_each_symbol() -> None:
    """The validator remembers each stream's last symbol (one lookup per tick): a stream
    whose symbol changes must still be judged by each symbol's own band, time and name."""
    frames = [(b"T.A", encode(m)) for m in (
        Trade(1, T0, "AAA", 10.0, 1.0),
        Trade(2, T0 + 1, "BBB", 1000.0, 1.0),   # another symbol's first price: in band
        Trade(3, T0 + 2, "AAA", 10.5, 1.0),     # AAA's band, not BBB's
        Trade(4, T0 + 3, "BBB", 10.0, 1.0),     # an outlier for BBB
        Trade(5, T0 + 1, "AAA", 10.0, 1.0),     # AAA's time went backwards
        Trade(6, T0 + 4, "", 10.0, 1.0),        # no symbol on a trade
    )]
    frames.insert(2, (b"H.", encode(Heartbeat(1, T0 + 1, "", False, 1))))
    frames.append((b"H.", encode(Trade(2, T0 + 5, "", 10.0, 1.0))))  # after a heartbeat
    v = Validator()
    got = v.validate_many(frames)
    assert [(m.symbol, m.seq) for m in got] == [("AAA", 1), ("BBB", 2), ("", 1), ("AAA", 3)]
    assert v.skipped.counts == {"price_outlier": 1, "time_backwards": 1, "bad_symbol": 2}
    assert v.last_price == {"AAA": 10.5, "BBB": 1000.0}
    assert v.last_seq == {b"T.A": 6, b"H.": 2}


@pytest.mark.parametrize(("seed", "every"), [(21, 1), (22, 3), (23, 8)])
def test_tap_hands_out_every_kth_accepted_trade_of_its_symbols(seed: int, every: int) -> None:
    """The tap (spots for the option worker, taken during validation) sees only trades the
    validator accepts, of the tapped symbols, every `every`-th per symbol, in order; after
    each batch `untapped_newest` gives each tapped symbol's newest accepted trade that the
    tap did not get. The validator's verdicts are those of an untapped one. Hostile
    fuzzed frames in batches of random sizes; the tap is switched off halfway."""
    frames = FrameFuzzer(seed=seed).frames(12_000)
    tapped_syms = {"AAA", "CCC"}
    plain, v, model = Validator(), Validator(), Validator()
    seen: list[tuple[str, float, int]] = []
    def tap(symbol: str, price: float, ts: int) -> None:
        seen.append((symbol, price, ts))

    v.tap_trades(tapped_syms, every, tap)
    want: list[tuple[str, float, int]] = []
    count = dict.fromkeys(tapped_syms, 0)
    r = random.Random(seed)
    got: list[Any] = []
    i = 0
    half = len(frames) // 2
    while i < len(frames):
        n = r.randrange(1, 700)
        if i < half <= i + n:
            n = half - i
        got.extend(v.validate_many(frames[i:i + n]))
        accepted = model.validate_many(frames[i:i + n])  # what the model expects, untapped
        newest: dict[str, Trade | None] = {}
        for m in accepted:
            if i < half and type(m) is Trade and m.symbol in tapped_syms:
                count[m.symbol] += 1
                if count[m.symbol] % every == 0:
                    want.append((m.symbol, m.price, m.ts))
                    newest[m.symbol] = None
                else:
                    newest[m.symbol] = m
        untapped = v.untapped_newest()
        assert sorted(encode(m) for m in untapped) == sorted(
            encode(m) for m in newest.values() if m is not None)
        assert v.untapped_newest() == []  # forgotten once taken
        i += n
        if i == half:
            v.tap_trades(tapped_syms, 0, tap)  # off: nothing more is handed out
    ref = [x for f in frames for x in plain.validate_many((f,))]
    assert [encode(m) for m in got] == [encode(m) for m in ref]
    assert v.skipped.counts == plain.skipped.counts
    assert seen == want and len(want) >= 20
    assert all(0.0 < p < math.inf for _, p, _ in seen)
    with pytest.raises(ValueError, match="every"):
        v.tap_trades(tapped_syms, -1, tap)
