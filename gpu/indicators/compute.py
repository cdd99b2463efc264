"""The 31 GP terminals in two forms that agree bitwise: incremental (live) and whole history.

- `IndicatorBank`: one state row per symbol, advanced one bar at a time in O(1) amortised;
  `values[symbol]` holds the 31 terminals after the symbol's latest bar. The live engine
  calls `update_one` from its hot loop (CPU) or `update` for a batch of symbols.
- `compute_panel`: the whole history of many stocks at once into a float32 panel laid out
  day x indicator x stock, the layout the GP interpreter reads (a warp's reads coalesce).

Both forms run the same core (`gpu.indicators.core.update_state`, formulas in its
docstring), compiled by `gpu.twin` for the CPU (`numba.njit`) and the GPU (CUDA device
functions). On one backend `compute_panel(...)[d, :, s]` equals, bit for bit, the bank's
values of stock s after bars 0..d. CPU and CUDA may differ in the last bits (the GPU compiler fuses
multiply-adds), so a boolean can flip between backends only where its input sits within
rounding of the threshold.

Inputs: prices in the instrument's currency, volume in shares, float64. A close that is
not finite and > 0 (NVI/PVI divide by the previous close), or a non-finite or negative
volume, is rejected with ValueError; a non-finite high or low only makes the terminals that
use it NaN for the windows containing that bar; open is not used by any terminal.

The core is compiled for both backends by `gpu.twin`; the drivers here inline it, so the
twin's cache policy (`flush_stale_caches`) drops their cache entries whenever
indicators_core.py is newer: an edit of the core is never hidden by stale machine code.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
import numpy.typing as npt
from numba import cuda

from gpu.device import cuda_simulated, resolve_device
from gpu.indicators import core
from gpu.indicators.catalogue import N_TERMINALS
from gpu.small import interpreted, uncompiled
from gpu.threads import run_chunks
from gpu.twin import compile_twin, flush_stale_caches

F64 = npt.NDArray[np.float64]
F32 = npt.NDArray[np.float32]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

STATE_LEN = core.STATE_LEN
PANEL_BLOCK = 32  # threads per block: few stocks, so small blocks spread them over more SMs
BANK_BLOCK = 128

# Error codes of the compiled input checks (0 = fine).
_BAD_SYMBOL = 1
_DUPLICATE_SYMBOL = 2
_BAD_CLOSE = 3
_BAD_VOLUME = 4

# ---- CPU backend ---------------------------------------------------------------------------
# The core, compiled for both backends by gpu.twin (its helpers are register_jitable).
_twin = compile_twin(core.__name__, (core.update_state, core.init_state), vars(core))
_update_cpu = _twin.cpu.update_state
_init_cpu = _twin.cpu.init_state


@numba.njit(cache=True)
def _bar_error(n_symbols: int, symbol: int, close: float, volume: float) -> int:
    if symbol < 0 or symbol >= n_symbols:
        return _BAD_SYMBOL
    if not (math.isfinite(close) and close > 0.0):
        return _BAD_CLOSE
    if not (math.isfinite(volume) and volume >= 0.0):
        return _BAD_VOLUME
    return 0


@numba.njit(cache=True)
def _check_batch(
    n_symbols: int, stamp: I64, generation: int, symbols: I32, close: F64, volume: F64
) -> tuple[int, int]:
    """First bad entry of a batch as (error code, position); stamps each symbol seen."""
    for i in range(symbols.shape[0]):
        symbol = symbols[i]
        code = _bar_error(n_symbols, symbol, close[i], volume[i])
        if code != 0:
            return code, i
        if stamp[symbol] == generation:
            return _DUPLICATE_SYMBOL, i
        stamp[symbol] = generation
    return 0, -1


@numba.njit(cache=True)
def _update_batch_cpu(
    state: F64, values: F32, bars_seen: I64, stamp: I64, generation: int,
    symbols: I32, o: F64, h: F64, l: F64, c: F64, v: F64,
) -> tuple[int, int]:
    code, at = _check_batch(state.shape[0], stamp, generation, symbols, c, v)
    if code != 0:
        return code, at
    for i in range(symbols.shape[0]):
        symbol = symbols[i]
        _update_cpu(state[symbol], o[i], h[i], l[i], c[i], v[i], values[symbol])
        bars_seen[symbol] += 1
    return 0, -1


#: the CPU update for compiled callers (engine/trading/compiled_close.py): one bar of each
#: listed symbol, the arrays of `IndicatorBank.compiled_arrays`
update_batch_cpu = _update_batch_cpu


@numba.njit(cache=True)
def _update_one_cpu(
    state: F64, values: F32, bars_seen: I64, symbol: int,
    o: float, h: float, l: float, c: float, v: float,
) -> int:
    code = _bar_error(state.shape[0], symbol, c, v)
    if code == 0:
        _update_cpu(state[symbol], o, h, l, c, v, values[symbol])
        bars_seen[symbol] += 1
    return code


@numba.njit(cache=True)
def _feed_history_cpu(
    state: F64, values: F32, symbol: int, o: F64, h: F64, l: F64, c: F64, v: F64
) -> None:
    for d in range(c.shape[0]):
        _update_cpu(state[symbol], o[d], h[d], l[d], c[d], v[d], values[symbol])


@numba.njit(cache=True)
def _reset_cpu(state: F64, values: F32) -> None:
    for symbol in range(state.shape[0]):
        _init_cpu(state[symbol])
        for k in range(values.shape[1]):
            values[symbol, k] = np.nan


@numba.njit(nogil=True, cache=True)
def _panel_cpu(lo: int, hi: int, o: F64, h: F64, l: F64, c: F64, v: F64, out: F32,
               raw: F64) -> None:
    """Stocks lo..hi-1 over every day into out (days, N_TERMINALS, stocks); also the float64
    values behind them into raw (days, N_RAW, stocks) unless raw is empty (the test hook).
    Run in chunks of stocks on threads (`gpu.threads.run_chunks`)."""
    n_days = c.shape[0]
    keep_raw = raw.shape[0] > 0
    state = np.empty(STATE_LEN)
    row = np.empty(N_TERMINALS, np.float32)
    for s in range(lo, hi):
        _init_cpu(state)
        for d in range(n_days):
            _update_cpu(state, o[d, s], h[d, s], l[d, s], c[d, s], v[d, s], row)
            for k in range(N_TERMINALS):
                out[d, k, s] = row[k]
            if keep_raw:
                for k in range(core.N_RAW):
                    raw[d, k, s] = state[core.S_RAW + k]


# ---- CUDA backend --------------------------------------------------------------------------
# Kernels are compiled on first launch; cache them on disk except under the simulator.
_cuda_options: dict[str, Any] = {} if cuda_simulated() else {"cache": True}
_update_dev = _twin.cuda.update_state
_init_dev = _twin.cuda.init_state


@cuda.jit(device=True)
def _thread_index() -> int:
    return cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x  # type: ignore[operator]


@cuda.jit(**_cuda_options)
def _panel_kernel(o, h, l, c, v, state, out):
    """One thread per stock, looping over days; state[k, stock] and out[day, k, stock] put
    neighbouring stocks (threads) at neighbouring addresses."""
    s = _thread_index()
    if s < c.shape[1]:
        column = state[:, s]
        _init_dev(column)
        for d in range(c.shape[0]):
            _update_dev(column, o[d, s], h[d, s], l[d, s], c[d, s], v[d, s], out[d, :, s])


@cuda.jit(**_cuda_options)
def _bank_kernel(n, symbols, bars, state, values):
    """One thread per listed symbol symbols[i], i < n; bars[0..4, i] = open, high, low,
    close, volume."""
    i = _thread_index()
    if i < n:
        symbol = symbols[i]
        _update_dev(
            state[:, symbol], bars[0, i], bars[1, i], bars[2, i], bars[3, i], bars[4, i],
            values[symbol, :],
        )


@cuda.jit(**_cuda_options)
def _bank_history_kernel(symbol, o, h, l, c, v, state, values):
    if _thread_index() == 0:
        for d in range(c.shape[0]):
            _update_dev(state[:, symbol], o[d], h[d], l[d], c[d], v[d], values[symbol, :])


@cuda.jit(**_cuda_options)
def _bank_reset_kernel(state, values):
    symbol = _thread_index()
    if symbol < values.shape[0]:
        _init_dev(state[:, symbol])
        for k in range(values.shape[1]):
            values[symbol, k] = math.nan


# The drivers above inline the core: the one cache policy of gpu.twin drops their stale
# cache entries whenever indicators_core.py is newer.
flush_stale_caches(__file__, [core.__file__])


def _blocks(n: int, block: int) -> int:
    return (n + block - 1) // block


def _panel_cuda_device(
    o: Any, h: Any, l: Any, c: Any, v: Any, state: Any, out: Any,
    block: int = PANEL_BLOCK, stream: Any = 0,
) -> None:
    """Launch the panel kernel on device arrays (days x stocks inputs, state (STATE_LEN,
    stocks), out (days, N_TERMINALS, stocks)); asynchronous on `stream`. Benchmark hook."""
    n_stocks = c.shape[1]
    if n_stocks and c.shape[0]:
        _panel_kernel[_blocks(n_stocks, block), block, stream](o, h, l, c, v, state, out)


def _panel_cuda(arrays: tuple[F64, F64, F64, F64, F64]) -> F32:
    n_days, n_stocks = arrays[3].shape
    stream = cuda.stream()
    o, h, l, c, v = (cuda.to_device(a, stream=stream) for a in arrays)
    state = cuda.device_array((STATE_LEN, n_stocks), np.float64, stream=stream)
    out = cuda.device_array((n_days, N_TERMINALS, n_stocks), np.float32, stream=stream)
    _panel_cuda_device(o, h, l, c, v, state, out, stream=stream)
    host: F32 = out.copy_to_host(stream=stream)
    stream.synchronize()
    return host


# ---- input checks --------------------------------------------------------------------------
def _first_bad(mask: npt.NDArray[np.bool_]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def _panel_inputs(
    open: Any, high: Any, low: Any, close: Any, volume: Any
) -> tuple[F64, F64, F64, F64, F64]:
    named = {"open": open, "high": high, "low": low, "close": close, "volume": volume}
    arrays = {k: np.ascontiguousarray(a, dtype=np.float64) for k, a in named.items()}
    shape = arrays["close"].shape
    if len(shape) != 2:
        raise ValueError(f"close has shape {shape}: expected (n_days, n_stocks)")
    for name, a in arrays.items():
        if a.shape != shape:
            raise ValueError(f"{name} has shape {a.shape}, close has {shape}: they must match")
    c, v = arrays["close"], arrays["volume"]
    bad = ~(np.isfinite(c) & (c > 0.0))
    if bad.any():
        d, s = _first_bad(bad)
        raise ValueError(f"close[day {d}, stock {s}] is {c[d, s]}: closes must be finite and > 0")
    bad = ~(np.isfinite(v) & (v >= 0.0))
    if bad.any():
        d, s = _first_bad(bad)
        raise ValueError(
            f"volume[day {d}, stock {s}] is {v[d, s]}: volumes must be finite and >= 0"
        )
    return arrays["open"], arrays["high"], arrays["low"], c, v


def compute_panel(
    open: Any, high: Any, low: Any, close: Any, volume: Any, device: str = "auto"
) -> F32:
    """All 31 terminals for every day and stock: float32 (n_days, 31, n_stocks).

    Inputs are (n_days, n_stocks) arrays, converted to float64; day 0 is each stock's first
    bar. Order of the indicator axis: `gpu.indicators.catalogue.TERMINALS`. Warm-up entries are NaN.
    """
    arrays = _panel_inputs(open, high, low, close, volume)
    backend = resolve_device(device, "indicator panel")
    if backend == "cuda":
        return _panel_cuda(arrays)
    n_days, n_stocks = arrays[3].shape
    out = np.empty((n_days, N_TERMINALS, n_stocks), np.float32)
    no_raw = np.empty((0, core.N_RAW, 0))
    if uncompiled(_panel_cpu, n_days * n_stocks, PANEL_BUDGET):
        _panel_python(0, n_stocks, *arrays, out, no_raw)
    else:
        run_chunks(_panel_cpu, n_stocks, *arrays, out, no_raw, min_chunk=1)
    return out


#: cells (days x stocks) of panels a process computes uncompiled (gpu.small): about 37 us
#: a cell interpreted, 1.2 s in all, against 1.7 s to compile `_panel_cpu` (2-core dev VM,
#: 2026-11-28; a warm run reads its window's panel from the parse cache and needs neither)
PANEL_BUDGET = 32_768
#: `_panel_cpu` run by the interpreter over the plain core (gpu.small)
_panel_python = interpreted(_panel_cpu, _init_cpu=core.init_state, _update_cpu=core.update_state)


def _raw_history(open: Any, high: Any, low: Any, close: Any, volume: Any) -> F64:
    """Test hook: the float64 values behind the terminals, (n_days, N_RAW, n_stocks), CPU.

    Names along axis 1: `gpu.indicators.core.RAW_NAMES`.
    """
    arrays = _panel_inputs(open, high, low, close, volume)
    n_days, n_stocks = arrays[3].shape
    raw = np.empty((n_days, core.N_RAW, n_stocks), np.float64)
    run_chunks(_panel_cpu, n_stocks, *arrays, np.empty((n_days, N_TERMINALS, n_stocks),
               np.float32), raw, min_chunk=1)
    return raw


# ---- incremental form ----------------------------------------------------------------------
class IndicatorBank:
    """Rolling state of the 31 terminals for `n_symbols` symbols, one bar at a time.

    `values` (float32, (n_symbols, 31)) holds each symbol's terminals after its latest bar
    (NaN before its first and while warming up); `bars_seen` (int64) counts its bars. On the
    CPU both are updated in place. On "cuda" the state stays on the device, the kernel
    reads the bars from and writes `values` to mapped host memory, and each call returns
    once the GPU has finished.
    """

    def __init__(self, n_symbols: int, device: str = "cpu") -> None:
        if int(n_symbols) != n_symbols or n_symbols < 1:
            raise ValueError(f"n_symbols is {n_symbols!r}: expected a positive integer")
        self.n_symbols = int(n_symbols)
        self.device = resolve_device(device, "indicator bank")
        n = self.n_symbols
        self._bars_seen: I64 = np.zeros(n, np.int64)
        self._stamp: I64 = np.zeros(n, np.int64)  # duplicate check: symbol -> call number
        self._generation = 0
        if self.device == "cpu":
            self._state: F64 = np.empty((n, STATE_LEN), np.float64)
            self._values: F32 = np.empty((n, N_TERMINALS), np.float32)
        else:
            self._stream = cuda.stream()
            self._state_dev = cuda.device_array((STATE_LEN, n), np.float64)
            self._values_mapped = cuda.mapped_array((n, N_TERMINALS), np.float32)
            self._symbols_mapped = cuda.mapped_array(n, np.int32)
            self._bars_mapped = cuda.mapped_array((5, n), np.float64)
            # host views of the mapped buffers (plain ndarrays, also under the simulator)
            self._values = np.asarray(self._values_mapped)
            self._symbols_host: I32 = np.asarray(self._symbols_mapped)
            self._bars_host: F64 = np.asarray(self._bars_mapped)
        self.reset()

    @property
    def values(self) -> F32:
        return self._values

    @property
    def bars_seen(self) -> I64:
        return self._bars_seen

    def grown(self, capacity: int) -> IndicatorBank:
        """A bank for `capacity` symbols that keeps every existing symbol's rolling state
        (a live engine meets new symbols); the new rows start empty."""
        if capacity < self.n_symbols:
            raise ValueError(f"capacity {capacity} is below the {self.n_symbols} symbols held")
        new = IndicatorBank(capacity, device=self.device)
        n = self.n_symbols
        if self.device == "cpu":
            new._state[:n] = self._state
        else:
            state = new._state_dev.copy_to_host()
            state[:, :n] = self._state_dev.copy_to_host()
            new._state_dev.copy_to_device(state)
        new._values[:n] = self._values
        new._bars_seen[:n] = self._bars_seen
        return new

    def reset(self) -> None:
        """Forget every bar of every symbol."""
        self._bars_seen[:] = 0
        if self.device == "cpu":
            _reset_cpu(self._state, self._values)
            return
        n = self.n_symbols
        _bank_reset_kernel[_blocks(n, BANK_BLOCK), BANK_BLOCK, self._stream](
            self._state_dev, self._values_mapped
        )
        self._stream.synchronize()

    def update(
        self, symbols: Any, open: Any, high: Any, low: Any, close: Any, volume: Any
    ) -> None:
        """Advance each listed symbol (int32 indices, no repeats) by one bar (float64 arrays
        of the same length). Nothing is advanced if any entry is bad (ValueError)."""
        sym = np.asarray(symbols, dtype=np.int32)
        o = np.asarray(open, dtype=np.float64)
        h = np.asarray(high, dtype=np.float64)
        l = np.asarray(low, dtype=np.float64)
        c = np.asarray(close, dtype=np.float64)
        v = np.asarray(volume, dtype=np.float64)
        k = sym.shape[0] if sym.ndim == 1 else -1
        if any(a.shape != (k,) for a in (sym, o, h, l, c, v)):
            raise ValueError(
                "update needs 1-D symbols, open, high, low, close, volume of one length; got "
                + ", ".join(str(a.shape) for a in (sym, o, h, l, c, v))
            )
        self._generation += 1
        if self.device == "cpu":
            code, at = _update_batch_cpu(
                self._state, self._values, self._bars_seen, self._stamp, self._generation,
                sym, o, h, l, c, v,
            )
            if code:
                self._raise(code, sym, c, v, at)
            return
        code, at = _check_batch(self.n_symbols, self._stamp, self._generation, sym, c, v)
        if code:
            self._raise(code, sym, c, v, at)
        if k == 0:
            return
        self._symbols_host[:k] = sym
        for row, a in enumerate((o, h, l, c, v)):
            self._bars_host[row, :k] = a
        _bank_kernel[_blocks(k, BANK_BLOCK), BANK_BLOCK, self._stream](
            k, self._symbols_mapped, self._bars_mapped, self._state_dev,
            self._values_mapped,
        )
        self._stream.synchronize()
        np.add.at(self._bars_seen, sym, 1)

    def compiled_arrays(self) -> tuple[F64, F32, I64, I64]:
        """The CPU bank's state, values, bars seen and duplicate stamps, which a compiled
        caller advances in place with `update_batch_cpu` (after `next_generation`)."""
        if self.device != "cpu":
            raise ValueError("compiled_arrays: the bank's state is on the GPU")
        return self._state, self._values, self._bars_seen, self._stamp

    def next_generation(self) -> int:
        """The generation of an update a compiled caller makes (`update` counts its own)."""
        self._generation += 1
        return self._generation

    def raise_update_error(self, code: int, symbols: Any, close: Any, volume: Any,
                           at: int) -> None:
        """The ValueError `update` raises for the error `update_batch_cpu` returned."""
        self._raise(code, np.asarray(symbols, np.int32), np.asarray(close, np.float64),
                    np.asarray(volume, np.float64), at)

    def update_one(self, symbol: int, o: float, h: float, l: float, c: float, v: float) -> None:
        """Advance one symbol by one bar (no allocation on the CPU path)."""
        if self.device == "cpu":
            code = _update_one_cpu(
                self._state, self._values, self._bars_seen, symbol, o, h, l, c, v
            )
            if code:
                self._raise_one(code, symbol, c, v)
            return
        self.update(
            np.array([symbol], np.int32), np.array([o]), np.array([h]), np.array([l]),
            np.array([c]), np.array([v]),
        )

    def feed_history(
        self, symbol: int, open: Any, high: Any, low: Any, close: Any, volume: Any
    ) -> None:
        """Advance one symbol through a whole history (1-D arrays, oldest bar first), e.g. to
        warm the live indicators up from past daily bars."""
        arrays = [
            np.ascontiguousarray(a, dtype=np.float64) for a in (open, high, low, close, volume)
        ]
        c, v = arrays[3], arrays[4]
        if c.ndim != 1 or any(a.shape != c.shape for a in arrays):
            raise ValueError("feed_history needs 1-D open, high, low, close, volume of one length")
        if not 0 <= symbol < self.n_symbols:
            raise ValueError(f"symbol {symbol} is outside 0..{self.n_symbols - 1}")
        bad = ~(np.isfinite(c) & (c > 0.0))
        if bad.any():
            d = int(np.argmax(bad))
            raise ValueError(f"close[{d}] is {c[d]}: closes must be finite and > 0")
        bad = ~(np.isfinite(v) & (v >= 0.0))
        if bad.any():
            d = int(np.argmax(bad))
            raise ValueError(f"volume[{d}] is {v[d]}: volumes must be finite and >= 0")
        if c.shape[0] == 0:
            return
        if self.device == "cpu":
            _feed_history_cpu(self._state, self._values, symbol, *arrays)
        else:
            device_in = [cuda.to_device(a, stream=self._stream) for a in arrays]
            _bank_history_kernel[1, 1, self._stream](
                symbol, *device_in, self._state_dev, self._values_mapped
            )
            self._stream.synchronize()
        self._bars_seen[symbol] += c.shape[0]

    def _raise_one(self, code: int, symbol: int, close: float, volume: float) -> None:
        if code == _BAD_SYMBOL:
            raise ValueError(f"symbol {symbol} is outside 0..{self.n_symbols - 1}")
        if code == _BAD_CLOSE:
            raise ValueError(f"close {close} for symbol {symbol}: closes must be finite and > 0")
        raise ValueError(f"volume {volume} for symbol {symbol}: volumes must be finite and >= 0")

    def _raise(self, code: int, symbols: I32, close: F64, volume: F64, at: int) -> None:
        if code == _DUPLICATE_SYMBOL:
            raise ValueError(
                f"symbols[{at}] = {symbols[at]} is listed twice: one bar per symbol per update"
            )
        self._raise_one(code, int(symbols[at]), float(close[at]), float(volume[at]))
