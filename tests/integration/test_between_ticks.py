"""Option groups between ticks: one message per group, and a worker process repricing them."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
from zoneinfo import ZoneInfo

import msgspec
import numpy as np
import pytest

from engine.options.book import EXCHANGE_TZ, open_option_book
from engine.options.group import OptionGroupConfig
from engine.settings.config import EngineConfig
from engine.trading.replay import replay
from feeds.messages import OptionGroupValues, OptionValue, encode, make_decoder
from feeds.synthetic import SyntheticMarket
from gpu.options.engines import black_scholes, make_grid, price_options
from strategies.sma_cross import SmaCross

NS = 1_000_000_000
TS0 = int(dt.datetime(2024, 3, 1, 15, 0, tzinfo=dt.UTC).timestamp()) * NS


def group(**kw: object) -> OptionGroupConfig:
    base: dict[str, object] = {
        "underlying": "ABC", "strikes": (90.0, 100.0, 110.0), "expiries": (30, 60),
        "rights": ("C", "P"), "style": "european", "vol": 0.3, "rate": 0.01,
        "grid": "default",
    }
    base.update(kw)
    return msgspec.convert(base, OptionGroupConfig)


def groups_only(msgs: list[OptionValue | OptionGroupValues]) -> list[OptionGroupValues]:
    """The group messages (the default); a per-contract message here is a defect."""
    assert all(isinstance(m, OptionGroupValues) for m in msgs)
    return [m for m in msgs if isinstance(m, OptionGroupValues)]


def reference(spot: float, cfg: OptionGroupConfig, years: list[float] | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The CPU twin's values for the group's contracts (expiry, strike, right order)."""
    grid = make_grid(cfg.grid, price_steps=cfg.price_steps or None,
                     time_steps=cfg.time_steps or None)
    rows = [(e, k, r) for e in cfg.expiries for k in cfg.strikes for r in cfg.rights]
    t = years if years is not None else [e / 365 for e, _, _ in rows]  # type: ignore[operator]
    v = price_options(spot, [k for _, k, _ in rows], t, cfg.vol, cfg.rate,
                      [r == "C" for _, _, r in rows], cfg.style == "american", grid=grid,
                      device="cpu")
    return v.price, v.delta, v.gamma


def test_group_message_round_trips_and_expands_to_per_contract_values() -> None:
    rng = np.random.default_rng(3)
    for n in (0, 1, 7, 1000):
        p, d, g = rng.normal(size=(3, n))
        syms = tuple(f"X{i}" for i in range(n))
        msg = OptionGroupValues(5, TS0, "X", 101.5, syms, p.tobytes(), d.tobytes(), g.tobytes())
        back = make_decoder().decode(encode(msg))
        assert back == msg
        np.testing.assert_array_equal(back.prices(), p)
        np.testing.assert_array_equal(back.deltas(), d)
        np.testing.assert_array_equal(back.gammas(), g)
        per = back.option_values(11)
        assert [v.seq for v in per] == list(range(11, 11 + n))
        assert [v.symbol for v in per] == list(syms)
        assert [v.price for v in per] == p.tolist()
        assert all(v.underlying == "X" and v.spot == 101.5 for v in per)


def test_group_messages_carry_the_same_values_as_per_contract_messages() -> None:
    grouped = open_option_book([group()], device="cpu")
    single = open_option_book([group(messages="option")], device="cpu")
    for book in (grouped, single):
        book.on_spot("ABC", 104.0, TS0)
    (msg,) = asyncio.run(grouped.drain())
    per = [m for m in asyncio.run(single.drain()) if isinstance(m, OptionValue)]
    assert isinstance(msg, OptionGroupValues) and len(per) == 12
    assert list(msg.options) == [m.symbol for m in per]
    assert msg.prices().tolist() == [m.price for m in per]  # bit for bit
    assert msg.deltas().tolist() == [m.delta for m in per]
    assert msg.gammas().tolist() == [m.gamma for m in per]
    assert grouped.values_published == single.values_published == 12
    # and against the analytic European price (the default grid: ≤ 0.07% near the money)
    rows = [(e, k, r) for e in (30, 60) for k in (90.0, 100.0, 110.0) for r in "CP"]
    ref = black_scholes(104.0, [k for _, k, _ in rows], [e / 365 for e, _, _ in rows], 0.3,
                        0.01, [r == "C" for _, _, r in rows])
    np.testing.assert_allclose(msg.prices(), ref.price, rtol=2e-3)
    np.testing.assert_allclose(msg.deltas(), ref.delta, atol=2e-3)


def test_worker_process_prices_the_newest_spot_like_the_cpu_twin() -> None:
    """A worker process (CPU backend here) against the in-process twin, on a seeded walk
    of spots with bad prices mixed in, two groups on two underlyings, one dated."""
    dated = group(underlying="DEF", strikes=(50.0,), expiries=(dt.date(2024, 3, 31),),
                  rights=("P",), style="american", grid="seed")
    book = open_option_book([group(), dated], device="cpu", dispatch="process")
    try:
        assert book.dispatch == "process" and book.underlyings == {"ABC", "DEF"}
        rng = np.random.default_rng(11)
        got: list[OptionGroupValues] = []
        asked: dict[str, list[float]] = {"ABC": [], "DEF": []}
        for i in range(300):
            sym = "ABC" if rng.random() < 0.7 else "DEF"
            spot = float((100.0 if sym == "ABC" else 50.0) * np.exp(rng.normal(0, 0.02)))
            if rng.random() < 0.1:  # bad prices: never priced
                spot = float(rng.choice([np.nan, -spot, 0.0, np.inf]))
            else:
                asked[sym].append(spot)
            book.on_spot(sym, spot, TS0 + i * NS)
            book.on_spot("XYZ", 10.0, TS0)  # no group: ignored
            if i % 50 == 0:
                got.extend(groups_only(book.poll()))
        got.extend(groups_only(asyncio.run(book.drain())))
        assert book.in_flight == 0
        by = {"ABC": [m for m in got if m.symbol == "ABC"],
              "DEF": [m for m in got if m.symbol == "DEF"]}
        for sym, msgs in by.items():
            assert msgs and msgs[-1].spot == asked[sym][-1]  # the newest spot is priced
            assert all(m.spot in asked[sym] for m in msgs)  # only good spots
            assert [m.ts for m in msgs] == sorted(m.ts for m in msgs)
        assert [m.seq for m in got] == list(range(1, len(got) + 1))
        for m in by["ABC"]:  # bit-identical to the in-process twin at the same spot
            p, d, g = reference(m.spot, group())
            assert m.prices().tolist() == p.tolist()
            assert m.deltas().tolist() == d.tolist() and m.gammas().tolist() == g.tolist()
        for m in by["DEF"]:  # the date rolled inside the worker: 30 days on 2024-03-01
            day = dt.datetime.fromtimestamp(m.ts // NS, tz=ZoneInfo(EXCHANGE_TZ)).date()
            p, _, _ = reference(m.spot, dated, [(dt.date(2024, 3, 31) - day).days / 365])
            assert m.prices().tolist() == p.tolist()
        s = book.summary()
        assert s["dispatch"] == "process" and s["options"] == 13 and s["groups"] == 2
        assert s["ticks"] == sum(len(v) for v in asked.values())
        assert s["repricings"] == len(got)
        assert s["latency_us_p50"] is not None and s["latency_us_p99"] is not None
        last = s["last"]
        assert last["DEF240331P00050000"]["spot"] == asked["DEF"][-1]  # type: ignore[index]
    finally:
        book.close()


def test_replay_with_a_worker_process_publishes_group_messages() -> None:
    cfg = group(underlying="SYN000", strikes=(20.0, 25.0, 30.0))
    book = open_option_book([cfg], device="cpu", dispatch="process")
    try:
        market = functools.partial(SyntheticMarket, n_symbols=3, n_ticks=5000, seed=9)
        res = replay(market, SmaCross(), EngineConfig(), option_book=book)
        msgs = [m for m in res.engine.option_values if isinstance(m, OptionGroupValues)]
        assert msgs and len(msgs) == len(res.engine.option_values)
        assert res.engine.stats.option_values == 12 * len(msgs)
        newest = msgs[-1]
        p, _, _ = reference(newest.spot, cfg)
        assert newest.prices().tolist() == p.tolist()
    finally:
        book.close()


def test_dispatch_and_messages_reject_unknown_values() -> None:
    with pytest.raises(ValueError, match="dispatch"):
        open_option_book([group()], device="cpu", dispatch="threads")
    with pytest.raises(msgspec.ValidationError, match="messages"):
        group(messages="each")


@pytest.mark.gpu
def test_cuda_worker_process_matches_the_cpu_twin() -> None:
    book = open_option_book([group(style="american", grid="seed")], device="cuda")
    try:
        assert book.dispatch == "process"
        for i, spot in enumerate(np.linspace(95, 105, 200)):
            book.on_spot("ABC", float(spot), TS0 + i)
        msgs = groups_only(asyncio.run(book.drain()))
        assert msgs[-1].spot == 105.0
        for m in msgs:
            assert isinstance(m, OptionGroupValues)
            p, d, _ = reference(m.spot, group(style="american", grid="seed"))
            np.testing.assert_allclose(m.prices(), p, rtol=1e-4, atol=1e-5)  # float32 GPU
            np.testing.assert_allclose(m.deltas(), d, atol=1e-4)
    finally:
        book.close()


# --------------------------------------------------------------- GP strategy: --device auto
def test_gp_auto_device_measures_both_backends_and_keeps_the_faster() -> None:
    from gpu.device import cuda_present
    from gpu.gp import decider as gp_decider
    from strategies.gp.init import ramped_half_and_half
    from strategies.gp.strategy import GPEnsemble

    pop = ramped_half_and_half(3, np.random.default_rng(4), 2, 3)
    rules = [pop.rule(i) for i in range(3)]
    fixed = GPEnsemble(rules, device="cpu")
    fixed.reset(["A", "B", "C"])
    assert fixed.device == "cpu" and fixed._decider.calibration is None
    if not cuda_present():
        auto = GPEnsemble(rules, device="auto")
        auto.reset(["A", "B", "C"])
        assert auto.device == "cpu" and auto._decider.calibration is None
        return
    gp_decider.BREAK_EVEN.pop((3, 5), None)
    auto = GPEnsemble(rules, device="auto")
    auto.reset([f"S{i}" for i in range(5)])
    cal = auto._decider.calibration
    assert cal is not None and cal["n_programs"] == 3 and cal["n_symbols"] == 5
    assert cal["cpu_us"] > 0 and cal["cuda_us"] > 0 and cal["codes_agree"]
    assert cal["gap_ms"] == gp_decider.CALIBRATION_GAP_S * 1e3 > 0
    faster = "cuda" if cal["cuda_us"] < cal["cpu_us"] else "cpu"
    assert cal["choice"] == faster == auto.device
    # on CUDA both ways the features travel were timed; the faster one is kept
    assert cal["cuda_us"] == min(cal["cuda_copy_us"], cal["cuda_mapped_us"])
    assert cal["panel"] == ("copy" if cal["cuda_copy_us"] <= cal["cuda_mapped_us"]
                            else "mapped") == auto._decider.panel
    again = GPEnsemble(rules, device="auto")  # the same size: the kept measurement
    again.reset([f"T{i}" for i in range(5)])
    assert again._decider.calibration is cal
    feats = np.random.default_rng(8).normal(size=(5, 31)).astype(np.float32)
    codes = asyncio.run(auto.decision_codes(feats))
    fixed.reset([f"S{i}" for i in range(5)])
    np.testing.assert_array_equal(codes, asyncio.run(fixed.decision_codes(feats)))


@pytest.mark.gpu
def test_prebound_launch_gives_the_ordinary_launch_results(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    from gpu.options.engines import OptionGroupPricer, option_params

    params = option_params(100.0, [90.0, 100.0, 110.0], 0.25, 0.3, 0.01, [True, False, True],
                           True)
    monkeypatch.setenv("GPU_OPTIONS_PREBIND", "1")
    bound = OptionGroupPricer(params, "seed", "cuda")
    monkeypatch.setenv("GPU_OPTIONS_PREBIND", "0")
    plain = OptionGroupPricer(params, "seed", "cuda")
    assert bound.prebound and not plain.prebound
    for spot in (95.0, 101.0, 107.5):
        for pricer in (bound, plain):
            pricer.set_spot(spot)
            pricer.launch()
            pricer.wait()
        a, b = bound.results(), plain.results()
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)


def test_cuda_worker_process_in_the_simulator_agrees_with_the_cpu_twin() -> None:
    """The worker's CUDA path (mapped arrays, event polling) at a tiny size; on a machine
    without CUDA nor the simulator this is the GPU test's job."""
    from gpu.device import cuda_present

    if not cuda_present():
        pytest.skip("no CUDA device or simulator")
    cfg = group(strikes=(95.0, 105.0), expiries=(30,), rights=("P",), style="american",
                grid="seed", price_steps=16, time_steps=3)
    book = open_option_book([cfg], device="cuda")
    try:
        assert book.dispatch == "process"
        for i, spot in enumerate((99.0, 101.0, 103.0)):
            book.on_spot("ABC", spot, TS0 + i)
        msgs = groups_only(asyncio.run(book.drain()))
        assert msgs[-1].spot == 103.0 and msgs[-1].ts == TS0 + 2
        for m in msgs:
            p, d, g = reference(m.spot, cfg)
            np.testing.assert_allclose(m.prices(), p, rtol=1e-5)  # float32 on the device
            np.testing.assert_allclose(m.deltas(), d, rtol=1e-4, atol=1e-6)
    finally:
        book.close()


def test_worker_failure_is_a_clear_error_and_close_frees_everything(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from engine.options.worker_client import WorkerClient
    from gpu.device import cuda_simulated

    if not cuda_simulated():
        pytest.skip("needs a machine where the worker's CUDA can be switched off")
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "0")  # the worker then finds no CUDA at all
    with pytest.raises(RuntimeError, match="option worker failed"):
        WorkerClient([group()], "cuda", "America/New_York")
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    from engine.options.worker_options import WorkerOptions

    book = WorkerOptions([group()], "cpu", "America/New_York")
    worker = book.client
    assert isinstance(worker, WorkerClient)
    name = worker._shm.name
    book.on_spot("ABC", 101.0, TS0)
    asyncio.run(book.drain())
    book.close()
    assert worker._proc.poll() is not None  # the process ended
    assert not os.path.exists(f"/dev/shm/{name.lstrip('/')}")  # the segment is gone


@pytest.mark.parametrize(("name", "value"), [("OPTION_WORKER_SLOTS", "two"),
                                              ("OPTION_WORKER_SLOTS", "0"),
                                              ("OPTION_WORKER_SPACING", "nan"),
                                              ("OPTION_WORKER_SPACING", "-1"),
                                              ("OPTION_WORKER_BATCH", "true"),
                                              ("OPTION_REQUEST_EVERY", "-1"),
                                              ("OPTION_REQUEST_EVERY", "4.5"),
                                              ("OPTION_TAP_EVERY", "-2"),
                                              ("OPTION_TAP_EVERY", "eight"),
                                              ("OPTION_TAP_EVERY", ""),
                                              ("GPU_FD_SOLVER", "thomas"),
                                              ("GPU_FD_SOLVER", "")])
def test_bad_worker_setting_is_a_user_error_before_the_worker_starts(
        monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    from engine.errors import UserError

    monkeypatch.setenv(name, value)
    with pytest.raises(UserError, match=name):
        open_option_book([group()], device="cpu", dispatch="process")


def test_newer_spot_wait_is_the_brute_force_per_tick_wait() -> None:
    """The benchmark's 'longest a newer spot waited' against a per-tick brute force: for
    every tick after the first repricing, the data time until the first repricing at or
    after it (seeded random tick and repricing times, no pauses)."""
    from benchmarks.between_ticks import newer_spot_waits_ms, worst_waits

    rng = np.random.default_rng(11)
    for _ in range(200):
        ticks = np.cumsum(rng.integers(1, 5_000_000, rng.integers(2, 60))).astype(np.int64)
        k = int(rng.integers(2, len(ticks) + 1))
        repriced = np.sort(rng.choice(ticks, size=k, replace=False))
        worst = 0
        for t in ticks.tolist():
            if t <= repriced[0]:
                continue
            nxt = [r for r in repriced.tolist() if r >= t]
            if nxt:
                worst = max(worst, nxt[0] - t)
        assert newer_spot_waits_ms(repriced, ticks) == worst / 1e6
        top = worst_waits(repriced, ticks, k=3)  # where: the same longest wait first
        assert (top[0][0] if top else 0.0) == worst / 1e6
        assert all(w1 >= w2 for (w1, _), (w2, _) in zip(top, top[1:], strict=False))
        assert all(at in repriced for _, at in top)


def test_a_paced_replay_takes_the_time_its_rate_says() -> None:
    """publish_rate paces the feed: 3,000 ticks at 10,000 a second take at least 0.29 s on
    the engine's clock (the feed process publishes only once the engine's clock runs, and
    sleeps to the rate every 64 messages; unpaced they take a few ms), and every tick still
    arrives."""
    factory = functools.partial(SyntheticMarket, n_symbols=2, n_ticks=3_000, seed=3,
                                tick_rate=50.0)
    res = replay(factory, SmaCross(), EngineConfig(transport="ipc"), publish_rate=10_000.0)
    assert res.engine.stats.market_data == 3_000
    assert res.wall_seconds >= (3_000 - 64) / 10_000.0


def test_engine_hands_the_worker_validated_spots_in_data_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With spots from validation (OPTION_TAP_EVERY=3) the worker's book gets every third
    accepted trade of the underlying while the batch is validated, and the batch's newest
    once it is applied (unless that one was just handed out): never a rejected price,
    never an older spot after a newer one, the newest of every batch always. The first
    tick and an order's fill (the engine's general path) wait for the batch's end too.
    The values come from a real worker process (CPU backend)."""
    from engine.trading.core import Engine
    from feeds.messages import Trade
    from feeds.validation import Validator

    monkeypatch.setenv("OPTION_TAP_EVERY", "3")
    cfg = group(strikes=(100.0,), expiries=(30,), rights=("C",))
    book = open_option_book([cfg], device="cpu", dispatch="process")
    asked: list[tuple[str, float, int]] = []
    to_worker = book.on_spot

    def recorded(symbol: str, spot: float, ts: int) -> None:
        asked.append((symbol, spot, ts))
        to_worker(symbol, spot, ts)

    book.on_spot = recorded  # type: ignore[method-assign]
    try:
        assert book.tap_every == 3
        eng = Engine(["ABC", "XYZ"], SmaCross(), EngineConfig(), option_book=book)
        validator = Validator()
        rng = np.random.default_rng(8)
        seq = {"ABC": 0, "XYZ": 0}
        ts = TS0
        want: list[tuple[str, float, int]] = []
        accepted = 0
        for batch in range(40):
            frames = []
            newest = None
            tapped_last = False
            for _ in range(int(rng.integers(1, 60))):
                sym = "ABC" if rng.random() < 0.6 else "XYZ"
                seq[sym] += 1
                ts += int(rng.integers(1, 10**6))
                price = float(100.0 * np.exp(rng.normal(0, 0.001)))
                bad = rng.random() < 0.08
                if bad:
                    price = float(rng.choice([np.nan, -1.0, 0.0, np.inf, 1e6]))
                frames.append((f"T.{sym}".encode(), encode(Trade(seq[sym], ts, sym, price,
                                                                   1.0))))
                if sym == "ABC" and not bad:
                    accepted += 1
                    newest = ("ABC", price, ts)
                    tapped_last = accepted % 3 == 0
                    if tapped_last:
                        want.append(newest)
            if newest is not None and not tapped_last:
                want.append(newest)
            if batch == 20:  # an order waits for ABC's next tick: the general path
                eng._place(eng.sym_index["ABC"], 1, "test", ts)
            asyncio.run(eng.consume(frames, validator))
        assert eng.stats.fills == 1
        assert asked == want
        assert [a[2] for a in asked] == sorted({a[2] for a in asked})  # in data order
        kept: list[OptionValue | OptionGroupValues] = [
            m for m in eng.option_values if isinstance(m, OptionGroupValues)]
        msgs = groups_only(kept + asyncio.run(book.drain()))
        assert msgs[-1].spot == want[-1][1] and msgs[-1].ts == want[-1][2]
        assert [m.ts for m in msgs] == sorted(m.ts for m in msgs)
        p, _, _ = reference(msgs[-1].spot, cfg)
        assert msgs[-1].prices().tolist() == p.tolist()
    finally:
        book.close()
