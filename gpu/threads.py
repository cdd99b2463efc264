"""Parallel loops on threads instead of numba's parallel compiler.

`run_chunks(fn, n, *args)` splits range(n) into contiguous chunks and calls the compiled
`fn(lo, hi, *args)` (an `njit(nogil=True)` function with a plain loop) on each, on a
shared pool of Python threads, the caller's thread taking the last chunk. The result equals
one call `fn(0, n, *args)` whenever iterations write disjoint outputs and draw from their
own random streams, as the GP operators' do.

Why: `numba.njit(parallel=True)` compiles the loop as a gufunc and optimises the inlined
loop body a second time, which every process with an empty cache pays. Measured on the
2-core VM (2026-11-28): the GP breeding step's first compile took 6.2 s with `prange`
against 3.8 s as a plain range function; the small CPU `evolve` compiled 23.4 s of top-
level functions with every GP loop on `prange`, 14.1 s with all of them here. The cost is
a hand-off per chunk through Python threads and the GIL: on a 16-core H200 host breeding
25,000 children took 4.07 ms in 16 chunks against 3.04 ms on numba's parallel runtime, and
handing out 16 empty chunks 0.42 ms (0.11 ms for 2), about 0.5 s over the headline's 50
generations of some 25 such calls each. So loops that run once per command (the first
population, the indicator panel, the masks, the population check), the CPU evaluators
(long calls) and breeding (one call a generation, whose body is the largest: on `prange` it
put 6.7 s on the critical path of a cold headline on 16 cores, against 1.3 ms a generation
in chunks) always run here. The other loops of every generation (compiling and checking
programs, fitness rows, behaviours), and the CPU twins of the option pricer, the implied
vols, the subset search and the autocorrelations, go through `parallel_range`: here with at
most CHUNKS_MAX_THREADS numba threads, where the hand-off is cheap and a short run's time is
mostly compiling; on numba's `prange` over chunks with more. A process compiles only the
variant it runs.

The number of chunks follows `numba.get_num_threads()` of the calling thread, so code that
limits numba's threads for a task (`numba.set_num_threads`, e.g. an island of the island
model or live re-evolution) limits these loops the same way.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numba
import numpy as np

#: numba's OpenMP threads sleep as soon as a parallel loop ends instead of spinning: this
#: module's chunk threads run between those loops on the same cores. Spinning, they took
#: the cores from breeding on a 16-core H200 host (2026-11-28, the warm headline 8.4-8.6 s
#: against 7.2-7.5 s passive, same machine). Set before numba loads its OpenMP layer, which
#: reads it then; a value the user set wins.
PASSIVE_WAIT = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}
for _name, _value in PASSIVE_WAIT.items():
    os.environ.setdefault(_name, _value)

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            most = max(1, int(getattr(numba.config, "NUMBA_NUM_THREADS", 1)))
            _pool = ThreadPoolExecutor(most, thread_name_prefix="numba-chunk")
        return _pool


def _forget_pool_in_child() -> None:
    """A forked child (multiprocessing's default start method on Linux) inherits the pool
    object but none of its threads: chunks handed to it would never run and the caller
    would wait forever. The child starts a pool of its own on first use."""
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def chunk_bounds(n: int, chunks: int) -> list[tuple[int, int]]:
    """`chunks` contiguous (lo, hi) ranges covering range(n), sizes differing by at most 1."""
    chunks = max(1, min(chunks, n))
    base, extra = divmod(n, chunks)
    bounds, lo = [], 0
    for k in range(chunks):
        hi = lo + base + (1 if k < extra else 0)
        bounds.append((lo, hi))
        lo = hi
    return bounds


#: with at most this many numba threads, `parallel_range` runs a loop in chunks on Python
#: threads (each hand-off costs 0.06-0.23 ms a call on 2-4 threads), so a cold process
#: compiles the plain range function only; with more it runs numba's parallel runtime
#: (a hand-off of 16 chunks to Python threads cost 0.42 ms a call on 16 cores)
CHUNKS_MAX_THREADS = 4


def parallel_range(range_fn: Callable[..., Any], parallel_fn: Callable[..., Any], n: int,
                   *args: Any, min_chunk: int = 32) -> None:
    """range_fn(lo, hi, *args) over range(n), in parallel: `run_chunks` where numba has at
    most CHUNKS_MAX_THREADS threads in the calling thread, else
    parallel_fn(chunks, n, *args), a numba `prange` over `chunks` contiguous chunks that
    calls range_fn on each (the same chunks as `chunk_bounds`). Either way the result is
    one call range_fn(0, n, *args), and a process compiles only the variant it runs."""
    threads = numba.get_num_threads()
    if threads <= CHUNKS_MAX_THREADS:
        run_chunks(range_fn, n, *args, min_chunk=min_chunk)
        return
    chunks = min(threads, n // max(1, min_chunk))
    if chunks <= 1:
        if n > 0:
            range_fn(0, n, *args)
        return
    parallel_fn(chunks, n, *args)


@numba.njit(cache=True)
def chunk_lo(k: int, chunks: int, n: int) -> int:
    """First index of chunk k of `chunks` over range(n), as `chunk_bounds` splits it (for
    the `prange` side of `parallel_range`; its index may be unsigned, so cast here)."""
    kk = np.int64(k)
    base = np.int64(n) // np.int64(chunks)
    extra = np.int64(n) % np.int64(chunks)
    return int(kk * base + min(kk, extra))


#: the least work worth a chunk of a loop over GP programs, in (day, stock) cells: a
#: program over 128 stocks x 768 days (98,304 cells) is a chunk of its own, so an
#: ensemble's ten rules run on ten threads; a small window's programs go many to a chunk
MIN_CHUNK_CELLS = 1 << 16


def programs_per_chunk(cells_per_program: int) -> int:
    """`min_chunk` of a loop over programs that each cover `cells_per_program` (day,
    stock) cells (MIN_CHUNK_CELLS)."""
    return max(1, -(-MIN_CHUNK_CELLS // max(1, cells_per_program)))


def run_chunks(fn: Callable[..., Any], n: int, *args: Any, min_chunk: int = 32) -> None:
    """fn(lo, hi, *args) over range(n) in chunks of at least `min_chunk` iterations, on up
    to numba.get_num_threads() threads (the caller's included); returns when all are done
    and re-raises the first error."""
    if n <= 0:
        return
    chunks = min(numba.get_num_threads(), n // max(1, min_chunk))
    if chunks <= 1:
        fn(0, n, *args)
        return
    bounds = chunk_bounds(n, chunks)
    pool = _executor()
    futures: list[Future[Any]] = [pool.submit(fn, lo, hi, *args) for lo, hi in bounds[:-1]]
    try:
        fn(*bounds[-1], *args)
    finally:
        for f in futures:
            f.result()
