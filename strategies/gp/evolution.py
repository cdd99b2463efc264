"""The generational loop: ramped half-and-half start, tournament selection, elitism,
crossover and mutation, a hall of fame.

One generation:
1. evaluate the individuals not evaluated yet (the elites keep their fitness);
2. record statistics and update the hall of fame;
3. copy the `elite` fittest unchanged, then breed the rest: each child has a recipient and
   a donor parent, each the winner of a tournament of `tournament` individuals drawn with
   replacement (ties go to the first drawn); see strategies.gp.operators for the operators.

`generations` counts evaluated populations including the random initial one.

The children are bred and handed to the evaluator in parts (`PARTS`), so that on CUDA the
breeding of one part overlaps the GPU's evaluation of the one before; every random number of
a generation is drawn before its first part, so the parts change nothing in the run.

Reproducibility: every random draw comes from `np.random.Generator(PCG64(seed))` on the host
(tournaments, and one stream seed per child for the numba operators). Fitness is identical
on every evaluator device (gpu.gp.evaluate), so the same seed gives the same run on CPU and CUDA.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import msgspec
import numba
import numpy as np
import numpy.typing as npt

from gpu.gp.bitwise import expect_translations
from gpu.gp.core import STACK_SIZE
from gpu.gp.evaluate import PopulationEvaluator
from gpu.gp.window import expect_checks
from gpu.small import is_small
from strategies.gp.init import ramped_half_and_half
from strategies.gp.operators import breed, expect_children
from strategies.gp.representation import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_NODES,
    GPRule,
    Population,
    expect_compiles,
)
from strategies.gp.rng import child_seeds

F64 = npt.NDArray[np.float64]


class EvolutionConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Parameters of one GP run (defaults follow the GP trading-rule paper where it says)."""

    population: int = 5000
    generations: int = 30
    seed: int = 1
    tournament: int = 7
    elite: int = 10                 # individuals copied unchanged into the next generation
    p_crossover: float = 0.9
    p_subtree_mutation: float = 0.1
    p_point_mutation: float = 0.1
    p_point_node: float = 0.1       # per-node replacement probability in point mutation
    max_depth: int = DEFAULT_MAX_DEPTH
    max_nodes: int = DEFAULT_MAX_NODES   # per tree
    init_min_depth: int = 2
    init_max_depth: int = 5
    mutation_depth: int = 4         # depth of subtrees grown by subtree mutation
    hall_of_fame: int = 10

    def __post_init__(self) -> None:
        problems = [f"{name} must be >= {low} (got {getattr(self, name)})"
                    for name, low in (("population", 2), ("generations", 1), ("tournament", 1))
                    if getattr(self, name) < low]
        if not 0 <= self.elite < self.population:
            problems.append(f"elite must be in [0, population) (got {self.elite})")
        for name in ("p_crossover", "p_subtree_mutation", "p_point_mutation", "p_point_node"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                problems.append(f"{name} must be in [0, 1] (got {getattr(self, name)})")
        if not 1 <= self.max_depth <= STACK_SIZE - 3:
            problems.append(f"max_depth must be in [1, {STACK_SIZE - 3}] (got {self.max_depth})")
        if not 3 <= self.max_nodes <= 4096:
            problems.append(f"max_nodes must be in [3, 4096] (got {self.max_nodes})")
        if not 1 <= self.init_min_depth <= self.init_max_depth <= self.max_depth:
            problems.append("need 1 <= init_min_depth <= init_max_depth <= max_depth "
                            f"(got {self.init_min_depth}, {self.init_max_depth}, "
                            f"{self.max_depth})")
        problems += [f"{name} must be >= {low} (got {getattr(self, name)})"
                     for name, low in (("mutation_depth", 0), ("hall_of_fame", 1), ("seed", 0))
                     if getattr(self, name) < low]
        if problems:
            raise ValueError("; ".join(problems))


@dataclass
class GenerationStats:
    generation: int
    best: float                 # best fitness (mean excess ROI over buy-and-hold)
    mean: float                 # mean fitness of the population
    mean_size: float            # mean nodes per individual (buy + sell)
    evaluated: int              # individuals evaluated this generation
    eval_seconds: float         # wall time of their evaluation (transfers included)
    seconds: float              # wall time of the whole generation
    gp_ops: int                 # interpreted nodes: sum of program lengths x stocks x days

    @property
    def evals_per_second(self) -> float:
        """Individuals evaluated (each over every stock and day) per second."""
        return self.evaluated / self.eval_seconds if self.eval_seconds > 0 else 0.0

    @property
    def gp_ops_per_second(self) -> float:
        return self.gp_ops / self.eval_seconds if self.eval_seconds > 0 else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {"generation": self.generation, "best": self.best, "mean": self.mean,
                "mean_size": self.mean_size, "evaluated": self.evaluated,
                "evals_per_second": self.evals_per_second,
                "gp_ops_per_second": self.gp_ops_per_second, "eval_seconds": self.eval_seconds,
                "seconds": self.seconds}


@dataclass(frozen=True)
class Champion:
    """A rule with its training fitness, the generation that first produced it and its
    behaviour fingerprint over the training days (gpu.gp.bitwise.behaviours; None when the
    hall of fame was kept without one)."""

    rule: GPRule
    fitness: float
    generation: int
    behaviour: int | None = None


#: fingerprints of individuals `index` of a population (gpu.gp.evaluate.WindowEvaluator.behaviours)
Behaviours = Callable[[Population, npt.NDArray[np.int64]], npt.NDArray[np.uint64]]

#: candidates fingerprinted together (one parallel pass), and the memo's bound
_BEHAVIOUR_BATCH = 256
_MEMO_LIMIT = 200_000


def population_behaviours(evaluator: PopulationEvaluator) -> Behaviours:
    """The evaluator's behaviour fingerprints of chosen individuals of a population."""
    def behaviours(pop: Population, index: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
        return evaluator.behaviours(*pop.take(index).compile())
    return behaviours


class HallOfFame:
    """The `capacity` fittest rules of distinct behaviour seen in any generation (ties:
    earlier first).

    Distinct twice over: the same trees count once, and, when `update` is given the
    evaluator's fingerprints, so do different trees with the same trades (identical daily
    returns over the training days: `x AND x` for `x`, a dead branch): of such twins the
    fitter stays, on equal fitness the earlier. Without that, a converged population fills
    the hall with one behaviour under many spellings. Fingerprints are memoised per tree
    pair, so a clone met again in a later generation costs nothing.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._members: dict[bytes, Champion] = {}
        self._memo: dict[bytes, int] = {}

    def __getstate__(self) -> dict[str, object]:
        # an island ships its hall between epochs: the memo is a cache, it stays behind
        return {"capacity": self.capacity, "_members": self._members, "_memo": {}}

    def update(self, pop: Population, fitness: F64, generation: int,
               behaviours: Behaviours | None = None) -> None:
        # candidates best first: the few dozen best decide almost always; the full order
        # is sorted only if they are exhausted without filling the hall (many duplicates)
        values = np.where(np.isnan(fitness), -np.inf, fitness)
        first = top_order(values, 4 * self.capacity + 16)
        if (self._take(pop, fitness, generation, first, behaviours)
                or first.size == fitness.size):
            return
        self._take(pop, fitness, generation, top_order(values, fitness.size)[first.size:],
                   behaviours)

    def _take(self, pop: Population, fitness: F64, generation: int,
              order: npt.NDArray[np.int64], behaviours: Behaviours | None) -> bool:
        """Offer candidates in `order` (best first); True once none further can enter."""
        candidates = order.tolist()
        for pos, i in enumerate(candidates):
            f = float(fitness[i])
            if not np.isfinite(f):
                return True
            if len(self._members) >= self.capacity and f <= self._worst().fitness:
                return True  # candidates come best first: none further can enter
            key = pop.key(i)
            if key in self._members:
                continue
            b = None
            if behaviours is not None:
                b = self._behaviour(pop, key, candidates[pos:], behaviours)
                twin = next((k for k, c in self._members.items() if c.behaviour == b), None)
                if twin is not None:
                    if f <= self._members[twin].fitness:
                        continue  # the same trades, no fitter: the member stays
                    del self._members[twin]
            self._members[key] = Champion(pop.rule(i), f, generation, b)
            if len(self._members) > self.capacity:
                worst = self._worst()
                self._members = {k: c for k, c in self._members.items() if c is not worst}
        return False

    def _behaviour(self, pop: Population, key: bytes, upcoming: list[int],
                   behaviours: Behaviours) -> int:
        """Fingerprint of the candidate `key` (upcoming[0]); the next candidates not yet
        known are fingerprinted in the same pass."""
        if key not in self._memo:
            batch = [i for i in upcoming[:_BEHAVIOUR_BATCH] if pop.key(i) not in self._memo]
            if len(self._memo) + len(batch) > _MEMO_LIMIT:
                self._memo.clear()
            found = behaviours(pop, np.asarray(batch, np.int64))
            for i, h in zip(batch, found.tolist(), strict=True):
                self._memo[pop.key(i)] = int(h)
        return self._memo[key]

    def _worst(self) -> Champion:
        return self.members[-1]

    @property
    def members(self) -> list[Champion]:
        """Best first; equal fitness: earlier generation, then earlier entry."""
        return sorted(self._members.values(), key=lambda c: (-c.fitness, c.generation))


@dataclass
class EvolutionResult:
    config: EvolutionConfig
    population: Population
    fitness: F64
    history: list[GenerationStats]
    hall_of_fame: list[Champion]
    device: str
    seconds: float
    gp_ops: int = 0
    eval_seconds: float = 0.0

    @property
    def best(self) -> Champion:
        return self.hall_of_fame[0]

    @property
    def gp_ops_per_second(self) -> float:
        return self.gp_ops / self.eval_seconds if self.eval_seconds > 0 else 0.0


def tournament(rng: np.random.Generator, fitness: F64, n: int, size: int
               ) -> npt.NDArray[np.int64]:
    """Indices of n tournament winners (size contestants each, drawn with replacement;
    ties go to the first drawn)."""
    contestants = rng.integers(0, fitness.size, size=(n, size))
    winners = np.empty(n, np.int64)
    if n and is_small(n, size):
        # numpy's argmax takes the first of equal maxima, `_winners`'s rule: the same
        # winners without compiling (gpu.small), in microseconds for a small population
        first = np.argmax(np.asarray(fitness, np.float64)[contestants], axis=1)
        winners[:] = contestants[np.arange(n), first]
    elif n:
        _winners(contestants, np.ascontiguousarray(fitness, np.float64), winners)
    return winners


@numba.njit(cache=True, nogil=True)
def _winners(contestants: npt.NDArray[np.int64], fitness: F64,
             out: npt.NDArray[np.int64]) -> None:
    """out[t] = the contestant of row t with the highest fitness, the first drawn on ties
    (np.argmax's rule; fitness holds no NaN, see _selectable)."""
    for t in range(contestants.shape[0]):  # 175,000 reads: threads would cost more
        best = contestants[t, 0]
        for k in range(1, contestants.shape[1]):
            c = contestants[t, k]
            if fitness[c] > fitness[best]:
                best = c
        out[t] = best


def top_order(values: F64, k: int) -> npt.NDArray[np.int64]:
    """The first k of `np.argsort(-values, kind="stable")` (values without NaN) without
    sorting them all: every value tied with the k-th is kept, so ties stay in index order."""
    n = values.size
    k = min(k, n)
    if k <= 0:
        return np.empty(0, np.int64)
    if k == n:
        return np.asarray(np.argsort(-values, kind="stable"), np.int64)
    kth = -np.partition(-values, k - 1)[k - 1]
    cand = np.flatnonzero(values >= kth)
    return np.asarray(cand[np.argsort(-values[cand], kind="stable")][:k], np.int64)


def _selectable(fitness: F64) -> F64:
    return np.where(np.isnan(fitness), -np.inf, fitness)


@dataclass
class EvolutionState:
    """One population between generations, everything needed to continue the run exactly.

    After `advance` the whole population is evaluated: `fitness[i]` belongs to individual i.
    The island model (strategies.gp.islands) ships this state between processes and edits
    population and fitness between generations (migration); a single run never pauses.
    """

    config: EvolutionConfig
    rng: np.random.Generator
    population: Population
    fitness: F64          # one per individual once generation >= 1; empty before
    generation: int       # generations evaluated so far
    hall: HallOfFame


def start_state(config: EvolutionConfig, rng: np.random.Generator | None = None
                ) -> EvolutionState:
    """The random initial population (not evaluated yet), drawn from `rng` (default: the
    config's seed)."""
    if rng is None:
        rng = np.random.Generator(np.random.PCG64(config.seed))
    pop = ramped_half_and_half(config.population, rng, config.init_min_depth,
                               config.init_max_depth, config.max_nodes)
    return EvolutionState(config=config, rng=rng, population=pop,
                          fitness=np.empty(0, np.float64), generation=0,
                          hall=HallOfFame(config.hall_of_fame))


#: an evolution hands its children to the evaluator in this many parts (each at least
#: MIN_PART), so that breeding part k + 1 overlaps the GPU's evaluation of part k. Each
#: part is a round of hand-offs to the host's threads (breeding, postfix, the checks, the
#: mask programs), which cost more than the overlap saves: the headline's 50 generations
#: took 1.57-1.87 s in 4 parts, 1.36-1.53 s in 2 and 1.49-1.58 s in 1 on a 16-core H200 host
#: (2026-11-28, benchmarks/results/h200-2026-11-28i/, the same fitness in every case)
PARTS = 2
MIN_PART = 2048

Parts = Iterator[tuple[npt.NDArray[np.int16], npt.NDArray[np.int32]]]


def _spans(n: int) -> list[tuple[int, int]]:
    k = max(1, min(PARTS, n // MIN_PART))
    edges = [n * j // k for j in range(k + 1)]
    return list(zip(edges[:-1], edges[1:], strict=True))


def _compiled_parts(todo: Population) -> Parts:
    for a, b in _spans(len(todo)):
        yield todo.rows(a, b).compile()


def _next_generation(state: EvolutionState) -> tuple[Population, F64, Parts, int]:
    """(next population, the elites' carried fitness, its children as compiled parts, their
    number): the `elite` fittest first, unchanged, then children of tournament winners bred
    straight behind them, part by part as the evaluator asks (see `parts_fitness`). Every
    random number is drawn here, before any part is bred, so the parts change nothing."""
    config = state.config
    select = _selectable(state.fitness)
    elite = top_order(select, config.elite)
    n_children = config.population - config.elite
    recipients = tournament(state.rng, select, n_children, config.tournament)
    donors = tournament(state.rng, select, n_children, config.tournament)
    seeds = child_seeds(state.rng, n_children)
    parents = state.population
    pop = Population.uninitialised(config.population, parents.max_nodes)
    pop.ops[:config.elite] = parents.ops[elite]
    pop.sizes[:config.elite] = parents.sizes[elite]
    pop.lengths[:config.elite] = parents.lengths[elite]

    def parts() -> Parts:
        for a, b in _spans(n_children):
            part = breed(parents, recipients[a:b], donors[a:b], state.rng,
                         p_crossover=config.p_crossover, p_subtree=config.p_subtree_mutation,
                         p_point=config.p_point_mutation, p_node=config.p_point_node,
                         max_depth=config.max_depth, mutation_depth=config.mutation_depth,
                         out=pop.rows(config.elite + a, config.elite + b), seeds=seeds[a:b])
            yield part.compile()

    return pop, state.fitness[elite], parts(), n_children


def _expect_work(config: EvolutionConfig, done: int, until: int) -> None:
    """Announce the work of generations done .. until - 1 to the helpers that run small
    work uncompiled (gpu.small): a run too large for their budgets compiles them from the
    start instead of interpreting its first generations and compiling anyway. The whole
    remaining run counts (`config.generations`): an island advances an epoch at a time."""
    until = max(until, config.generations)
    if until <= done:
        return
    bred = (until - max(done, 1)) * (config.population - config.elite)
    evaluated = (until - done) * config.population
    expect_children(bred)
    expect_compiles(evaluated)
    expect_checks(evaluated)
    expect_translations(evaluated)


def advance(evaluator: PopulationEvaluator, state: EvolutionState, until: int,
            progress: Callable[[GenerationStats], None] | None = None
            ) -> list[GenerationStats]:
    """Evaluate generations state.generation .. until - 1, in place; their statistics.

    Generation 0 evaluates the initial population; each later one first breeds from the
    evaluated population (elites keep their fitness), then evaluates the children. Running
    to G at once or in several calls draws the same random numbers in the same order.
    """
    history: list[GenerationStats] = []
    _expect_work(state.config, state.generation, until)
    # the next generation's selection (tournaments, child seeds, elites) runs on a helper
    # thread while this one updates the hall of fame: both only read the evaluated
    # generation, and the hall draws no random number, so the draws stay in their order.
    # Tournaments and the hall took 3.8 and 2.4 ms of a headline generation's ~28 ms of
    # host work on a 16-core H200 host (2026-11-28, benchmarks/results/h200-2026-11-28i/)
    selected: Future[tuple[Population, F64, Parts, int]] | None = None
    with ThreadPoolExecutor(1, thread_name_prefix="gp-selection") as selection:
        while state.generation < until:
            t_gen = time.perf_counter()
            g = state.generation
            if g == 0:  # the initial population: every individual still to evaluate
                pop, carried = state.population, np.empty(0, np.float64)
                parts, n_todo = _compiled_parts(pop), len(pop)
            elif selected is not None:
                pop, carried, parts, n_todo = selected.result()
                selected = None
            else:
                pop, carried, parts, n_todo = _next_generation(state)
            new_fit = evaluator.parts_fitness(parts, n_todo)
            fitness = np.concatenate([carried, new_fit])
            state.population, state.fitness, state.generation = pop, fitness, g + 1
            if g + 1 < until:  # (never past `until`: a later call draws those numbers)
                selected = selection.submit(_next_generation, state)
            state.hall.update(pop, fitness, g, population_behaviours(evaluator))
            history.append(_generation_stats(evaluator, pop, fitness, g, n_todo, t_gen))
            if progress is not None:
                progress(history[-1])
    return history


def _generation_stats(evaluator: PopulationEvaluator, pop: Population, fitness: F64, g: int,
                      n_todo: int, t_gen: float) -> GenerationStats:
    sizes = pop.node_counts()
    finite = fitness[np.isfinite(fitness)]
    return GenerationStats(
        generation=g, best=float(finite.max()) if finite.size else float("nan"),
        mean=float(finite.mean()) if finite.size else float("nan"),
        mean_size=float(sizes.mean()), evaluated=n_todo,
        eval_seconds=evaluator.last_seconds, seconds=time.perf_counter() - t_gen,
        gp_ops=evaluator.last_ops)


def evolve(evaluator: PopulationEvaluator, config: EvolutionConfig,
           progress: Callable[[GenerationStats], None] | None = None) -> EvolutionResult:
    """Run the GP over the evaluator's window (training days) and return the result."""
    t_start = time.perf_counter()
    state = start_state(config)
    history = advance(evaluator, state, config.generations, progress)
    return EvolutionResult(config=config, population=state.population, fitness=state.fitness,
                           history=history, hall_of_fame=state.hall.members,
                           device=evaluator.device, seconds=time.perf_counter() - t_start,
                           gp_ops=sum(s.gp_ops for s in history),
                           eval_seconds=sum(s.eval_seconds for s in history))
