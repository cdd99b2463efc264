"""Island-model GP evolution on dask.distributed: islands evolve in synchronous epochs on
the workers of a Dask cluster and pass their best individuals around a ring between epochs.

One epoch: the driver submits one task per island ("take in these arrivals, run generations
g .. g + migrate_every, pick your emigrants"), gathers all of them, and routes island i's
emigrants (copies of its `migrants` fittest) to island (i + 1) mod n, whose next task puts
them in place of its `migrants` least fit before breeding (fitness travels along: every
island trains on the same days, so a migrant's fitness is valid on arrival). The driver
only routes: choosing and inserting migrants runs on the workers. With one island nothing
migrates.

Reproducibility. An island's randomness comes from its own generator: island 0 draws from
the run's seed exactly as a single-population run does (so one island reproduces
`strategies.gp.evolution.evolve` bit for bit), island i > 0 from the seed's i-th spawned
stream (`SeedSequence(seed, spawn_key=(i,))`). A task is a pure function of its inputs
(island state, arrivals, generations, data), the epochs are synchronous and the driver
routes migrants by island index, so the result does not depend on how many workers there
are, how fast they are or in which order they finish; fitness is identical on CPU and CUDA
workers.

Data shipped once. The indicator panel and closes of the training days (never the test
days) go to every worker once per run (`Client.scatter(broadcast=True)`, which now and then
lands a second copy on a worker while it replicates; `panels_received` counts); tasks name
them by their future, so an epoch moves only island states and migrants: each population is sent
packed (used tree prefixes only, subtree sizes are rebuilt on arrival), about 2 bytes per
node, 1.3 MB for 25,000 individuals of 20 nodes against 12.9 MB unpacked. Each worker
process keeps one evaluator per data token, so on a GPU the panel is copied to the device
and the kernel compiled once.
`EpochRecord` counts the bytes of the pickled task arguments and results of each epoch.

Fault tolerance. The driver keeps every island's state between epochs and each task carries
its state in its arguments, so when a worker dies Dask runs the lost tasks again on another
worker (which already holds a replica of the data) and the run ends as an undisturbed one.

Clusters. With no scheduler address, `local_cluster` starts a scheduler and one worker
process per GPU, each pinned to its GPU through CUDA_VISIBLE_DEVICES in its nanny's
environment (plain dask.distributed: dask-cuda would do the same pinning but brings its own
dependencies), or CPU worker processes when there is no GPU, each with an equal share of
the cores for numba's parallel loops. One thread per worker: an island task fills a GPU or
its share of the cores.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numba
import numpy as np
import numpy.typing as npt

from gpu.device import cuda_present, cuda_simulated
from gpu.gp.core import DEFAULT_COSTS
from gpu.gp.evaluate import PopulationEvaluator
from strategies.gp.evolution import (
    Champion,
    EvolutionConfig,
    EvolutionResult,
    EvolutionState,
    GenerationStats,
    HallOfFame,
    advance,
    start_state,
)
from strategies.gp.representation import Population, subtree_sizes
from strategies.gp.window import GPWindow

if TYPE_CHECKING:
    from distributed import Client, Future, SpecCluster

log = logging.getLogger(__name__)

F64 = npt.NDArray[np.float64]
I16 = npt.NDArray[np.int16]


# --------------------------------------------------------------------------- plan and seeds
@dataclass(frozen=True)
class IslandPlan:
    """How many islands, how often and how many individuals migrate."""

    islands: int = 1
    migrate_every: int = 5      # generations per epoch
    migrants: int = 50          # individuals each island sends to the next per migration

    def check(self, population: int) -> None:
        """Raise ValueError naming every problem with this plan for islands of `population`."""
        problems = []
        if self.islands < 1:
            problems.append(f"islands must be >= 1 (got {self.islands})")
        if self.migrate_every < 1:
            problems.append(f"migrate-every must be >= 1 (got {self.migrate_every})")
        if not 0 <= self.migrants <= population // 2:
            problems.append(f"migrants must be in [0, population / 2 = {population // 2}] "
                            f"(got {self.migrants})")
        if problems:
            raise ValueError("; ".join(problems))

    def epoch_ends(self, generations: int) -> list[int]:
        """Generation counts at which the epochs end (the last one is `generations`)."""
        ends = list(range(self.migrate_every, generations, self.migrate_every))
        return [*ends, generations]


def island_rng(seed: int, island: int) -> np.random.Generator:
    """The generator of one island (see the module docstring)."""
    if island == 0:
        return np.random.Generator(np.random.PCG64(seed))
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(island,))))


# --------------------------------------------------------------------------- packed populations
@numba.njit(cache=True, nogil=True)
def _pack(ops: I16, lengths: I16, out: I16) -> None:
    k = 0
    for i in range(ops.shape[0]):
        for t in range(2):
            n = lengths[i, t]
            out[k:k + n] = ops[i, t, :n]
            k += n


@numba.njit(cache=True, nogil=True)
def _unpack(flat: I16, lengths: I16, ops: I16, sizes: I16) -> None:
    k = 0
    for i in range(ops.shape[0]):
        for t in range(2):
            n = lengths[i, t]
            ops[i, t, :n] = flat[k:k + n]
            subtree_sizes(ops[i, t], n, sizes[i, t])
            k += n


@dataclass
class PackedPopulation:
    """A population as the used prefixes of its trees, back to back (what travels)."""

    max_nodes: int
    lengths: I16        # (n, 2)
    flat: I16           # (sum of lengths,)

    @staticmethod
    def pack(pop: Population) -> PackedPopulation:
        lengths = np.ascontiguousarray(pop.lengths, np.int16)
        flat = np.empty(int(np.asarray(lengths, np.int64).sum()), np.int16)
        _pack(np.ascontiguousarray(pop.ops), lengths, flat)
        return PackedPopulation(pop.max_nodes, lengths, flat)

    def unpack(self) -> Population:
        pop = Population.empty(self.lengths.shape[0], self.max_nodes)
        pop.lengths[:] = self.lengths
        _unpack(self.flat, pop.lengths, pop.ops, pop.sizes)
        return pop


# --------------------------------------------------------------------------- one island epoch
@dataclass
class IslandPayload:
    """Everything an island needs to continue: its state between two epochs."""

    island: int
    config: EvolutionConfig
    rng: np.random.Generator | None          # None: not started (the worker draws it)
    population: PackedPopulation | None
    fitness: F64
    generation: int
    hall: HallOfFame

    @staticmethod
    def initial(island: int, config: EvolutionConfig) -> IslandPayload:
        return IslandPayload(island, config, None, None, np.empty(0, np.float64), 0,
                             HallOfFame(config.hall_of_fame))

    def to_state(self) -> EvolutionState:
        if self.population is None:
            return start_state(self.config, island_rng(self.config.seed, self.island))
        assert self.rng is not None
        return EvolutionState(config=self.config, rng=self.rng,
                              population=self.population.unpack(),
                              fitness=np.array(self.fitness, np.float64),
                              generation=self.generation, hall=self.hall)

    @staticmethod
    def from_state(island: int, state: EvolutionState) -> IslandPayload:
        return IslandPayload(island, state.config, state.rng,
                             PackedPopulation.pack(state.population), state.fitness,
                             state.generation, state.hall)


@dataclass
class EpochOutcome:
    """What an island task returns: the new state, the emigrants for the next island (None
    after the last epoch), its generations' statistics, and where and how long it ran."""

    payload: IslandPayload
    leaving: Migrants | None
    history: list[GenerationStats]
    device: str
    worker: str
    seconds: float


@dataclass(frozen=True)
class PanelData:
    """The training window every island evaluates on, named by a token of its contents."""

    panel: npt.NDArray[np.float32]
    close: F64
    day0: int
    day1: int
    token: str
    costs: tuple[float, float, float] = DEFAULT_COSTS   # gp_core.cost_tuple

    @staticmethod
    def make(panel: np.ndarray, close: np.ndarray, day0: int, day1: int,
             costs: tuple[float, float, float] = DEFAULT_COSTS) -> PanelData:
        panel = np.ascontiguousarray(panel, np.float32)
        close = np.ascontiguousarray(close, np.float64)
        h = hashlib.blake2b(digest_size=16)
        for a in (panel, close):
            h.update(repr(a.shape).encode())
            h.update(a.tobytes())
        h.update(f"{day0}:{day1}:{costs!r}".encode())
        return PanelData(panel, close, day0, day1, h.hexdigest(), costs)

    @staticmethod
    def training(window: GPWindow, costs: tuple[float, float, float] = DEFAULT_COSTS
                 ) -> PanelData:
        """The window's training days only: fewer bytes, and workers never see test days
        (indicators were computed over the whole window, so the cut changes no value)."""
        end = window.train.day1
        return PanelData.make(window.panel[:end], window.close[:end], window.train.day0, end,
                              costs)

    @property
    def nbytes(self) -> int:
        return int(self.panel.nbytes + self.close.nbytes)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # runs where a pickled copy arrives: counts the panels this process received
        self.__dict__.update(state)  # frozen: bypass the dataclass's __setattr__
        PANELS_RECEIVED[0] += 1


PANELS_RECEIVED = [0]


def panels_received() -> int:
    """Panels unpickled in this process (a worker's count: once per run, not per epoch)."""
    return PANELS_RECEIVED[0]


# One evaluator per worker process and data token: a GPU worker copies the panel to its
# device and compiles the kernel once per run, not once per epoch. `EVALUATORS_BUILT` counts
# the builds in this process (the tests read it through Client.run).
_EVALUATORS: dict[tuple[str, str], PopulationEvaluator] = {}
_EVALUATORS_LOCK = threading.Lock()
EVALUATORS_BUILT = [0]


def evaluator_for(data: PanelData, device: str) -> PopulationEvaluator:
    key = (data.token, device)
    with _EVALUATORS_LOCK:
        ev = _EVALUATORS.get(key)
        if ev is None:
            _EVALUATORS.clear()  # a worker serves one run at a time: free the last window
            ev = PopulationEvaluator(data.panel, data.close, data.day0, data.day1, device,
                                     costs=data.costs)
            _EVALUATORS[key] = ev
            EVALUATORS_BUILT[0] += 1
        return ev


def evaluators_built() -> int:
    return EVALUATORS_BUILT[0]


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return f"local pid {os.getpid()}"


# The nanny applies a worker's env after the process has imported numba, and numba refuses a
# NUMBA_NUM_THREADS that changes after its threads start: the share of cores travels in a
# variable of our own and is applied with numba.set_num_threads in the task's thread.
THREADS_ENV = "GP_ISLAND_NUMBA_THREADS"


def _apply_thread_share() -> None:
    share = os.environ.get(THREADS_ENV)
    if share:
        most = int(getattr(numba.config, "NUMBA_NUM_THREADS", 1))
        numba.set_num_threads(max(1, min(int(share), most)))


def run_island_epoch(data: PanelData, payload: IslandPayload, arrivals: Migrants | None,
                     until: int, send: int, device: str) -> EpochOutcome:
    """One island's epoch (the Dask task): take in the arrivals from the previous island,
    run to `until` evaluated generations, pick `send` emigrants for the next island."""
    t0 = time.perf_counter()
    _apply_thread_share()
    ev = evaluator_for(data, device)
    state = payload.to_state()
    if arrivals is not None:
        state.population, state.fitness = receive(state.population, state.fitness,
                                                  arrivals.population.unpack(),
                                                  arrivals.fitness)
    history = advance(ev, state, until)
    leaving = None
    if send > 0:
        pop, fit = emigrants(state.population, state.fitness, send)
        leaving = Migrants(payload.island, PackedPopulation.pack(pop), fit)
    return EpochOutcome(IslandPayload.from_state(payload.island, state), leaving, history,
                        ev.device, _worker_name(), time.perf_counter() - t0)


# --------------------------------------------------------------------------- migration
def _selectable(fitness: F64) -> F64:
    return np.where(np.isnan(fitness), -np.inf, fitness)


@dataclass
class Migrants:
    """Copies of an island's fittest individuals on their way to the next island."""

    source: int
    population: PackedPopulation
    fitness: F64


def emigrants(pop: Population, fitness: F64, k: int) -> tuple[Population, F64]:
    """The k fittest (ties: lower index; NaN counts as worst), best first."""
    best = np.argsort(-_selectable(fitness), kind="stable")[:k]
    return pop.take(best), np.array(fitness[best], np.float64)


def receive(pop: Population, fitness: F64, arrivals: Population, arrival_fitness: F64
            ) -> tuple[Population, F64]:
    """Arrivals replace the least fit (ties: lower index); returns copies."""
    worst = np.argsort(_selectable(fitness), kind="stable")[:len(arrivals)]
    out = pop.take(np.arange(len(pop)))
    out_fit = np.array(fitness, np.float64)
    out.ops[worst], out.sizes[worst], out.lengths[worst] = (arrivals.ops, arrivals.sizes,
                                                            arrivals.lengths)
    out_fit[worst] = arrival_fitness
    return out, out_fit


def ring_migration(populations: list[Population], fitness: list[F64], migrants: int
                   ) -> tuple[list[Population], list[F64]]:
    """Island i's `migrants` fittest replace island (i + 1) mod n's least fit, all emigrants
    chosen before anyone arrives. The distributed run does the same in two halves: each
    task picks its emigrants after its epoch, the next task of the receiving island takes
    them in before breeding."""
    n = len(populations)
    if n < 2 or migrants == 0:
        return populations, fitness
    leaving = [emigrants(p, f, migrants) for p, f in zip(populations, fitness, strict=True)]
    out = [receive(populations[d], fitness[d], *leaving[(d - 1) % n]) for d in range(n)]
    return [p for p, _ in out], [f for _, f in out]


def merge_halls(halls: list[list[Champion]], capacity: int) -> list[Champion]:
    """The `capacity` best distinct rules of all islands (distinct trees and distinct
    behaviour fingerprints); equal fitness: earlier generation, then lower island."""
    best: dict[bytes, tuple[float, int, int, Champion]] = {}
    for island, members in enumerate(halls):
        for c in members:
            key = c.rule.buy.tobytes() + b"|" + c.rule.sell.tobytes()
            rank = (-c.fitness, c.generation, island, c)
            if key not in best or rank[:3] < best[key][:3]:
                best[key] = rank
    ranked = sorted(best.values(), key=lambda r: r[:3])
    # islands share the training days, so equal fingerprints are equal trades: once each
    seen: set[int] = set()
    out: list[Champion] = []
    for r in ranked:
        b = r[3].behaviour
        if b is not None and b in seen:
            continue
        if b is not None:
            seen.add(b)
        out.append(r[3])
    return out[:capacity]


# --------------------------------------------------------------------------- the driver
def _nbytes(obj: object) -> int:
    return len(pickle.dumps(obj, protocol=5))


@dataclass
class EpochRecord:
    """One synchronous epoch as the driver saw it."""

    epoch: int
    first_generation: int
    until: int                  # generations evaluated after it
    seconds: float              # submit to migrated (wall)
    slowest_island_seconds: float
    busiest_worker_seconds: float   # islands' task seconds summed per worker, the largest
    bytes_sent: int             # pickled island states and migrants sent to the workers
    bytes_received: int         # pickled outcomes gathered back
    workers: list[str]          # worker of each island, island order

    @property
    def overhead_seconds(self) -> float:
        """Wall time the busiest worker did not spend inside island tasks: scheduling,
        transfers and (un)pickling."""
        return max(0.0, self.seconds - self.busiest_worker_seconds)

    def as_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "first_generation": self.first_generation,
                "until": self.until, "seconds": self.seconds,
                "slowest_island_seconds": self.slowest_island_seconds,
                "busiest_worker_seconds": self.busiest_worker_seconds,
                "overhead_seconds": self.overhead_seconds, "bytes_sent": self.bytes_sent,
                "bytes_received": self.bytes_received, "workers": self.workers}


@dataclass
class IslandsResult:
    config: EvolutionConfig
    plan: IslandPlan
    histories: list[list[GenerationStats]]     # per island, per generation
    hall_of_fame: list[Champion]               # merged over the islands
    epochs: list[EpochRecord]
    devices: list[str]                         # evaluator device of each island
    panel_bytes: int
    n_workers: int
    seconds: float                             # wall time of the evolution
    dashboard: str | None = None
    final: list[IslandPayload] = field(default_factory=list)

    @property
    def best(self) -> Champion:
        return self.hall_of_fame[0]

    @property
    def gp_ops(self) -> int:
        return sum(s.gp_ops for h in self.histories for s in h)

    @property
    def wall_gp_ops_per_second(self) -> float:
        """GP operations of all islands per second of the run's wall time (what scaling over
        GPUs is judged by: breeding, transfers and waiting included)."""
        return self.gp_ops / self.seconds if self.seconds > 0 else 0.0

    def combined_history(self) -> list[GenerationStats]:
        """Per generation over all islands: best of the bests, mean of the means (islands
        are equal in size), evaluations and GP ops summed, evaluation seconds summed (so
        its GP ops/s is that of one evaluator) and the slowest island's seconds."""
        out = []
        for g in range(len(self.histories[0])):
            row = [h[g] for h in self.histories]
            out.append(GenerationStats(
                generation=g, best=max(s.best for s in row),
                mean=float(np.mean([s.mean for s in row])),
                mean_size=float(np.mean([s.mean_size for s in row])),
                evaluated=sum(s.evaluated for s in row),
                eval_seconds=sum(s.eval_seconds for s in row),
                seconds=max(s.seconds for s in row), gp_ops=sum(s.gp_ops for s in row)))
        return out

    def evolution_result(self) -> EvolutionResult:
        """The run in the single-population shape (`population`: island 0's)."""
        hist = self.combined_history()
        first = self.final[0] if self.final else None
        pop = first.population.unpack() if first and first.population else Population.empty(0)
        fit = first.fitness if first else np.empty(0, np.float64)
        return EvolutionResult(config=self.config, population=pop, fitness=fit, history=hist,
                               hall_of_fame=self.hall_of_fame, device=",".join(
                                   sorted(set(self.devices))), seconds=self.seconds,
                               gp_ops=self.gp_ops,
                               eval_seconds=sum(s.eval_seconds for s in hist))

    def report(self) -> dict[str, Any]:
        n_ep = max(1, len(self.epochs))
        moved = [e.bytes_sent + e.bytes_received for e in self.epochs]
        return {"islands": {
            "islands": self.plan.islands, "migrate_every": self.plan.migrate_every,
            "migrants": self.plan.migrants, "workers": self.n_workers,
            "devices": self.devices, "dashboard": self.dashboard,
            "panel_bytes_per_worker": self.panel_bytes,
            "bytes_per_epoch": sum(moved) / n_ep,
            "overhead_seconds_per_epoch": sum(e.overhead_seconds for e in self.epochs) / n_ep,
            "wall_gp_ops_per_second": self.wall_gp_ops_per_second,
            "seconds": self.seconds,
            "epochs": [e.as_dict() for e in self.epochs],
            "per_island": [[s.as_dict() for s in h] for h in self.histories],
            "best_per_island": [max(s.best for s in h) for h in self.histories],
        }}


#: tries per epoch when Dask cancels its tasks (a worker lost scattered data)
EPOCH_ATTEMPTS = 3
#: how long an epoch waits for the cluster to have a worker again before it fails
WORKER_WAIT_S = 60.0


class _EpochTasks:
    """Submits an epoch's island tasks and gathers them; owns the data shipped once per run.

    Placement: island i goes to worker i mod n, one island per GPU when islands == workers
    (Dask's own placement may queue two on one worker); loose, so a task whose worker died
    runs on another one. When Dask cancels the tasks instead (a worker died holding the only
    copy of something they need: scattered data is not recomputed) the epoch runs again from
    the driver's copies with the data sent anew; the tasks are pure, so the result is the same.
    """

    def __init__(self, client: Client, data: PanelData, device: str,
                 workers: list[str] | None,
                 after_submit: Callable[[int, list[Future]], None] | None) -> None:
        self.client, self.data, self.device = client, data, device
        self.workers, self.after_submit = workers, after_submit
        self.data_future = client.scatter(data, broadcast=True, hash=False)
        self.run_id = uuid.uuid4().hex[:8]

    def _submit(self, payloads: list[IslandPayload], arrivals: list[Migrants | None],
                until: int, send: int, attempt: int) -> list[Future]:
        pool = self.workers or self._live_workers()
        return [self.client.submit(run_island_epoch, self.data_future, p, a, until, send,
                                   self.device, pure=False,
                                   key=f"gp-island-{p.island}-gen-{until}-{self.run_id}-{attempt}",
                                   workers=[pool[p.island % len(pool)]],
                                   allow_other_workers=self.workers is None)
                for p, a in zip(payloads, arrivals, strict=True)]

    def _live_workers(self) -> list[str]:
        """The cluster's workers now; while it has none (a worker lost and its nanny
        starting another), wait for one rather than place the islands nowhere."""
        pool = sorted(self.client.scheduler_info(n_workers=-1)["workers"])
        if not pool:
            try:
                self.client.wait_for_workers(1, timeout=WORKER_WAIT_S)
            except TimeoutError:
                raise RuntimeError(f"the dask cluster has had no worker for "
                                   f"{WORKER_WAIT_S:g} s: no island can run") from None
            pool = sorted(self.client.scheduler_info(n_workers=-1)["workers"])
        return pool

    def run(self, epoch: int, payloads: list[IslandPayload], arrivals: list[Migrants | None],
            until: int, send: int) -> list[EpochOutcome]:
        for attempt in range(EPOCH_ATTEMPTS):
            futures = self._submit(payloads, arrivals, until, send, attempt)
            if self.after_submit is not None and attempt == 0:
                self.after_submit(epoch, futures)
            try:
                outcomes: list[EpochOutcome] = self.client.gather(futures)
                return outcomes
            except CancelledError as err:
                if attempt + 1 == EPOCH_ATTEMPTS:
                    raise
                log.warning("islands: epoch %d cancelled (%s); sending the data again and "
                            "re-running it", epoch, err)
                self.client.cancel(futures)
                self.client.cancel(self.data_future)
                self.data_future = self.client.scatter(self.data, broadcast=True, hash=False)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def close(self) -> None:
        self.client.cancel(self.data_future)


def evolve_islands(client: Client, data: PanelData, config: EvolutionConfig, plan: IslandPlan,
                   device: str = "auto",
                   progress: Callable[[int, GenerationStats], None] | None = None,
                   on_epoch: Callable[[EpochRecord], None] | None = None,
                   after_submit: Callable[[int, list[Future]], None] | None = None,
                   workers: list[str] | None = None) -> IslandsResult:
    """Evolve `plan.islands` populations of `config.population` on the client's cluster.

    `progress(island, stats)` is called for every island and generation after each epoch,
    `on_epoch` after each migration, `after_submit(epoch, futures)` right after an epoch's
    tasks are submitted (the fault-tolerance test kills a worker there). `workers`
    restricts the island tasks to these worker addresses (default: any worker).
    """
    plan.check(config.population)
    t0 = time.perf_counter()
    tasks = _EpochTasks(client, data, device, workers, after_submit)
    payloads = [IslandPayload.initial(i, config) for i in range(plan.islands)]
    histories: list[list[GenerationStats]] = [[] for _ in range(plan.islands)]
    devices = ["?"] * plan.islands
    epochs: list[EpochRecord] = []
    first = 0
    arrivals: list[Migrants | None] = [None] * plan.islands
    ring = plan.islands > 1 and plan.migrants > 0
    try:
        for e, until in enumerate(plan.epoch_ends(config.generations)):
            t_ep = time.perf_counter()
            send = plan.migrants if ring and until < config.generations else 0
            sent = sum(_nbytes(p) + _nbytes(a) for p, a in zip(payloads, arrivals, strict=True))
            outcomes = tasks.run(e, payloads, arrivals, until, send)
            received = sum(_nbytes(o) for o in outcomes)
            for o in outcomes:
                histories[o.payload.island].extend(o.history)
                devices[o.payload.island] = o.device
                if progress is not None:
                    for s in o.history:
                        progress(o.payload.island, s)
            payloads = [o.payload for o in outcomes]
            # the ring: what island i sent arrives at island i + 1 in the next epoch
            arrivals = [outcomes[(i - 1) % plan.islands].leaving for i in range(plan.islands)]
            busy: dict[str, float] = {}
            for o in outcomes:
                busy[o.worker] = busy.get(o.worker, 0.0) + o.seconds
            rec = EpochRecord(epoch=e, first_generation=first, until=until,
                              seconds=time.perf_counter() - t_ep,
                              slowest_island_seconds=max(o.seconds for o in outcomes),
                              busiest_worker_seconds=max(busy.values()),
                              bytes_sent=sent, bytes_received=received,
                              workers=[o.worker for o in outcomes])
            epochs.append(rec)
            if on_epoch is not None:
                on_epoch(rec)
            first = until
    finally:
        tasks.close()
    halls = [p.hall.members for p in payloads]
    return IslandsResult(config=config, plan=plan, histories=histories,
                         hall_of_fame=merge_halls(halls, config.hall_of_fame), epochs=epochs,
                         devices=devices, panel_bytes=data.nbytes,
                         n_workers=len(client.scheduler_info(n_workers=-1)["workers"]),
                         seconds=time.perf_counter() - t0, final=payloads)


# --------------------------------------------------------------------------- clusters
def gpu_count() -> int:
    """Real CUDA GPUs numba sees on this machine (the simulator counts as none)."""
    if cuda_simulated() or not cuda_present():
        return 0
    from numba import cuda

    return len(cuda.gpus)


def worker_plan(islands: int, gpus: int, cores: int, workers: int | None = None,
                threads: int | None = None, visible: str | None = None
                ) -> list[dict[str, str]]:
    """The environment of each local worker process: one worker per GPU pinned by
    CUDA_VISIBLE_DEVICES, or without GPUs min(islands, cores) CPU workers; `workers`
    overrides the count (GPU workers then share GPUs round-robin). Each gets an equal share
    of the cores for numba's parallel loops (breeding, CPU evaluation), or `threads`.
    `visible` is this process's own CUDA_VISIBLE_DEVICES: worker k gets its k-th entry, so a
    run confined to some GPUs stays on them."""
    ids = [v.strip() for v in visible.split(",") if v.strip()] if visible else []
    if len(ids) < gpus:
        ids = [str(g) for g in range(gpus)]
    n = workers if workers is not None else (gpus or max(1, min(islands, cores)))
    if n < 1:
        raise ValueError(f"workers must be >= 1 (got {n})")
    threads = threads if threads is not None else max(1, cores // n)
    envs = []
    for k in range(n):
        env = {THREADS_ENV: str(threads)}
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ids[k % gpus]
        envs.append(env)
    return envs


def local_cluster(islands: int, device: str = "auto", workers: int | None = None,
                  dashboard_address: str | None = ":8787", threads: int | None = None,
                  gpus: int | None = None) -> SpecCluster:
    """A scheduler and worker processes on this machine, laid out by `worker_plan`
    (`gpus`: use at most this many of the GPUs)."""
    from distributed import Nanny, Scheduler, SpecCluster

    seen = 0 if device == "cpu" else gpu_count()
    gpus = seen if gpus is None else max(0, min(gpus, seen))
    specs: dict[str, dict[str, Any]] = {}
    envs = worker_plan(islands, gpus, os.cpu_count() or 1, workers, threads,
                       os.environ.get("CUDA_VISIBLE_DEVICES"))
    for k, env in enumerate(envs):
        # the nanny sets env in the worker process before it runs any task, so before CUDA
        # initialises (which reads CUDA_VISIBLE_DEVICES); memory_limit 0: an island's memory
        # is its population, and a limit derived from the thread count would restart
        # healthy workers
        specs[f"gp-worker-{k}"] = {"cls": Nanny, "options": {
            "nthreads": 1, "env": env, "memory_limit": 0, "host": "127.0.0.1",
            "silence_logs": logging.WARNING}}
    # the scheduler's HTTP server (health, metrics) runs even without the dashboard: give it
    # a free port then, not 8787
    sched_opts: dict[str, Any] = {"host": "127.0.0.1", "dashboard": dashboard_address is not None,
                                  "dashboard_address": dashboard_address or "127.0.0.1:0"}
    return SpecCluster(workers=specs, scheduler={"cls": Scheduler, "options": sched_opts},
                       name="gp-islands")


def dashboard_link(client: Client) -> str | None:
    """The dashboard's address, or None when the scheduler runs without one (no bokeh)."""
    info = client.scheduler_info()
    if "dashboard" not in info.get("services", {}):
        return None
    return str(client.dashboard_link)


def evolve_on_dask(data: PanelData, config: EvolutionConfig, plan: IslandPlan,
                   scheduler: str | None = None, workers: int | None = None,
                   device: str = "auto", quiet: bool = False,
                   dashboard_address: str | None = ":8787") -> IslandsResult:
    """The `evolve --islands` path: connect to `scheduler` or start a local cluster, run,
    print progress per island and generation and one line per epoch on stderr."""
    from distributed import Client

    plan.check(config.population)
    if scheduler and workers is not None:
        raise ValueError("--workers sizes the local cluster; with --scheduler, start the "
                         "workers with `dask worker`")
    # the scheduler's and nannies' INFO lines (connections, shutdown) would bury the progress
    logging.getLogger("distributed").setLevel(logging.WARNING)
    cluster = None
    if scheduler:
        client = Client(scheduler, timeout="10s")
        where = f"Dask scheduler {scheduler}"
    else:
        cluster = local_cluster(plan.islands, device, workers, dashboard_address)
        client = Client(cluster)
        where = "local Dask cluster"
    try:
        n_workers = len(client.scheduler_info(n_workers=-1)["workers"])
        if n_workers == 0:
            client.wait_for_workers(1, timeout=60)
            n_workers = len(client.scheduler_info(n_workers=-1)["workers"])
        link = dashboard_link(client)
        print(f"{plan.islands} islands x {config.population} individuals, migrate "
              f"{plan.migrants} every {plan.migrate_every} generations, on {where} with "
              f"{n_workers} workers; dashboard {link or 'off (install bokeh for it)'}",
              file=sys.stderr, flush=True)

        def progress(island: int, s: GenerationStats) -> None:
            if not quiet:
                print(f"island {island:>2} gen {s.generation + 1:>3}/{config.generations}  "
                      f"best {s.best:+.4f}  mean {s.mean:+.4f}  size {s.mean_size:5.1f}  "
                      f"{s.gp_ops_per_second:9.3g} GP ops/s  {s.seconds:.2f} s",
                      file=sys.stderr, flush=True)

        def on_epoch(r: EpochRecord) -> None:
            if not quiet:
                print(f"epoch {r.epoch + 1}: generations {r.first_generation + 1}..{r.until}"
                      f"  {r.seconds:.2f} s (slowest island {r.slowest_island_seconds:.2f} s)"
                      f"  moved {(r.bytes_sent + r.bytes_received) / 1e6:.2f} MB"
                      f"  workers {len(set(r.workers))}", file=sys.stderr, flush=True)

        result = evolve_islands(client, data, config, plan, device, progress, on_epoch)
        result.dashboard = link
        return result
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
