"""Island-model GP on dask.distributed: one island is the single-population run bit for bit;
the result does not depend on the number of workers; ring migration moves the right
individuals; the panel travels once per worker; a worker killed mid-run changes nothing.

Tiny sizes (synthetic market, a few stocks and days, populations of tens) and one local
process cluster shared by the module keep the whole file within seconds of CI time.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

from distributed import Client, Future  # noqa: E402

from feeds.daily import DailyMatrix  # noqa: E402
from gpu.gp.evaluate import PopulationEvaluator  # noqa: E402
from strategies.gp import islands as isl  # noqa: E402
from strategies.gp.evolution import (  # noqa: E402
    EvolutionConfig,
    EvolutionState,
    advance,
    evolve,
    start_state,
)
from strategies.gp.init import ramped_half_and_half  # noqa: E402
from strategies.gp.window import GPWindow, window_from_matrix  # noqa: E402

DEVICE = "cpu"  # the simulator would be slow; CPU and CUDA fitness are identical anyway


def synthetic_window(seed: int = 11, stocks: int = 4, days: int = 90, test_days: int = 0
                     ) -> GPWindow:
    """Geometric random walks with plausible OHLCV (no real data needed)."""
    rng = np.random.default_rng(seed)
    close = 50.0 * np.exp(np.cumsum(rng.normal(0.0003, 0.02, (days, stocks)), axis=0))
    spread = np.abs(rng.normal(0, 0.01, (days, stocks))) * close
    open_ = close * np.exp(rng.normal(0, 0.005, (days, stocks)))
    high = np.maximum(open_, close) + spread
    low = np.minimum(open_, close) - spread
    volume = rng.integers(10_000, 1_000_000, (days, stocks)).astype(np.float64)
    dates = np.arange(np.datetime64("2020-01-01"), np.datetime64("2020-01-01") + days)
    m = DailyMatrix(dates=dates, symbols=[f"S{i}" for i in range(stocks)], open=open_,
                    high=high, low=low, close=close, volume=volume)
    return window_from_matrix(m, days - test_days, test_days, source="synthetic")


@pytest.fixture(scope="module")
def window() -> GPWindow:
    return synthetic_window()


@pytest.fixture(scope="module")
def data(window: GPWindow) -> isl.PanelData:
    return isl.PanelData.make(window.panel, window.close, 0, window.train.day1)


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    # worker processes (the fault test kills one), one numba thread each on CI's 2 cores
    with isl.local_cluster(3, "cpu", workers=3, dashboard_address=None, threads=1) as cluster, \
            Client(cluster) as c:
        c.wait_for_workers(3, timeout=60)
        yield c


CONFIG = EvolutionConfig(population=40, generations=7, seed=5, elite=2, hall_of_fame=5)


def fingerprint(r: isl.IslandsResult) -> tuple[object, ...]:
    finals = [(p.population.flat.tobytes() if p.population else b"", p.fitness.tobytes())
              for p in r.final]
    return (finals, [[(s.best, s.mean, s.mean_size) for s in h] for h in r.histories],
            [(str(c.rule), c.fitness, c.generation) for c in r.hall_of_fame])


# --------------------------------------------------------------------------- no cluster needed
def test_packing_round_trips_a_population() -> None:
    rng = np.random.default_rng(3)
    pop = ramped_half_and_half(200, np.random.Generator(np.random.PCG64(3)), 1, 6, 64)
    packed = isl.PackedPopulation.pack(pop)
    assert packed.flat.size == int(pop.lengths.astype(np.int64).sum())
    back = packed.unpack()
    assert np.array_equal(back.lengths, pop.lengths)
    for i in rng.integers(0, len(pop), 30):
        for t in range(2):
            n = int(pop.lengths[i, t])
            assert np.array_equal(back.ops[i, t, :n], pop.ops[i, t, :n])
            assert np.array_equal(back.sizes[i, t, :n], pop.sizes[i, t, :n])
    assert np.array_equal(back.compile()[0], pop.compile()[0])
    back.check()


def test_ring_migration_against_a_brute_force_reference() -> None:
    gen = np.random.default_rng(8)
    for trial in range(20):  # seeded fuzz over island counts, sizes, ties and NaN
        n_islands, size = int(gen.integers(2, 5)), int(gen.integers(4, 12))
        k = int(gen.integers(0, size // 2 + 1))
        pops = [ramped_half_and_half(size, np.random.Generator(np.random.PCG64(trial * 10 + i)),
                                     1, 4, 32) for i in range(n_islands)]
        fits = [np.round(gen.normal(0, 1, size), 1) for _ in range(n_islands)]
        for f in fits:
            f[gen.random(size) < 0.15] = np.nan
        new_pops, new_fits = isl.ring_migration(pops, fits, k)
        for dst in range(n_islands):
            src = (dst - 1) % n_islands
            # reference: sort (value, index) pairs in plain Python
            sv = [(-np.inf if np.isnan(v) else v, i) for i, v in enumerate(fits[src])]
            best = [i for _, i in sorted(sv, key=lambda t: (-t[0], t[1]))][:k]
            dv = [(-np.inf if np.isnan(v) else v, i) for i, v in enumerate(fits[dst])]
            worst = [i for _, i in sorted(dv)][:k]
            for w, b in zip(worst, best, strict=True):
                assert pops[src].key(b) == new_pops[dst].key(w)
                assert np.array_equal(new_fits[dst][w], fits[src][b], equal_nan=True)
            untouched = [i for i in range(size) if i not in worst]
            for i in untouched:
                assert new_pops[dst].key(i) == pops[dst].key(i)
            assert np.array_equal(new_fits[dst][untouched], fits[dst][untouched],
                                  equal_nan=True)


def test_training_panel_gives_the_full_windows_fitness_without_test_days() -> None:
    w = synthetic_window(days=90, test_days=30)
    d = isl.PanelData.training(w)
    assert d.panel.shape[0] == d.close.shape[0] == w.train.day1 == 60
    pop = ramped_half_and_half(50, np.random.Generator(np.random.PCG64(2)), 1, 5, 64)
    programs, lengths = pop.compile()
    full = PopulationEvaluator(w.panel, w.close, 0, w.train.day1, DEVICE)
    cut = isl.evaluator_for(d, DEVICE)
    want, got = full.fitness(programs, lengths)[0], cut.fitness(programs, lengths)[0]
    assert want.tobytes() == got.tobytes()
    assert isl.PanelData.training(w).token == d.token != isl.PanelData.training(
        synthetic_window(seed=12, days=90, test_days=30)).token


@pytest.mark.parametrize("bad", [dict(islands=0), dict(migrate_every=0), dict(migrants=-1),
                                 dict(migrants=21)])
def test_bad_plan_is_a_value_error(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad)).replace("_", "-")[:7]):
        isl.IslandPlan(**bad).check(population=40)


def test_epochs_cover_every_generation_once() -> None:
    for g in range(1, 30):
        for m in range(1, 9):
            ends = isl.IslandPlan(migrate_every=m).epoch_ends(g)
            assert ends[-1] == g and ends == sorted(set(ends))
            assert all(b - a <= m for a, b in zip([0, *ends], ends, strict=False))


def test_island_seeds_are_distinct_and_island_0_is_the_run_seed() -> None:
    draws = [isl.island_rng(7, i).integers(0, 2**62, 4).tolist() for i in range(6)]
    assert len({tuple(d) for d in draws}) == 6
    assert draws[0] == np.random.Generator(np.random.PCG64(7)).integers(0, 2**62, 4).tolist()


# --------------------------------------------------------------------------- on the cluster
def test_one_island_is_the_single_population_run(client: Client, window: GPWindow,
                                                 data: isl.PanelData) -> None:
    ev = PopulationEvaluator(window.panel, window.close, 0, window.train.day1, DEVICE)
    plain = evolve(ev, CONFIG)
    r = isl.evolve_islands(client, data, CONFIG, isl.IslandPlan(1, 3, 5), DEVICE)
    res = r.evolution_result()
    assert [str(c.rule) for c in res.hall_of_fame] == [str(c.rule) for c in plain.hall_of_fame]
    assert [c.fitness for c in res.hall_of_fame] == [c.fitness for c in plain.hall_of_fame]
    assert [(s.best, s.mean) for s in res.history] == [(s.best, s.mean) for s in plain.history]
    assert res.fitness.tobytes() == plain.fitness.tobytes()
    assert len(r.epochs) == 3 and [e.until for e in r.epochs] == [3, 6, 7]


def test_result_is_independent_of_worker_count_and_data_travels_once(
        client: Client, data: isl.PanelData) -> None:
    plan = isl.IslandPlan(islands=4, migrate_every=2, migrants=3)
    built_before = client.run(isl.evaluators_built)
    received_before = client.run(isl.panels_received)
    three = isl.evolve_islands(client, data, CONFIG, plan, DEVICE)
    built = client.run(isl.evaluators_built)
    received = client.run(isl.panels_received)
    # over 4 epochs every worker received the panel once (Dask's broadcast sometimes lands
    # extra copies while it replicates, more under load, never one per epoch) and built one
    # evaluator
    assert len(three.epochs) == 4
    assert all(1 <= received[w] - received_before[w] < len(three.epochs) for w in received)
    assert all(built[w] - built_before.get(w, 0) <= 1 for w in built)
    assert len({w for e in three.epochs for w in e.workers}) >= 2
    # the first epoch sends no population (workers draw it), later ones send the states
    assert three.epochs[0].bytes_sent * 5 < three.epochs[1].bytes_sent
    assert all(e.bytes_received > e.bytes_sent / 2 > 0 for e in three.epochs[1:])
    one_worker = sorted(built)[:1]
    one = isl.evolve_islands(client, data, CONFIG, plan, DEVICE, workers=one_worker)
    assert {w for e in one.epochs for w in e.workers} == set(one_worker)
    assert fingerprint(one) == fingerprint(three)
    # the same as islands run one after another in this process, migrating on whole arrays
    ref = sequential_islands(data, CONFIG, plan)
    for p, st in zip(three.final, ref, strict=True):
        assert p.population is not None
        got = p.population.unpack()
        assert [got.key(i) for i in range(len(got))] == \
            [st.population.key(i) for i in range(len(got))]
        assert p.fitness.tobytes() == st.fitness.tobytes()
    # migration matters: without it the islands evolve alone, island 0 as a lone run does
    alone = isl.evolve_islands(client, data, CONFIG, isl.IslandPlan(4, 2, 0), DEVICE)
    assert fingerprint(alone) != fingerprint(three)
    lone = isl.evolve_islands(client, data, CONFIG, isl.IslandPlan(1, 7, 0), DEVICE)
    assert [s.best for s in alone.histories[0]] == [s.best for s in lone.histories[0]]
    assert [s.mean for s in three.histories[0]] != [s.mean for s in lone.histories[0]]


def sequential_islands(data: isl.PanelData, config: EvolutionConfig, plan: isl.IslandPlan
                       ) -> list[EvolutionState]:
    """Reference: every island in turn in this process, ring migration on whole arrays."""
    ev = PopulationEvaluator(data.panel, data.close, data.day0, data.day1, DEVICE)
    states = [start_state(config, isl.island_rng(config.seed, i)) for i in range(plan.islands)]
    for until in plan.epoch_ends(config.generations):
        for st in states:
            advance(ev, st, until)
        if until < config.generations:
            pops, fits = isl.ring_migration([st.population for st in states],
                                            [st.fitness for st in states], plan.migrants)
            for st, p, f in zip(states, pops, fits, strict=True):
                st.population, st.fitness = p, f
    return states


def test_killed_worker_mid_run_gives_the_undisturbed_result(client: Client,
                                                          data: isl.PanelData) -> None:
    plan = isl.IslandPlan(islands=3, migrate_every=2, migrants=3)
    undisturbed = isl.evolve_islands(client, data, CONFIG, plan, DEVICE)
    pids = client.run(os.getpid)
    killed: list[str] = []

    def kill_during(epoch: int, futures: list[Future]) -> None:
        if epoch != 1:
            return
        # kill the worker that holds or runs island 0's task of the second epoch
        deadline = time.time() + 10
        while time.time() < deadline:
            where = client.run_on_scheduler(_worker_of, futures[0].key)
            if where:
                break
            time.sleep(0.01)
        assert where, "island 0 never reached a worker"
        killed.append(where)
        os.kill(pids[where], signal.SIGKILL)

    disturbed = isl.evolve_islands(client, data, CONFIG, plan, DEVICE, after_submit=kill_during)
    assert killed
    assert killed[0] not in client.scheduler_info()["workers"]  # that worker really died
    assert disturbed.epochs[1].workers[0] != killed[0]          # island 0 re-ran elsewhere
    assert fingerprint(disturbed) == fingerprint(undisturbed)
    client.wait_for_workers(3, timeout=30)  # the nanny restarts it for the next tests


def test_an_epoch_whose_tasks_dask_cancelled_is_run_again(client: Client,
                                                          data: isl.PanelData) -> None:
    plan = isl.IslandPlan(islands=2, migrate_every=2, migrants=3)
    undisturbed = isl.evolve_islands(client, data, CONFIG, plan, DEVICE)
    cancelled: list[int] = []

    def cancel_during(epoch: int, futures: list[Future]) -> None:
        # what Dask does to the tasks when a worker dies with the only copy of their data
        if epoch == 1:
            client.cancel(futures)
            cancelled.append(epoch)

    disturbed = isl.evolve_islands(client, data, CONFIG, plan, DEVICE,
                                   after_submit=cancel_during)
    assert cancelled == [1]
    assert fingerprint(disturbed) == fingerprint(undisturbed)


def _worker_of(key: str, dask_scheduler: object = None) -> str | None:
    ts = dask_scheduler.tasks.get(key)  # type: ignore[attr-defined]
    if ts is None:
        return None
    ws = ts.processing_on or next(iter(ts.who_has), None)
    return ws.address if ws is not None else None


def test_local_workers_are_pinned_one_per_gpu_or_share_the_cores() -> None:
    for gpus, cores, islands, workers in [(2, 16, 8, None), (8, 64, 8, None), (0, 16, 8, None),
                                          (0, 2, 8, None), (0, 16, 3, None), (2, 16, 4, 4),
                                          (0, 4, 1, None)]:
        envs = isl.worker_plan(islands, gpus, cores, workers)
        n = workers or gpus or min(islands, cores)
        assert len(envs) == n
        for k, env in enumerate(envs):
            assert env[isl.THREADS_ENV] == str(max(1, cores // n))
            assert env.get("CUDA_VISIBLE_DEVICES") == (str(k % gpus) if gpus else None)
    # a process confined to GPUs 2 and 3 pins its workers to those, not to 0 and 1
    envs = isl.worker_plan(2, 2, 32, visible="2,3")
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["2", "3"]
    with pytest.raises(ValueError, match="workers"):
        isl.worker_plan(2, 0, 4, 0)


@pytest.fixture(scope="module")
def daily_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small daily OHLCV file in the shared data's format, from the synthetic market."""
    w = synthetic_window(stocks=3, days=80)
    csv = tmp_path_factory.mktemp("islands") / "daily.csv"
    with csv.open("w") as f:
        f.write("date,open,high,low,close,volume,Name\n")
        for d in range(w.close.shape[0]):
            for s, sym in enumerate(w.symbols):
                c = w.close[d, s]
                f.write(f"{w.dates[d]},{c},{c * 1.01},{c * 0.99},{c},1000,{sym}\n")
    return csv


@pytest.mark.parametrize(("bad", "names"), [
    (["--islands", "0", "--migrants", "5"], "islands must be"),
    (["--islands", "2", "--migrants", "16"], "migrants"),
    (["--islands", "2", "--migrate-every", "0"], "migrate-every"),
    (["--islands", "2", "--migrants", "-1"], "migrants"),
    (["--islands", "3", "--workers", "0", "--migrants", "5"], "workers"),
    (["--scheduler", "tcp://127.0.0.1:1", "--workers", "2", "--migrants", "5"], "workers"),
    (["--migrants", "5"], "--migrants only apply to an island run"),  # no --islands
    (["--workers", "2", "--migrate-every", "3"], "--migrate-every, --workers"),
])
def test_command_rejects_a_bad_island_plan_in_one_line(
        daily_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        bad: list[str], names: str) -> None:
    import run_engine

    code = run_engine.main(["evolve", "--data", str(daily_csv), "--stocks", "3",
                            "--train-days", "60", "--test-days", "20", "--population", "30",
                            "--generations", "2", "--device", "cpu", "--out",
                            str(tmp_path / "b.json"), *bad])
    err = capsys.readouterr().err
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("error:") and "Traceback" not in err
    assert names in last


def test_command_runs_islands_on_a_given_scheduler(client: Client, daily_csv: Path,
                                                   tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import run_engine

    csv = daily_csv
    out = tmp_path / "best.json"
    report = tmp_path / "r.json"
    code = run_engine.main([
        "evolve", "--data", str(csv), "--stocks", "3", "--train-days", "60", "--test-days",
        "20", "--population", "30", "--generations", "4", "--seed", "3", "--device", "cpu",
        "--islands", "2", "--migrate-every", "2", "--migrants", "4",
        "--scheduler", str(client.scheduler_info()["address"]),
        "--out", str(out), "--json", str(report)])
    assert code == 0
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert sum(ln.startswith("island ") for ln in lines) == 2 * 4
    assert sum(ln.startswith("epoch ") for ln in lines) == 2
    import json

    r = json.loads(report.read_text())
    assert r["islands"]["islands"] == 2 and len(r["islands"]["per_island"]) == 2
    assert r["islands"]["bytes_per_epoch"] > 0 and len(r["generations"]) == 4
    assert Path(r["png"]).read_bytes()[:4] == b"\x89PNG"
    assert r["best"]["fitness"] == max(max(g["best"] for g in isl_h)
                                       for isl_h in r["islands"]["per_island"])


def _current_gpu() -> str:
    """UUID of the GPU this worker process sees (runs on a worker)."""
    from numba import cuda

    return str(cuda.get_current_device().uuid)


@pytest.mark.gpu
def test_local_cluster_pins_one_worker_per_gpu_and_matches_cpu(data: isl.PanelData) -> None:
    gpus = isl.gpu_count()
    plan = isl.IslandPlan(islands=max(2, gpus), migrate_every=2, migrants=3)
    with isl.local_cluster(plan.islands, "cuda", dashboard_address=None) as cluster, \
            Client(cluster) as c:
        c.wait_for_workers(gpus, timeout=120)
        seen = c.run(_current_gpu)
        assert len(seen) == gpus and len(set(seen.values())) == gpus  # one GPU per worker
        on_gpu = isl.evolve_islands(c, data, CONFIG, plan, "cuda")
    assert set(on_gpu.devices) == {"cuda"}
    with isl.local_cluster(plan.islands, "cpu", workers=2, dashboard_address=None) as cluster, \
            Client(cluster) as c:
        on_cpu = isl.evolve_islands(c, data, CONFIG, plan, "cpu")
    assert fingerprint(on_gpu) == fingerprint(on_cpu)


def test_an_epoch_waits_for_a_worker_when_the_cluster_has_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster briefly without workers (all lost, nannies restarting them) is waited for,
    not divided by; one that stays empty is a one-line error after WORKER_WAIT_S."""
    import threading

    from distributed import LocalCluster

    monkeypatch.setattr(isl, "WORKER_WAIT_S", 0.5)
    with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as c:
        tasks = object.__new__(isl._EpochTasks)
        tasks.client = c
        with pytest.raises(RuntimeError, match=r"no worker for 0.5 s: no island can run"):
            tasks._live_workers()
        monkeypatch.setattr(isl, "WORKER_WAIT_S", 60.0)
        threading.Timer(0.3, cluster.scale, args=(1,)).start()
        pool = tasks._live_workers()
        assert len(pool) == 1 and pool == sorted(c.scheduler_info()["workers"])
