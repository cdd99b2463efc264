"""Option groups on the data's clock (`options_every_ms`, `engine.options.clocked`): which
spots are priced, how the values are stamped, and that the result is a function of the
data alone; the setting's bad values; a whole replay."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import math
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import UserError
from engine.options.book import open_option_book
from engine.options.clocked import LAUNCHES_IN_FLIGHT, MAX_EVERY_MS, ClockedOptions
from engine.options.group import OptionGroupConfig, build_group
from engine.settings.config import EngineConfig
from engine.settings.resolve import merge
from engine.trading.replay import replay
from feeds.messages import OptionGroupValues
from feeds.records import KIND_TRADE
from feeds.synthetic import SyntheticMarket
from gpu.device import cuda_present, cuda_simulated
from gpu.options.engines import price_params
from strategies.sma_cross import SmaCross

needs_cuda = pytest.mark.skipif(not cuda_present(), reason="no CUDA device or simulator")

MS = 1_000_000
TS0 = int(dt.datetime(2024, 3, 1, 15, 0, tzinfo=dt.UTC).timestamp()) * 1_000_000_000
EVERY_MS = 10.0


def group(underlying: str, **kw: object) -> OptionGroupConfig:
    base: dict[str, object] = {
        "underlying": underlying, "strikes": (95.0, 105.0), "expiries": (30,),
        "rights": ("C", "P"), "style": "american", "vol": 0.3, "rate": 0.01,
        "grid": "seed", "price_steps": 16, "time_steps": 3}
    base.update(kw)
    return msgspec.convert(base, OptionGroupConfig)


def configs() -> list[OptionGroupConfig]:
    # two groups on one underlying (one with another grid: a second launch), one on another
    return [group("AAA"), group("AAA", strikes=(90.0,), price_steps=24), group("BBB")]


def spot_stream(seed: int, n: int = 300) -> list[tuple[str, float, int]]:
    """Spots of AAA and BBB at random data times: bursts within an interval, quiet
    stretches of several intervals, ticks right on a boundary; a few bad prices."""
    rng = np.random.default_rng(seed)
    ts = TS0 + 3 * MS
    out = []
    for _ in range(n):
        ts += int(rng.choice([0, 1, MS // 2, 3 * MS, 10 * MS - (ts - TS0) % (10 * MS),
                              47 * MS]))
        sym = "AAA" if rng.random() < 0.6 else "BBB"
        price = float(rng.uniform(90.0, 110.0))
        if rng.random() < 0.03:
            price = float(rng.choice([math.nan, -1.0, 0.0, math.inf]))
        out.append((sym, price, ts))
    return out


def brute_force(stream: list[tuple[str, float, int]]) -> list[tuple[str, int, float]]:
    """(underlying, stamp, spot) the clock must price: per interval [B - every, B) in which
    an underlying had a good spot, its newest one, stamped B."""
    every = int(EVERY_MS * MS)
    newest: dict[tuple[str, int], tuple[int, float]] = {}
    for k, (sym, price, ts) in enumerate(stream):
        if 0.0 < price < math.inf:
            newest[(sym, (ts // every + 1) * every)] = (k, price)
    return sorted((sym, b, price) for (sym, b), (_, price) in newest.items())


def run_book(stream: list[tuple[str, float, int]], poll_every: int) -> list[OptionGroupValues]:
    book = open_option_book(configs(), device="cpu", every_ms=EVERY_MS)
    assert isinstance(book, ClockedOptions) and book.dispatch == "clocked"
    out = []
    for k, (sym, price, ts) in enumerate(stream):
        book.on_spot(sym, price, ts)
        if poll_every and k % poll_every == 0:
            out.extend(book.poll())
    out.extend(asyncio.run(book.drain()))
    assert book.in_flight == 0
    return [m for m in out if isinstance(m, OptionGroupValues)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_clock_prices_each_intervals_newest_spot_stamped_at_its_boundary(seed: int) -> None:
    stream = spot_stream(seed)
    msgs = run_book(stream, poll_every=7)
    want = brute_force(stream)
    per_group = {"AAA": 2, "BBB": 1}  # groups per underlying: one message each a stamp
    assert sorted({(m.symbol, m.ts, m.spot) for m in msgs}) == want
    assert len(msgs) == sum(per_group[s] for s, _, _ in want)
    for m in msgs:
        assert m.ts % int(EVERY_MS * MS) == 0  # stamped on the clock
    # every value is its group's repricing at that spot (the one-shot path), in order
    groups = {tuple(g.symbols): g for g in
              (build_group(c, "cpu", False, set()) for c in configs())}
    for m in msgs[:12]:
        g = groups[tuple(m.options)]
        rows = np.array(g.pricer.params)
        rows[:, 0] = m.spot
        np.testing.assert_array_equal(m.prices(), price_params(rows, g.pricer.grid, "cpu").price)
    seqs = [m.seq for m in msgs]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_the_values_are_a_function_of_the_data_alone() -> None:
    """Polled after every spot, every 50th or only at the end: the same messages."""
    stream = spot_stream(4)
    runs = [run_book(stream, poll_every=k) for k in (1, 50, 0)]
    encoded = [[msgspec.msgpack.encode(m) for m in r] for r in runs]
    assert encoded[0] == encoded[1] == encoded[2]


def test_spots_wait_for_their_boundary() -> None:
    book = open_option_book([group("AAA")], device="cpu", every_ms=EVERY_MS)
    book.on_spot("AAA", 100.0, TS0 + 1 * MS)
    book.on_spot("AAA", 101.0, TS0 + 9 * MS)
    assert book.poll() == [] and book.in_flight == 1  # waiting for TS0 + 10 ms
    book.on_spot("AAA", 102.0, TS0 + 10 * MS)  # on the boundary: the next interval's
    got = book.poll()
    assert [(m.ts, m.spot) for m in got] == [(TS0 + 10 * MS, 101.0)]
    book.on_spot("ZZZ", 5.0, TS0 + 500 * MS)  # no group of its own: nothing moves
    assert book.poll() == []
    got = asyncio.run(book.drain())
    assert [(m.ts, m.spot) for m in got] == [(TS0 + 20 * MS, 102.0)]
    summary = book.summary()
    assert summary["dispatch"] == "clocked" and summary["boundaries"] == 2
    assert summary["repricings"] == 2 and summary["coalesced_ticks"] == 1


def test_a_grid_keeps_at_most_two_launches_in_flight() -> None:
    """Never polled, a book hands out its oldest launch when a grid's slots are all busy:
    the values are never more than LAUNCHES_IN_FLIGHT intervals behind the data."""
    book = open_option_book([group("AAA"), group("BBB")], device="cpu", every_ms=EVERY_MS)
    assert isinstance(book, ClockedOptions)
    for k in range(7):
        book.on_spot("AAA", 100.0 + k, TS0 + k * 10 * MS + 1)
        book.on_spot("BBB", 50.0 + k, TS0 + k * 10 * MS + 2)
        assert len(book._flights) <= LAUNCHES_IN_FLIGHT
    assert len(book.waits_ns) == 6 - LAUNCHES_IN_FLIGHT  # boundaries 3..6 found no slot
    got = book.poll() + asyncio.run(book.drain())
    assert [(m.symbol, m.ts, m.spot) for m in got] == [
        (sym, TS0 + (k + 1) * 10 * MS, base + k) for k in range(7)
        for sym, base in (("AAA", 100.0), ("BBB", 50.0))]


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, -math.inf,
                                 MAX_EVERY_MS * 1.0001, 1e300, "10", True])
def test_bad_clock_intervals_are_one_line(bad: object) -> None:
    with pytest.raises(ValueError, match="must be a number of milliseconds above 0") as e:
        ClockedOptions([group("AAA")], "cpu", "America/New_York", bad)  # type: ignore[arg-type]
    assert "\n" not in str(e.value)


@given(st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**70), 2**70))
@settings(max_examples=60, deadline=None)
def test_any_options_every_ms_is_taken_or_refused_in_one_line(value: float) -> None:
    """From a config file's table or a flag merge: a clock interval, 0 (off), or a
    one-line error naming the setting; never anything else."""
    ok = value == 0 or (0 < value <= MAX_EVERY_MS)
    for make in (lambda: msgspec.convert({"options_every_ms": value}, EngineConfig),
                 lambda: merge(EngineConfig(), {"options_every_ms": value})):
        if ok:
            assert make().options_every_ms == value
            continue
        with pytest.raises((ValueError, UserError, msgspec.ValidationError)) as e:
            make()
        assert "options_every_ms" in str(e.value) and "\n" not in str(e.value)


def test_a_clocked_book_is_in_process() -> None:
    with pytest.raises(ValueError, match="dispatch must be auto or inline"):
        open_option_book([group("AAA")], device="cpu", dispatch="process", every_ms=5.0)


def replay_clocked(device: str, seed: int = 9, n_ticks: int = 4000
                   ) -> tuple[list[OptionGroupValues], list[Any]]:
    """A replay of a synthetic market with two groups on the clock: their messages, and
    the feed's trades as (symbol, price, ts)."""
    market = functools.partial(SyntheticMarket, n_symbols=3, n_ticks=n_ticks, seed=seed,
                               tick_rate=300.0)
    cfgs = [group("SYN000", strikes=(20.0, 25.0, 30.0)), group("SYN001", strikes=(25.0,))]
    book = open_option_book(cfgs, device=device, every_ms=EVERY_MS)
    try:
        res = replay(market, SmaCross(), EngineConfig(options_every_ms=EVERY_MS),
                     option_book=book)
    finally:
        book.close()
    source = market()
    trades = [(source.symbols[int(s)], float(p), int(t)) for c in source.chunks()
              for s, p, t, k in zip(c["sym"], c["f0"], c["ts"], c["kind"], strict=True)
              if k == KIND_TRADE]
    msgs = [m for m in res.engine.option_values if isinstance(m, OptionGroupValues)]
    assert len(msgs) == len(res.engine.option_values)
    return msgs, trades


def test_a_replay_on_the_clock_prices_exactly_the_boundaries_and_repeats_itself() -> None:
    msgs, trades = replay_clocked("cpu")
    want = brute_force([t for t in trades if t[0] in ("SYN000", "SYN001")])
    assert sorted((m.symbol, m.ts, m.spot) for m in msgs) == want
    assert len(want) > 100  # many boundaries, not a handful
    again, _ = replay_clocked("cpu")
    assert [msgspec.msgpack.encode(m) for m in again] == [
        msgspec.msgpack.encode(m) for m in msgs]


@needs_cuda
def test_a_replay_on_the_clock_prices_the_same_on_cuda() -> None:
    """On CUDA (a real GPU, where a boundary may wait for the launch before it, or the
    simulator) the same spots and stamps as the CPU twin, values within float32."""
    # (fewer ticks: numba's simulator runs a launch's threads in Python)
    n_ticks = 4000 if cuda_present() and not cuda_simulated() else 150
    cpu, _ = replay_clocked("cpu", n_ticks=n_ticks)
    gpu, _ = replay_clocked("cuda", n_ticks=n_ticks)
    assert len(cpu) >= 10
    assert [(m.symbol, m.ts, m.spot, m.seq) for m in gpu] == [
        (m.symbol, m.ts, m.spot, m.seq) for m in cpu]
    for a, b in zip(gpu, cpu, strict=True):
        np.testing.assert_allclose(a.prices(), b.prices(), rtol=1e-4, atol=1e-5)


def test_timings_kept_for_the_summary_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A live book passes a boundary every interval for as long as it runs: it keeps only
    the newest latencies and waits, and still counts every repricing."""
    import engine.options.clocked as clocked

    monkeypatch.setattr(clocked, "KEEP_TIMINGS", 3)
    book = open_option_book([group("AAA")], device="cpu", every_ms=EVERY_MS)
    assert isinstance(book, ClockedOptions)
    for k in range(40):
        book.on_spot("AAA", 100.0 + k, TS0 + k * 10 * MS + 1)
    asyncio.run(book.drain())
    g = book._groups["AAA"][0]
    assert g.repricings == 40 and 3 <= len(g.latencies_ns) < 6
    assert len(book.waits_ns) == 3
    assert book.summary()["repricings"] == 40


def test_a_late_older_tick_never_replaces_the_intervals_newest_spot() -> None:
    book = open_option_book([group("AAA")], device="cpu", every_ms=EVERY_MS)
    book.on_spot("AAA", 101.0, TS0 + 5 * MS)
    book.on_spot("AAA", 99.0, TS0 + 2 * MS)  # older than the pending one: not newer
    got = asyncio.run(book.drain())
    assert [(m.ts, m.spot) for m in got] == [(TS0 + 10 * MS, 101.0)]


@given(st.lists(st.tuples(st.sampled_from(["AAA", "BBB", "ZZZ"]),
                          st.floats(allow_nan=True, allow_infinity=True),
                          st.integers(-(2**63), 2**63 - 1)), max_size=25))
@settings(max_examples=40, deadline=None)
def test_any_spots_and_timestamps_leave_the_book_working(
        stream: list[tuple[str, float, int]]) -> None:
    """Whatever reaches on_spot (NaN, infinite, negative prices; timestamps anywhere in
    int64, backwards included), the book never raises, prices only good spots, stamps on
    the clock and hands out messages that encode."""
    book = open_option_book([group("AAA"), group("BBB")], device="cpu", every_ms=EVERY_MS)
    for sym, price, ts in stream:
        book.on_spot(sym, price, ts)
    msgs = book.poll() + asyncio.run(book.drain())
    good = {(s, p) for s, p, _ in stream if 0.0 < p < math.inf}
    for m in msgs:
        assert isinstance(m, OptionGroupValues) and (m.symbol, m.spot) in good
        assert m.ts % int(EVERY_MS * MS) == 0
        msgspec.msgpack.encode(m)
    assert book.in_flight == 0
