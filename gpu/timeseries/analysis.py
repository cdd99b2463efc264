"""Lag-dependent Hurst exponent and autocorrelations of a price series, on the GPU or the CPU.

Definitions (Δt in ticks, i.e. in steps of the series; N prices p(0..N−1)):

- m(Δt) = ⟨|p(t+Δt) − p(t)|⟩ over the N − Δt pairs (the q = 1 moment).
- H(Δt) = ln(m(Δt+1)/m(Δt)) / ln((Δt+1)/Δt): the local slope of ln m against ln Δt between
  consecutive lags (m ∝ Δt^H for a self-affine series; H = 0.5 for a random walk, < 0.5
  for anti-persistent, > 0.5 for persistent increments).
- r(t) = p(t+1) − p(t), t < N − 1; ρ(Δt) = ⟨r̃(t) r̃(t+Δt)⟩ / ⟨r̃(t)²⟩ with r̃ = r − mean(r),
  the mean removed once over the whole series ("stationary" form), each average over the
  pairs that exist (N − 1 − Δt of them), normalised by the lag-0 variance.
- ρ_abs(Δt): the same for |r| (volatility clustering).

Lags Δt = 1 … max_lag are reported; H(max_lag) needs m(max_lag + 1), so max_lag must be
below the number of price changes N − 1. Any N works (no power-of-two padding).

Kernels ("shared-memory tiling as in the paper", Preis et al.): the series is cut into time
tiles of `time_tile` points; a CUDA block of `lag_tile` threads loads one time tile and the
tile shifted by its first lag into shared memory, and thread j sums lag l0 + j over the
tile with `gpu.timeseries.core.tile_lag_sums`: the first window is read by all threads at
once (a broadcast), the second at consecutive addresses (no bank conflicts). Partial sums
per (tile, quantity, lag) are then added in tile order by a second kernel (deterministic, no
atomics). The CPU twin runs the same core over the same tiles with `prange` and adds them
with the same core in the same order.

Precision: float64 (default) agrees with a plain numpy loop to ~1e-12 relative in m and
~1e-12 of the lag-0 variance in ρ. float32 stores the series and sums within a tile in
float32 (tiles are added in float64); prices are shifted by p(0) first so that a price
change of one cent keeps its digits. H is a log-slope between lags whose ratio is
(Δt+1)/Δt, so a relative error ε of m costs up to ≈ 2εΔt in H: float32 is for speed,
float64 for agreement with numpy to rounding (benchmarks/timeseries.py; measured:
benchmarks/results/h200-2026-11-22-timeseries-subset/README.md).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import cuda, float32, float64, njit, prange
from numba.core.errors import NumbaPerformanceWarning

from gpu.device import resolve_device
from gpu.threads import chunk_lo, parallel_range
from gpu.timeseries import core as timeseries_core
from gpu.twin import compile_twin, cuda_kernel_cache, flush_stale_caches

F64 = npt.NDArray[np.float64]

TIME_TILE = 512
"""Time points per tile (CUDA block and CPU work item)."""
LAG_TILE = 128
"""Lags per CUDA block (threads per block)."""
N_QUANTITIES = 3  # |Δp|, r̃·r̃, ã·ã
SHARED_BYTES_MAX = 48 * 1024  # dynamic shared memory without an opt-in
DTYPES = {"float64": np.float64, "float32": np.float32}

flush_stale_caches(__file__, [timeseries_core.__file__])
_twin = compile_twin(__name__, timeseries_core.CORE_FUNCTIONS)
_store_tile_lag_cpu = _twin.cpu.store_tile_lag
_sum_over_tiles_cpu = _twin.cpu.sum_over_tiles
_store_tile_lag_gpu = _twin.cuda.store_tile_lag
_sum_over_tiles_gpu = _twin.cuda.sum_over_tiles


# ---------------------------------------------------------------- CPU twin


def _partials_cpu(p: Any, rc: Any, ac: Any, n_lags: int, time_tile: int, partial: Any) -> None:
    """Every time tile's partial sums per lag, in parallel (`gpu.threads`)."""
    parallel_range(_partials_range, _partials_parallel, partial.shape[0], p, rc, ac, n_lags,
                   time_tile, partial, min_chunk=1)


@njit(parallel=True, cache=True)
def _partials_parallel(chunks: int, n_tiles: int, p: Any, rc: Any, ac: Any, n_lags: int,
                       time_tile: int, partial: Any) -> None:
    for c in prange(chunks):
        _partials_range(chunk_lo(c, chunks, n_tiles), chunk_lo(c + 1, chunks, n_tiles), p, rc,
                        ac, n_lags, time_tile, partial)


@njit(cache=True, nogil=True)
def _partials_range(lo: int, hi: int, p: Any, rc: Any, ac: Any, n_lags: int, time_tile: int,
                    partial: Any) -> None:
    n = p.shape[0]
    for tile in range(lo, hi):
        t0 = tile * time_tile
        for lag in range(n_lags):
            count = min(time_tile, n - lag - t0)
            _store_tile_lag_cpu(partial, tile, lag, p, rc, ac, t0, p, rc, ac, t0 + lag, count)


def _reduce_cpu(partial: Any, out: Any) -> None:
    """The tiles' partial sums added per lag, in parallel (`gpu.threads`)."""
    parallel_range(_reduce_range, _reduce_parallel, partial.shape[2], partial, out)


@njit(parallel=True, cache=True)
def _reduce_parallel(chunks: int, n_lags: int, partial: Any, out: Any) -> None:
    for c in prange(chunks):
        _reduce_range(chunk_lo(c, chunks, n_lags), chunk_lo(c + 1, chunks, n_lags), partial,
                      out)


@njit(cache=True, nogil=True)
def _reduce_range(lo: int, hi: int, partial: Any, out: Any) -> None:
    for lag in range(lo, hi):
        for q in range(partial.shape[1]):
            out[q, lag] = _sum_over_tiles_cpu(partial, q, lag)


# ---------------------------------------------------------------- CUDA


@cuda.jit(device=True)
def _load_window(dp: Any, dr: Any, da: Any, p: Any, rc: Any, ac: Any, start: int, length: int,
                 j: int, n_threads: int) -> None:
    """Copy p, rc, ac[start:start+length] into shared memory (zeros past the series' end)."""
    n = p.shape[0]
    for i in range(j, length, n_threads):
        t = start + i
        if t < n:
            dp[i] = p[t]
            dr[i] = rc[t]
            da[i] = ac[t]
        else:
            dp[i] = 0
            dr[i] = 0
            da[i] = 0


@cuda.jit(device=True)
def _tile_block(sh: Any, p: Any, rc: Any, ac: Any, n_lags: int, time_tile: int,
                partial: Any) -> None:
    n = p.shape[0]
    lag_tile: int = cuda.blockDim.x  # type: ignore[assignment]
    j: int = cuda.threadIdx.x  # type: ignore[assignment]
    tile: int = cuda.blockIdx.x  # type: ignore[assignment]
    t0 = tile * time_tile
    l0: int = cuda.blockIdx.y * lag_tile  # type: ignore[operator]
    span = time_tile + lag_tile
    pa = sh[0:time_tile]
    ra = sh[time_tile:2 * time_tile]
    aa = sh[2 * time_tile:3 * time_tile]
    b0 = 3 * time_tile
    pb = sh[b0:b0 + span]
    rb = sh[b0 + span:b0 + 2 * span]
    ab = sh[b0 + 2 * span:b0 + 3 * span]
    _load_window(pa, ra, aa, p, rc, ac, t0, time_tile, j, lag_tile)
    _load_window(pb, rb, ab, p, rc, ac, t0 + l0, span, j, lag_tile)
    cuda.syncthreads()  # type: ignore[call-arg]
    lag = l0 + j
    if lag < n_lags:
        count = min(time_tile, n - lag - t0)
        _store_tile_lag_gpu(partial, tile, lag, pa, ra, aa, 0, pb, rb, ab, j, count)


_cache = cuda_kernel_cache()


@cuda.jit(cache=_cache)
def _partials_f64(p: Any, rc: Any, ac: Any, n_lags: int, time_tile: int, partial: Any) -> None:
    sh = cuda.shared.array(0, float64)
    _tile_block(sh, p, rc, ac, n_lags, time_tile, partial)


@cuda.jit(cache=_cache)
def _partials_f32(p: Any, rc: Any, ac: Any, n_lags: int, time_tile: int, partial: Any) -> None:
    sh = cuda.shared.array(0, float32)
    _tile_block(sh, p, rc, ac, n_lags, time_tile, partial)


@cuda.jit(cache=_cache)
def _reduce_gpu(partial: Any, out: Any) -> None:
    i: int = cuda.grid(1)  # type: ignore[call-arg]
    n_lags = partial.shape[2]
    if i < partial.shape[1] * n_lags:
        q = i // n_lags
        lag = i - q * n_lags
        out[q, lag] = _sum_over_tiles_gpu(partial, q, lag)


# ---------------------------------------------------------------- API


@dataclass(frozen=True)
class LagStatistics:
    """Lag-dependent statistics of one price series (see the module docstring).

    `lags` = 1 … max_lag; `hurst`, `autocorr`, `autocorr_abs` are aligned with it;
    `mean_abs_change[i]` is m(lags[i]) and `mean_abs_change_next` is m(max_lag + 1).
    """

    lags: npt.NDArray[np.int64]
    hurst: F64
    autocorr: F64
    autocorr_abs: F64
    mean_abs_change: F64
    mean_abs_change_next: float
    n_prices: int
    device: str
    precision: str
    seconds: float


def check_max_lag(n_prices: int, max_lag: int) -> None:
    """ValueError unless 1 ≤ max_lag < number of price changes (n_prices − 1)."""
    if max_lag < 1:
        raise ValueError(f"max-lag must be at least 1, got {max_lag}")
    if max_lag >= n_prices - 1:
        raise ValueError(
            f"max-lag {max_lag} must be below the series length in price changes "
            f"({n_prices - 1} from {n_prices} prices)"
        )


def prepared_series(prices: npt.ArrayLike, dtype: type
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shifted prices, centred changes and centred absolute changes, padded to N points.

    The change arrays get a zero at t = N − 1, so one summation range t < N − Δt serves
    all three sums (the padded term multiplies by zero).
    """
    p = np.asarray(prices, np.float64)
    r = np.diff(p)
    a = np.abs(r)
    rc = np.zeros_like(p)
    ac = np.zeros_like(p)
    rc[:-1] = r - r.mean()
    ac[:-1] = a - a.mean()
    shifted = p - p[0]
    return (np.ascontiguousarray(shifted, dtype), np.ascontiguousarray(rc, dtype),
            np.ascontiguousarray(ac, dtype))


def lag_sums(prices: npt.ArrayLike, n_lags: int, device: str = "auto",
             precision: str = "float64", time_tile: int = TIME_TILE,
             lag_tile: int = LAG_TILE) -> tuple[F64, str]:
    """Raw sums (3, n_lags) for lags 0 … n_lags−1: Σ|Δp|, Σ r̃r̃, Σ ãã; and the device used."""
    if precision not in DTYPES:
        raise ValueError(f"precision must be one of {sorted(DTYPES)}, got {precision!r}")
    if time_tile < 1 or lag_tile < 1:
        raise ValueError("tile sizes must be positive")
    dev = resolve_device(device, "time-series kernels")
    dtype = DTYPES[precision]
    p, rc, ac = prepared_series(prices, dtype)
    out = np.empty((N_QUANTITIES, n_lags), np.float64)
    if dev == "cpu":
        n_tiles = -(-p.shape[0] // time_tile)
        partial = np.empty((n_tiles, N_QUANTITIES, n_lags), np.float64)
        _partials_cpu(p, rc, ac, n_lags, time_tile, partial)
        _reduce_cpu(partial, out)
        return out, dev
    d_out = lag_sums_device(cuda.to_device(p), cuda.to_device(rc), cuda.to_device(ac), n_lags,
                            time_tile, lag_tile)
    d_out.copy_to_host(out)
    return out, dev


def lag_sums_device(d_p: Any, d_rc: Any, d_ac: Any, n_lags: int, time_tile: int = TIME_TILE,
                    lag_tile: int = LAG_TILE) -> Any:
    """The two CUDA launches of `lag_sums` on device arrays from `prepared_series` (timing)."""
    n = d_p.shape[0]
    n_tiles = -(-n // time_tile)
    d_partial = cuda.device_array((n_tiles, N_QUANTITIES, n_lags), np.float64)
    d_out = cuda.device_array((N_QUANTITIES, n_lags), np.float64)
    itemsize = np.dtype(d_p.dtype).itemsize
    shared_bytes = 3 * (2 * time_tile + lag_tile) * itemsize
    if shared_bytes > SHARED_BYTES_MAX:
        raise ValueError(f"tiles of {time_tile} times x {lag_tile} lags need {shared_bytes} "
                         f"bytes of shared memory, more than {SHARED_BYTES_MAX}")
    kernel = _partials_f64 if itemsize == 8 else _partials_f32
    grid = (n_tiles, -(-n_lags // lag_tile))
    threads = 128
    with warnings.catch_warnings():  # short series and few lags are small grids: fine
        warnings.simplefilter("ignore", NumbaPerformanceWarning)
        kernel[grid, lag_tile, 0, shared_bytes](d_p, d_rc, d_ac, n_lags, time_tile, d_partial)
        _reduce_gpu[-(-(N_QUANTITIES * n_lags) // threads), threads](d_partial, d_out)
    return d_out


def statistics_from_sums(sums: F64, n_prices: int, max_lag: int) -> tuple[F64, F64, F64, F64]:
    """(m for lags 1…max_lag+1, H, ρ, ρ_abs for lags 1…max_lag) from `lag_sums` output."""
    lags = np.arange(sums.shape[1], dtype=np.float64)
    m = sums[0, 1:max_lag + 2] / (n_prices - lags[1:max_lag + 2])
    cov_r = sums[1, :max_lag + 1] / (n_prices - 1 - lags[:max_lag + 1])
    cov_a = sums[2, :max_lag + 1] / (n_prices - 1 - lags[:max_lag + 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        lag = lags[1:max_lag + 1]
        hurst = np.log(m[1:] / m[:-1]) / np.log((lag + 1.0) / lag)
        rho = cov_r[1:] / cov_r[0]
        rho_abs = cov_a[1:] / cov_a[0]
    return m, hurst, rho, rho_abs


def lag_statistics(prices: npt.ArrayLike, max_lag: int, device: str = "auto",
                   precision: str = "float64", time_tile: int = TIME_TILE,
                   lag_tile: int = LAG_TILE) -> LagStatistics:
    """H(Δt), ρ(Δt) and ρ_abs(Δt) for Δt = 1 … max_lag of one price series.

    ValueError for non-finite prices or max_lag outside 1 … N − 2. A constant series has
    m = 0 and zero variance: its H and ρ are NaN.
    """
    p = np.asarray(prices, np.float64)
    if p.ndim != 1:
        raise ValueError("prices must be one series (1-D)")
    check_max_lag(p.shape[0], max_lag)
    if not np.all(np.isfinite(p)):
        raise ValueError("prices must be finite")
    t0 = time.perf_counter()
    sums, dev = lag_sums(p, max_lag + 2, device, precision, time_tile, lag_tile)
    m, hurst, rho, rho_abs = statistics_from_sums(sums, p.shape[0], max_lag)
    return LagStatistics(
        lags=np.arange(1, max_lag + 1, dtype=np.int64), hurst=hurst, autocorr=rho,
        autocorr_abs=rho_abs, mean_abs_change=m[:-1], mean_abs_change_next=float(m[-1]),
        n_prices=int(p.shape[0]), device=dev, precision=precision,
        seconds=time.perf_counter() - t0)


def lag_statistics_numpy(prices: npt.ArrayLike, max_lag: int) -> tuple[F64, F64, F64, F64]:
    """Reference by plain numpy, one vector expression per lag: (m for 1…max_lag+1, H, ρ, ρ_abs).

    Written from the definitions, independently of the tiling (tests and benchmarks).
    """
    p = np.asarray(prices, np.float64)
    check_max_lag(p.shape[0], max_lag)
    r = np.diff(p)
    rt = r - r.mean()
    at = np.abs(r) - np.abs(r).mean()
    m = np.array([np.mean(np.abs(p[d:] - p[:-d])) for d in range(1, max_lag + 2)])
    var_r, var_a = np.mean(rt * rt), np.mean(at * at)
    rho = np.array([np.mean(rt[d:] * rt[:-d]) for d in range(1, max_lag + 1)]) / var_r
    rho_abs = np.array([np.mean(at[d:] * at[:-d]) for d in range(1, max_lag + 1)]) / var_a
    d = np.arange(1, max_lag + 1, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        hurst = np.log(m[1:] / m[:-1]) / np.log((d + 1.0) / d)
    return m, hurst, rho, rho_abs


def autocorr_fft(x: npt.ArrayLike, max_lag: int) -> F64:
    """ρ(1…max_lag) of a series by FFT (numpy): the O(N log N) alternative to the tiling."""
    v = np.asarray(x, np.float64)
    v = v - v.mean()
    n = v.shape[0]
    size = 1 << math.ceil(math.log2(2 * n - 1))
    spec = np.fft.rfft(v, size)
    acov = np.fft.irfft(spec * np.conj(spec), size)[:max_lag + 1]
    acov /= n - np.arange(max_lag + 1)
    return np.asarray(acov[1:] / acov[0], np.float64)
