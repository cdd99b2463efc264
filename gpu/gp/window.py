"""What every GP population evaluator shares: one checked window of the panel and closes
(`WindowEvaluator`), the program and panel checks, buy-and-hold cash, the fitness reduction
and the thread-to-(program, stock) map of the kernels.

The stack interpreter (`gpu.gp.evaluate`) and the bitwise evaluator (`gpu.gp.bitwise`) both
build on this module; `gp_eval` also wraps the bitwise evaluator, so the shared pieces live
here rather than in either (no import cycle between the two).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numba
import numpy as np
import numpy.typing as npt
from numba import cuda, prange

from gpu import small
from gpu.device import resolve_device
from gpu.gp import core as gp_core
from gpu.gp.core import CASH0, DEFAULT_COSTS, STACK_SIZE
from gpu.indicators.catalogue import N_FLOAT, N_TERMINALS
from gpu.small import is_small
from gpu.threads import chunk_lo, parallel_range
from gpu.twin import flush_stale_caches

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I16 = npt.NDArray[np.int16]
I32 = npt.NDArray[np.int32]

# compiled functions here inline the core: recompile when it changes (gpu.twin's policy)
flush_stale_caches(__file__, [gp_core.__file__])


@cuda.jit(device=True)
def program_and_stock(n_programs: int, n_stocks: int) -> tuple[int, int]:
    """(program, stock) of this thread, one thread per pair with the stocks of a program in
    consecutive threads; program -1 for the threads past the last pair."""
    t = cuda.grid(1)  # type: ignore[call-arg,var-annotated]
    i = t // n_stocks
    if i >= n_programs:
        return -1, 0
    return i, t - i * n_stocks



# --------------------------------------------------------------------------- checks
@numba.njit(cache=True, nogil=True)
def _program_ok(program: Any, n: int, kinds: Any) -> bool:
    """Whether program[:n] is two type-correct bool trees in postfix (the interpreter relies
    on it). Types on the stack: 0 float, 1 bool; `kinds` is scratch of len(program) + 1."""
    if n < 2 or n > program.shape[0]:
        return False
    sp = 0
    for pc in range(n):
        op = program[pc]
        if op < 0 or op >= gp_core.N_OPS:
            return False
        if op < gp_core.N_TERMINALS:
            kinds[sp] = 0 if op < N_FLOAT else 1
            sp += 1
        elif op == gp_core.OP_NOT:
            if sp < 1 or kinds[sp - 1] != 1:
                return False
        else:
            want = 0 if op == gp_core.OP_LT or op == gp_core.OP_GT else 1
            if sp < 2 or kinds[sp - 1] != want or kinds[sp - 2] != want:
                return False
            sp -= 1
            kinds[sp - 1] = 1
        if sp > STACK_SIZE:
            return False
    return sp == 2 and kinds[0] == 1 and kinds[1] == 1


@numba.njit(cache=True, nogil=True)
def _mark_bad_programs(lo: int, hi: int, programs: Any, lengths: Any, bad: Any) -> None:
    """bad[i] = program i fails `_program_ok`, for i in lo..hi-1 (in parallel: an
    evolution checks 25,000 programs every generation)."""
    kinds = np.empty(programs.shape[1] + 1, np.int8)
    for i in range(lo, hi):
        bad[i] = not _program_ok(programs[i], lengths[i], kinds)


@numba.njit(cache=True, parallel=True)
def _mark_bad_programs_parallel(chunks: int, n: int, programs: Any, lengths: Any,
                                bad: Any) -> None:
    for k in prange(chunks):
        _mark_bad_programs(chunk_lo(k, chunks, n), chunk_lo(k + 1, chunks, n), programs,
                           lengths, bad)


#: programs a process checks uncompiled (gpu.small): about 0.01 ms each interpreted,
#: 0.41 s to compile `_mark_bad_programs` (2-core dev VM, 2026-11-28)
CHECK_BUDGET = 16_384


def expect_checks(n: int) -> None:
    """Announce `n` programs this process will check (an evolution's evaluations): more
    than CHECK_BUDGET, and the check is compiled from its first call."""
    small.expect(_mark_bad_programs, n, CHECK_BUDGET)


def _first_bad_program(programs: Any, lengths: Any) -> int:
    """Index of the first program that fails `_program_ok`, or -1."""
    n = programs.shape[0]
    bad = np.zeros(n, np.bool_)
    if small.uncompiled(_mark_bad_programs, n, CHECK_BUDGET):
        small.run_plain(_mark_bad_programs, 0, n, programs, lengths, bad)
    else:
        parallel_range(_mark_bad_programs, _mark_bad_programs_parallel, n, programs, lengths,
                       bad, min_chunk=256)
    hits = np.flatnonzero(bad)
    return int(hits[0]) if hits.size else -1


def _check_programs(programs: np.ndarray, lengths: np.ndarray) -> tuple[I16, I32]:
    programs = np.ascontiguousarray(programs, np.int16)
    lengths = np.ascontiguousarray(lengths, np.int32)
    if programs.ndim != 2 or lengths.shape != (programs.shape[0],):
        raise ValueError(f"programs must be (n, max_len) with lengths (n,), got "
                         f"{programs.shape} and {lengths.shape}")
    bad = _first_bad_program(programs, lengths) if programs.shape[0] else -1
    if bad >= 0:
        raise ValueError(f"program {bad} is not a buy and a sell tree in typed postfix "
                         f"(length {lengths[bad]}, row width {programs.shape[1]})")
    return programs, lengths


def _check_panel(panel: np.ndarray, close: np.ndarray | None, day0: int, day1: int
                 ) -> tuple[F32, F64 | None]:
    panel = np.ascontiguousarray(panel, np.float32)
    if panel.ndim != 3 or panel.shape[1] != N_TERMINALS:
        raise ValueError(f"panel must be (n_days, {N_TERMINALS}, n_stocks), got {panel.shape}")
    if panel.shape[2] == 0:
        raise ValueError("panel has no stocks")
    if not 0 <= day0 < day1 <= panel.shape[0]:
        raise ValueError(f"day range [{day0}, {day1}) outside the panel's {panel.shape[0]} days")
    if close is None:
        return panel, None
    close = np.ascontiguousarray(close, np.float64)
    if close.shape != (panel.shape[0], panel.shape[2]):
        raise ValueError(f"close must be (n_days, n_stocks) = {(panel.shape[0], panel.shape[2])},"
                         f" got {close.shape}")
    return panel, close





def buy_hold_cash(close: np.ndarray, day0: int = 0, day1: int | None = None,
                  costs: tuple[float, float, float] = DEFAULT_COSTS) -> F64:
    """Final cash (n_stocks,) of buying at close[day0] and selling at close[day1 - 1],
    paying `costs` (gp_core.cost_tuple) on both trades."""
    close = np.ascontiguousarray(close, np.float64)
    day1 = close.shape[0] if day1 is None else day1
    out = np.empty(close.shape[1], np.float64)
    # two trades a stock: the plain core in Python (microseconds a stock) costs less than
    # compiling a loop over the stocks (0.45 s of a cold run; gpu.small)
    for s in range(close.shape[1]):
        out[s] = gp_core.buy_hold(close, s, day0, day1, costs)
    return out


def roi(cash: np.ndarray) -> F64:
    """Return on investment of final cash (dollars) against CASH0."""
    return np.asarray(cash, np.float64) / CASH0 - 1.0


@numba.njit(cache=True, nogil=True)
def _block_sum(a: Any, lo: int, n: int) -> float:
    """numpy's `pairwise_sum` on a block of n <= 128 (eight accumulators, then the rest)."""
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[lo + i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    while i < n - n % 8:
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@numba.njit(cache=True, nogil=True)
def _pairwise_sum(a: Any, n: int) -> float:
    """numpy's pairwise summation of a[:n] (numpy/_core/src/umath/loops_utils.h.src,
    `pairwise_sum`: blocks of up to 128, halves rounded to multiples of 8 above that),
    operation for operation, so it equals `np.sum(.., axis=-1)` of a contiguous row bit for
    bit (a test compares them on many lengths). Iterative, not recursive: numba's disk cache
    cannot reload a recursive function."""
    work_lo = np.empty(192, np.int64)
    work_n = np.empty(192, np.int64)
    work_phase = np.empty(192, np.int8)
    vals = np.empty(64, np.float64)
    top = 0
    nv = 0
    work_lo[0], work_n[0], work_phase[0] = 0, n, 0
    top = 1
    while top > 0:
        top -= 1
        lo, m, phase = work_lo[top], work_n[top], work_phase[top]
        if m <= 128:
            vals[nv] = _block_sum(a, lo, m)
            nv += 1
        elif phase == 1:  # both halves summed: left below right
            nv -= 1
            vals[nv - 1] = vals[nv - 1] + vals[nv]
        else:
            m2 = m // 2
            m2 -= m2 % 8
            work_lo[top], work_n[top], work_phase[top] = lo, m, 1
            work_lo[top + 1], work_n[top + 1], work_phase[top + 1] = lo + m2, m - m2, 0
            work_lo[top + 2], work_n[top + 2], work_phase[top + 2] = lo, m2, 0
            top += 3
    return vals[0]


@numba.njit(cache=True, nogil=True)
def _fitness_rows(lo: int, hi: int, cash: Any, roi_bh: Any, cash0: float, out: Any) -> None:
    """Rows lo..hi-1 of `fitness_from_cash` (in parallel: `gpu.threads.parallel_range`)."""
    n_stocks = cash.shape[1]
    row = np.empty(n_stocks, np.float64)  # one row of excess ROI, in cache
    for i in range(lo, hi):
        for s in range(n_stocks):
            row[s] = (cash[i, s] / cash0 - 1.0) - roi_bh[s]
        # numpy's add.reduce starts from the identity 0.0, then divides by the count
        out[i] = (0.0 + _pairwise_sum(row, n_stocks)) / n_stocks


@numba.njit(cache=True, parallel=True)
def _fitness_rows_parallel(chunks: int, n: int, cash: Any, roi_bh: Any, cash0: float,
                           out: Any) -> None:
    for k in prange(chunks):
        _fitness_rows(chunk_lo(k, chunks, n), chunk_lo(k + 1, chunks, n), cash, roi_bh, cash0,
                      out)


def fitness_from_cash(cash: np.ndarray, bh_cash: np.ndarray) -> F64:
    """Fitness (n_programs,) = mean over stocks of ROI - buy-and-hold ROI.

    The operations of `mean(roi(cash) - roi(bh), axis=1)` in numpy's order (element-wise
    divide and subtracts, then numpy's pairwise sum and the division by the count), in one
    parallel pass over the rows: every evaluator gives these bits, and an evolution spends
    about 1 ms here per generation instead of 11 ms (25,000 x 128 doubles through four
    numpy passes on one core)."""
    cash = np.ascontiguousarray(cash, np.float64)
    # numpy itself where that is quick (gpu.small): the parallel pass is for large
    # populations, and a short run would compile it for longer than numpy takes
    if cash.ndim != 2 or cash.shape[1] == 0 or is_small(cash.size):
        excess = roi(cash) - roi(bh_cash)[None, :]
        return np.asarray(np.mean(excess, axis=1), np.float64)
    out = np.empty(cash.shape[0], np.float64)
    parallel_range(_fitness_rows, _fitness_rows_parallel, cash.shape[0], cash, roi(bh_cash),
                   float(CASH0), out, min_chunk=256)
    return out


def gp_ops(lengths: np.ndarray, n_stocks: int, n_days: int) -> int:
    """GP operations (interpreted nodes) of evaluating programs of these lengths."""
    return int(np.asarray(lengths, np.int64).sum()) * n_stocks * n_days


class WindowEvaluator:
    """What every population evaluator holds: one checked window of the panel and closes,
    the buy-and-hold cash of each stock over it, and the timing of the latest evaluation.

    `panel` (n_days, 31, n_stocks) float32, `close` (n_days, n_stocks) float64, trading days
    [day0, day1), `costs` (gp_core.cost_tuple) paid by every trade, buy-and-hold's included.
    Subclasses implement `final_cash`.
    """

    def __init__(self, panel: np.ndarray, close: np.ndarray, day0: int, day1: int,
                 device: str = "auto",
                 costs: tuple[float, float, float] = DEFAULT_COSTS) -> None:
        panel_c, close_c = _check_panel(panel, close, day0, day1)
        assert close_c is not None
        if not np.all(np.isfinite(close_c[day0:day1])) or np.any(close_c[day0:day1] <= 0):
            raise ValueError("close prices must be finite and > 0 on every day of the window")
        self.device = resolve_device(device, "GP evaluation")
        self.panel, self.close = panel_c, close_c
        self.day0, self.day1 = day0, day1
        self.n_stocks = panel_c.shape[2]
        self.n_days = day1 - day0
        c0, c1, c2 = (float(c) for c in costs)
        self.costs = (c0, c1, c2)
        self.bh_cash = buy_hold_cash(close_c, day0, day1, self.costs)
        self.last_seconds = 0.0
        self.last_ops = 0

    def final_cash(self, programs: np.ndarray, lengths: np.ndarray) -> F64:
        raise NotImplementedError

    def behaviours(self, programs: np.ndarray, lengths: np.ndarray) -> npt.NDArray[np.uint64]:
        """Behaviour fingerprints (n,) of programs over this window (equal fingerprints, equal
        daily returns): `gpu.gp.bitwise.host_behaviours`, which subclasses call (the
        bitwise module builds on this one, so this one cannot import it)."""
        raise NotImplementedError

    def fitness(self, programs: np.ndarray, lengths: np.ndarray) -> tuple[F64, F64]:
        """(fitness (n,), final cash (n, n_stocks))."""
        cash = self.final_cash(programs, lengths)
        return fitness_from_cash(cash, self.bh_cash), cash

    def population_fitness(self, programs: np.ndarray, lengths: np.ndarray) -> F64:
        """Fitness (n,) alone: what an evolution needs each generation (no cash kept)."""
        return self.fitness(programs, lengths)[0]

    def parts_fitness(self, parts: Iterable[tuple[np.ndarray, np.ndarray]], total: int
                      ) -> F64:
        """Fitness (total,) of programs that come in parts, (programs, lengths) each, made by
        the caller when the next is asked for (an evolution breeds them part by part).

        Here the parts are evaluated one after another; the bitwise CUDA evaluator launches
        each part's kernel before asking for the next, so the caller's breeding overlaps the
        GPU. `last_seconds` and `last_ops` cover all parts."""
        fits, seconds, ops = [], 0.0, 0
        for programs, lengths in parts:
            fits.append(self.population_fitness(programs, lengths))
            seconds, ops = seconds + self.last_seconds, ops + self.last_ops
        self.last_seconds, self.last_ops = seconds, ops
        out = np.concatenate(fits) if fits else np.empty(0, np.float64)
        if out.size != total:
            raise ValueError(f"parts hold {out.size} programs, {total} announced")
        return out
