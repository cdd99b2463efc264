"""Re-evolution: GP rules evolved again on a rolling training window, away from the engine.

A `RuleVersion` is one rule set the engine trades (or traded): its rules (infix text, the
strategy file's readable form), the training window it was evolved on (first and last day,
YYYY-MM-DD), the seed, the training fitness, the evolution's size and where it ran. Rule
versions are numbered from 1 in the order the engine adopted them; replay writes them to
report.json (`rule_versions[]`), the live daemon to its journal (table `rule_versions`),
so a restart resumes with the rule it traded and `journal --json` exports them.

The evolution itself (`evolve_job`) is a pure function of an `EvolveJob` (the training
window's daily OHLCV, the evolution settings, the seed, the costs), so it runs in another
process: `Reevolver` keeps one spawned worker process (multiprocessing "spawn": no fork of
an interpreter holding ZeroMQ sockets, a CUDA context or an asyncio loop) and hands jobs
to it; the engine's event loop only submits a job and, later, picks up its result, so the
tick path never evaluates a GP individual. A job's indicator panel starts on its training
window's first day, exactly as `evolve --start TRAIN_START --train-days TRAIN` computes
it, and it evolves with the seed it is given: a walk-forward fold k (seed + k) is the same
evolution as the fold of `evolve --walk-forward` (strategies/gp/walk_forward.py).

The worker runs at a lower priority (nice 10) with one CPU thread fewer than the cores,
so an evolution on the CPU leaves the engine's core to the tick path.

Budget: a job carries `budget_seconds` (0 = none). The evolution checks it after every
generation and gives up with `BudgetExceeded` when it is spent; the caller keeps the rule
it has (a failure, logged and counted, never a half-evolved rule).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing as mp
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from gpu.gp.core import DEFAULT_COSTS
from strategies.gp.evolution import EvolutionConfig, GenerationStats
from strategies.gp.representation import GPRule

F64 = npt.NDArray[np.float64]


class RuleText(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One rule as infix text (GPRule.from_infix reads it back)."""

    buy: str
    sell: str


class RuleVersion(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One rule set the engine adopted, with where it came from."""

    version: int
    rules: list[RuleText]
    train_start: str                 # first training day, YYYY-MM-DD
    train_end: str                   # last training day, YYYY-MM-DD
    seed: int
    fitness: float                   # training fitness of the best rule (ROI - buy & hold)
    population: int = 0
    generations: int = 0
    symbols: list[str] = msgspec.field(default_factory=list)
    device: str = ""
    seconds: float = 0.0             # the evolution's own time, in its process
    #: data time (ISO, UTC) at which the evolution was asked for
    evolved_at: str = ""
    #: "file" (the rule the run started with), "fold K" (replay), "reevolve" (live)
    origin: str = ""

    def gp_rules(self) -> list[GPRule]:
        return [GPRule.from_infix(r.buy, r.sell) for r in self.rules]

    def as_dict(self) -> dict[str, Any]:
        return dict(msgspec.to_builtins(self))

    def describe(self) -> str:
        return (f"rule version {self.version} ({self.origin or 'evolved'}; trained "
                f"{self.train_start}..{self.train_end}, seed {self.seed}, fitness "
                f"{self.fitness:+.4f})")


def renumbered(v: RuleVersion, version: int, evolved_at: str, origin: str) -> RuleVersion:
    return msgspec.structs.replace(v, version=version, evolved_at=evolved_at, origin=origin)


# --------------------------------------------------------------------------- the job
@dataclass(frozen=True)
class EvolveJob:
    """One evolution: the training window's daily OHLCV (days x stocks, float64) and how
    to evolve on it. `dates` are the window's days (YYYY-MM-DD)."""

    open: F64
    high: F64
    low: F64
    close: F64
    volume: F64
    dates: list[str]
    symbols: list[str]
    config: EvolutionConfig           # seed included
    ensemble: int = 1                 # rules traded: the hall of fame's top K, voted
    costs: tuple[float, float, float] = DEFAULT_COSTS
    device: str = "cpu"
    budget_seconds: float = 0.0       # 0: no budget

    @staticmethod
    def of_days(m: Any, day0: int, day1: int, **kw: Any) -> EvolveJob:
        """The job over days [day0, day1) of a DailyMatrix-like `m` (dates, symbols,
        open, high, low, close, volume)."""
        sl = slice(day0, day1)

        def f64(a: Any) -> F64:
            return np.ascontiguousarray(np.asarray(a)[sl], np.float64)

        return EvolveJob(f64(m.open), f64(m.high), f64(m.low), f64(m.close), f64(m.volume),
                         [str(d)[:10] for d in m.dates[sl]], list(m.symbols), **kw)


class BudgetExceeded(RuntimeError):
    """The evolution ran past its time budget: no rule comes out of it."""


def evolve_job(job: EvolveJob) -> RuleVersion:
    """Evolve on the job's window (in the worker process); version 0 until adopted."""
    from gpu.gp.evaluate import PopulationEvaluator
    from gpu.indicators.compute import compute_panel
    from strategies.gp.evolution import evolve

    t0 = time.perf_counter()
    n_days = job.close.shape[0]
    if n_days < 2:
        raise ValueError(f"a training window needs at least 2 days, got {n_days}")
    panel = compute_panel(job.open, job.high, job.low, job.close, job.volume, device="cpu")
    evaluator = PopulationEvaluator(panel, np.ascontiguousarray(job.close), 0, n_days,
                                    job.device, costs=job.costs)

    def check_budget(_s: GenerationStats) -> None:
        spent = time.perf_counter() - t0
        if job.budget_seconds > 0 and spent > job.budget_seconds:
            raise BudgetExceeded(f"evolution ran {spent:.1f} s, past its budget of "
                                 f"{job.budget_seconds:g} s")

    result = evolve(evaluator, job.config, check_budget)
    chosen = result.hall_of_fame[:job.ensemble]
    return RuleVersion(
        version=0, rules=[RuleText(c.rule.buy_infix, c.rule.sell_infix) for c in chosen],
        train_start=job.dates[0], train_end=job.dates[-1], seed=job.config.seed,
        fitness=float(result.hall_of_fame[0].fitness), population=job.config.population,
        generations=job.config.generations, symbols=list(job.symbols),
        device=evaluator.device, seconds=time.perf_counter() - t0)


@dataclass(frozen=True)
class AsOfJob:
    """A live re-evolution: the last `train_days` days up to `as_of` (YYYY-MM-DD) of the
    daily file `data`, read in the worker (the daemon's loop never parses a file)."""

    data: str
    symbols: list[str]
    as_of: str
    train_days: int
    config: EvolutionConfig
    ensemble: int = 1
    costs: tuple[float, float, float] = DEFAULT_COSTS
    device: str = "cpu"
    budget_seconds: float = 0.0


def evolve_as_of(job: AsOfJob) -> RuleVersion:
    """Evolve on the training window `job` names (in the worker process)."""
    from bisect import bisect_right

    from strategies.gp.window import history_matrix

    m = history_matrix(job.data, None, None, job.symbols or None)
    dates = [str(d)[:10] for d in m.dates]
    end = bisect_right(dates, job.as_of)
    if end < job.train_days:
        raise ValueError(f"{job.data} has {end} trading days up to {job.as_of}, "
                         f"{job.train_days} needed")
    return evolve_job(EvolveJob.of_days(
        m, end - job.train_days, end, config=job.config, ensemble=job.ensemble,
        costs=job.costs, device=job.device, budget_seconds=job.budget_seconds))


def _worker_init() -> None:
    """The worker yields to the engine: a lower scheduling priority, and numba's CPU
    threads one fewer than the cores (the engine's loop keeps a core; on a GPU the
    evolution's work is the device's anyway)."""
    import os

    import numba

    with contextlib.suppress(OSError):
        os.nice(10)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    most = int(getattr(numba.config, "NUMBA_NUM_THREADS", cores))
    numba.set_num_threads(max(1, min(cores - 1, most)))


def _ready() -> bool:
    """The worker's first task: import what an evolution needs (numba's compiled code
    loads from its cache), so the first real job does not pay for it."""
    import strategies.gp.evolution  # noqa: F401
    from gpu.gp.evaluate import PopulationEvaluator  # noqa: F401
    from gpu.indicators.compute import compute_panel  # noqa: F401

    return True


# --------------------------------------------------------------------------- the process
class Reevolver:
    """One background worker process for evolutions, started at once and warmed.

    `submit` returns a concurrent.futures.Future; an asyncio caller wraps it
    (`asyncio.wrap_future`) or polls `done()`, so waiting never blocks the event loop. A
    job that outlives `hard_timeout` seconds (a hung device, a budget the evolution could
    not check) is given up: the worker is terminated and a fresh one started."""

    def __init__(self, warm: bool = True) -> None:
        self._pool = self._start()
        self._warm = self._pool.submit(_ready) if warm else None

    @staticmethod
    def _start() -> cf.ProcessPoolExecutor:
        return cf.ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"),
                                      initializer=_worker_init)

    def submit(self, job: EvolveJob | AsOfJob) -> cf.Future[RuleVersion]:
        if isinstance(job, AsOfJob):
            return self._pool.submit(evolve_as_of, job)
        return self._pool.submit(evolve_job, job)

    def restart(self) -> None:
        """Give up on whatever runs (a job past its hard timeout) and start afresh."""
        procs = list(getattr(self._pool, "_processes", {}).values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        for p in procs:  # our own worker, by its handle
            if p.is_alive():
                p.terminate()
        self._pool = self._start()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Reevolver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def versions_table(versions: Sequence[RuleVersion]) -> list[dict[str, Any]]:
    return [v.as_dict() for v in versions]
