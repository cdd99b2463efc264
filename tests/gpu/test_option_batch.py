"""Batched option launches: several groups in one launch, several launches in flight."""

from __future__ import annotations

import numpy as np
import pytest

from gpu.device import cuda_present
from gpu.options import core
from gpu.options.batch import BatchPricer
from gpu.options.engines import make_grid, option_params, price_params

needs_cuda = pytest.mark.skipif(not cuda_present(), reason="no CUDA device or simulator")

# tiny grids: the CUDA simulator runs every thread in Python
TINY = make_grid("seed", price_steps=16, time_steps=3)


def groups() -> list[np.ndarray]:
    """Three groups; expiries ascending within each, so the launch reorders the rows."""
    a = option_params(100.0, [90.0, 100.0, 110.0], [0.05, 0.5, 1.0], 0.25, 0.01,
                      [True, False, True], True)
    b = option_params(50.0, [45.0, 55.0], [0.1, 0.9], 0.4, 0.0, False, True)
    c = option_params(20.0, 20.0, 0.3, 0.3, 0.02, True, False)
    return [a, b, c]


def with_spot(rows: np.ndarray, spot: float) -> np.ndarray:
    out = rows.copy()
    out[:, core.SPOT] = spot
    return out


def twin(rows: np.ndarray) -> np.ndarray:
    v = price_params(rows, TINY, "cpu")
    return np.stack([v.price, v.delta, v.gamma], axis=1)


def test_cpu_batch_prices_every_subset_like_each_group_alone() -> None:
    g = groups()
    pricer = BatchPricer([len(x) for x in g], TINY, "cpu", slots=2)
    for subset, spots in (((0, 1, 2), (101.0, 49.0, 21.0)), ((2, 0), (19.0, 97.0)),
                          ((1,), (52.5,))):
        rows = [with_spot(g[i], s) for i, s in zip(subset, spots, strict=True)]
        slot = pricer.free_slot()
        assert slot is not None
        pricer.launch(slot, rows, subset)
        got = pricer.results(slot)
        o = 0
        for r in rows:  # bit for bit: the rows' order inside the launch changes nothing
            np.testing.assert_array_equal(got[o:o + len(r)], twin(r))
            o += len(r)
        assert o == len(got)


def test_slots_are_exclusive_until_their_results_are_taken() -> None:
    g = groups()
    pricer = BatchPricer([len(x) for x in g], TINY, "cpu", slots=2)
    pricer.launch(0, [g[0]], (0,))
    assert pricer.free_slot() == 1
    pricer.launch(1, [g[1]], (1,))
    assert pricer.free_slot() is None
    with pytest.raises(RuntimeError, match="busy"):
        pricer.launch(0, [g[2]], (2,))
    np.testing.assert_array_equal(pricer.results(1), twin(g[1]))
    np.testing.assert_array_equal(pricer.results(0), twin(g[0]))
    assert pricer.free_slot() == 0
    with pytest.raises(ValueError, match="exceed"):
        pricer.launch(0, [g[0], g[0], g[0]], (0, 0, 0))
    with pytest.raises(ValueError, match="slots"):
        BatchPricer([1], TINY, "cpu", slots=0)


@needs_cuda
def test_cuda_batch_with_launches_in_flight_agrees_with_the_cpu_twin() -> None:
    """Two slots in flight at once on the device (the simulator at this size), each a batch
    of groups in a different order: every group's values as its CPU twin's."""
    g = groups()
    pricer = BatchPricer([len(x) for x in g], TINY, "cuda", slots=2)
    first = [with_spot(g[0], 103.0), with_spot(g[1], 48.0)]
    second = [with_spot(g[2], 20.5), with_spot(g[1], 51.0), with_spot(g[0], 99.0)]
    pricer.launch(0, first, (0, 1))
    pricer.launch(1, second, (2, 1, 0))
    for slot, rows in ((0, first), (1, second)):
        pricer.wait(slot)
        assert pricer.done(slot)
        got = pricer.results(slot)
        want = twin(np.concatenate(rows))
        np.testing.assert_allclose(got[:, core.PRICE], want[:, core.PRICE], rtol=1e-5,
                                   atol=1e-6)  # float32 on the device
        np.testing.assert_allclose(got[:, core.DELTA], want[:, core.DELTA], rtol=1e-4,
                                   atol=1e-6)


def random_groups(seed: int) -> list[np.ndarray]:
    """Three groups of American options (40, 300 and 7), random strikes, expiries, rights."""
    rng = np.random.default_rng(seed)
    return [option_params(100.0, rng.uniform(60, 140, n), rng.uniform(0.01, 2.0, n), 0.3,
                          0.02, rng.random(n) < 0.5, True) for n in (40, 300, 7)]


@pytest.mark.gpu
def test_prebound_batch_launch_equals_the_ordinary_launch(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    rows = random_groups(2)
    monkeypatch.setenv("GPU_OPTIONS_PREBIND", "1")
    bound = BatchPricer([len(r) for r in rows], "seed", "cuda", slots=3)
    monkeypatch.setenv("GPU_OPTIONS_PREBIND", "0")
    plain = BatchPricer([len(r) for r in rows], "seed", "cuda", slots=1)
    assert bound.prebound and not plain.prebound
    for subset in ((0, 1, 2), (1,), (2, 0)):
        parts = [with_spot(rows[i], 95.0 + i) for i in subset]
        for i in range(bound.slots):
            bound.launch(i, parts, subset)
        plain.launch(0, parts, subset)
        plain.wait(0)
        ref = plain.results(0)
        for i in range(bound.slots):
            bound.wait(i)
            np.testing.assert_array_equal(bound.results(i), ref)


def _spot_run(pricer: BatchPricer, g: list[np.ndarray]) -> None:
    """Launches of one group at a time, rows in place (spot given) or regathered, checked
    against the twin: same key and new spot, another group in the same slot, a key change
    (new expiries), then the first key again."""
    later = g[0].copy()
    later[:, core.EXPIRY] -= 0.01  # the date rolled: a new key, new expiry columns
    steps = [(g[0], ("a", 1), 101.0), (g[0], ("a", 1), 98.5), (g[0], ("a", 1), 98.5),
             (g[1], ("b", 1), 52.0), (g[0], ("a", 1), 99.0), (later, ("a", 2), 99.0),
             (later, ("a", 2), 104.0), (g[0], ("a", 1), 97.0)]
    for rows, key, spot in steps:
        for slot in range(pricer.slots):
            rows_now = with_spot(rows, spot + slot)
            pricer.launch(slot, [rows_now], key, spot + slot)
        for slot in range(pricer.slots):
            pricer.wait(slot)
            dest = np.full((3, len(rows)), np.nan)
            pricer.results_into(slot, 0, dest)
            pricer.release(slot)
            want = twin(with_spot(rows, spot + slot)).T
            if pricer.device == "cpu":
                np.testing.assert_array_equal(dest, want)
            else:
                np.testing.assert_allclose(dest[core.PRICE], want[core.PRICE], rtol=1e-5,
                                           atol=1e-6)


def test_rows_in_place_take_only_the_new_spot_and_regather_on_a_new_key() -> None:
    g = groups()
    _spot_run(BatchPricer([len(x) for x in g], TINY, "cpu", slots=2), g)


def test_results_into_matches_results_part_by_part_and_release_frees() -> None:
    g = groups()
    pricer = BatchPricer([len(x) for x in g], TINY, "cpu", slots=1)
    parts = [with_spot(g[2], 20.0), with_spot(g[0], 102.0)]
    pricer.launch(0, parts, (2, 0))
    dest = [np.zeros((3, len(p))) for p in parts]
    o = 0
    for p, d in zip(parts, dest, strict=True):
        pricer.results_into(0, o, d)
        np.testing.assert_array_equal(d, twin(p).T)
        o += len(p)
    assert pricer.free_slot() is None
    pricer.release(0)
    assert pricer.free_slot() == 0


@needs_cuda
def test_cuda_rows_in_place_agree_with_the_twin() -> None:
    g = groups()
    _spot_run(BatchPricer([len(x) for x in g], TINY, "cuda", slots=2), g)


@pytest.mark.gpu
def test_raw_driver_launch_equals_numbas_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ctypes cuLaunchKernel path (GPU_RAW_LAUNCH=1; a launch of all the rows replayed
    as a CUDA graph with its event's record) against numba's own launcher for bound
    launches (=0), bit for bit, over three batch shapes and in-place spot updates."""
    rows = random_groups(3)
    monkeypatch.setenv("GPU_RAW_LAUNCH", "1")
    raw = BatchPricer([len(r) for r in rows], "seed", "cuda", slots=2)
    monkeypatch.setenv("GPU_RAW_LAUNCH", "0")
    numba_bound = BatchPricer([len(r) for r in rows], "seed", "cuda", slots=2)
    assert raw.launcher == "ctypes+graph" and numba_bound.launcher == "cuda.core"
    for subset, spot in (((0, 1, 2), None), ((1,), 97.0), ((1,), 103.0), ((2, 0), None)):
        parts = [with_spot(rows[i], spot or 95.0 + i) for i in subset]
        for p in (raw, numba_bound):
            p.launch(0, parts, subset, spot)
            p.wait(0)
        np.testing.assert_array_equal(raw.results(0), numba_bound.results(0))


@pytest.mark.parametrize("seed", [0, 1])
def test_spots_of_several_groups_in_place_equal_a_regather(seed: int) -> None:
    """A seeded sequence of launches of group subsets, each with one spot per group
    (`spots`): rows kept in place while the key stays, regathered when it changes, priced
    exactly like each group's rows at its spot."""
    g = groups()
    rng = np.random.default_rng(seed)
    pricer = BatchPricer([len(x) for x in g], TINY, "cpu", slots=2)
    subsets = [(0, 1, 2), (2, 0), (1,)]
    for _ in range(12):
        subset = subsets[int(rng.integers(len(subsets)))]
        spots = [float(rng.uniform(15.0, 120.0)) for _ in subset]
        parts = [with_spot(g[i], sp) for i, sp in zip(subset, spots, strict=True)]
        slot = int(rng.integers(2))
        pricer.launch(slot, parts, subset, spots=spots)
        got = pricer.results(slot)
        np.testing.assert_array_equal(got, twin(np.concatenate(parts)))


def test_results_by_column_are_the_results_transposed() -> None:
    g = groups()
    pricer = BatchPricer([len(x) for x in g], TINY, "cpu", slots=1)
    parts = [with_spot(g[1], 99.0), with_spot(g[2], 21.0)]
    pricer.launch(0, parts, (1, 2))
    cols = pricer.results_by_column(0)
    assert cols.shape == (core.N_OUT, sum(len(p) for p in parts))
    np.testing.assert_array_equal(cols, twin(np.concatenate(parts)).T)
    assert pricer.free_slot() == 0
