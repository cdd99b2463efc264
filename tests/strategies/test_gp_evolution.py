"""The GP loop: a seed reproduces a run exactly (also across evaluator devices), a
different seed gives a different run, elitism keeps the best, selection is a tournament,
the hall of fame holds the best distinct rules with their true fitness."""

from __future__ import annotations

import numpy as np
import pytest

from gpu.device import cuda_present, cuda_simulated
from gpu.gp import evaluate as gp_eval
from strategies.gp import evolution, reference
from strategies.gp.evolution import EvolutionConfig, EvolutionResult, evolve, tournament
from strategies.gp.init import ramped_half_and_half
from strategies.gp.representation import Population, rules_programs
from strategies.gp.window import GPWindow, load_window


@pytest.fixture(scope="module")
def window(shared_data) -> GPWindow:
    return load_window(shared_data / "sp500_5yr_daily", 5, 260, 0, start="2014-01-02")


def run(window: GPWindow, seed: int, device: str = "cpu", population: int = 80,
        generations: int = 5, days: int | None = None, stocks: int | None = None
        ) -> EvolutionResult:
    panel, close = window.panel, window.close
    if days is not None or stocks is not None:
        panel = np.ascontiguousarray(panel[:days, :, :stocks])
        close = np.ascontiguousarray(close[:days, :stocks])
    ev = gp_eval.PopulationEvaluator(panel, close, 0, panel.shape[0], device)
    cfg = EvolutionConfig(population=population, generations=generations, seed=seed, elite=2,
                          hall_of_fame=5)
    return evolve(ev, cfg)


def fingerprint(r: EvolutionResult) -> tuple[object, ...]:
    return (r.population.ops.tobytes(), r.population.lengths.tobytes(), r.fitness.tobytes(),
            [(s.best, s.mean, s.mean_size) for s in r.history],
            [(str(c.rule), c.fitness, c.generation) for c in r.hall_of_fame])


def test_same_seed_same_run_other_seed_other_run(window: GPWindow) -> None:
    a = run(window, seed=3)
    b = run(window, seed=3)
    c = run(window, seed=4)
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(a) != fingerprint(c)
    a.population.check(EvolutionConfig().max_depth)


@pytest.mark.skipif(not cuda_present(), reason="no CUDA device or simulator")
def test_same_seed_same_run_on_cpu_and_cuda(window: GPWindow) -> None:
    # simulator: tiny (12 individuals x 3 stocks x 50 days x 2 generations)
    kw = {"population": 12, "generations": 2, "days": 50, "stocks": 3}
    cpu = run(window, seed=5, device="cpu", **kw)
    gpu = run(window, seed=5, device="cuda", **kw)
    assert fingerprint(cpu) == fingerprint(gpu)


def test_elitism_keeps_the_best_and_evolution_improves(window: GPWindow) -> None:
    r = run(window, seed=7, population=150, generations=6)
    best = [s.best for s in r.history]
    assert all(b2 >= b1 for b1, b2 in zip(best, best[1:], strict=False))
    assert r.history[-1].mean > r.history[0].mean
    assert r.history[0].evaluated == 150 and r.history[1].evaluated == 148


def test_hall_of_fame_is_distinct_sorted_and_true(window: GPWindow) -> None:
    r = run(window, seed=8, population=100, generations=4)
    hof = r.hall_of_fame
    assert len(hof) == 5
    assert len({str(c.rule) for c in hof}) == 5
    fits = [c.fitness for c in hof]
    assert fits == sorted(fits, reverse=True)
    assert hof[0].fitness == max(s.best for s in r.history)
    ref_fit, _ = reference.fitness([c.rule for c in hof], window.panel, window.close)
    assert np.array_equal(ref_fit, np.array(fits))
    # and no individual of the final population beats the last member unless it is in it
    programs, lengths = rules_programs([c.rule for c in hof])
    assert programs.shape[0] == 5 and lengths.min() >= 2


def test_tournament_picks_the_fittest_contestant() -> None:
    fitness = np.random.default_rng(0).normal(size=50)
    fitness[7] = fitness[9] = 10.0  # a tie: the first drawn wins
    won = tournament(np.random.default_rng(42), fitness, 200, 7)
    drawn = np.random.default_rng(42).integers(0, 50, size=(200, 7))
    for k in range(200):
        best = max(drawn[k], key=lambda i: fitness[i])  # max keeps the first of equals
        assert won[k] == best


@pytest.mark.parametrize("bad", [{"population": 1}, {"generations": 0}, {"tournament": 0},
                                 {"elite": 100}, {"p_crossover": 1.5}, {"max_depth": 40},
                                 {"init_max_depth": 9, "max_depth": 8}, {"max_nodes": 2}])
def test_bad_config_is_a_value_error(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        EvolutionConfig(**{"population": 100, **bad})  # type: ignore[arg-type]


@pytest.mark.gpu
def test_same_seed_same_run_on_cpu_and_real_gpu(shared_data) -> None:
    if cuda_simulated():
        pytest.skip("real GPU only")
    w = load_window(shared_data / "sp500_5yr_daily", 16, 256, 0)
    cpu = run(w, seed=11, device="cpu", population=2000, generations=3)
    gpu = run(w, seed=11, device="cuda", population=2000, generations=3)
    assert fingerprint(cpu) == fingerprint(gpu)


@pytest.mark.parametrize("k", [0, 1, 5, 49, 50, 51, 300, 1000])
def test_top_order_is_the_head_of_a_stable_descending_sort(k: int) -> None:
    rng = np.random.default_rng(k)
    values = rng.integers(-5, 6, 300).astype(np.float64)  # many ties across the k-th
    values[[3, 70]] = -np.inf
    assert np.array_equal(evolution.top_order(values, k),
                          np.argsort(-values, kind="stable")[:min(k, values.size)])


def reference_hall(capacity: int, generations: list[tuple[Population, np.ndarray]]
                   ) -> list[tuple[bytes, float, int]]:
    """The hall of fame by its definition: every individual offered in full stable order."""
    members: dict[bytes, tuple[float, int]] = {}
    for g, (pop, fitness) in enumerate(generations):
        for i in np.argsort(-fitness, kind="stable"):
            f = float(fitness[i])
            if not np.isfinite(f):
                break
            if pop.key(int(i)) not in members:
                members[pop.key(int(i))] = (f, g)
        best = sorted(members.items(), key=lambda kv: (-kv[1][0], kv[1][1]))[:capacity]
        members = dict(best)
    return [(k, f, g) for k, (f, g) in sorted(members.items(),
                                              key=lambda kv: (-kv[1][0], kv[1][1]))]


def test_hall_of_fame_looks_past_its_candidates_when_they_repeat() -> None:
    # 60 copies of the fittest individual fill more than the first candidates (4 x 3 + 16):
    # the hall must still find the next distinct rules further down
    rng = np.random.default_rng(5)
    base = ramped_half_and_half(200, rng, 2, 4)
    copies = Population.concat([base.take(np.zeros(60, np.int64)), base.take(np.arange(1, 200))])
    fitness = rng.normal(size=len(copies))
    fitness[:60] = 5.0
    fitness[100] = np.nan
    second = (copies, rng.normal(size=len(copies)))
    hall = evolution.HallOfFame(3)
    hall.update(copies, fitness, 0)
    hall.update(*second, 1)
    want = reference_hall(3, [(copies, fitness), second])
    got = [(c.rule.buy.tobytes() + b"|" + c.rule.sell.tobytes(), c.fitness, c.generation)
           for c in hall.members]
    assert got == want
    assert len({k for k, _, _ in got}) == 3


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not cuda_present(), reason="no CUDA device or simulator"))])
def test_children_bred_in_parts_equal_one_breeding(window: GPWindow, device: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # parts of 16 children: the evaluator asks for part k + 1 while part k evaluates. In
    # the simulator, 60 days of 3 stocks (the population, hence the parts, unchanged)
    data: dict[str, int] = {"days": 60, "stocks": 3} if device == "cuda" and cuda_simulated() \
        else {}
    whole = run(window, seed=9, device=device, population=70, generations=3, **data)
    monkeypatch.setattr(evolution, "MIN_PART", 16)
    assert evolution._spans(68) == [(0, 34), (34, 68)]
    monkeypatch.setattr(evolution, "PARTS", 4)
    assert evolution._spans(68) == [(0, 17), (17, 34), (34, 51), (51, 68)]
    assert fingerprint(run(window, seed=9, device=device, population=70, generations=3,
                           **data)) == fingerprint(whole)


def test_selection_beside_the_hall_is_the_serial_run(window: GPWindow) -> None:
    """`advance` draws generation g + 1's tournaments on a helper thread while it updates
    the hall with generation g: the run, the hall and the random stream afterwards are
    those of the serial loop (every step in turn on one thread), whether the generations
    run in one call or in several (the island model's epochs), and no call draws past
    its last generation."""
    ev = gp_eval.PopulationEvaluator(window.panel, window.close, 0, window.panel.shape[0], "cpu")
    cfg = EvolutionConfig(population=120, generations=6, seed=11, elite=2, hall_of_fame=5)

    def summary(st: evolution.EvolutionState) -> tuple[object, ...]:
        return (st.population.ops.tobytes(), st.population.lengths.tobytes(),
                st.fitness.tobytes(), [(str(c.rule), c.fitness, c.generation)
                                       for c in st.hall.members],
                st.rng.bit_generator.state["state"])

    serial = evolution.start_state(cfg)
    for g in range(cfg.generations):
        if g == 0:
            pop, carried = serial.population, np.empty(0, np.float64)
            parts, n = evolution._compiled_parts(pop), len(pop)
        else:
            pop, carried, parts, n = evolution._next_generation(serial)
        fit = np.concatenate([carried, ev.parts_fitness(parts, n)])
        serial.population, serial.fitness, serial.generation = pop, fit, g + 1
        serial.hall.update(pop, fit, g, evolution.population_behaviours(ev))
    whole = evolution.start_state(cfg)
    evolution.advance(ev, whole, cfg.generations)
    epochs = evolution.start_state(cfg)
    for until in (1, 2, 4, 6):
        evolution.advance(ev, epochs, until)
        assert epochs.generation == until
    assert summary(whole) == summary(serial)
    assert summary(epochs) == summary(serial)
