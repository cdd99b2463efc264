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
def sma_cross_close(o: F64, h: F64, l: F64, c: F64, v: F64,  # noqa: E741
                    state: F64, values: F32, bars_seen: I64, stamp: I64, generation: int,
                    fast_col: int, slow_col: int, long_only: bool, signal: I8, prev: I8
                    ) -> tuple[int, int, I8, I64, int]:
    """Close the open bars (those with a tick: open not NaN) of `n = o.shape[0]` symbols.

    The indicator bank's arrays advance in place exactly as `IndicatorBank.update` over
    the closing symbols in ascending order (`bars.OpenBars.push`). Then SmaCross's
    `target_signals` over the bank's values: +1 where the fast SMA is above the slow, -1
    below (0 long-only), 0 while either is not finite, the old signal where equal; a
    symbol whose bar did not close keeps its signal. Returns (error code, its position
    (the bank's codes; nothing advanced then), the new signals (int8, n), the closing
    symbols whose signal differs from `prev` (the decisions' last signal: the only ones
    the phase table acts on outside STOP), the count of active signals (> 0 long-only,
    else != 0: equal-weight sizing's divisor))."""
    n = o.shape[0]
    sym = np.empty(n, np.int32)
    k = 0
    for i in range(n):
        if o[i] == o[i]:
            sym[k] = i
            k += 1
    sym = sym[:k]
    out = np.empty(n, np.int8)
    for i in range(n):
        out[i] = signal[i]
    if k > 0:
        og, hg, lg, cg, vg = (np.empty(k), np.empty(k), np.empty(k), np.empty(k),
                              np.empty(k))
        for j in range(k):
            i = sym[j]
            og[j], hg[j], lg[j], cg[j], vg[j] = o[i], h[i], l[i], c[i], v[i]
        code, at = update_batch_cpu(state, values, bars_seen, stamp, generation, sym,
                                    og, hg, lg, cg, vg)
        if code != 0:
            return code, at, out, np.empty(0, np.int64), 0
    changed = np.empty(k, np.int64)
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
        out[i] = s
        if (0 if long_only and s < 0 else s) != prev[i]:  # as `Decisions.decide` compares
            changed[m] = i
            m += 1
    active = 0
    for i in range(n):
        if (out[i] > 0) if long_only else (out[i] != 0):
            active += 1
    return 0, -1, out, changed[:m], active


def warm_up() -> None:
    """Load (or compile) `sma_cross_close` for the types the engine calls it with, so the
    first live close does not pay for it."""
    one = np.ones(1)
    nan = np.full(1, np.nan)
    from gpu.indicators.compute import IndicatorBank

    bank = IndicatorBank(1)
    state, values, seen, stamp = bank.compiled_arrays()
    sig = np.zeros(1, np.int8)
    sma_cross_close(nan, one, one, one, one, state, values, seen, stamp, 1, 0, 1, False,
                    sig, sig)
