"""The GP loops run through `gpu.threads.parallel_range` give the same results on both of its
paths (chunks on Python threads; numba's prange over chunks) and as one serial call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import pytest

from gpu import threads
from gpu.gp import bitwise as gp_bitwise
from gpu.gp.window import _check_programs, fitness_from_cash
from strategies.gp.window import GPWindow, load_window
from tests.gpu.gp_common import bred_population


@pytest.fixture(scope="module")
def window(shared_data: Any) -> GPWindow:
    return load_window(shared_data / "sp500_5yr_daily", 4, 140, 60)


def both_paths(run: Callable[[], Any], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """run() with every loop on Python threads, on numba's prange and on one thread."""
    out = []
    for most in (1 << 20, 0):  # threads path / prange path (any thread count > 0)
        monkeypatch.setattr(threads, "CHUNKS_MAX_THREADS", most)
        out.append(run())
    before = numba.get_num_threads()
    numba.set_num_threads(1)  # one chunk: a single serial call on either path
    try:
        out.append(run())
    finally:
        numba.set_num_threads(before)
    return out


def test_breeding_is_the_same_on_every_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # bred_population breeds three generations from a seeded start
    pops = both_paths(lambda: bred_population(600, seed=3, max_depth=6), monkeypatch)
    for pop in pops[1:]:
        for field in ("ops", "sizes", "lengths"):
            np.testing.assert_array_equal(getattr(pop, field), getattr(pops[0], field))


def test_compile_check_translate_behaviours_and_fitness_are_the_same_on_every_path(
        window: GPWindow, monkeypatch: pytest.MonkeyPatch) -> None:
    pop = bred_population(700, seed=5, max_depth=6)
    day0, day1 = window.train.day0, window.train.day1
    masks = gp_bitwise.build_masks(window.panel, day0, day1, "cpu")
    rng = np.random.default_rng(9)
    cash = rng.uniform(5e3, 2e4, (700, 4))
    bh = rng.uniform(5e3, 2e4, 4)

    def run() -> tuple[np.ndarray, ...]:
        programs, lengths = pop.compile()
        checked = _check_programs(programs, lengths)
        code, code_lengths = gp_bitwise.to_mask_programs(*checked)
        fingerprints = gp_bitwise.behaviours(programs, lengths, masks, day1 - day0)
        # a hall of fame's batch (a few dozen programs, a program a chunk): the same values
        few = gp_bitwise.behaviours(programs[:37], lengths[:37], masks, day1 - day0)
        np.testing.assert_array_equal(few, fingerprints[:37])
        return programs, lengths, code, code_lengths, fingerprints, fitness_from_cash(cash, bh)

    results = both_paths(run, monkeypatch)
    for other in results[1:]:
        for got, want in zip(other, results[0], strict=True):
            np.testing.assert_array_equal(got, want)


def test_a_bad_program_is_found_first_on_every_path(monkeypatch: pytest.MonkeyPatch) -> None:
    programs, lengths = bred_population(900, seed=7, max_depth=6).compile()
    lengths = lengths.copy()
    lengths[[611, 700]] = 1  # too short to be two trees
    for most in (1 << 20, 0):
        monkeypatch.setattr(threads, "CHUNKS_MAX_THREADS", most)
        with pytest.raises(ValueError, match="program 611 "):
            _check_programs(programs, lengths)


@pytest.mark.parametrize("preset", [None, "ACTIVE"])
def test_numbas_openmp_threads_sleep_between_loops_unless_the_user_says(
        preset: str | None) -> None:
    """gpu.threads sets OpenMP's passive wait before numba loads its threading layer (the
    chunk threads share the cores with it); a value already in the environment is kept."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "KMP_BLOCKTIME")}
    if preset is not None:
        env["OMP_WAIT_POLICY"] = preset
    code = "import os, gpu.threads; print(os.environ['OMP_WAIT_POLICY'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=Path(__file__).resolve().parents[2], check=True)
    assert out.stdout.strip() == (preset or "PASSIVE")


def test_few_rules_a_chunk_each_give_the_serial_codes_and_cash(
        window: GPWindow, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ensemble's decisions and a hall of fame's money (a few rules over a large
    window: `threads.programs_per_chunk` gives each its own chunk) equal one serial call;
    here every program's window counts as large."""
    from gpu.gp.evaluate import PopulationEvaluator, decision_codes

    assert threads.programs_per_chunk(768 * 128) == 1  # the headline's window
    assert threads.programs_per_chunk(60 * 4) == -(-threads.MIN_CHUNK_CELLS // 240)
    assert threads.programs_per_chunk(0) == threads.MIN_CHUNK_CELLS
    programs, lengths = bred_population(7, seed=11, max_depth=6).compile()
    day0, day1 = window.train.day0, window.train.day1

    def run() -> tuple[np.ndarray, ...]:
        codes = decision_codes(programs, lengths, window.panel, day0, day1, "cpu")
        cash = [PopulationEvaluator(window.panel, window.close, day0, day1, "cpu",
                                    method).final_cash(programs, lengths)
                for method in ("stack", "bitwise")]
        return codes, *cash

    monkeypatch.setattr(threads, "MIN_CHUNK_CELLS", 1)
    many = run()
    monkeypatch.setattr(threads, "MIN_CHUNK_CELLS", 1 << 40)  # one chunk: serial
    serial = run()
    for got, want in zip(many, serial, strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(many[1], many[2])  # both evaluators, the same cash
