"""Least-correlated k of n: exact search over all C(n, k) combinations on the GPU or the CPU.

`least_correlated(corr, k)` returns the k indices whose correlation sub-matrix is closest to
the identity (Frobenius norm), searching every combination (gpu.subset.core: unranking with
64-bit ranks, stepping inside a thread, packed lower triangle of squared correlations).

CUDA: the packed triangle (n(n−1)/2 float64) is copied into shared memory by every block
when it fits (n ≤ 106; larger n read it from global memory through the cache); each thread
scans `chunk` consecutive ranks, then the block reduces its (objective, rank) pairs in
shared memory, smallest objective and then lowest rank first. A search of more than
`LAUNCH_RANKS` combinations is several launches. CPU twin: the same core over the same
ranges with `prange`, or a small search (gpu/small.py) interpreted over the plain core. The
final (objective, rank) minimum is taken on the host, so the backends return the same subset
and the same objective bit for bit. The compiled parts are in gpu/subset/kernels.py,
imported only by a search that runs compiled: this module imports no numba.

`max_seconds`: the first launch (after a warm-up that compiles the kernel) measures the
rate; a search whose estimated time exceeds the limit stops with `SearchTooLong`, which
carries the estimate.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpu.device import resolve_device
from gpu.small import SMALL_CELLS, uncompiled
from gpu.subset import core as subset_core
from gpu.subset.core import BLOCK, INT64_MAX, K_MAX

SHARED_BYTES_MAX = 48 * 1024
REDUCTION_BYTES = 2 * BLOCK * 8  # s_value (float64) and s_rank (int64) in the block's reduction
LAUNCH_RANKS = 1 << 34
"""Most combinations per launch: a few seconds on one GPU at the rates in
benchmarks/results/h200-2026-11-22-timeseries-subset/README.md."""
CALIBRATION_RANKS = 1 << 24
#: combinations x k a process searches uncompiled: a few us a combination interpreted, so
#: some 0.1 s at most, against 1.2 s to compile the CPU search (2-core dev VM, 2026-11-28)
SUBSET_BUDGET = SMALL_CELLS


class SearchTooLong(ValueError):
    """The exhaustive search would take longer than allowed; `.estimate_seconds` says how long."""

    def __init__(self, message: str, estimate_seconds: float) -> None:
        super().__init__(message)
        self.estimate_seconds = estimate_seconds


def _cpu_driver() -> Any:
    """The CPU search's work item as `uncompiled` should judge it: the compiled one once
    this process has loaded the kernels (gpu/subset/kernels.py: then its machine code, in
    memory or in numba's disk cache, is the faster way at any size), else the plain core,
    which has none: a small search then runs interpreted. Loading machine code from the
    disk cache would first import the kernels' numba and numba.cuda, some 0.4 s warm and
    1.4 s cold on the 2-core dev VM, against at most some 0.1 s for an interpreted search
    within SUBSET_BUDGET."""
    kernels = sys.modules.get("gpu.subset.kernels")
    return subset_core.best_in_ranges if kernels is None else kernels.ranges_range


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
            self.compiled = not uncompiled(_cpu_driver(), total * k, SUBSET_BUDGET)
            return
        from gpu.subset import kernels

        self.q, self.binom = kernels.to_device(q), kernels.to_device(binom)
        # the block reduction's two BLOCK-long arrays share the 48 KiB with the triangle
        shared = q.nbytes if q.nbytes <= SHARED_BYTES_MAX - REDUCTION_BYTES else 0
        self.kernel = kernels.search_shared if shared else kernels.search_global
        self.shared = shared

    def search(self, first: int, count: int) -> tuple[float, int]:
        end = first + count
        ranges = -(-count // self.chunk)
        if self.device == "cpu":
            values = np.empty(ranges, np.float64)
            ranks = np.empty(ranges, np.int64)
            if self.compiled:
                from gpu.subset import kernels

                kernels.ranges_cpu(self.q, self.binom, self.n, self.k, first, end, self.chunk,
                                   values, ranks)
            else:  # the plain core, interpreted (gpu.small)
                subset_core.best_in_ranges(0, ranges, self.q, self.binom, self.n, self.k,
                                           first, end, self.chunk, values, ranks)
        else:
            from gpu.subset import kernels

            values, ranks = kernels.launch(self.kernel, self.shared, self.q, self.binom,
                                           self.n, self.k, first, end, self.chunk, ranges)
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
