"""A bar close of the built-in moving-average crossover in one compiled call (issue 27).

The live daemon's orders all come from bar closes, and on the 2-core machine a close made
of many small Python and numpy calls cost about 250 µs of an order's 370 µs: between two
closes the daemon runs hundreds of steps of other work (SQLite, ZeroMQ), so the close's
code and data are cold in the caches each time and every small call pays for it. Here the
closing bars' indicator update (the bank's own compiled update), the SMA-cross signals of
every symbol and the symbols whose signal changed come out of one `@njit` call; Python
runs afterwards only for the symbols whose signal changed (the phase table and the
orders, `Decisions.decide`, the same code as the general path).

Covered (`covers`): `SmaCross` reading both averages from the indicator bank (the
default windows), on a CPU bank, with no bar history kept, no weights, no orders of the
strategy's own, no overlapped decisions, and not in a STOP phase (there the strategy is
not asked). Anything else takes the general path (`Engine._close_bars`). Both give the
same indicators, signals, orders, fills and journal rows: tests/engine/
test_compiled_close.py runs them side by side over the real tick files and over seeded
and generated streams. Measurements: benchmarks/results/devbox-2026-11-28c-live-latency.
"""

from __future__ import annotations

import math
from array import array
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

from gpu.indicators.compute import update_batch_cpu

F64 = npt.NDArray[np.float64]
F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
I8 = npt.NDArray[np.int8]


@njit(cache=True)
def sma_cross_close(ohlcv: Any, n: int, state: F64, values: F32, bars_seen: I64,
                    stamp: I64, generation: int, fast_col: int, slow_col: int,
                    long_only: bool, signal: I8, prev: I8, changed: Any
                    ) -> tuple[int, int, int]:
    """Close the open bars (those with a tick: open not NaN) of `n` symbols; `ohlcv` holds
    their open, high, low, close and volume lists one after the other (5 n floats).

    The indicator bank's arrays advance in place exactly as `IndicatorBank.update` over
    the closing symbols in ascending order (`bars.OpenBars.push`). Then SmaCross's
    `target_signals` over the bank's values, into `signal` in place: +1 where the fast SMA
    is above the slow, -1 below (0 long-only), 0 while either is not finite, the old signal
    where equal; a symbol whose bar did not close keeps its signal. The closing symbols
    whose signal differs from `prev` (the decisions' last signal: the only ones the phase
    table acts on outside STOP) go to `changed` (room for n), ascending.

    Returns (error code, its position, 0) for a bad bar (the bank's codes; nothing but the
    bank's duplicate stamps advanced, as in `update`), else (0, how many symbols changed,
    the count of active signals: > 0 long-only, else != 0, equal-weight sizing's divisor).
    Inputs and outputs are the caller's buffers: no array is made or returned per call
    (each costs microseconds of cold numpy code at a live close)."""
    sym = np.empty(n, np.int32)
    k = 0
    for i in range(n):
        if ohlcv[i] == ohlcv[i]:
            sym[k] = i
            k += 1
    sym = sym[:k]
    if k > 0:
        og, hg, lg, cg, vg = (np.empty(k), np.empty(k), np.empty(k), np.empty(k),
                              np.empty(k))
        for j in range(k):
            i = sym[j]
            og[j], hg[j], lg[j] = ohlcv[i], ohlcv[n + i], ohlcv[2 * n + i]
            cg[j], vg[j] = ohlcv[3 * n + i], ohlcv[4 * n + i]
        code, at = update_batch_cpu(state, values, bars_seen, stamp, generation, sym,
                                    og, hg, lg, cg, vg)
        if code != 0:
            return code, at, 0
    m = 0
    for j in range(k):
        i = sym[j]
        fast = np.float64(values[i, fast_col])
        slow = np.float64(values[i, slow_col])
        s = signal[i]
        if fast > slow:
            s = 1
        elif fast < slow:
            s = 0 if long_only else -1
        if not (np.isfinite(fast) and np.isfinite(slow)):
            s = 0
        signal[i] = s
        if (0 if long_only and s < 0 else s) != prev[i]:  # as `Decisions.decide` compares
            changed[m] = i
            m += 1
    active = 0
    for i in range(n):
        if (signal[i] > 0) if long_only else (signal[i] != 0):
            active += 1
    return 0, m, active


def warm_up() -> None:
    """Load (or compile) `sma_cross_close` for the types the engine calls it with, so the
    first live close does not pay for it."""
    from gpu.indicators.compute import IndicatorBank

    bank = IndicatorBank(1)
    state, values, seen, stamp = bank.compiled_arrays()
    sig = np.zeros(1, np.int8)
    sma_cross_close(array("d", [math.nan, 1.0, 1.0, 1.0, 1.0]), 1, state, values, seen,
                    stamp, 1, 0, 1, False, sig, sig, array("q", [0]))
