"""Both implementations of `OptionPricing`: the same protocol, the same values for the same
spots (CPU backend; the worker is a real process on real shared memory)."""

from __future__ import annotations

import asyncio
import datetime as dt

import numpy as np
import pytest

from engine.options.book import open_option_book
from engine.options.group import OptionGroupConfig
from engine.options.in_process import InProcessOptions
from engine.options.protocol import OptionMessage, OptionPricing, per_option
from engine.options.worker_options import WorkerOptions
from engine.settings.config import EngineConfig
from engine.trading.core import Engine
from feeds.messages import OptionGroupValues, OptionValue, Trade
from strategies.sma_cross import SmaCross

NS = 1_000_000_000
TS0 = int(dt.datetime(2024, 3, 1, 15, 0, tzinfo=dt.UTC).timestamp()) * NS
TZ = "America/New_York"


def groups() -> list[OptionGroupConfig]:
    """Two underlyings; one group with a dated expiry (its time to expiry follows the
    ticks' date), one publishing per-contract messages."""
    return [
        OptionGroupConfig(underlying="ABC", strikes=(90.0, 100.0, 110.0),
                          expiries=(7, dt.date(2024, 4, 19)), style="american",
                          vol=0.3, rate=0.02, dividend_yield=0.01, price_steps=16,
                          time_steps=3),
        OptionGroupConfig(underlying="DEF", strikes=(40.0,), expiries=(30,), rights=("P",),
                          style="european", vol=0.2, price_steps=16, time_steps=3,
                          messages="option"),
    ]


def both() -> list[OptionPricing]:
    return [InProcessOptions(groups(), "cpu", TZ), WorkerOptions(groups(), "cpu", TZ)]


def spot_walk(seed: int, n: int) -> list[tuple[str, float, int]]:
    """Spots on both underlyings with bad prices and an unknown symbol mixed in, across
    two exchange days (the dated expiry's time to expiry changes)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        sym = str(rng.choice(["ABC", "DEF", "XYZ"], p=[0.6, 0.3, 0.1]))
        spot = float((100.0 if sym == "ABC" else 40.0) * np.exp(rng.normal(0, 0.03)))
        if rng.random() < 0.1:
            spot = float(rng.choice([np.nan, -spot, 0.0, np.inf]))
        out.append((sym, spot, TS0 + i * 3_600 * NS))  # hourly: the date rolls over
    return out


def values(msgs: list[OptionMessage]) -> list[tuple[object, ...]]:
    """Every contract's value as (symbol, underlying, spot, ts, price, delta, gamma)."""
    return [(v.symbol, v.underlying, v.spot, v.ts, v.price, v.delta, v.gamma)
            for v in per_option(msgs)]


def test_both_implementations_satisfy_the_protocol() -> None:
    books = both()
    try:
        for book in books:
            assert isinstance(book, OptionPricing)
            assert book.underlyings == {"ABC", "DEF"}
            assert book.device == "cpu" and book.in_flight == 0 and book.poll() == []
        assert [b.dispatch for b in books] == ["inline", "process"]
        # in-process spots come from the hot loop; the worker's from validation by default
        assert books[0].tap_every == 0 and books[1].tap_every == 8
        assert isinstance(open_option_book(groups()[:1], device="cpu"), InProcessOptions)
    finally:
        for book in books:
            book.close()


@pytest.mark.parametrize("seed", [1, 2])
def test_same_spots_give_the_same_values_in_process_and_in_a_worker(seed: int) -> None:
    """Each spot drained before the next (so none is coalesced away): both publish the
    same messages, bit for bit, in the same order and sequence."""
    books = both()
    try:
        got: list[list[OptionMessage]] = [[], []]
        for sym, spot, ts in spot_walk(seed, 60):
            for book, out in zip(books, got, strict=True):
                book.begin_batch()
                book.on_spot(sym, spot, ts)
                out.extend(asyncio.run(book.drain()))
        inline, worker = got
        assert values(inline) and values(inline) == values(worker)
        # the same message kinds and numbering: group messages for ABC, per contract for DEF
        assert [(type(m), m.seq) for m in inline] == [(type(m), m.seq) for m in worker]
        assert {type(m) for m in inline} == {OptionGroupValues, OptionValue}
        s_in, s_w = (b.summary() for b in books)
        for key in ("groups", "options", "ticks", "repricings", "coalesced_ticks", "last",
                    "never_priced"):
            assert s_in[key] == s_w[key], key
        assert s_in["repricings"] == sum(isinstance(m, OptionGroupValues) for m in inline) \
            + sum(isinstance(m, OptionValue) for m in inline)  # 1 DEF contract a repricing
        assert books[0].values_published == books[1].values_published == len(values(inline))
    finally:
        for book in books:
            book.close()


def test_the_engine_gives_both_implementations_the_same_spots(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the engine's hot loop (OPTION_TAP_EVERY=0: no validator), one trade a
    batch: the engine's option values are the same with either implementation."""
    monkeypatch.setenv("OPTION_TAP_EVERY", "0")
    books = both()
    try:
        published = []
        for book in books:
            eng = Engine(["ABC", "DEF", "XYZ"], SmaCross(), EngineConfig(), option_book=book)
            for i, (sym, spot, ts) in enumerate(spot_walk(7, 40)):
                if not (0.0 < spot < np.inf):
                    continue  # the validator's to drop before the engine
                asyncio.run(eng.process([Trade(i + 1, ts, sym, spot, 1.0)]))
                eng.option_values.extend(asyncio.run(book.drain()))
            published.append(values([m for m in eng.option_values
                                      if isinstance(m, OptionValue | OptionGroupValues)]))
        assert published[0] and published[0] == published[1]
    finally:
        for book in books:
            book.close()
