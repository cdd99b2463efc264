"""Pricing engines for options: the Black–Scholes PDE (GPU or CPU twin) and the analytic formula.

The instruments and market inputs live in `gpu.options.instruments`; an engine turns them into
values, so a caller never sees which device or formula prices them:
- `FdPricingEngine(grid, device)`: `price(contracts, market)`, `group_pricer(...)` for
  repeated repricing of one group, `warm_up()`.
- `AnalyticEuropeanEngine()`: `price(contracts, market)` with vega, European only.

Below the engines, the finite-difference machinery they share (the kernel's row layout is
the engine's internal representation; `gpu.options.implied_vol` works on it too):
- `FdGrid` / `GRIDS` / `make_grid`: the finite-difference settings ("seed", "default",
  "fine"; defined in `gpu.options.grids`, which imports no numba).
- `option_params` / `contract_rows`: parameter rows (see `gpu.options.core` for the column
  layout).
- `price_options` / `price_params`: one batched repricing (one CUDA launch, one block per
  option; or all CPU cores).
- `black_scholes`: the analytic European price and greeks (reference and IV start).
- `OptionGroupPricer`: one group of options on one underlying that is repriced many times,
  e.g. after each tick: parameters and spot live in mapped host memory, the kernel writes
  its results into mapped host memory, on the group's own stream, and completion is
  observed by polling a recorded event (numba-cuda 0.30.4 has no stream callbacks).

Units: prices in the underlying's currency, expiry in years (calendar days / 365 where a
date is involved), vol, rate and dividend yield per year (continuously compounded; the
yield defaults to 0, which leaves every result bit for bit as without it).

The grids' design and accuracy: `gpu.options.grids`.
"""

from __future__ import annotations

import ctypes
import math
import os
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from gpu.device import fd_max_registers, fd_solver, quiet_event_polling, resolve_device
from gpu.launch import (
    CompletionFlag,
    bind,
    completion_flag,
    event_query,
    event_recorder,
    event_waiter,
    graph_launcher,
    kernel_node_updater,
    untimed_event,
)
from gpu.options import core
from gpu.options.grids import GRIDS as GRIDS  # re-exported: scripts name engines.GRIDS
from gpu.options.grids import FdGrid, make_grid
from gpu.options.instruments import (
    DIVIDEND_YIELD_LIMIT,
    MarketInputs,
    OptionContracts,
    check_dividend_yield,
)

FloatArray = npt.NDArray[np.float64]

quiet_event_polling()


def option_params(
    spot: npt.ArrayLike,
    strike: npt.ArrayLike,
    expiry: npt.ArrayLike,
    vol: npt.ArrayLike,
    rate: npt.ArrayLike = 0.0,
    is_call: npt.ArrayLike = True,
    is_american: npt.ArrayLike = False,
    dividend_yield: npt.ArrayLike = 0.0,
) -> FloatArray:
    """Parameter rows (n, core.N_PARAMS) from broadcastable arrays; rejects nonsense.

    spot, strike in [1e-8, 1e12]; expiry in years, at most 100 (≤ 0 means expired:
    priced at intrinsic value); vol in [0, 10] per year; rate and dividend yield per
    year, continuously compounded, in [−1, 1] (`PARAM_RANGES`).
    """
    cols = np.broadcast_arrays(
        *(np.asarray(x, dtype=np.float64) for x in (spot, strike, expiry, vol, rate)),
        np.asarray(is_call, dtype=np.float64),
        np.asarray(is_american, dtype=np.float64),
        np.asarray(dividend_yield, dtype=np.float64),
    )
    n = cols[0].size
    params = np.zeros((n, core.N_PARAMS), dtype=np.float64)
    for c, col in zip(
        (core.SPOT, core.STRIKE, core.EXPIRY, core.VOL, core.RATE, core.IS_CALL, core.IS_AMERICAN,
         core.DIVIDEND),
        cols,
        strict=True,
    ):
        params[:, c] = col.ravel()
    check_params(params)
    return params


#: (column, name, lowest, highest) of a parameter row: prices of real instruments, vols to
#: 1,000% a year, expiries to a century, rates within ±100% a year (the yield's [-1, 1]
#: is `check_dividend_yield`'s)
MIN_VOL = 1e-8  # a smaller vol than this divides the grid's coefficients by ~0
PARAM_RANGES = (
    (core.SPOT, "spot", 1e-8, 1e12),
    (core.STRIKE, "strike", 1e-8, 1e12),
    (core.VOL, "vol", 0.0, 10.0),
    (core.EXPIRY, "expiry", -1e6, 100.0),
    (core.RATE, "rate", -1.0, 1.0),
)


def check_params(params: FloatArray) -> None:
    if params.ndim != 2 or params.shape[1] != core.N_PARAMS:
        raise ValueError(f"params must have shape (n, {core.N_PARAMS}), got {params.shape}")
    check_dividend_yield(params[:, core.DIVIDEND])  # first: its own message for a NaN
    if not np.isfinite(params).all():
        raise ValueError("option parameters contain NaN or infinity")
    for col, what in ((core.SPOT, "spot"), (core.STRIKE, "strike")):
        bad = params[:, col] <= 0
        if bad.any():
            raise ValueError(f"{what} must be > 0 ({int(bad.sum())} rows are not)")
    # Values that decode but no instrument has: the grids divide by them (a strike of
    # 1e-300 raised ZeroDivisionError in the seed grid, a spot of 1e300 gave NaN values;
    # found by tests/gpu/test_fd_solvers.py's set_column property)
    for col, what, lo, hi in PARAM_RANGES:
        x = params[:, col]
        bad = (x < lo) | (x > hi)
        if bad.any():
            raise ValueError(f"{what} must be in [{lo:g}, {hi:g}], got {float(x[bad][0])!r} "
                             f"({int(bad.sum())} rows)")
    vol = params[:, core.VOL]
    tiny = (vol > 0.0) & (vol < MIN_VOL)  # (0: priced in closed form, no grid)
    if tiny.any():
        raise ValueError(f"vol must be 0 or at least {MIN_VOL:g}, got {float(vol[tiny][0])!r} "
                         f"({int(tiny.sum())} rows)")


def contract_rows(contracts: OptionContracts, market: MarketInputs) -> FloatArray:
    """The kernel's parameter rows of contracts in a market (broadcast against each other:
    one contract against n spots gives n rows)."""
    return option_params(market.spot, contracts.strike, contracts.expiry, market.vol,
                         market.rate, contracts.is_call, contracts.is_american,
                         market.dividend_yield)


class OptionValues(NamedTuple):
    """Results of a repricing, one entry per option: price, ∂V/∂S, ∂²V/∂S²."""

    price: FloatArray
    delta: FloatArray
    gamma: FloatArray


def _values(out: np.ndarray) -> OptionValues:
    out = np.array(out, dtype=np.float64, copy=True)
    return OptionValues(out[:, core.PRICE], out[:, core.DELTA], out[:, core.GAMMA])


def price_params(
    params: FloatArray, grid: str | FdGrid = "default", device: str = "auto"
) -> OptionValues:
    """Price every parameter row by Crank–Nicolson: one CUDA launch, or all CPU cores."""
    g = make_grid(grid)
    params = np.ascontiguousarray(params, dtype=np.float64)
    check_params(params)
    n = params.shape[0]
    if n == 0:
        empty = np.zeros(0)
        return OptionValues(empty, empty.copy(), empty.copy())
    backend = resolve_device(device, "option pricing")
    if backend == "cpu":
        out = np.empty((n, core.N_OUT))
        core.fd_price_batch_cpu(params, out, *g.kernel_args())
        return _values(out)
    # the kernel interleaving an option's two marches only where some row has two
    interleave = core.two_marches(params, g.richardson)
    batch = _mapped_batch(g, n)
    if batch is None:
        return _price_on_cuda(params, g, interleave)
    try:
        batch.host_params[:n] = params
        return batch.price(n, interleave)
    finally:
        batch.lock.release()


def _launch_shape(g: FdGrid, n: int, interleave: bool) -> tuple[Any, int]:
    """(kernel, threads per block) of a CUDA launch of n checked rows: two warps an option
    by the compiled kernel's occupancy (a first call, which compiles it, keeps one warp;
    the values are the same bit for bit either way)."""
    split = core.split_passes(g.richardson, n,
                              core.fd_kernel(g.price_steps, interleave=interleave)[0])
    return core.fd_kernel(g.price_steps, split_passes=split, interleave=interleave)


def _price_on_cuda(params: FloatArray, g: FdGrid, interleave: bool) -> OptionValues:
    """numba's ordinary launch of checked rows: a stream, two device arrays and copies."""
    from numba import cuda

    n = params.shape[0]
    stream = cuda.stream()
    d_params = cuda.to_device(params, stream=stream)
    d_out = cuda.device_array((n, core.N_OUT), dtype=np.float64, stream=stream)
    kernel, threads = _launch_shape(g, n, interleave)
    kernel[n, threads, stream](d_params, d_out, *core.launch_args(g.kernel_args()))
    out = d_out.copy_to_host(stream=stream)
    stream.synchronize()
    return _values(out)


#: one-shot repricings of up to this many rows reuse a mapped workspace (16 MiB of pinned
#: parameter rows); larger ones allocate their own device arrays
MAPPED_BATCH_MAX_ROWS = 1 << 18


#: rows per launch when `FdPricingEngine.price` builds rows in the workspace: the host
#: builds and checks the next chunk while the GPU prices the last, on two streams in
#: turn so one chunk's blocks start while the one before drains
PIPELINE_CHUNK_ROWS = 2048


class _MappedBatch:
    """A reusable workspace for one-shot repricings on CUDA (`price_params`,
    `FdPricingEngine.price`): parameter rows and results in mapped host memory (no copies:
    the kernel reads and writes them over the bus), two streams of its own, pre-bound
    launches (per kernel, block size and first row) and an event per stream. numba's
    ordinary path creates a stream, allocates two device arrays, copies both ways through
    pageable memory and types every argument on each call: at 10,000 contracts on the
    H200 (2026-11-28) that host work took about twice the kernel's time. Capacity only
    grows (doubling)."""

    def __init__(self, grid: FdGrid, rows: int) -> None:
        import threading

        from numba import cuda
        from numba.cuda.cudadrv.devicearray import DeviceNDArray

        self.grid = grid
        self.lock = threading.Lock()
        self.capacity = rows
        self.params = cuda.mapped_array((rows, core.N_PARAMS), dtype=np.float64)
        self.out = cuda.mapped_array((rows, core.N_OUT), dtype=np.float64)
        self.host_params = np.asarray(self.params)
        self.host_out = np.asarray(self.out)
        self.host_params[:] = 0.0
        self.host_params[:, core.SPOT] = 1.0
        self.host_params[:, core.STRIKE] = 1.0
        # device-side views of the mapped memory: a chunk's launch takes a slice from its
        # first row (the kernel's row is its block's index)
        self.device_params, self.device_out = (
            DeviceNDArray(a.shape, a.strides, a.dtype, gpu_data=a.gpu_data)
            for a in (self.params, self.out))
        self.grid_args = core.launch_args(grid.kernel_args())
        self.streams = (cuda.stream(), cuda.stream())
        self.launches: dict[tuple[Any, int, int, int], tuple[Any, tuple[Any, ...]]] = {}
        self.kernels: dict[bool, Any] = {}  # the one-warp kernel, by interleave
        self.shapes: dict[tuple[bool, bool], tuple[Any, int]] = {}  # by (split, interleave)
        events = (untimed_event(), untimed_event())
        self.records = tuple(event_recorder(e, s) for e, s in zip(events, self.streams,
                                                                   strict=True))
        self.waits = tuple(event_waiter(e) for e in events)  # without the GIL

    def _shape(self, rows: int, interleave: bool) -> tuple[Any, int]:
        """`_launch_shape` with the kernel looked up once (`fd_kernel`'s and
        `split_passes`'s lookups took 28-72 µs a call on the H200's host, 2026-11-28)."""
        one_warp = self.kernels.get(interleave)
        if one_warp is None:
            one_warp = self.kernels[interleave] = core.fd_kernel(
                self.grid.price_steps, interleave=interleave)[0]
        split = core.split_passes(self.grid.richardson, rows, one_warp)
        shape = self.shapes.get((split, interleave))
        if shape is None:
            shape = self.shapes[(split, interleave)] = core.fd_kernel(
                self.grid.price_steps, split_passes=split, interleave=interleave)
        return shape

    def _launch(self, first: int, rows: int, interleave: bool, stream: int) -> None:
        """Price rows first..first+rows-1 on `self.streams[stream]`."""
        kernel, threads = self._shape(rows, interleave)
        key = (kernel, threads, first, stream)
        entry = self.launches.get(key)
        if entry is None:
            args = (self.device_params[first:], self.device_out[first:], *self.grid_args)
            go = bind(kernel, args, self.streams[stream], threads)
            if go is None and not getattr(kernel, "overloads", None):
                # (rows first.. are already built: this launch's value is overwritten)
                kernel[1, threads, self.streams[stream]](*args)  # compiles, or loads
                self.streams[stream].synchronize()
                go = bind(kernel, args, self.streams[stream], threads)
            entry = self.launches[key] = (go, args)
        go, args = entry
        if go is not None:
            go(rows)
        else:
            kernel[rows, threads, self.streams[stream]](*args)

    def _wait(self, streams: int) -> None:
        """Until the work queued on the first `streams` streams is done."""
        for k in range(streams):
            self.records[k]()
        for k in range(streams):
            self.waits[k]()

    def price(self, n: int, interleave: bool) -> OptionValues:
        """Values of the checked rows host_params[:n] (the caller holds `lock`)."""
        self._launch(0, n, interleave, 0)
        self._wait(1)
        return _values(self.host_out[:n])

    def price_columns(self, columns: tuple[FloatArray, ...], n: int) -> OptionValues | None:
        """Values of the rows built from `columns` (`_row_columns`), built and checked by
        `core.fill_rows` a chunk at a time, each chunk launched as soon as it is built
        (with the interleaving kernel only where it has a two-march row: the values are
        the same bit for bit either way); None, after the launches in flight, where a row
        fails the check. The caller holds `lock`."""
        bad = 0
        launches = 0
        try:
            for first in range(0, n, PIPELINE_CHUNK_ROWS):
                last = min(n, first + PIPELINE_CHUNK_ROWS)
                bad, early = core.fill_rows(self.host_params, first, last, columns,
                                            _ROW_LOWEST, _ROW_HIGHEST, MIN_VOL)
                if bad:
                    break
                self._launch(first, last - first, early and self.grid.richardson,
                             launches % 2)
                launches += 1
        finally:
            # whatever stopped the loop, no chunk in flight outlives the caller's lock: the
            # next caller rewrites these rows
            self._wait(min(launches, 2))
        return None if bad else _values(self.host_out[:n])


_mapped_batches: dict[tuple[Any, ...], _MappedBatch] = {}


def _mapped_batch(grid: FdGrid, rows: int) -> _MappedBatch | None:
    """The workspace for this grid (its lock held), or None: the simulator, too many rows,
    or another thread pricing on it now (that call takes the ordinary path)."""
    if rows > MAPPED_BATCH_MAX_ROWS or os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1":
        return None
    key = (grid.kernel_args(), fd_solver(None), fd_max_registers(),
           os.environ.get("GPU_FD_INTERLEAVE", "1"))  # (the batch keeps its kernels)
    batch = _mapped_batches.get(key)
    if batch is None or batch.capacity < rows:
        capacity = max(rows, 2 * batch.capacity if batch is not None else 1024)
        batch = _MappedBatch(grid, min(capacity, MAPPED_BATCH_MAX_ROWS))
        _mapped_batches[key] = batch
    if not batch.lock.acquire(blocking=False):
        return None
    return batch


#: per row column (`core.SPOT` .. `core.DIVIDEND`): the values `check_params` accepts,
#: as `core.fill_rows` checks them (every value finite; the ranges of PARAM_RANGES and
#: of the dividend yield)
_ROW_LOWEST = np.full(core.N_PARAMS, -np.finfo(np.float64).max)
_ROW_HIGHEST = np.full(core.N_PARAMS, np.finfo(np.float64).max)
for _col, _name, _lo, _hi in PARAM_RANGES:
    _ROW_LOWEST[_col], _ROW_HIGHEST[_col] = _lo, _hi
_ROW_LOWEST[core.DIVIDEND], _ROW_HIGHEST[core.DIVIDEND] = -DIVIDEND_YIELD_LIMIT, \
    DIVIDEND_YIELD_LIMIT


def _row_columns(contracts: OptionContracts,
                 market: MarketInputs) -> tuple[tuple[FloatArray, ...], int] | None:
    """The eight row columns (`core.fill_rows`'s order) as contiguous float64 vectors of
    length n or 1, and n; None where they do not broadcast as vectors (a 2-D market
    input, mismatched lengths, no rows): `contract_rows` then builds them or says why not."""
    inputs = (market.spot, contracts.strike, contracts.expiry, market.vol, market.rate,
              contracts.is_call, contracts.is_american, market.dividend_yield)
    columns = []
    for x in inputs:
        a = np.asarray(x, dtype=np.float64)
        if a.ndim > 1:
            return None
        columns.append(np.ascontiguousarray(a.reshape(-1)))
    n = max(len(c) for c in columns)
    if n == 0 or any(len(c) not in (1, n) for c in columns):
        return None
    return tuple(columns), n


def _price_contracts_on_cuda(contracts: OptionContracts, market: MarketInputs,
                             g: FdGrid) -> OptionValues | None:
    """`FdPricingEngine.price` on CUDA with the rows built and checked by compiled passes,
    straight into the mapped workspace (`_MappedBatch.price_columns`); None where a row
    fails `check_params`'s checks or the inputs are not vectors (the caller's numpy path
    then raises its one-line error, or broadcasts)."""
    built = _row_columns(contracts, market)
    if built is None:
        return None
    columns, n = built
    batch = _mapped_batch(g, n)
    if batch is None:
        rows = np.empty((n, core.N_PARAMS))
        bad, early = core.fill_rows(rows, 0, n, columns, _ROW_LOWEST, _ROW_HIGHEST, MIN_VOL)
        return None if bad else _price_on_cuda(rows, g, early and g.richardson)
    try:
        return batch.price_columns(columns, n)
    finally:
        batch.lock.release()


def price_options(
    spot: npt.ArrayLike,
    strike: npt.ArrayLike,
    expiry: npt.ArrayLike,
    vol: npt.ArrayLike,
    rate: npt.ArrayLike = 0.0,
    is_call: npt.ArrayLike = True,
    is_american: npt.ArrayLike = False,
    *,
    dividend_yield: npt.ArrayLike = 0.0,
    grid: str | FdGrid = "default",
    device: str = "auto",
) -> OptionValues:
    """Crank–Nicolson prices and greeks of broadcastable option arrays (see option_params)."""
    params = option_params(spot, strike, expiry, vol, rate, is_call, is_american,
                           dividend_yield)
    return price_params(params, grid, device)


class AnalyticValues(NamedTuple):
    price: FloatArray
    delta: FloatArray
    gamma: FloatArray
    vega: FloatArray


def black_scholes(
    spot: npt.ArrayLike,
    strike: npt.ArrayLike,
    expiry: npt.ArrayLike,
    vol: npt.ArrayLike,
    rate: npt.ArrayLike = 0.0,
    is_call: npt.ArrayLike = True,
    dividend_yield: npt.ArrayLike = 0.0,
) -> AnalyticValues:
    """Analytic European Black–Scholes–Merton price, delta, gamma and vega (per unit of σ),
    with a continuous dividend yield."""
    params = option_params(spot, strike, expiry, vol, rate, is_call, False, dividend_yield)
    out = np.empty((params.shape[0], 4))
    core.bs_price_greeks_batch(params, out)
    return AnalyticValues(out[:, 0], out[:, 1], out[:, 2], out[:, 3])


def warm_up(grid: str | FdGrid = "default", device: str = "auto") -> str:
    """Compile the kernels (JIT ≈0.8 s on first use, then disk-cached) before live work."""
    backend = resolve_device(device, "option pricing")
    g = make_grid(grid)
    # the grid's own price steps: the lanes kernel is compiled per rows-per-lane count
    tiny = g._replace(time_steps=2)
    params = option_params(100.0, 100.0, 0.1, 0.2)
    price_params(params, tiny, backend)
    if backend == "cpu":  # the background repricing's serial twin too, not on the first tick
        core.fd_price_batch_cpu_serial(params, np.empty((1, core.N_OUT)), *tiny.kernel_args())
    return backend


def _then_signal(go: Any, signal: Any) -> Any:
    """A launcher of `go(grid)` followed by the completion flag's one-thread `signal`."""
    def both(grid: int) -> None:
        go(grid)
        signal(1)

    return both


def _recorded_by_the_graph() -> None:
    """A graph launch records the pricer's event itself (`OptionGroupPricer._capture_graph`)."""


class OptionGroupPricer:
    """A group of options repriced again and again, e.g. on every tick of its underlying.

    On CUDA: a new spot is the launch's `spot_at` (no row is written); the parameter rows
    live in device memory, copied from pinned host rows (`params`) at the first launch
    after a `set_column`; the results live in mapped (pinned, device-visible) host memory
    and need no copy; each `launch` is one CUDA graph on the group's own stream (the
    kernel, a completion flag's signal, an event's record); `done()` reads the flag (or
    polls the event) and never blocks. On the CPU the launch
    computes synchronously and `done()` is always true, unless `background=True`: then the
    CPU twin runs on a worker thread without the GIL and `done()` polls its future, so an
    event loop keeps running while the group is repriced, as on the GPU.
    """

    def __init__(
        self, params: FloatArray, grid: str | FdGrid = "default", device: str = "auto",
        background: bool = False, solver: str | None = None,
    ) -> None:
        check_params(params)
        self.grid = make_grid(grid)
        self.device = resolve_device(device, "option group repricing")
        self.n = params.shape[0]
        #: the FD kernel's tridiagonal solver (`gpu.device.fd_solver`: GPU_FD_SOLVER, "lanes")
        self.solver = fd_solver(solver)
        self._args = self.grid.kernel_args()
        self._in_flight = False
        self._future: Any = None
        self._executor: Any = None
        #: completion read from host memory (`gpu.launch.CompletionFlag`) where the graph has it
        self._flag: CompletionFlag | None = None
        #: on CUDA, the spot of every row as the launch's `spot_at` (0: each row's own);
        #: the bound launch's ctypes value of it, and the graph's update after a change
        self._spot = 0.0
        self._spot_value: Any = None
        self._update_node: Any = None
        self._node_stale = False
        #: a bound launch whose `spot_at` cannot change (numba's launcher): spots in rows
        self._spot_in_rows = False
        #: on CUDA, host rows changed since they were copied to the device
        self._rows_stale = False
        if self.device == "cpu":
            self._params_dev: Any = np.array(params, dtype=np.float64, copy=True)
            self._rows = self._params_dev
            self._out_dev: Any = np.zeros((self.n, core.N_OUT))
            self._out = self._out_dev
            self._stream: Any = None
            self._event: Any = None
            if background:
                from concurrent.futures import ThreadPoolExecutor

                self._executor = ThreadPoolExecutor(1, thread_name_prefix="option-group")
            return
        from numba import cuda

        # the rows in device memory, copied from pinned host rows (`params`) on the group's
        # stream at the first launch after they change (`set_column`): a spot is the
        # launch's `spot_at`, so they rarely do, and every block's first read is then
        # device memory instead of a round trip over the bus. The results stay in mapped
        # memory (written over the bus, read by the host with no copy).
        self._stream = cuda.stream()
        self._rows = cuda.pinned_array((self.n, core.N_PARAMS), dtype=np.float64)
        self._rows[:] = params
        self._params_dev = cuda.to_device(self._rows, stream=self._stream)
        self._out_dev = cuda.mapped_array((self.n, core.N_OUT), dtype=np.float64)
        self._out = np.asarray(self._out_dev)  # (a host view of the same memory)
        self._out[:] = np.nan
        self._event = untimed_event()
        # the event's record and query as single driver calls (numba's query raises and
        # logs an error on every not-ready poll: microseconds each)
        self._record = event_recorder(self._event, self._stream)
        self._query = event_query(self._event)
        self._kernel, self._threads = core.fd_kernel(
            self.grid.price_steps, self.solver,
            interleave=core.two_marches(self._rows, self.grid.richardson))
        # two warps an option where the device holds them all at once (`core.split_passes`)
        self._threads = core.lanes_threads(self._kernel, self._threads, self.grid.richardson,
                                           self.n, self._compile_once)
        self._bound: Any = None
        #: True when launches skip numba's per-call argument typing (see _bind_launch)
        self.prebound = False
        #: how a bound launch reaches the driver ("ctypes", "cuda.core") or None
        self.launcher: str | None = None
        if os.environ.get("GPU_OPTIONS_PREBIND", "1") != "0":
            self._bind_launch()
        self._spot_in_rows = self._bound is not None and self._spot_value is None

    def _launch_args(self) -> tuple[Any, ...]:
        return (self._params_dev, self._out_dev, *core.launch_args(self._args, self._spot))

    def _compile_once(self) -> None:
        """One ordinary launch, which compiles (or loads) the kernel; the results it
        leaves are no repricing's."""
        self._kernel[self.n, self._threads, self._stream](*self._launch_args())
        self._stream.synchronize()
        self._out[:] = np.nan

    def _bind_launch(self) -> None:
        """Pre-bind the launch (`gpu.launch.bind`): numba types every argument and
        prepares it as ctypes on each call (tens of microseconds of Python); the arguments
        here never change (the same mapped arrays, the same grid scalars), so they are
        prepared once and each launch is one driver call. It uses numba-cuda's internals,
        so it is verified: one ordinary launch and one bound launch must give bit-identical
        results, else the ordinary path stays (and a warning says so)."""
        import logging

        log = logging.getLogger(__name__)
        if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1":
            return  # the simulator has no driver launch to bind
        # an ordinary launch compiles (or loads) the kernel and gives the reference
        self._kernel[self.n, self._threads, self._stream](*self._launch_args())
        self._stream.synchronize()
        reference = self._out.copy()
        go = bind(self._kernel, self._launch_args(), self._stream, self._threads)
        if go is None:
            return
        self._out[:] = np.nan
        go(self.n)
        self._stream.synchronize()
        if not np.array_equal(self._out, reference, equal_nan=True):
            log.warning("option pricer: the pre-bound launch disagrees; not used")
            return
        n = self.n
        self._bound = lambda: go(n)
        self.prebound = True
        self.launcher = getattr(go, "driver", None)
        scalars = getattr(go, "scalars", None)
        # `spot_at` is the launch's last argument: its prepared value, changed in place
        if scalars and isinstance(scalars[-1], ctypes.c_double):
            self._spot_value = scalars[-1]
        if os.environ.get("GPU_OPTIONS_GRAPH", "1") != "0":
            self._capture_graph(go, reference)

    def _capture_graph(self, go: Any, reference: np.ndarray) -> None:
        """The bound launch, a completion flag's signal and the event's record as one
        CUDA graph (`graph_launcher`, `completion_flag`): one driver call a repricing
        instead of two, and `done()` a read of host memory instead of an event query;
        kept only where a replay gives the reference bit for bit, sets the flag and the
        event reports it done (without the flag where it cannot be made)."""
        flag = completion_flag(self._stream)
        work = go if flag is None else _then_signal(go, flag.go)
        replay = graph_launcher(work, self.n, self._event, self._stream)
        if replay is None:
            return
        self._out[:] = np.nan
        if flag is not None:
            flag.arm()
        replay()
        self._event.synchronize()
        update = kernel_node_updater(replay, go)
        if update is None:  # a graph whose spot cannot change: the bound launch stays
            return
        if (self._query() and np.array_equal(self._out, reference, equal_nan=True)
                and (flag is None or flag.seen())):
            self._bound = replay
            self._update_node = update
            self._record = _recorded_by_the_graph
            self._flag = flag
            self.launcher = f"{self.launcher}+graph" + ("+flag" if flag is not None else "")

    @property
    def in_flight(self) -> bool:
        return self._in_flight

    def set_spot(self, spot: float) -> None:
        """A new spot for every row. On the CPU it is written into each row; on CUDA it is
        the launch's `spot_at` (one value: the rows' own SPOT column is then not read),
        which a graph takes up with one node update at the next launch."""
        if self._in_flight:
            raise RuntimeError("cannot change parameters while a repricing is in flight")
        if not (spot > 0 and math.isfinite(spot)):
            raise ValueError(f"spot must be a positive number, got {spot!r}")
        if self.device == "cpu" or self._spot_in_rows:
            self._rows[:, core.SPOT] = spot
            self._rows_stale = self.device != "cpu"
            return
        self._set_spot_at(float(spot))

    def rows(self) -> FloatArray:
        """A copy of the parameter rows as the next launch prices them (`params`, with
        the spot `set_spot` gave on CUDA in the SPOT column)."""
        rows = np.array(self._rows, dtype=np.float64, copy=True)
        if self._spot > 0.0:
            rows[:, core.SPOT] = self._spot
        return rows

    def _set_spot_at(self, spot: float) -> None:
        """The launch's `spot_at`: each launch path's copy of it (0.0: the rows' own)."""
        self._spot = spot
        if self._spot_value is not None:
            self._spot_value.value = spot
            self._node_stale = self._update_node is not None

    def set_expiry(self, years: npt.ArrayLike) -> None:
        """New times to expiry in years (the valuation date rolled); ≤ 0: expired."""
        self.set_column(core.EXPIRY, years)

    @property
    def params(self) -> FloatArray:
        """The parameter rows as the host holds them, read-only: on CUDA the kernel reads a
        device copy, which only `set_column`, `set_expiry` and `set_spot` bring up to date
        (a write into these rows would otherwise be silently left out of the prices)."""
        view = self._rows.view()
        view.flags.writeable = False
        return view

    def set_column(self, column: int, values: npt.ArrayLike) -> None:
        """Change one parameter column (e.g. core.EXPIRY when the date rolls). Values
        that would make a row nonsense (`check_params`: NaN, a spot or strike ≤ 0, a
        negative vol, a yield outside [-1, 1]), a column out of range or values that do
        not broadcast to the rows are a one-line ValueError that leaves every row as it
        was."""
        if self._in_flight:
            raise RuntimeError("cannot change parameters while a repricing is in flight")
        if isinstance(column, bool) or not isinstance(column, (int, np.integer)) or not (
                0 <= column < core.N_PARAMS):
            raise ValueError(f"column must be an integer from 0 to {core.N_PARAMS - 1}, "
                             f"got {column!r}")
        rows = np.array(self._rows, dtype=np.float64, copy=True)
        try:
            rows[:, column] = values
        except (TypeError, ValueError) as exc:
            raise ValueError(f"values for column {column} must be numbers, one per row "
                             f"({self.n}) or one for all: {exc}") from None
        check_params(rows)
        self._rows[:, column] = rows[:, column]
        if self.device != "cpu":
            self._rows_stale = True
            if column == core.SPOT:
                self._set_spot_at(0.0)  # the rows' own spots again

    def launch(self) -> None:
        """Start repricing the group with the current parameters; does not wait."""
        if self._in_flight:
            raise RuntimeError("a repricing of this group is already in flight")
        if self.device == "cpu":
            if self._executor is not None:
                self._future = self._executor.submit(
                    core.fd_price_batch_cpu_serial, self._params_dev, self._out_dev,
                    *self._args)
            else:
                core.fd_price_batch_cpu(self._params_dev, self._out_dev, *self._args)
            self._in_flight = True
            return
        if self._rows_stale:  # ahead of the launch on the same stream
            self._params_dev.copy_to_device(self._rows, stream=self._stream)
            self._rows_stale = False
        if self._node_stale:
            self._update_node()
            self._node_stale = False
        if self._flag is not None:
            self._flag.arm()
        if self._bound is not None:
            self._bound()
        else:
            self._kernel[self.n, self._threads, self._stream](*self._launch_args())
        self._record()
        self._in_flight = True

    def done(self) -> bool:
        """True once the launched repricing has finished (non-blocking event query)."""
        if not self._in_flight:
            return True
        if self._event is None:
            return self._future is None or bool(self._future.done())
        if self._flag is not None:
            return self._flag.seen()
        # (the CUDA simulator's Event has no query(); it runs launches synchronously)
        return self._query()

    def wait(self) -> None:
        """Block until the launched repricing has finished (benchmarks, shutdown)."""
        if self._in_flight and self._event is not None:
            self._event.synchronize()
        elif self._in_flight and self._future is not None:
            self._future.result()

    def results(self) -> OptionValues:
        """Copy of the finished results; ends the in-flight state. Call only when done()."""
        if self._in_flight and not self.done():
            raise RuntimeError("results requested before the repricing finished")
        self._in_flight = False
        if self._future is not None:
            self._future.result()  # re-raises an error of the worker thread
            self._future = None
        return _values(self._out)


class FdPricingEngine:
    """Crank–Nicolson prices and greeks of contracts on one grid and one device.

    `device` is "auto", "cpu" or "cuda" (resolved once, here); whoever holds the engine
    prices through it without knowing which device runs.
    """

    def __init__(self, grid: str | FdGrid = "default", device: str = "auto") -> None:
        self.grid = make_grid(grid)
        self.device = resolve_device(device, "option pricing")

    def __repr__(self) -> str:
        return f"FdPricingEngine({self.grid.name!r}, {self.device!r})"

    def price(self, contracts: OptionContracts, market: MarketInputs) -> OptionValues:
        """Price, delta and gamma of every contract (one batched repricing)."""
        if self.device == "cuda":  # (the CPU twin's marches dwarf numpy's row building)
            values = _price_contracts_on_cuda(contracts, market, self.grid)
            if values is not None:
                return values
        return price_params(contract_rows(contracts, market), self.grid, self.device)

    def group_pricer(self, contracts: OptionContracts, market: MarketInputs,
                     background: bool = False) -> OptionGroupPricer:
        """A pricer that reprices these contracts again and again (see OptionGroupPricer);
        `background` runs the CPU twin on a worker thread (ignored on CUDA)."""
        return OptionGroupPricer(contract_rows(contracts, market), self.grid, self.device,
                                 background=background)

    def warm_up(self) -> None:
        """Compile the kernels before live work (see `warm_up`)."""
        warm_up(self.grid, self.device)


class AnalyticEuropeanEngine:
    """Black–Scholes closed form: price, delta, gamma and vega of European contracts."""

    def price(self, contracts: OptionContracts, market: MarketInputs) -> AnalyticValues:
        if contracts.is_american.any():
            raise ValueError("the analytic engine prices European contracts only")
        return black_scholes(market.spot, contracts.strike, contracts.expiry, market.vol,
                             market.rate, contracts.is_call, market.dividend_yield)
