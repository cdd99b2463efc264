"""The option worker process with batched launches and several launches in flight."""

from __future__ import annotations

import asyncio
import datetime as dt
import time

import msgspec
import numpy as np
import pytest

from engine.options.book import open_option_book
from engine.options.group import OptionGroupConfig
from engine.options.protocol import OptionPricing
from engine.options.worker_client import WorkerClient
from engine.options.worker_options import WorkerOptions
from feeds.messages import OptionGroupValues
from gpu.device import cuda_present
from gpu.options.engines import make_grid, price_options

NS = 1_000_000_000
TS0 = int(dt.datetime(2024, 3, 1, 15, 0, tzinfo=dt.UTC).timestamp()) * NS


def cfg(underlying: str, strikes: tuple[float, ...], **kw: object) -> OptionGroupConfig:
    base: dict[str, object] = {"underlying": underlying, "strikes": strikes,
                               "expiries": (7, 60), "rights": ("C", "P"), "style": "american",
                               "vol": 0.3, "rate": 0.01, "grid": "seed", "price_steps": 16,
                               "time_steps": 3}
    base.update(kw)
    return msgspec.convert(base, OptionGroupConfig)


def reference(spot: float, c: OptionGroupConfig) -> tuple[np.ndarray, np.ndarray]:
    grid = make_grid(c.grid, price_steps=c.price_steps or None, time_steps=c.time_steps or None)
    rows = [(e, k, r) for e in c.expiries for k in c.strikes for r in c.rights]
    years = [e / 365 for e, _, _ in rows]  # type: ignore[operator]
    v = price_options(spot, [k for _, k, _ in rows], years, c.vol,
                      c.rate, [r == "C" for _, _, r in rows], c.style == "american",
                      grid=grid, device="cpu")
    return v.price, v.delta


def run_walk(book: OptionPricing, n: int, seed: int) -> tuple[list[OptionGroupValues],
                                                            dict[str, list[float]]]:
    rng = np.random.default_rng(seed)
    got: list[OptionGroupValues] = []
    asked: dict[str, list[float]] = {"ABC": [], "DEF": []}
    for i in range(n):
        sym = "ABC" if rng.random() < 0.6 else "DEF"
        spot = float((100.0 if sym == "ABC" else 40.0) * np.exp(rng.normal(0, 0.02)))
        asked[sym].append(spot)
        book.on_spot(sym, spot, TS0 + i * NS)
        if i % 7 == 0:
            got.extend(m for m in book.poll() if isinstance(m, OptionGroupValues))
    got.extend(m for m in asyncio.run(book.drain()) if isinstance(m, OptionGroupValues))
    return got, asked


def check(got: list[OptionGroupValues], asked: dict[str, list[float]],
          configs: dict[str, OptionGroupConfig], exact: bool) -> None:
    for sym, c in configs.items():
        msgs = [m for m in got if m.symbol == sym]
        assert msgs and msgs[-1].spot == asked[sym][-1]  # the newest spot is priced last
        ts = [m.ts for m in msgs]
        assert ts == sorted(ts) and len(set(ts)) == len(ts)  # published in request order
        for m in msgs:
            assert m.spot in asked[sym]
            p, d = reference(m.spot, c)
            if exact:
                assert m.prices().tolist() == p.tolist() and m.deltas().tolist() == d.tolist()
            else:  # float32 on the device
                np.testing.assert_allclose(m.prices(), p, rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(m.deltas(), d, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(("slots", "batch", "every"),
                         [(3, "1", "0"), (1, "0", "4"), (2, "0", "1")])
def test_cpu_worker_batches_groups_of_one_grid_bit_for_bit(
        monkeypatch: pytest.MonkeyPatch, slots: int, batch: str, every: str) -> None:
    """Requests only on demand (ticks held while the worker is busy, the newest sent when
    it wants one), also every 4th held tick, or on every tick: the newest spot of each
    underlying is priced last."""
    monkeypatch.setenv("OPTION_WORKER_SLOTS", str(slots))
    monkeypatch.setenv("OPTION_WORKER_BATCH", batch)
    monkeypatch.setenv("OPTION_REQUEST_EVERY", every)
    configs = {"ABC": cfg("ABC", (90.0, 100.0, 110.0)), "DEF": cfg("DEF", (35.0, 45.0))}
    book = open_option_book(list(configs.values()), device="cpu", dispatch="process")
    try:
        got, asked = run_walk(book, 400, 5)
        check(got, asked, configs, exact=True)
        assert book.in_flight == 0
        s = book.summary()
        assert s["repricings"] == len(got) and s["ticks"] == 400
        assert int(s["worker_repricings"]) >= len(got)  # type: ignore[call-overload]
        # every tick was either priced or replaced by a newer one of its underlying
        assert s["coalesced_ticks"] + s["worker_repricings"] == 400  # type: ignore[operator]
    finally:
        book.close()


def test_cuda_worker_with_launches_in_flight_in_the_simulator(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two groups of one grid in one launch, two launches in flight, on the worker's CUDA
    path (the simulator at this size; a real GPU runs it too)."""
    if not cuda_present():
        pytest.skip("no CUDA device or simulator")
    monkeypatch.setenv("OPTION_WORKER_SLOTS", "2")
    monkeypatch.setenv("OPTION_WORKER_BATCH", "1")
    configs = {"ABC": cfg("ABC", (95.0, 105.0), expiries=(30,)),
               "DEF": cfg("DEF", (40.0,), expiries=(7, 90))}
    book = open_option_book(list(configs.values()), device="cuda", dispatch="process")
    try:
        got, asked = run_walk(book, 40, 8)
        check(got, asked, configs, exact=False)
    finally:
        book.close()


def test_cuda_workers_on_two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """OPTION_WORKER_GPUS=2 on CUDA: two worker processes, each told its own device
    (CUDA_VISIBLE_DEVICES), each pricing its underlying; the simulator in CI (which ignores
    the device id), two real GPUs where the machine has them."""
    from engine.options.worker_pool import MultiWorkerClient
    from gpu.device import cuda_simulated

    if not cuda_present():
        pytest.skip("no CUDA device or simulator")
    if cuda_simulated():
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    else:
        from numba import cuda
        if len(cuda.gpus) < 2:
            pytest.skip("needs two GPUs")
    monkeypatch.setenv("OPTION_WORKER_GPUS", "2")
    configs = {"ABC": cfg("ABC", (95.0, 105.0), expiries=(30,)),
               "DEF": cfg("DEF", (40.0,), expiries=(7, 90))}
    book = WorkerOptions(list(configs.values()), "cuda", "America/New_York")
    try:
        assert isinstance(book.client, MultiWorkerClient)
        assert [c.visible_devices for c in book.client.clients] == ["0", "1"]
        got, asked = run_walk(book, 40, 9)
        check(got, asked, configs, exact=False)
        assert [m.seq for m in got] == list(range(1, len(got) + 1))
    finally:
        book.close()


def stopped_client() -> WorkerClient:
    """The engine's side of two groups (ABC, DEF) with real shared memory, its worker
    stopped and both WANT flags lowered by hand, so only the client writes."""
    from engine.options.worker_layout import HEADER, SLOT, STOP, WANT

    client = WorkerClient([cfg("ABC", (100.0,)), cfg("DEF", (40.0,))], "cpu", "UTC")
    q = client._q
    q[STOP] = 1
    client._proc.wait(30)
    for g in (0, 1):
        q[HEADER + SLOT * g + WANT] = 0
    return client


def test_held_ticks_count_per_group_and_collect_finished_results(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's side alone (the worker stopped, WANT lowered by hand, real shared
    memory): with OPTION_REQUEST_EVERY=2 each group writes a request on every 2nd of its
    own held ticks, whatever the other underlying does; a held tick takes a result the
    worker published; poll() sends the newest held tick."""
    from engine.options.worker_layout import (
        HEADER,
        REQ_SLOT,
        REQ_SPOT,
        REQ_T0,
        REQ_TS,
        RES,
        RES_T0,
        RES_TS,
        SLOT,
    )

    monkeypatch.setenv("OPTION_REQUEST_EVERY", "2")
    client = stopped_client()
    try:
        q = client._q
        for i in range(3):  # A, B, A, B, A, B
            client.on_spot("ABC", 100.0 + i, TS0 + i)
            client.on_spot("DEF", 40.0 + i, TS0 + i)
        assert client._requests == [1, 1]  # the 2nd tick of each; the 3rd is held
        assert client._pending[0] == (102.0, TS0 + 2)
        b = HEADER + SLOT * 0  # the worker publishes a result for ABC (seqlock even)
        q[b + RES_TS], q[b + RES_T0] = TS0, 1
        q[b + RES] = 2
        client.on_spot("ABC", 103.0, TS0 + 3)  # held (4th), and collects
        assert client.repricings == 1
        assert client._requests == [2, 1]  # the 4th tick is the 2nd held one: sent
        client.on_spot("DEF", 43.0, TS0 + 3)  # DEF's 2nd held tick: sent
        assert client._requests == [2, 2] and client._pending[1] is None
        client.on_spot("DEF", 44.0, TS0 + 4)
        assert client._pending[1] is not None
        client.batch_t0 = 12345  # the engine's batch began then (WorkerClient.begin_batch)
        client.poll()  # the newest held tick goes out with the poll, dated from its batch
        assert client._requests == [2, 3] and client._pending[1] is None
        s1 = HEADER + SLOT * 1 + REQ_SLOT * (3 & 1)
        assert client._d[s1 + REQ_SPOT] == 44.0 and q[s1 + REQ_TS] == TS0 + 4
        assert q[s1 + REQ_T0] == 12345
        assert client.ticks == 9
    finally:
        client.close()


def test_every_tick_writes_request_n_into_slot_n_mod_2(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """The default protocol's inlined write, read back as the worker reads it (the worker
    stopped, real shared memory): request n is in slot n % 2 and REQ says n."""
    from engine.options.worker_layout import (
        HEADER,
        REQ,
        REQ_SLOT,
        REQ_SPOT,
        REQ_T0,
        REQ_TS,
        SLOT,
    )

    monkeypatch.delenv("OPTION_REQUEST_EVERY", raising=False)  # the default: every tick
    client = stopped_client()  # no demand: every tick is written anyway
    try:
        q = client._q
        for i in range(5):
            client.on_spot("DEF", 40.0 + i, TS0 + i)
            b = HEADER + SLOT * 1
            n = q[b + REQ]
            assert n == i + 1
            s = b + REQ_SLOT * (n & 1)
            assert client._d[s + REQ_SPOT] == 40.0 + i and q[s + REQ_TS] == TS0 + i
            assert q[s + REQ_T0] > 0
            other = b + REQ_SLOT * ((n + 1) & 1)  # the previous request stays readable
            if i:
                assert client._d[other + REQ_SPOT] == 40.0 + i - 1
        assert q[HEADER + REQ] == 0  # ABC never ticked
        assert client._pending == [None, None]
    finally:
        client.close()


@pytest.mark.parametrize("seed", range(30))
def test_split_groups_keeps_underlyings_whole_and_balances(seed: int) -> None:
    """Every group on exactly one worker, an underlying's groups together, no empty
    worker, and the greedy bound: the fullest worker holds at most the emptiest one's
    options plus the largest underlying's."""
    from engine.options.worker_layout import group_sizes
    from engine.options.worker_pool import split_groups

    rng = np.random.default_rng(seed)
    names = [f"U{i}" for i in range(int(rng.integers(1, 9)))]
    configs = [cfg(str(rng.choice(names)), tuple(float(k) for k in range(
        90, 90 + 5 * int(rng.integers(1, 8)), 5))) for _ in range(int(rng.integers(1, 15)))]
    n = int(rng.integers(1, 6))
    shares = split_groups(configs, n)
    flat = sorted(g for share in shares for g in share)
    assert flat == list(range(len(configs)))
    assert all(share for share in shares) and len(shares) <= n
    owner = {configs[g].underlying: w for w, share in enumerate(shares) for g in share}
    for w, share in enumerate(shares):
        assert all(owner[configs[g].underlying] == w for g in share)
    sizes = group_sizes(configs)
    per_underlying: dict[str, int] = {}
    for g, c in enumerate(configs):
        per_underlying[c.underlying] = per_underlying.get(c.underlying, 0) + sizes[g]
    load = [sum(sizes[g] for g in share) for share in shares]
    assert len(shares) == min(n, len(per_underlying))
    assert max(load) <= min(load) + max(per_underlying.values())


def test_two_cpu_workers_price_bit_for_bit_in_one_sequence(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """OPTION_WORKER_GPUS=3 with two underlyings: two worker processes (no empty one),
    each pricing its underlying's group; values equal the reference, the newest spot is
    priced last, messages carry one sequence across the workers, counts add up."""
    from engine.options.worker_pool import MultiWorkerClient

    monkeypatch.setenv("OPTION_WORKER_GPUS", "3")
    configs = {"ABC": cfg("ABC", (90.0, 100.0, 110.0)), "DEF": cfg("DEF", (35.0, 45.0))}
    book = WorkerOptions(list(configs.values()), "cpu", "America/New_York")
    try:
        worker = book.client
        assert isinstance(worker, MultiWorkerClient) and len(worker.clients) == 2
        assert sorted(sorted(c.underlyings) for c in worker.clients) == [["ABC"], ["DEF"]]
        got, asked = run_walk(book, 300, 8)
        check(got, asked, configs, exact=True)
        assert [m.seq for m in got] == list(range(1, len(got) + 1))
        s = book.summary()
        assert s["repricings"] == len(got) and s["ticks"] == 300 and s["groups"] == 2
        assert s["coalesced_ticks"] + s["worker_repricings"] == 300  # type: ignore[operator]
        assert book.in_flight == 0
    finally:
        book.close()


def test_bad_worker_gpu_settings_are_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.errors import UserError
    from engine.options.worker_pool import open_workers

    configs = [cfg("ABC", (100.0,)), cfg("DEF", (40.0,))]
    for bad in ("0", "-2", "two", "", "1.5"):
        monkeypatch.setenv("OPTION_WORKER_GPUS", bad)
        with pytest.raises(UserError, match="OPTION_WORKER_GPUS must be an integer >= 1"):
            open_workers(configs, "cpu", "UTC")
    # more GPUs asked for than the engine may see: refused before any worker starts
    monkeypatch.setenv("OPTION_WORKER_GPUS", "2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    with pytest.raises(UserError, match="OPTION_WORKER_GPUS=2 but CUDA_VISIBLE_DEVICES "
                                        "lists 1 device"):
        open_workers(configs, "cuda", "UTC")


def test_results_collected_during_ticks_keep_one_sequence_across_workers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two CPU workers: a result taken by a tick (the client collects a finished repricing
    on its next request) gets the next number of the one sequence, as one taken by poll():
    no two messages share a number, whichever worker and whichever path took them."""
    from engine.options.worker_layout import HEADER, RES_REQ, SLOT
    from engine.options.worker_pool import MultiWorkerClient

    monkeypatch.setenv("OPTION_WORKER_GPUS", "2")
    configs = [cfg("ABC", (100.0,)), cfg("DEF", (40.0,))]
    book = WorkerOptions(configs, "cpu", "America/New_York")
    client = book.client
    assert isinstance(client, MultiWorkerClient)

    def priced() -> None:  # until every requested spot has been published by its worker
        for _ in range(3000):
            if all(c._q[HEADER + SLOT * g + RES_REQ] == c._requests[g]
                   for c in client.clients for g in range(c.layout.n_groups)):
                return
            time.sleep(0.01)
        raise AssertionError("the workers did not price in 30 s")

    try:
        got = []
        book.on_spot("ABC", 100.0, TS0)
        book.on_spot("DEF", 40.0, TS0)
        priced()
        got += book.poll()  # ABC's and DEF's first results, taken by poll()
        for i in range(1, 4):
            book.on_spot("ABC", 100.0 + i, TS0 + i)  # takes ABC's previous result
            book.on_spot("DEF", 40.0 + i, TS0 + i)  # takes DEF's
            got += book.poll()
            priced()
        got += asyncio.run(book.drain())
        assert len(got) == 8
        assert [m.seq for m in got] == list(range(1, 9))
        assert sorted(m.spot for m in got) == sorted(
            [100.0 + i for i in range(4)] + [40.0 + i for i in range(4)])
    finally:
        book.close()
