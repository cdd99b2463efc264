"""The compiled subset search: the core (gpu/subset/core.py) compiled for the CPU and CUDA,
the CPU's parallel driver and the CUDA kernels (the search itself: gpu/subset/search.py).

Its own module so that numba and numba.cuda are imported only by a search that runs
compiled: a small CPU search runs the plain core uncompiled (gpu/small.py) and, without
this module, imports no numba (issue 27: 1.4 s of a cold `select`'s 2.3 s on the 2-core
dev VM; benchmarks/results/devbox-2026-11-28f-cold-start-select/README.md).

CUDA: `search_shared` copies the packed triangle into shared memory, `search_global`
reads it from global memory (the search's docstring says when and how the block reduces).
CPU twin: the same core over the same ranges with `prange` (`ranges_cpu`).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
from numba import cuda, float64, int64, njit, prange
from numba.core.errors import NumbaPerformanceWarning

from gpu.subset import core as subset_core
from gpu.subset.core import BLOCK, INT64_MAX, K_MAX
from gpu.threads import chunk_lo, parallel_range
from gpu.twin import compile_twin, cuda_kernel_cache, flush_stale_caches

flush_stale_caches(__file__, [subset_core.__file__])
_twin = compile_twin(__name__, subset_core.CORE_FUNCTIONS, subset_core.CORE_CONSTANTS)
_scan_gpu = _twin.cuda.scan_ranks
#: `subset_core.best_in_ranges` compiled: the driver `gpu.small.uncompiled` asks about
ranges_range = _twin.cpu.best_in_ranges


# ---------------------------------------------------------------- CPU twin


def ranges_cpu(q: Any, binom: Any, n: int, k: int, first: int, total: int, chunk: int,
               out_value: Any, out_rank: Any) -> None:
    """Each item's best subset of its `chunk` ranks, in parallel (`gpu.threads`)."""
    parallel_range(ranges_range, _ranges_parallel, out_value.shape[0], q, binom, n, k,
                   first, total, chunk, out_value, out_rank, min_chunk=1)


@njit(parallel=True, cache=True)
def _ranges_parallel(chunks: int, n_items: int, q: Any, binom: Any, n: int, k: int,
                     first: int, total: int, chunk: int, out_value: Any,
                     out_rank: Any) -> None:
    for c in prange(chunks):
        ranges_range(chunk_lo(c, chunks, n_items), chunk_lo(c + 1, chunks, n_items), q,
                     binom, n, k, first, total, chunk, out_value, out_rank)


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
def search_shared(q: Any, binom: Any, n: int, k: int, first: int, total: int, chunk: int,
                  out_value: Any, out_rank: Any) -> None:
    qs = cuda.shared.array(0, float64)
    for i in range(cuda.threadIdx.x, q.shape[0], cuda.blockDim.x):  # type: ignore[call-overload]
        qs[i] = q[i]
    cuda.syncthreads()  # type: ignore[call-arg]
    _block_search(qs, binom, n, k, first, total, chunk, out_value, out_rank)


@cuda.jit(cache=_cache)
def search_global(q: Any, binom: Any, n: int, k: int, first: int, total: int, chunk: int,
                  out_value: Any, out_rank: Any) -> None:
    _block_search(q, binom, n, k, first, total, chunk, out_value, out_rank)


def to_device(host: np.ndarray) -> Any:
    """A host array copied to the GPU."""
    return cuda.to_device(host)


def launch(kernel: Any, shared: int, q: Any, binom: Any, n: int, k: int, first: int,
           end: int, chunk: int, ranges: int) -> tuple[np.ndarray, np.ndarray]:
    """One launch of `kernel` over ranks first … end−1 in `ranges` ranges of `chunk` ranks
    (`shared` bytes of dynamic shared memory): each block's (objective, rank), on the host."""
    blocks = -(-ranges // BLOCK)
    d_values = cuda.device_array(blocks, np.float64)
    d_ranks = cuda.device_array(blocks, np.int64)
    with warnings.catch_warnings():  # small searches are small grids, and that is fine
        warnings.simplefilter("ignore", NumbaPerformanceWarning)
        kernel[blocks, BLOCK, 0, shared](q, binom, n, k, first, end, chunk, d_values, d_ranks)
    return d_values.copy_to_host(), d_ranks.copy_to_host()
