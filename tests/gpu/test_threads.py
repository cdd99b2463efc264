"""gpu.threads.run_chunks: a nogil range function over range(n) on threads, as one call."""

from __future__ import annotations

import threading

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.threads import chunk_bounds, chunk_lo, run_chunks


@numba.njit(nogil=True, cache=True)
def _mark(lo: int, hi: int, hits: np.ndarray, square: np.ndarray) -> None:
    for i in range(lo, hi):
        hits[i] += 1
        square[i] = i * i


@given(n=st.integers(0, 5000), chunks=st.integers(1, 64))
@settings(max_examples=200, deadline=None)
def test_chunk_bounds_cover_the_range_once_in_near_equal_pieces(n: int, chunks: int) -> None:
    bounds = chunk_bounds(n, chunks)
    covered = [i for lo, hi in bounds for i in range(lo, hi)]
    assert covered == list(range(n))
    sizes = [hi - lo for lo, hi in bounds]
    assert len(bounds) == max(1, min(chunks, n))
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 1000, 4097])
@pytest.mark.parametrize("threads", [1, 2])
def test_every_index_runs_exactly_once(n: int, threads: int) -> None:
    hits = np.zeros(n, np.int64)
    square = np.zeros(n, np.int64)
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, int(getattr(numba.config, "NUMBA_NUM_THREADS", 1))))
    try:
        run_chunks(_mark, n, hits, square, min_chunk=8)
    finally:
        numba.set_num_threads(before)
    assert (hits == 1).all()
    np.testing.assert_array_equal(square, np.arange(n) ** 2)


def test_the_calling_threads_numba_thread_count_limits_the_chunks() -> None:
    seen: list[str] = []

    def record(lo: int, hi: int) -> None:
        seen.append(threading.current_thread().name)

    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        run_chunks(record, 10_000, min_chunk=1)
    finally:
        numba.set_num_threads(before)
    assert seen == [threading.current_thread().name]


def test_an_error_in_a_chunk_reaches_the_caller() -> None:
    def fail_late(lo: int, hi: int) -> None:
        if lo == 0:
            raise ValueError("chunk at 0 failed")

    if int(getattr(numba.config, "NUMBA_NUM_THREADS", 1)) < 2:
        pytest.skip("one numba thread: a single chunk")
    with pytest.raises(ValueError, match="chunk at 0 failed"):
        run_chunks(fail_late, 1000, min_chunk=1)


@numba.njit(parallel=True, cache=True)
def _mark_parallel(chunks: int, n: int, hits: np.ndarray, square: np.ndarray) -> None:
    for k in numba.prange(chunks):
        _mark(chunk_lo(k, chunks, n), chunk_lo(k + 1, chunks, n), hits, square)


@given(n=st.integers(0, 3000), chunks=st.integers(1, 40))
@settings(max_examples=200, deadline=None)
def test_chunk_lo_splits_as_chunk_bounds(n: int, chunks: int) -> None:
    if n < chunks:
        chunks = max(1, n)
    want = chunk_bounds(n, chunks)
    got = [(chunk_lo(k, chunks, n), chunk_lo(k + 1, chunks, n)) for k in range(chunks)]
    assert got == want


@pytest.mark.parametrize("most", [1 << 20, 0])  # Python threads / numba's prange
@pytest.mark.parametrize("n", [0, 1, 33, 2000])
def test_parallel_range_runs_every_index_once_on_either_path(
        most: int, n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu import threads

    monkeypatch.setattr(threads, "CHUNKS_MAX_THREADS", most)
    hits = np.zeros(n, np.int64)
    square = np.zeros(n, np.int64)
    threads.parallel_range(_mark, _mark_parallel, n, hits, square, min_chunk=8)
    assert (hits == 1).all()
    np.testing.assert_array_equal(square, np.arange(n) ** 2)


def _chunks_in_child(n: int) -> int:
    hits = np.zeros(n, np.int64)
    square = np.zeros(n, np.int64)
    run_chunks(_mark, n, hits, square, min_chunk=1)
    return int(hits.sum())


def test_a_forked_child_runs_chunks_after_the_parent_did() -> None:
    """The parent's pool threads do not survive a fork: a child that inherited the pool
    object must start its own, not wait on threads that are not there."""
    import multiprocessing

    if int(getattr(numba.config, "NUMBA_NUM_THREADS", 1)) < 2:
        pytest.skip("one numba thread: run_chunks never uses the pool")
    assert _chunks_in_child(1000) == 1000  # the parent's pool now exists, with threads
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        got = pool.apply_async(_chunks_in_child, (1000,)).get(timeout=120)
    assert got == 1000
