"""Least-correlated k of n: exact search over all C(n, k) combinations on the GPU or the CPU.

`least_correlated(corr, k)` returns the k indices whose correlation sub-matrix is closest to
the identity (Frobenius norm), searching every combination (gpu.subset.core: unranking with
64-bit ranks, stepping inside a thread, packed lower triangle of squared correlations).

CUDA: the packed triangle (n(n−1)/2 float64) is copied into shared memory by every block
when it fits (n ≤ 106; larger n read it from global memory through the cache); each thread
scans `chunk` consecutive ranks, then the block reduces its (objective, rank) pairs in
shared memory, smallest objective and then lowest rank first. A search of more than
`LAUNCH_RANKS` combinations is several launches. CPU twin: the same core over the same
ranges with `prange`. The final (objective, rank) minimum is taken on the host, so the two
backends return the same subset and the same objective bit for bit.

`max_seconds`: the first launch (after a warm-up that compiles the kernel) measures the
rate; a search whose estimated time exceeds the limit stops with `SearchTooLong`, which
carries the estimate.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import cuda, float64, int64, njit, prange
from numba.core.errors import NumbaPerformanceWarning

from gpu.device import resolve_device
from gpu.small import SMALL_CELLS, interpreted, uncompiled
from gpu.subset import core as subset_core
from gpu.threads import chunk_lo, parallel_range
from gpu.twin import compile_twin, cuda_kernel_cache, flush_stale_caches

K_MAX = 32
"""Largest subset (local arrays of a CUDA thread have a fixed size)."""
BLOCK = 256
SHARED_BYTES_MAX = 48 * 1024
REDUCTION_BYTES = 2 * BLOCK * 8  # s_value (float64) and s_rank (int64) in _block_search
LAUNCH_RANKS = 1 << 34
"""Most combinations per launch: a few seconds on one GPU at the rates in
benchmarks/results/h200-2026-11-22-timeseries-subset/README.md."""
CALIBRATION_RANKS = 1 << 24
INT64_MAX = np.iinfo(np.int64).max

flush_stale_caches(__file__, [subset_core.__file__])
_twin = compile_twin(__name__, subset_core.CORE_FUNCTIONS)
_scan_cpu = _twin.cpu.scan_ranks
_scan_gpu = _twin.cuda.scan_ranks


class SearchTooLong(ValueError):
    """The exhaustive search would take longer than allowed; `.estimate_seconds` says how long."""

    def __init__(self, message: str, estimate_seconds: float) -> None:
        super().__init__(message)
        self.estimate_seconds = estimate_seconds


# ---------------------------------------------------------------- CPU twin


def _ranges_cpu(q: Any, binom: Any, n: int, k: int, first: int, total: int, chunk: int,
                out_value: Any, out_rank: Any, compiled: bool = True) -> None:
    """Each item's best subset of its `chunk` ranks, in parallel (`gpu.threads`), or with
    `compiled` False by the interpreter over the plain core (a small search, gpu.small)."""
    if not compiled:
        _ranges_python(0, out_value.shape[0], q, binom, n, k, first, total, chunk, out_value,
                       out_rank)
        return
    parallel_range(_ranges_range, _ranges_parallel, out_value.shape[0], q, binom, n, k,
                   first, total, chunk, out_value, out_rank, min_chunk=1)


@njit(parallel=True, cache=True)
def _ranges_parallel(chunks: int, n_items: int, q: Any, binom: Any, n: int, k: int,
                     first: int, total: int, chunk: int, out_value: Any,
                     out_rank: Any) -> None:
    for c in prange(chunks):
        _ranges_range(chunk_lo(c, chunks, n_items), chunk_lo(c + 1, chunks, n_items), q,
                      binom, n, k, first, total, chunk, out_value, out_rank)


@njit(cache=True, nogil=True)
def _ranges_range(lo: int, hi: int, q: Any, binom: Any, n: int, k: int, first: int,
                  total: int, chunk: int, out_value: Any, out_rank: Any) -> None:
    for item in range(lo, hi):
        rank0 = first + item * chunk
        count = min(chunk, total - rank0)
        comb = np.empty(K_MAX, np.int64)
        partial = np.empty(K_MAX, np.float64)
        v, r = _scan_cpu(q, binom, n, k, rank0, count, comb, partial)
        out_value[item] = v
        out_rank[item] = r


#: `_ranges_range` run by the interpreter over the plain core (gpu.small)
_ranges_python = interpreted(_ranges_range, _scan_cpu=subset_core.scan_ranks)
#: combinations x k a process searches uncompiled: a few us a combination interpreted, so
#: some 0.1 s at most, against 1.2 s to compile `_ranges_range` (2-core dev VM, 2026-11-28)
SUBSET_BUDGET = SMALL_CELLS


# ---------------------------------------------------------------- CUDA


@cuda.jit(device=True)
def _block_search(qs: Any, binom: Any, n: int, k: int, first: int, total: int, chunk: int,
                  out_value: Any, out_rank: Any) -> None:
    tid: int = cuda.threadIdx.x  # type: ignore[assignment]
    block: int = cuda.blockIdx.x  # type: ignore[assignment]
    width: int = cuda.blockDim.x  # type: ignore[assignment]
    s_value = cuda.shared.array(BLOCK, float64)
    s_rank = cuda.shared.array(BLOCK, int64)
    comb = cuda.local.array(K_MAX, int64)
    partial = cuda.local.array(K_MAX, float64)
    rank0 = first + (block * width + tid) * chunk
    best = math.inf
    best_rank = INT64_MAX
    if rank0 < total:
        best, best_rank = _scan_gpu(qs, binom, n, k, rank0, min(chunk, total - rank0), comb,
                                    partial)
    s_value[tid] = best
    s_rank[tid] = best_rank
    cuda.syncthreads()  # type: ignore[call-arg]
    stride = width // 2
    while stride > 0:
        if tid < stride:
            v, r = s_value[tid + stride], s_rank[tid + stride]
            if v < s_value[tid] or (v == s_value[tid] and r < s_rank[tid]):
                s_value[tid] = v
                s_rank[tid] = r
        cuda.syncthreads()
        stride //= 2
    if tid == 0:
        out_value[block] = s_value[0]
        out_rank[block] = s_rank[0]


_cache = cuda_kernel_cache()


@cuda.jit(cache=_cache)
def _search_shared(q: Any, binom: Any, n: int, k: int, first: int, total: int, chunk: int,
                   out_value: Any, out_rank: Any) -> None:
    qs = cuda.shared.array(0, float64)
    for i in range(cuda.threadIdx.x, q.shape[0], cuda.blockDim.x):  # type: ignore[call-overload]
        qs[i] = q[i]
    cuda.syncthreads()  # type: ignore[call-arg]
    _block_search(qs, binom, n, k, first, total, chunk, out_value, out_rank)


@cuda.jit(cache=_cache)
def _search_global(q: Any, binom: Any, n: int, k: int, first: int, total: int, chunk: int,
                   out_value: Any, out_rank: Any) -> None:
    _block_search(q, binom, n, k, first, total, chunk, out_value, out_rank)


# ---------------------------------------------------------------- API


@dataclass(frozen=True)
class SubsetResult:
    """The least-correlated subset: indices ascending, its rank, objective and distance."""

    subset: tuple[int, ...]
    rank: int
    objective: float          # Σ over pairs of the subset of c_ij²
    distance: float           # ‖C_S − I‖_F = √(2·objective)
    combinations: int         # C(n, k), all searched
    seconds: float            # search time (after the warm-up compile)
    device: str

    @property
    def combinations_per_second(self) -> float:
        return self.combinations / self.seconds if self.seconds > 0 else math.inf


def binomial_table(n: int, k: int) -> npt.NDArray[np.int64]:
    """C(m, j) for m ≤ n, j ≤ k, clipped to the int64 maximum (unranking reads only ≤ C(n, k))."""
    table = np.zeros((n + 1, k + 1), np.int64)
    for m in range(n + 1):
        for j in range(min(m, k) + 1):
            table[m, j] = min(math.comb(m, j), INT64_MAX)
    return table


def packed_squared(corr: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """q[a(a−1)/2 + b] = corr[a, b]² for a > b (the packed strict lower triangle)."""
    c = np.asarray(corr, np.float64)
    rows, cols = np.tril_indices(c.shape[0], -1)
    return np.ascontiguousarray(c[rows, cols] ** 2)


def unrank_combination(rank: int, n: int, k: int) -> tuple[int, ...]:
    """The combination of a lexicographic rank (plain Python; the kernels' numbering)."""
    comb = np.empty(k, np.int64)
    subset_core.unrank(rank, n, k, binomial_table(n, k), comb)
    return tuple(int(x) for x in comb)


def _chunk(total: int, device: str) -> int:
    if device == "cuda":
        # enough threads to fill a large GPU, enough ranks per thread to amortise unranking
        return int(min(1024, max(8, total // (1 << 21))))
    return int(min(1 << 16, max(256, total // 4096)))


def _check(corr: np.ndarray, k: int) -> tuple[int, int]:
    if corr.ndim != 2 or corr.shape[0] != corr.shape[1]:
        raise ValueError("the correlation matrix must be square")
    n = corr.shape[0]
    if not 2 <= k <= min(n, K_MAX):
        raise ValueError(f"k must be between 2 and min(n, {K_MAX}) = {min(n, K_MAX)}, got {k} "
                         f"(n = {n})")
    if not np.all(np.isfinite(corr)):
        raise ValueError("the correlation matrix has non-finite entries")
    total = math.comb(n, k)
    if total > INT64_MAX - LAUNCH_RANKS:  # a thread's first rank must not wrap past the end
        raise ValueError(f"C({n}, {k}) = {total:.3g} combinations do not fit 64-bit ranks")
    return n, total


class _Searcher:
    """One device's launches over rank ranges, each returning (objective, rank) per range."""

    def __init__(self, q: np.ndarray, binom: np.ndarray, n: int, k: int, total: int,
                 device: str, chunk: int | None = None) -> None:
        self.n, self.k, self.total, self.device = n, k, total, device
        self.chunk = chunk or _chunk(total, device)
        if device == "cpu":
            self.q, self.binom = q, binom
            # one way for the whole search, so a compiling warm-up precedes the timed part
            self.compiled = not uncompiled(_ranges_range, total * k, SUBSET_BUDGET)
            return
        self.q, self.binom = cuda.to_device(q), cuda.to_device(binom)
        # the block reduction's two BLOCK-long arrays share the 48 KiB with the triangle
        shared = q.nbytes if q.nbytes <= SHARED_BYTES_MAX - REDUCTION_BYTES else 0
        self.kernel = _search_shared if shared else _search_global
        self.shared = shared

    def search(self, first: int, count: int) -> tuple[float, int]:
        end = first + count
        ranges = -(-count // self.chunk)
        if self.device == "cpu":
            values = np.empty(ranges, np.float64)
            ranks = np.empty(ranges, np.int64)
            _ranges_cpu(self.q, self.binom, self.n, self.k, first, end, self.chunk, values,
                        ranks, self.compiled)
        else:
            blocks = -(-ranges // BLOCK)
            d_values = cuda.device_array(blocks, np.float64)
            d_ranks = cuda.device_array(blocks, np.int64)
            with warnings.catch_warnings():  # small searches are small grids, and that is fine
                warnings.simplefilter("ignore", NumbaPerformanceWarning)
                self.kernel[blocks, BLOCK, 0, self.shared](
                    self.q, self.binom, self.n, self.k, first, end, self.chunk, d_values,
                    d_ranks)
            values, ranks = d_values.copy_to_host(), d_ranks.copy_to_host()
        best = np.lexsort((ranks, values))[0]
        return float(values[best]), int(ranks[best])


def least_correlated(corr: npt.ArrayLike, k: int, device: str = "auto",
                     max_seconds: float | None = None,
                     progress: Callable[[int, int, float], None] | None = None,
                     chunk: int | None = None) -> SubsetResult:
    """The k of n strategies whose correlation sub-matrix is closest to the identity.

    `corr`: n×n correlation matrix. Exhaustive over C(n, k); ties go to the lowest
    lexicographic rank. `progress(done, total, seconds)` is called after each launch.
    `chunk`: ranks per thread (default: chosen from C(n, k); 1 unranks every combination).
    ValueError for bad input; SearchTooLong when the estimate exceeds `max_seconds`.
    """
    c = np.asarray(corr, np.float64)
    n, total = _check(c, k)
    dev = resolve_device(device, "subset search")
    if chunk is not None and chunk < 1:
        raise ValueError(f"chunk must be at least 1, got {chunk}")
    searcher = _Searcher(packed_squared(c), binomial_table(n, k), n, k, total, dev, chunk)
    searcher.search(0, 1)  # compile (or load) the kernel before anything is timed
    t0 = time.perf_counter()
    best: tuple[float, int] = (math.inf, INT64_MAX)
    done = 0
    size = min(total, CALIBRATION_RANKS)
    while done < total:
        count = min(size, total - done)
        found = searcher.search(done, count)
        best = min(best, found)
        done += count
        elapsed = time.perf_counter() - t0
        if progress is not None:
            progress(done, total, elapsed)
        if done < total and max_seconds is not None:
            estimate = elapsed * total / done
            if estimate > max_seconds:
                raise SearchTooLong(
                    f"searching all C({n}, {k}) = {total:,} combinations would take about "
                    f"{estimate:,.0f} s on {dev} ({done / elapsed:.3g} combinations/s), more "
                    f"than the {max_seconds:g} s allowed", estimate)
        size = LAUNCH_RANKS
    seconds = time.perf_counter() - t0
    objective, rank = best
    return SubsetResult(subset=unrank_combination(rank, n, k), rank=rank, objective=objective,
                        distance=math.sqrt(2.0 * objective), combinations=total,
                        seconds=seconds, device=dev)
