"""Evaluate compiled GP trading programs over a panel: a CPU twin (numba) and a CUDA kernel.

Inputs, shared by both backends:
- `programs` int16 (n_programs, max_len): postfix op codes (gpu.gp.core), buy tree then
  sell tree; `lengths` int32 (n_programs,) the used prefix of each row;
- `panel` float32 (n_days, 31, n_stocks): indicator values, day x indicator x stock, so the
  threads of one program (consecutive stocks) read consecutive addresses;
- `close` float64 (n_days, n_stocks): closing prices in dollars; trades fill at close[day].

CUDA layout: one thread per (program, stock), thread t -> program t // n_stocks, stock
t % n_stocks, so the stocks of one program sit in consecutive threads of a warp, run the
same op sequence without divergence and read the program row as a broadcast. The
interpreter's stack is a few bits in a register (gp_core.decision_code), never local memory. The
CPU twin runs the same core functions over programs, in chunks on threads (final cash and
the decisions of a period, `gpu.threads.run_chunks`) or in a prange (a bar close's decisions
of many rules, `_codes_cpu`, for gpu.gp.decider).

Compiled kernels follow the one cache policy of `gpu.twin`: cached on disk (CUDA ones only
on a real GPU), and flushed at import whenever gp_core.py is newer than their cache entry,
since they inline the core.

The evaluators return final cash per (program, stock) in float64; fitness is reduced on the
host by `fitness_from_cash`, the same code for both backends (numpy's mean, replayed in one
parallel numba pass), so identical cash gives identical fitness bit for bit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from typing import Any

import numba
import numpy as np
import numpy.typing as npt
from numba import cuda, prange

from gpu.device import resolve_device
from gpu.gp import core as gp_core
from gpu.gp import window as gp_window
from gpu.gp.core import DEFAULT_COSTS
from gpu.gp.window import (  # noqa: F401 (the shared pieces stay importable from here)
    WindowEvaluator,
    _check_panel,
    _check_programs,
    buy_hold_cash,
    fitness_from_cash,
    gp_ops,
    program_and_stock,
    roi,
)
from gpu.indicators.catalogue import N_FLOAT, N_TERMINALS
from gpu.small import SMALL_CELLS, interpreted, is_small, uncompiled
from gpu.threads import programs_per_chunk, run_chunks
from gpu.twin import cuda_kernel_cache, flush_stale_caches

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I16 = npt.NDArray[np.int16]
I32 = npt.NDArray[np.int32]
I8 = npt.NDArray[np.int8]

THREADS_PER_BLOCK = 128

# the kernels inline the core and gp_window's program_and_stock
flush_stale_caches(__file__, [gp_core.__file__, gp_window.__file__])
_cpu = gp_core.CPU
_simulate_cpu = _cpu.simulate
_decide_cpu = _cpu.decision_code
_simulate_codes_cpu = _cpu.simulate_codes


# --------------------------------------------------------------------------- CPU kernels
@numba.njit(nogil=True, cache=True)
def _final_cash_cpu(lo: int, hi: int, programs: Any, lengths: Any, panel: Any, close: Any,
                    day0: int, day1: int, costs: Any, out: Any) -> None:
    """Programs lo..hi-1's final cash per stock (run in chunks on threads)."""
    n_stocks = close.shape[1]
    for i in range(lo, hi):
        program = programs[i]
        for s in range(n_stocks):
            out[i, s] = _simulate_cpu(program, lengths[i], panel, close, s, day0, day1, costs)


@numba.njit(parallel=True, cache=True)
def _codes_cpu(programs: Any, lengths: Any, panel: Any, day0: int, day1: int, out: Any) -> None:
    n_stocks = panel.shape[2]
    for i in prange(programs.shape[0]):
        program = programs[i]
        for d in range(day0, day1):
            for s in range(n_stocks):
                out[i, d - day0, s] = _decide_cpu(program, lengths[i], panel[d], s)


@numba.njit(nogil=True, cache=True)
def _codes_range_cpu(lo: int, hi: int, programs: Any, lengths: Any, panel: Any, day0: int,
                     day1: int, out: Any) -> None:
    """Programs lo..hi-1's decision codes (run in chunks on threads): `_codes_cpu`'s loop
    without its prange, which a cold process would compile twice (see gpu.threads) for a
    period's decisions (`decision_codes`), a call or two of a command."""
    n_stocks = panel.shape[2]
    for i in range(lo, hi):
        program = programs[i]
        for d in range(day0, day1):
            for s in range(n_stocks):
                out[i, d - day0, s] = _decide_cpu(program, lengths[i], panel[d], s)


@numba.njit(cache=True)  # keeps the GIL: released for microseconds, it lets another
# Python thread of the process (a replay's feed) take it for up to a switch interval
def _codes_day_serial_cpu(programs: Any, lengths: Any, day: Any, out: Any) -> None:
    """One bar's codes (n_programs, n_symbols) from one day of the panel, (31, n_symbols),
    on the calling thread: a bar close of a few rules is microseconds of work, less than
    waking numba's thread pool for `_codes_cpu`'s prange (see `gpu.gp.decider`)."""
    for i in range(programs.shape[0]):
        program = programs[i]
        for s in range(day.shape[1]):
            out[i, s] = _decide_cpu(program, lengths[i], day, s)


@numba.njit(cache=True)
def _codes_cash_cpu(codes: Any, close: Any, day0: int, day1: int, costs: Any, out: Any
                    ) -> None:
    for s in range(close.shape[1]):
        out[s] = _simulate_codes_cpu(codes, close, s, day0, day1, costs)


#: cells a process runs uncompiled per driver here (gpu.small): about 1 us a cell, so some
#: 0.25 s in all, against 0.2-0.4 s to compile a driver (2-core dev VM, 2026-11-28)
MONEY_BUDGET = 8 * SMALL_CELLS
#: `_codes_cash_cpu` run by the interpreter over the plain money rules, for small windows
_codes_cash_python = interpreted(_codes_cash_cpu, _simulate_codes_cpu=gp_core.simulate_codes)


# --------------------------------------------------------------------------- CUDA kernels
# Kernels are module-level so that they see `cuda` as a module global (the CUDA simulator
# swaps only globals); decorating compiles nothing, the first launch does.
_cuda_core = gp_core.cuda_backend()
_simulate_dev = _cuda_core.simulate
_decide_dev = _cuda_core.decision_code


@cuda.jit(cache=cuda_kernel_cache())
def _final_cash_kernel(programs: Any, lengths: Any, panel: Any, close: Any, day0: int, day1: int,
                       costs: Any, out: Any) -> None:
    i, s = program_and_stock(programs.shape[0], close.shape[1])
    if i >= 0:
        out[i, s] = _simulate_dev(programs[i], lengths[i], panel, close, s, day0, day1, costs)


@cuda.jit(cache=cuda_kernel_cache())
def _codes_kernel(programs: Any, lengths: Any, panel: Any, day0: int, day1: int,
                  out: Any) -> None:
    i, s = program_and_stock(programs.shape[0], panel.shape[2])
    if i < 0:
        return
    for d in range(day0, day1):
        out[i, d - day0, s] = _decide_dev(programs[i], lengths[i], panel[d], s)


@cuda.jit(cache=cuda_kernel_cache())
def _codes_rows_kernel(programs: Any, lengths: Any, rows: Any, out: Any) -> None:
    """Decision codes out[:, 0, :] of one bar close from the engine's feature matrix `rows`
    (n_stocks, 31) as it is, in device memory or read straight from mapped host memory.
    Each thread first loads its stock's 31 features into a local copy (a constant-count
    loop the compiler unrolls, so over the bus the loads travel together rather than one
    round trip per terminal the interpreter reaches), then interprets its program."""
    i, s = program_and_stock(programs.shape[0], rows.shape[0])
    if i < 0:
        return
    local = cuda.local.array((N_TERMINALS, 1), numba.float32)
    for k in range(N_TERMINALS):
        local[k, 0] = rows[s, k]
    out[i, 0, s] = _decide_dev(programs[i], lengths[i], local, 0)


def _blocks(n_threads: int) -> int:
    return max(1, math.ceil(n_threads / THREADS_PER_BLOCK))


# --------------------------------------------------------------------------- public API
def final_cash(programs: np.ndarray, lengths: np.ndarray, panel: np.ndarray, close: np.ndarray,
               day0: int = 0, day1: int | None = None, device: str = "auto",
               method: str = "stack", costs: tuple[float, float, float] = DEFAULT_COSTS
               ) -> F64:
    """Final cash in dollars (n_programs, n_stocks) of each program trading each stock over
    days [day0, day1) from CASH0, liquidated at the last close (`method` as in
    PopulationEvaluator; for one-off calls the interpreter needs no mask build; `costs` as
    gp_core.cost_tuple)."""
    day1 = panel.shape[0] if day1 is None else day1
    return PopulationEvaluator(panel, close, day0, day1, device, method, costs).final_cash(
        programs, lengths)


def decision_codes(programs: np.ndarray, lengths: np.ndarray, panel: np.ndarray,
                   day0: int = 0, day1: int | None = None, device: str = "auto") -> I8:
    """Decision codes int8 (n_programs, day1 - day0, n_stocks): bit 0 buy, bit 1 sell."""
    programs, lengths = _check_programs(programs, lengths)
    day1 = panel.shape[0] if day1 is None else day1
    panel_c, _ = _check_panel(panel, None, day0, day1)
    n, n_stocks = programs.shape[0], panel_c.shape[2]
    out = np.zeros((n, day1 - day0, n_stocks), np.int8)
    if n == 0:
        return out
    if resolve_device(device, "GP decisions") == "cpu":
        words = (day1 - day0 + 63) // 64  # a few rules on a small window (gpu.small)
        if is_small(day1 - day0, n_stocks) and uncompiled(_codes_range_cpu, n * words * n_stocks,
                                                          MONEY_BUDGET):
            from gpu.gp.bitwise import codes_numpy

            return codes_numpy(programs, lengths, panel_c, day0, day1)
        run_chunks(_codes_range_cpu, n, programs, lengths, panel_c, day0, day1, out,
                   min_chunk=programs_per_chunk((day1 - day0) * n_stocks))
        return out
    d_out = cuda.device_array(out.shape, np.int8)
    _codes_kernel[_blocks(n * n_stocks), THREADS_PER_BLOCK](
        cuda.to_device(programs), cuda.to_device(lengths), cuda.to_device(panel_c), day0, day1,
        d_out)
    return np.asarray(d_out.copy_to_host())


def cash_from_codes(codes: np.ndarray, close: np.ndarray, day0: int = 0,
                    day1: int | None = None,
                    costs: tuple[float, float, float] = DEFAULT_COSTS) -> F64:
    """Final cash (n_stocks,) of trading decision codes (day1 - day0, n_stocks) at close."""
    close = np.ascontiguousarray(close, np.float64)
    day1 = close.shape[0] if day1 is None else day1
    codes = np.ascontiguousarray(codes, np.int8)
    if codes.shape != (day1 - day0, close.shape[1]):
        raise ValueError(f"codes must be {(day1 - day0, close.shape[1])}, got {codes.shape}")
    out = np.empty(close.shape[1], np.float64)
    if uncompiled(_codes_cash_cpu, (day1 - day0) * close.shape[1], MONEY_BUDGET):
        # the plain core, interpreted (gpu.small)
        _codes_cash_python(codes, close, day0, day1, costs, out)
    else:
        _codes_cash_cpu(codes, close, day0, day1, costs, out)
    return out


class PopulationEvaluator(WindowEvaluator):
    """Evaluates many populations over one fixed window; on CUDA the panel stays resident.

    `method`: "bitwise" (default; `gpu.gp.bitwise`, 64 days per word over shared comparison
    masks, `last_ops` counts credited GP ops) or "stack" (the postfix stack interpreter of
    this module, `last_ops` counts interpreted nodes). Both give identical final cash.

    `panel` (n_days, 31, n_stocks) float32, `close` (n_days, n_stocks) float64, trading days
    [day0, day1). `last_seconds` is the wall time of the latest evaluation (transfers
    included, synchronised), `last_ops` its GP operation count.
    """

    def __init__(self, panel: np.ndarray, close: np.ndarray, day0: int, day1: int,
                 device: str = "auto", method: str = "bitwise",
                 costs: tuple[float, float, float] = DEFAULT_COSTS) -> None:
        if method not in ("bitwise", "stack"):
            raise ValueError(f"unknown GP evaluation method {method!r}: bitwise or stack")
        self.method = method
        self._bits: Any = None
        if method == "bitwise":
            from gpu.gp.bitwise import BitwiseEvaluator

            self._bits = BitwiseEvaluator(panel, close, day0, day1, device, costs)
        super().__init__(panel, close, day0, day1, device, costs)
        panel_c, close_c = self.panel, self.close
        self._d_panel: Any = None
        self._d_close: Any = None
        if self._bits is not None:
            return
        if self.device == "cuda":
            self._d_panel = cuda.to_device(panel_c)
            self._d_close = cuda.to_device(close_c)
        # compile (or load) the kernel now, so that timings of real work exclude the JIT
        warm = np.full((1, 2), N_FLOAT, np.int16)
        self.final_cash(warm, np.full(1, 2, np.int32))

    def behaviours(self, programs: np.ndarray, lengths: np.ndarray) -> npt.NDArray[np.uint64]:
        """Behaviour fingerprints (n,) of programs over this window (equal fingerprints,
        equal daily returns), on the host whatever the device: a hall of fame asks for a
        few per generation."""
        from gpu.gp import bitwise as gp_bitwise

        return gp_bitwise.host_behaviours(self, programs, lengths)

    def _from_bits(self, result: F64) -> F64:
        """A result of the bitwise evaluator, with its timing and operation count taken over."""
        self.last_seconds = self._bits.last_seconds
        self.last_ops = self._bits.last_ops
        return result

    def population_fitness(self, programs: np.ndarray, lengths: np.ndarray) -> F64:
        if self._bits is None:
            return super().population_fitness(programs, lengths)
        return self._from_bits(self._bits.population_fitness(programs, lengths))

    def parts_fitness(self, parts: Iterable[tuple[np.ndarray, np.ndarray]], total: int
                      ) -> F64:
        if self._bits is None:
            return super().parts_fitness(parts, total)
        return self._from_bits(self._bits.parts_fitness(parts, total))

    def final_cash(self, programs: np.ndarray, lengths: np.ndarray) -> F64:
        if self._bits is not None:
            return self._from_bits(self._bits.final_cash(programs, lengths))
        programs, lengths = _check_programs(programs, lengths)
        n = programs.shape[0]
        t0 = time.perf_counter()
        out = np.empty((n, self.n_stocks), np.float64)
        if n == 0:
            return out
        if self.device == "cpu":
            run_chunks(_final_cash_cpu, n, programs, lengths, self.panel, self.close,
                       self.day0, self.day1, self.costs, out,
                       min_chunk=programs_per_chunk(self.n_days * self.n_stocks))
        else:
            d_out = cuda.device_array(out.shape, np.float64)
            _final_cash_kernel[_blocks(n * self.n_stocks), THREADS_PER_BLOCK](
                cuda.to_device(programs), cuda.to_device(lengths), self._d_panel, self._d_close,
                self.day0, self.day1, self.costs, d_out)
            d_out.copy_to_host(out)
        self.last_seconds = time.perf_counter() - t0
        self.last_ops = gp_ops(lengths, self.n_stocks, self.n_days)
        return out

