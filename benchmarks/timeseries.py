"""Time H(Δt) and ρ(Δt) (max-lag 1,024) on the 1.89 M SPY trades: GPU vs CPU twin vs numpy.

    python benchmarks/timeseries.py [--data PATH] [--max-lag 1024] [--device auto|cpu|cuda]
        [--repeats 5] [--quick] [--json PATH]

Variants, each computing m(Δt) (hence H) and both autocorrelations for Δt = 1 … max-lag:
- `gpu tiled f64/f32 (T×L)`: gpu.timeseries.analysis kernels, time tile T, lag tile L; CUDA-event
  time of the two launches on data already on the device (median), and the wall time of
  the whole `lag_statistics` call (transfers included);
- `cpu twin f64`: the same core on all numba threads;
- `numpy per lag`: one vector expression per lag and quantity (gpu.timeseries.analysis'
  reference), timed once: it takes tens of seconds;
- `numpy fft (rho only)`: both autocorrelations by FFT; the FFT cannot give m(Δt), whose
  |·| is not a product, so it is a partial alternative for ρ alone.
Speed-ups are against `numpy per lag`. `--quick`: a synthetic 20,000-tick series,
max-lag 64 (a smoke run for machines without the data or a GPU). Writes JSON (default
benchmarks/out/timeseries.json).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numba
import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.common import device_or_none, gpu_name, log, write_json  # noqa: E402
from benchmarks.common import median_seconds as _median_seconds  # noqa: E402
from engine.commands.timeseries import price_series  # noqa: E402
from feeds.datadir import data_dir  # noqa: E402
from gpu.timeseries import analysis as ts  # noqa: E402

GPU_TILES = ((512, 128), (256, 128), (512, 256), (1024, 64))


def median_seconds(run: Callable[[], Any], repeats: int) -> float:
    """No warm-up call: every variant here has compiled before it is timed."""
    return _median_seconds(run, repeats, warmup=False)


def gpu_kernel_seconds(prices: np.ndarray, n_lags: int, precision: str, tiles: tuple[int, int],
                       repeats: int) -> float:
    from numba import cuda

    arrays = ts.prepared_series(prices, ts.DTYPES[precision])
    d = [cuda.to_device(a) for a in arrays]
    ts.lag_sums_device(d[0], d[1], d[2], n_lags, tiles[0], tiles[1])  # warm-up: compile
    cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = cuda.event(), cuda.event()
        start.record()
        ts.lag_sums_device(d[0], d[1], d[2], n_lags, tiles[0], tiles[1])
        end.record()
        end.synchronize()
        times.append(cuda.event_elapsed_time(start, end) / 1e3)
    return statistics.median(times)


def cupy_fft_row(r: np.ndarray, max_lag: int, rho_ref: np.ndarray, repeats: int
                 ) -> dict[str, Any] | None:
    """ρ and ρ_abs by cuFFT through cupy, if installed (it is not a project dependency)."""
    try:
        import cupy as cp
    except Exception as e:  # absent or broken: the row is left out, and the log says why
        log(f"cupy fft skipped: {e}")
        return None
    n = r.shape[0]
    size = 1 << int(np.ceil(np.log2(2 * n - 1)))
    norm = cp.asarray(n - np.arange(max_lag + 1), dtype=cp.float64)

    def rho(x: Any) -> Any:
        x = x - x.mean()
        spec = cp.fft.rfft(x, size)
        acov = cp.fft.irfft(spec * cp.conj(spec), size)[:max_lag + 1] / norm
        return acov[1:] / acov[0]

    d_r = cp.asarray(r)
    d_a = cp.abs(d_r)
    rho(d_r), rho(d_a)  # warm-up: plans and kernels
    times = []
    for _ in range(repeats):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        rho(d_r), rho(d_a)
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    err = float(np.max(np.abs(cp.asnumpy(rho(d_r)) - rho_ref)))
    return {"variant": "cupy fft (rho only)", "kernel_seconds": statistics.median(times),
            "wall_seconds": statistics.median(times), "rho_abs_err": err}


def load_prices(args: argparse.Namespace) -> tuple[np.ndarray, int, str] | None:
    """The price series, the max lag and where the prices come from (None: unusable)."""
    if args.quick:
        rng = np.random.default_rng(1)
        prices = 170.0 + np.cumsum(rng.normal(size=20_000) * 0.01)
        return prices, 64, "synthetic random walk (--quick)"
    path = args.data or data_dir() / "lean_ticks_2013-10/equity/usa/tick/spy"
    log(f"reading {path} ...")
    series, _ = price_series([str(path)])
    if len(series) != 1:
        log(f"error: expected one symbol in {path}, found {sorted(series)}")
        return None
    (symbol, prices), = series.items()
    return prices, args.max_lag, f"{symbol} trades in {path}"


Accuracy = Callable[[ts.LagStatistics], dict[str, float]]


def accuracy_against(reference: Any) -> Accuracy:
    """Largest errors of a variant's statistics against the numpy reference."""
    def accuracy(stats: ts.LagStatistics) -> dict[str, float]:
        m, hurst, rho, rho_abs = reference
        return {"m_rel_err": float(np.max(np.abs(stats.mean_abs_change / m[:-1] - 1))),
                "hurst_abs_err": float(np.nanmax(np.abs(stats.hurst - hurst))),
                "rho_abs_err": float(np.max(np.abs(stats.autocorr - rho))),
                "rho_abs_abs_err": float(np.max(np.abs(stats.autocorr_abs - rho_abs)))}
    return accuracy


def gpu_rows(prices: np.ndarray, max_lag: int, repeats: int,
             accuracy: Accuracy) -> list[dict[str, Any]]:
    """The tiled kernels, each precision and tile shape that fits in shared memory."""
    rows = []
    for precision in ("float64", "float32"):
        for tiles in GPU_TILES:
            if 3 * (2 * tiles[0] + tiles[1]) * (8 if precision == "float64" else 4) > \
                    ts.SHARED_BYTES_MAX:
                continue
            log(f"gpu {precision} tiles {tiles} ...")
            kernel = gpu_kernel_seconds(prices, max_lag + 2, precision, tiles, repeats)
            stats = ts.lag_statistics(prices, max_lag, "cuda", precision, tiles[0], tiles[1])

            def whole_call(p: str = precision, t: tuple[int, int] = tiles) -> None:
                ts.lag_statistics(prices, max_lag, "cuda", p, t[0], t[1])

            wall = median_seconds(whole_call, repeats)
            rows.append({"variant": f"gpu tiled {precision[-2:]} ({tiles[0]}x{tiles[1]})",
                         "kernel_seconds": kernel, "wall_seconds": wall, **accuracy(stats)})
    return rows


def cpu_rows(prices: np.ndarray, max_lag: int, repeats: int, accuracy: Accuracy,
             rho_ref: np.ndarray) -> list[dict[str, Any]]:
    """The CPU twin, numpy per lag (the reference, timed once) and numpy's FFT."""
    log("cpu twin ...")
    stats = ts.lag_statistics(prices, max_lag, "cpu")  # compile or load from cache
    rows: list[dict[str, Any]] = [{
        "variant": "cpu twin f64", "kernel_seconds": None,
        "wall_seconds": median_seconds(lambda: ts.lag_statistics(prices, max_lag, "cpu"),
                                       max(1, min(repeats, 3))),
        **accuracy(stats)}]
    log("numpy per lag (once) ...")
    t0 = time.perf_counter()
    ts.lag_statistics_numpy(prices, max_lag)
    rows.append({"variant": "numpy per lag", "kernel_seconds": None,
                 "wall_seconds": time.perf_counter() - t0})
    r = np.diff(prices)
    fft = median_seconds(lambda: (ts.autocorr_fft(r, max_lag), ts.autocorr_fft(np.abs(r), max_lag)),
                         repeats)
    fft_err = float(np.max(np.abs(ts.autocorr_fft(r, max_lag) - rho_ref)))
    rows.append({"variant": "numpy fft (rho only)", "kernel_seconds": None, "wall_seconds": fft,
                 "rho_abs_err": fft_err})
    return rows


def print_table(rows: list[dict[str, Any]], n_prices: int, source: str, max_lag: int) -> None:
    print(f"H and rho, {n_prices:,} prices ({source}), lags 1..{max_lag}")
    print(f"{'variant':<28} {'kernel ms':>10} {'wall ms':>10} {'x numpy':>9} {'H err':>9} "
          f"{'rho err':>9}")
    for row in rows:
        k = f"{row['kernel_seconds'] * 1e3:10.2f}" if row["kernel_seconds"] else f"{'-':>10}"
        h = f"{row['hurst_abs_err']:9.1e}" if "hurst_abs_err" in row else f"{'-':>9}"
        rho = f"{row['rho_abs_err']:9.1e}" if "rho_abs_err" in row else f"{'-':>9}"
        print(f"{row['variant']:<28} {k} {row['wall_seconds'] * 1e3:10.2f} "
              f"{row['speedup_vs_numpy']:9.1f} {h} {rho}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, help="tick data (default: the shared SPY trades)")
    ap.add_argument("--max-lag", type=int, default=1024)
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="synthetic 20k ticks, max-lag 64")
    ap.add_argument("--json", type=Path, default=REPO_ROOT / "benchmarks/out/timeseries.json")
    args = ap.parse_args()
    device = device_or_none(args.device, "time-series benchmark")
    loaded = load_prices(args) if device is not None else None
    if device is None or loaded is None:
        return 2
    prices, max_lag, source = loaded
    log(f"{len(prices):,} prices, lags 1..{max_lag}, device {device}, "
        f"{numba.get_num_threads()} CPU threads")
    reference = ts.lag_statistics_numpy(prices, max_lag)
    accuracy = accuracy_against(reference)
    rows = gpu_rows(prices, max_lag, args.repeats, accuracy) if device == "cuda" else []
    rows += cpu_rows(prices, max_lag, args.repeats, accuracy, reference[2])
    if device == "cuda":
        cupy_row = cupy_fft_row(np.diff(prices), max_lag, reference[2], args.repeats)
        if cupy_row:
            rows.append(cupy_row)
    numpy_seconds = next(r["wall_seconds"] for r in rows if r["variant"] == "numpy per lag")
    for row in rows:
        best = row["kernel_seconds"] or row["wall_seconds"]
        row["speedup_vs_numpy"] = numpy_seconds / best
        row["wall_speedup_vs_numpy"] = numpy_seconds / row["wall_seconds"]
    print_table(rows, len(prices), source, max_lag)
    result = {"benchmark": "timeseries", "source": source, "prices": int(len(prices)),
              "max_lag": max_lag, "device": device, "cpu_threads": numba.get_num_threads(),
              "goal": ">= 100x numpy for H + rho", "rows": rows}
    if device == "cuda":
        result["gpu"] = gpu_name()
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
