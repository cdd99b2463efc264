"""Options in the engine's process (`open_option_book`, dispatch "inline"): groups repriced
on underlying ticks, results by event polling, in asyncio."""

from __future__ import annotations

import asyncio
import datetime as dt
from zoneinfo import ZoneInfo

import msgspec
import numpy as np
import pytest

from engine.options.book import open_option_book
from engine.options.group import (
    OptionGroupConfig,
    build_group,
    contract_symbols,
    group_contracts,
    prepare_launch,
)
from engine.options.protocol import OptionPricingStalled
from feeds.messages import OptionGroupValues, OptionValue, encode, make_decoder
from gpu.device import cuda_present
from gpu.options.engines import black_scholes, make_grid, price_options
from gpu.options.instruments import Exercise, Right

needs_cuda = pytest.mark.skipif(not cuda_present(), reason="no CUDA device or simulator")

NS = 1_000_000_000
TS0 = int(dt.datetime(2024, 3, 1, 15, 0, tzinfo=dt.UTC).timestamp()) * NS


def contracts(msgs: list[OptionValue | OptionGroupValues]) -> list[OptionValue]:
    """The per-contract messages of a group with messages = "option" (nothing else)."""
    assert all(isinstance(m, OptionValue) for m in msgs)
    return [m for m in msgs if isinstance(m, OptionValue)]


def small_group(**kw: object) -> OptionGroupConfig:
    base: dict[str, object] = {
        "underlying": "ABC",
        "strikes": (95.0, 105.0),
        "expiries": (30,),
        "rights": ("C", "P"),
        "style": "european",
        "vol": 0.3,
        "rate": 0.01,
        "grid": "seed",
        "price_steps": 16,
        "time_steps": 3,
        "messages": "option",  # per-contract messages; group messages: test_between_ticks
    }
    base.update(kw)
    return msgspec.convert(base, OptionGroupConfig)


def expected(spot: float, cfg: OptionGroupConfig, years: float) -> np.ndarray:
    grid = make_grid(cfg.grid, price_steps=cfg.price_steps or None,
                     time_steps=cfg.time_steps or None)
    rows = [(k, r == "C") for k in cfg.strikes for r in cfg.rights]
    k = np.array([r[0] for r in rows])
    call = np.array([r[1] for r in rows])
    return price_options(spot, k, years, cfg.vol, cfg.rate, call,
                         cfg.style == "american", grid=grid, device="cpu").price


def test_config_rejects_unknown_fields_and_bad_values() -> None:
    with pytest.raises(msgspec.ValidationError, match="unknown"):
        msgspec.convert({"underlying": "A", "strikes": [1.0], "expiries": [5], "colour": 1},
                        OptionGroupConfig)
    bads: list[dict[str, object]] = [
        {"rights": ["X"]}, {"style": "bermudan"}, {"vol": 0.0}, {"strikes": [-1.0]},
        {"grid": "coarse"}, {"expiries": []},
    ]
    for bad in bads:
        with pytest.raises(msgspec.ValidationError):
            small_group(**bad)
    cfg = msgspec.convert({"underlying": "A", "strikes": [100], "expiries": ["2024-06-21", 7]},
                          OptionGroupConfig)
    assert cfg.expiries == (dt.date(2024, 6, 21), 7)


def test_cpu_book_prices_in_background_and_drain_returns_messages() -> None:
    cfg = small_group(grid="default", price_steps=0, time_steps=0)
    book = open_option_book([cfg], device="cpu")
    assert book.underlyings == {"ABC"}
    book.on_spot("XYZ", 100.0, TS0)  # not an underlying of ours
    book.on_spot("ABC", float("nan"), TS0)  # a bad price is never priced
    book.on_spot("ABC", 101.0, TS0)
    msgs = contracts(asyncio.run(book.drain()))  # the CPU twin ran on a worker thread
    assert len(msgs) == 4 and all(isinstance(m, OptionValue) for m in msgs)
    assert [m.seq for m in msgs] == [1, 2, 3, 4]
    assert {m.symbol for m in msgs} == {
        "ABC+30DC00095000", "ABC+30DP00095000", "ABC+30DC00105000", "ABC+30DP00105000"}
    np.testing.assert_allclose([m.price for m in msgs], expected(101.0, cfg, 30 / 365))
    ref = black_scholes(101.0, [95.0, 95.0, 105.0, 105.0], 30 / 365, 0.3, 0.01,
                        [True, False, True, False])
    np.testing.assert_allclose([m.price for m in msgs], ref.price, rtol=1e-3)
    np.testing.assert_allclose([m.delta for m in msgs], ref.delta, atol=1e-3)
    np.testing.assert_allclose([m.gamma for m in msgs], ref.gamma, rtol=1e-2)
    assert all(m.spot == 101.0 and m.ts == TS0 and m.underlying == "ABC" for m in msgs)
    # messages survive the wire
    dec = make_decoder()
    assert dec.decode(encode(msgs[0])) == msgs[0]
    assert book.poll() == []
    s = book.summary()
    assert s["repricings"] == 1 and s["ticks"] == 1 and s["options"] == 4
    assert s["last"]["ABC+30DP00105000"]["price"] == msgs[3].price  # type: ignore[index]


def test_dated_expiries_shrink_with_the_tick_date() -> None:
    cfg = small_group(expiries=(dt.date(2024, 3, 31),), strikes=(100.0,), rights=("P",))
    book = open_option_book([cfg], device="cpu")
    book.on_spot("ABC", 100.0, TS0)  # 2024-03-01: 30 days
    (first,) = contracts(asyncio.run(book.drain()))
    book.on_spot("ABC", 100.0, TS0 + 10 * 86_400 * NS)  # 20 days
    (second,) = contracts(asyncio.run(book.drain()))
    np.testing.assert_allclose(first.price, expected(100.0, cfg, 30 / 365))
    np.testing.assert_allclose(second.price, expected(100.0, cfg, 20 / 365))
    assert first.symbol == "ABC240331P00100000"


@needs_cuda
async def test_cuda_book_coalesces_ticks_and_awaits_by_polling() -> None:
    cfg = small_group(strikes=(100.0,), rights=("P",))
    other = small_group(underlying="DEF", strikes=(50.0,), rights=("C",))
    book = open_option_book([cfg, other], device="cuda", dispatch="inline")
    assert book.underlyings == {"ABC", "DEF"}
    book.on_spot("ABC", 99.0, TS0)
    assert book.in_flight == 1
    # while ABC is in flight, newer ticks are remembered, only the newest survives
    book.on_spot("ABC", 98.0, TS0 + 1)
    book.on_spot("ABC", 97.0, TS0 + 2)
    book.on_spot("DEF", 51.0, TS0 + 3)
    msgs = contracts(await book.drain())
    assert book.in_flight == 0
    by = {(m.symbol, m.ts): m for m in msgs}
    assert [m.spot for m in msgs if m.underlying == "ABC"] == [99.0, 97.0]
    assert len(msgs) == 3
    np.testing.assert_allclose(by[("ABC+30DP00100000", TS0 + 2)].price,
                               expected(97.0, cfg, 30 / 365), rtol=1e-4)
    np.testing.assert_allclose(by[("DEF+30DC00050000", TS0 + 3)].price,
                               expected(51.0, other, 30 / 365), rtol=1e-4)
    assert sorted(m.seq for m in msgs) == [1, 2, 3]
    s = book.summary()
    assert s["repricings"] == 3 and s["coalesced_ticks"] == 1 and s["ticks"] == 4
    assert s["latency_us_max"] is not None


@needs_cuda
async def test_engine_loop_keeps_running_while_groups_reprice() -> None:
    """A consumer loop feeding ticks and polling between them, as the engine does."""
    cfg = small_group(strikes=(100.0,), rights=("C",))
    book = open_option_book([cfg], device="cuda", dispatch="inline")
    got: list[OptionValue] = []
    for i, spot in enumerate((100.0, 100.5, 101.0)):
        book.on_spot("ABC", spot, TS0 + i)
        await asyncio.sleep(0)
        got.extend(contracts(book.poll()))
    got.extend(contracts(await book.drain()))
    assert got[-1].spot == 101.0  # the newest spot is always priced
    assert all(np.isfinite(m.price) for m in got)


async def test_contracts_expired_before_the_tick_date_are_reported_once(
        caplog: pytest.LogCaptureFixture) -> None:
    cfg = OptionGroupConfig(underlying="SPY", strikes=(160.0, 170.0),
                            expiries=(dt.date(2013, 10, 4), dt.date(2013, 11, 15)),
                            grid="seed")
    book = open_option_book([cfg], device="cpu")
    ts = int(dt.datetime(2013, 10, 7, 15, tzinfo=dt.UTC).timestamp()) * 1_000_000_000
    with caplog.at_level("WARNING", logger="engine.options"):
        for i in range(3):
            book.on_spot("SPY", 165.0 + i, ts + i * 1_000_000)
            await book.drain()
    warned = [r.getMessage() for r in caplog.records if "expired" in r.getMessage()]
    assert len(warned) == 1 and "4 contract(s)" in warned[0]  # 2 strikes x C/P, Oct 4


def test_group_holds_its_contracts_in_symbol_order_and_rolls_their_expiry() -> None:
    cfg = small_group(expiries=(dt.date(2024, 3, 31), 7), strikes=(95.0, 105.0),
                      style="american")
    contracts = group_contracts(cfg)
    symbols = contract_symbols(cfg)
    assert len(contracts) == len(symbols) == 8
    first, last = contracts[0], contracts[7]
    assert symbols[0].endswith("C00095000") and first.right is Right.CALL
    assert first.strike == 95.0 and first.exercise is Exercise.AMERICAN
    assert symbols[7].startswith("ABC+7DP") and last.right is Right.PUT
    assert last.expiry == 7 / 365
    g = build_group(cfg, "cpu", False, set())
    prepare_launch(g, 101.0, TS0, ZoneInfo("America/New_York"))  # 2024-03-01 at the exchange
    np.testing.assert_array_equal(g.contracts.expiry, [30 / 365] * 4 + [7 / 365] * 4)
    g.pricer.launch()
    got = g.pricer.results().price
    want = expected(101.0, cfg, 30 / 365)
    np.testing.assert_array_equal(got[:4], want)


def test_drain_gives_up_on_repricings_that_do_not_finish_in_time() -> None:
    """A hung device or worker must end the run with one line, not hang it: with no time
    allowed, a repricing still running on the CPU twin's thread is reported."""
    # 400 options on the fine grid: the thread takes far longer than the first poll
    strikes = tuple(float(k) for k in range(60, 160, 1)) + tuple(k + 0.5 for k in range(60, 160))
    cfg = small_group(grid="fine", price_steps=0, time_steps=0, strikes=strikes)
    book = open_option_book([cfg], device="cpu")
    book.on_spot("ABC", 101.0, TS0)
    assert book.in_flight
    with pytest.raises(OptionPricingStalled, match="1 option group repricing"):
        asyncio.run(book.drain(timeout_s=0.0))
    assert len(contracts(asyncio.run(book.drain()))) == 400  # nothing was lost meanwhile


def test_a_group_whose_underlying_never_ticks_is_named(caplog: pytest.LogCaptureFixture
                                                       ) -> None:
    book = open_option_book([small_group(), small_group(underlying="XYZ")], device="cpu")
    book.on_spot("ABC", 101.0, TS0)
    book.on_spot("XYZ", float("nan"), TS0)  # a bad price prices nothing either
    asyncio.run(book.drain())
    with caplog.at_level("WARNING"):
        summary = book.summary()
    assert summary["never_priced"] == ["XYZ"]
    assert "never priced" in caplog.text and "XYZ" in caplog.text
    book.on_spot("XYZ", 50.0, TS0)
    asyncio.run(book.drain())
    assert book.summary()["never_priced"] == []


async def test_engine_hands_every_underlying_tick_to_the_book_on_either_tick_path() -> None:
    """An underlying with nothing else to do goes straight from the hot loop to the book
    (SPOT_ONLY); its first tick, and ticks while an order waits to fill, take the general
    path (FLAGGED), which reaches the book too. Every tick of the underlying is counted
    by the book, whichever path it took, and a plain symbol needs neither."""
    from engine.settings.config import EngineConfig
    from engine.trading.core import FLAGGED, NOT_FLAGGED, SPOT_ONLY, Engine
    from feeds.messages import Trade
    from strategies.sma_cross import SmaCross

    book = open_option_book([small_group(strikes=(100.0,), rights=("C",))], device="cpu",
                      dispatch="inline")
    eng = Engine(["ABC", "XYZ"], SmaCross(), EngineConfig(), option_book=book)
    abc, xyz = eng.sym_index["ABC"], eng.sym_index["XYZ"]
    seq = iter(range(1, 1000))

    def trades(*pairs: tuple[str, float]) -> list[Trade]:
        return [Trade(next(seq), TS0 + i * NS // 1000, s, p, 1.0) for i, (s, p) in
                enumerate(pairs)]

    await eng.process(trades(("ABC", 100.0), ("XYZ", 50.0)))  # first prices: FLAGGED
    assert eng._flagged[abc] == SPOT_ONLY and eng._flagged[xyz] == NOT_FLAGGED
    await eng.process(trades(("ABC", 100.5), ("XYZ", 50.5), ("ABC", 101.0)))
    eng._place(abc, 1, "test", TS0)  # an order waits for ABC's next tick
    assert eng._flagged[abc] == FLAGGED
    await eng.process(trades(("ABC", 101.5), ("ABC", 102.0)))  # fills, then SPOT_ONLY
    assert eng._flagged[abc] == SPOT_ONLY
    assert eng.stats.fills == 1
    assert book.summary()["ticks"] == 5  # every ABC tick, none of XYZ's
    await book.drain()
    book.close()


def test_group_dividend_yield_reaches_its_pricer_and_bad_yields_are_refused() -> None:
    cfg = small_group(style="american", dividend_yield=0.04)
    g = build_group(cfg, "cpu", False, set())
    from gpu.options import core

    assert (g.pricer.params[:, core.DIVIDEND] == 0.04).all()
    g.pricer.set_spot(100.0)
    g.pricer.launch()
    got = g.pricer.results().price
    rows = [(k, r == "C") for k in cfg.strikes for r in cfg.rights]
    want = price_options(100.0, [k for k, _ in rows], 30 / 365, cfg.vol, cfg.rate,
                         [c for _, c in rows], True, dividend_yield=0.04,
                         grid=make_grid("seed", price_steps=16, time_steps=3), device="cpu")
    np.testing.assert_array_equal(got, want.price)
    assert small_group().dividend_yield == 0.0  # by default none
    for bad in (float("nan"), float("inf"), -2.0, 1.5):
        with pytest.raises(msgspec.ValidationError, match="dividend_yield must be a finite"):
            small_group(dividend_yield=bad)
