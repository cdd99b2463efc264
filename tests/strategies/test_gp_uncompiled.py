"""Small GP runs uncompiled (gpu.small): the first population, breeding, postfix
compilation, program checks, translation, tournaments and behaviour fingerprints give what
their compiled twins give, bit for bit, over many seeds, parameters and real S&P windows;
and a whole evolution run uncompiled equals the compiled run."""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import pytest

from gpu import small
from gpu.gp import bitwise
from gpu.gp import window as gp_window
from gpu.gp.evaluate import PopulationEvaluator
from strategies.gp import evolution, init, operators
from strategies.gp import representation as rep
from strategies.gp.evolution import EvolutionConfig, EvolutionResult, evolve
from strategies.gp.representation import Population, rules_programs
from strategies.gp.rng import child_seeds
from strategies.gp.window import GPWindow, load_window
from tests.gpu.gp_common import HAND_RULES

SEEDS = range(16)


@pytest.fixture(scope="module")
def window(shared_data: Any) -> GPWindow:
    # 300 + 123 days: periods that end inside a 64-day word
    return load_window(shared_data / "sp500_5yr_daily", 9, 300, 123, start="2014-03-03")


def _same(a: Population, b: Population) -> bool:
    return (a.ops.tobytes() == b.ops.tobytes() and a.sizes.tobytes() == b.sizes.tobytes()
            and a.lengths.tobytes() == b.lengths.tobytes())


def _first_population(seed: int) -> tuple[Population, dict[str, int]]:
    """A seeded population of random size, depths and node limit (a tight one makes trees
    retry shallower), drawn uncompiled and compiled: both returned must be equal."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    lo = int(rng.integers(1, 4))
    params = {"min_depth": lo, "max_depth": int(rng.integers(lo, 7)),
              "max_nodes": int(rng.choice([7, 16, 64]))}
    seeds = child_seeds(rng, n)
    pops = [Population.empty(n, params["max_nodes"]) for _ in range(2)]
    args = [(p.ops, p.sizes, p.lengths, seeds, params["min_depth"], params["max_depth"])
            for p in pops]
    small.run_plain(init._ramped_range, 0, n, *args[0])
    init._ramped_range(0, n, *args[1])
    assert _same(pops[0], pops[1]), params
    return pops[1], params


@pytest.mark.parametrize("seed", SEEDS)
def test_the_first_population_uncompiled_equals_the_compiled(seed: int) -> None:
    pop, _ = _first_population(seed)
    pop.check()


@pytest.mark.parametrize("seed", SEEDS)
def test_breeding_uncompiled_equals_the_compiled(seed: int) -> None:
    parents, params = _first_population(seed + 100)
    rng = np.random.default_rng(seed)
    n = len(parents)
    children = int(rng.integers(1, 2 * n + 2))
    rec, don = rng.integers(0, n, children), rng.integers(0, n, children)
    probs = [float(x) for x in rng.choice([0.0, 0.1, 0.5, 0.9, 1.0], 4)]
    depth = int(rng.integers(params["max_depth"], 9))
    mutation_depth = int(rng.integers(0, 5))
    seeds = child_seeds(rng, children)
    out = [Population.empty(children, parents.max_nodes) for _ in range(2)]
    args: list[tuple[Any, ...]] = [(parents.ops, parents.sizes, parents.lengths, rec, don,
                                    seeds, *probs, depth, mutation_depth, o.ops, o.sizes,
                                    o.lengths) for o in out]
    small.run_plain(operators._breed_range, 0, children, *args[0])
    operators._breed_range(0, children, *args[1])
    assert _same(out[0], out[1]), (probs, depth, mutation_depth)
    out[0].check(max(depth, params["max_depth"]))


def _programs(seed: int) -> tuple[Population, np.ndarray, np.ndarray]:
    """A bred population and its postfix programs, compiled uncompiled and compiled."""
    parents, _ = _first_population(seed)
    rng = np.random.default_rng(seed)
    n = len(parents)
    pop = operators.breed(parents, rng.integers(0, n, n), rng.integers(0, n, n), rng)
    progs = [np.zeros((n, 2 * pop.max_nodes), np.int16) for _ in range(2)]
    lengths = [np.zeros(n, np.int32) for _ in range(2)]
    small.run_plain(rep._compile_population, 0, n, pop.ops, pop.sizes, pop.lengths, progs[0],
                    lengths[0])
    rep._compile_population(0, n, pop.ops, pop.sizes, pop.lengths, progs[1], lengths[1])
    assert progs[0].tobytes() == progs[1].tobytes()
    assert lengths[0].tobytes() == lengths[1].tobytes()
    return pop, progs[1], lengths[1]


@pytest.mark.parametrize("seed", SEEDS)
def test_programs_checks_and_translation_uncompiled_equal_the_compiled(seed: int) -> None:
    pop, progs, lengths = _programs(seed)
    rng = np.random.default_rng(seed)
    n = progs.shape[0]
    # damaged copies: op codes out of range or of the wrong type, cut or stretched lengths
    bad_progs, bad_lengths = progs.copy(), lengths.copy()
    hit = np.asarray(rng.random(n) < 0.5)
    at = rng.integers(0, np.maximum(lengths, 1))
    bad_progs[hit, at[hit]] = rng.integers(-2, 40, int(hit.sum()))
    bad_lengths[rng.random(n) < 0.2] += rng.integers(-3, 3)
    for p, ln in ((progs, lengths), (bad_progs, np.clip(bad_lengths, 0, progs.shape[1]))):
        marks = [np.zeros(n, np.bool_) for _ in range(2)]
        small.run_plain(gp_window._mark_bad_programs, 0, n, p, ln, marks[0])
        gp_window._mark_bad_programs(0, n, p, ln, marks[1])
        assert marks[0].tobytes() == marks[1].tobytes()
    assert not marks[0][~hit & (bad_lengths == lengths)].any()
    code = [np.zeros_like(progs) for _ in range(2)]
    code_lengths = [np.zeros(n, np.int32) for _ in range(2)]
    small.run_plain(bitwise._translate, 0, n, progs, lengths, code[0], code_lengths[0])
    bitwise._translate(0, n, progs, lengths, code[1], code_lengths[1])
    assert code[0].tobytes() == code[1].tobytes()
    assert code_lengths[0].tobytes() == code_lengths[1].tobytes()
    reasons = [np.zeros((n, 2), np.int16) for _ in range(2)]
    sizes = pop.sizes.copy()
    sizes[rng.random(sizes.shape) < 0.01] += 1  # stale sizes, reason 4
    max_depth = int(rng.integers(1, 9))  # reason 3 for the deeper trees
    validators: tuple[Any, Any] = (small.plain(rep._validate_population),
                                   rep._validate_population)
    for out, run in zip(reasons, validators, strict=True):
        run(0, n, pop.ops, sizes, pop.lengths, max_depth, out)
    assert reasons[0].tobytes() == reasons[1].tobytes()


@pytest.mark.parametrize("seed", SEEDS)
def test_one_tree_helpers_uncompiled_equal_the_compiled(seed: int) -> None:
    """What a rule built in Python runs (tree_depth, tree_to_postfix): random op arrays,
    most not trees at all, and real trees."""
    rng = np.random.default_rng(seed)
    pop, _, _ = _programs(seed)
    trees = [rng.integers(-1, 37, int(rng.integers(1, 12))).astype(np.int16)
             for _ in range(50)]
    trees += [pop.ops[i, t, :pop.lengths[i, t]].copy() for i in range(len(pop))
              for t in range(2)]
    for tree in trees:
        n = tree.size
        depths = [np.zeros(n, np.int32) for _ in range(2)]
        got = small.plain(rep.scan_tree)(tree, n, depths[0])
        assert int(got) == rep.scan_tree(tree, n, depths[1])
        if got < 0:
            continue
        assert depths[0].tobytes() == depths[1].tobytes()
        sizes = [np.zeros(n, np.int16) for _ in range(2)]
        small.plain(rep.subtree_sizes)(tree, n, sizes[0])
        rep.subtree_sizes(tree, n, sizes[1])
        assert sizes[0].tobytes() == sizes[1].tobytes()
        post = [np.zeros(n, np.int16) for _ in range(2)]
        small.plain(rep.prefix_to_postfix)(tree, n, sizes[1], depths[1], post[0])
        rep.prefix_to_postfix(tree, n, sizes[1], depths[1], post[1])
        assert post[0].tobytes() == post[1].tobytes()


@pytest.mark.parametrize("seed", SEEDS)
def test_numpy_tournament_equals_the_compiled(seed: int) -> None:
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 600))
    # few distinct values: many ties, which go to the first drawn; -inf for NaN fitness
    fitness = rng.choice([-np.inf, -0.5, 0.0, 0.25, 1.0], size)
    n, k = int(rng.integers(1, 500)), int(rng.integers(1, 9))
    state = rng.bit_generator.state
    got = evolution.tournament(rng, fitness, n, k)
    rng.bit_generator.state = state
    contestants = rng.integers(0, size, size=(n, k))
    want = np.empty(n, np.int64)
    evolution._winners(contestants, fitness, want)
    assert got.tobytes() == want.tobytes()


def test_numpy_fingerprints_equal_the_compiled(window: GPWindow) -> None:
    _, progs, lengths = _programs(3)
    hand, hand_lengths = rules_programs(HAND_RULES)
    for day0, day1 in ((window.train.day0, window.train.day1),
                       (window.test.day0, window.test.day1), (5, 70)):
        masks = bitwise.masks_numpy(window.panel, day0, day1)
        for p, ln in ((progs, lengths), (hand, hand_lengths)):
            code, code_lengths = bitwise.to_mask_programs(p, ln)
            want = np.zeros(p.shape[0], np.uint64)
            bitwise._behaviours_cpu(0, p.shape[0], code, code_lengths, masks, day1 - day0,
                                    want)
            got = [bitwise.behaviour_numpy(code[i], int(code_lengths[i]), masks, day1 - day0)
                   for i in range(p.shape[0])]
            assert got == [int(h) for h in want]
    assert len(set(got)) == len(HAND_RULES)  # four rules, four different trade lists


def _run(window: GPWindow, seed: int, population: int, generations: int) -> EvolutionResult:
    ev = PopulationEvaluator(window.panel, window.close, window.train.day0, window.train.day1,
                             "cpu")
    return evolve(ev, EvolutionConfig(population=population, generations=generations,
                                      seed=seed, elite=2, hall_of_fame=6, tournament=4))


def _fingerprint(r: EvolutionResult) -> tuple[object, ...]:
    return (r.population.ops.tobytes(), r.population.sizes.tobytes(),
            r.population.lengths.tobytes(), r.fitness.tobytes(),
            [(s.best, s.mean, s.mean_size) for s in r.history],
            [(str(c.rule), c.fitness, c.generation, c.behaviour) for c in r.hall_of_fame])


@pytest.mark.parametrize("seed,population,generations", [(1, 120, 4), (7, 64, 6)])
def test_a_small_evolution_uncompiled_equals_the_compiled(
        window: GPWindow, seed: int, population: int, generations: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    runs, spent = [], []
    for machine_code in (False, True):  # as in a cold process, then as with warm caches
        monkeypatch.setattr(small, "_spent", {})
        monkeypatch.setattr(small, "_too_big", set())
        monkeypatch.setattr(small, "has_machine_code", lambda driver, m=machine_code: m)
        runs.append(_fingerprint(_run(window, seed, population, generations)))
        spent.append(set(small._spent))
    assert runs[0] == runs[1]
    # the first run interpreted every GP helper, the second none
    assert {"_breed_range", "_ramped_range", "_compile_population", "_mark_bad_programs",
            "_translate", "_behaviours_cpu"} <= spent[0]
    assert spent[1] == set()


def test_an_announced_large_run_compiles_from_the_start(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    monkeypatch.setattr(small, "_spent", {})
    monkeypatch.setattr(small, "_too_big", set())
    monkeypatch.setattr(small, "has_machine_code", lambda driver: False)
    assert small.expect(_twice, 900, budget=1000) and small.uncompiled(_twice, 600, 1000)
    assert not small.expect(_twice, 500, budget=1000)  # 600 spent + 500 > 1000
    assert not small.uncompiled(_twice, 1, 1000)  # compiled from now on, however small
    evolution._expect_work(EvolutionConfig(population=5000, generations=30), 0, 30)
    assert not small.uncompiled(operators._breed_range, 100, operators.BREED_BUDGET)
    assert small.uncompiled(init._ramped_range, 100, init.RAMPED_BUDGET)  # not announced


@numba.njit(cache=False)
def _inner(x: int) -> int:
    return x + 1


@numba.njit(cache=False)
def _twice(x: int) -> int:
    return _inner(x) * 2


def test_plain_runs_the_whole_call_tree_uncompiled() -> None:
    assert small.run_plain(_twice, 3) == 8
    # neither the driver nor its callee was compiled: a compiled callee called from the
    # interpreter would have been
    assert not _twice.signatures and not _inner.signatures
    assert small.plain(_twice) is small.plain(_twice)  # built once
