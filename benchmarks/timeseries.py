"""Time H(Δt) and ρ(Δt) (max-lag 1,024) on the 1.89 M SPY trades: GPU vs CPU twin vs numpy.

    python benchmarks/timeseries.py [--data PATH] [--max-lag 1024] [--device auto|cpu|cuda]
        [--repeats 5] [--quick] [--json PATH]

Variants, each computing m(Δt) (hence H) and both autocorrelations for Δt = 1 … max-lag:
- `gpu tiled f64/f32 (T×L)`: gpu.timeseries kernels, time tile T, lag tile L; CUDA-event
  time of the two launches on data already on the device (median), and the wall time of
  the whole `lag_statistics` call (transfers included);
- `cpu twin f64`: the same core on all numba threads;
- `numpy per lag`: one vector expression per lag and quantity (gpu.timeseries'
  reference), timed once: it takes tens of seconds;
- `numpy fft (rho only)`: both autocorrelations by FFT; the FFT cannot give m(Δt), whose
  |·| is not a product, so it is a partial alternative for ρ alone.
Speed-ups are against `numpy per lag`. `--quick`: a synthetic 20,000-tick series,
max-lag 64 (a smoke run for machines without the data or a GPU). Writes JSON (default
benchmarks/out/timeseries.json).
"""

from __future__ import annotations

import argparse
import json
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

from engine.commands.timeseries import price_series  # noqa: E402
from feeds.datadir import data_dir  # noqa: E402
from gpu import timeseries as ts  # noqa: E402
from gpu.device import DeviceUnavailable, resolve_device  # noqa: E402

GPU_TILES = ((512, 128), (256, 128), (512, 256), (1024, 64))


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def median_seconds(run: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, help="tick data (default: the shared SPY trades)")
    ap.add_argument("--max-lag", type=int, default=1024)
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="synthetic 20k ticks, max-lag 64")
    ap.add_argument("--json", type=Path, default=REPO_ROOT / "benchmarks/out/timeseries.json")
    args = ap.parse_args()
    try:
        device = resolve_device(args.device, "time-series benchmark")
    except DeviceUnavailable as e:
        log(f"error: {e}")
        return 2
    if args.quick:
        rng = np.random.default_rng(1)
        prices = 170.0 + np.cumsum(rng.normal(size=20_000) * 0.01)
        max_lag, source = 64, "synthetic random walk (--quick)"
    else:
        path = args.data or data_dir() / "lean_ticks_2013-10/equity/usa/tick/spy"
        log(f"reading {path} ...")
        series, _ = price_series([str(path)])
        if len(series) != 1:
            log(f"error: expected one symbol in {path}, found {sorted(series)}")
            return 2
        (symbol, prices), = series.items()
        max_lag, source = args.max_lag, f"{symbol} trades in {path}"
    n_lags = max_lag + 2
    log(f"{len(prices):,} prices, lags 1..{max_lag}, device {device}, "
        f"{numba.get_num_threads()} CPU threads")

    rows: list[dict[str, Any]] = []
    reference = ts.lag_statistics_numpy(prices, max_lag)

    def accuracy(stats: ts.LagStatistics) -> dict[str, float]:
        m, hurst, rho, rho_abs = reference
        return {"m_rel_err": float(np.max(np.abs(stats.mean_abs_change / m[:-1] - 1))),
                "hurst_abs_err": float(np.nanmax(np.abs(stats.hurst - hurst))),
                "rho_abs_err": float(np.max(np.abs(stats.autocorr - rho))),
                "rho_abs_abs_err": float(np.max(np.abs(stats.autocorr_abs - rho_abs)))}

    if device == "cuda":
        for precision in ("float64", "float32"):
            for tiles in GPU_TILES:
                if 3 * (2 * tiles[0] + tiles[1]) * (8 if precision == "float64" else 4) > \
                        ts.SHARED_BYTES_MAX:
                    continue
                log(f"gpu {precision} tiles {tiles} ...")
                kernel = gpu_kernel_seconds(prices, n_lags, precision, tiles, args.repeats)
                stats = ts.lag_statistics(prices, max_lag, "cuda", precision, tiles[0], tiles[1])

                def whole_call(p: str = precision, t: tuple[int, int] = tiles) -> None:
                    ts.lag_statistics(prices, max_lag, "cuda", p, t[0], t[1])

                wall = median_seconds(whole_call, args.repeats)
                rows.append({"variant": f"gpu tiled {precision[-2:]} ({tiles[0]}x{tiles[1]})",
                             "kernel_seconds": kernel, "wall_seconds": wall,
                             **accuracy(stats)})
    log("cpu twin ...")
    stats = ts.lag_statistics(prices, max_lag, "cpu")  # compile or load from cache
    rows.append({"variant": "cpu twin f64", "kernel_seconds": None,
                 "wall_seconds": median_seconds(lambda: ts.lag_statistics(prices, max_lag, "cpu"),
                                                max(1, min(args.repeats, 3))),
                 **accuracy(stats)})
    log("numpy per lag (once) ...")
    t0 = time.perf_counter()
    ts.lag_statistics_numpy(prices, max_lag)
    numpy_seconds = time.perf_counter() - t0
    rows.append({"variant": "numpy per lag", "kernel_seconds": None,
                 "wall_seconds": numpy_seconds})
    r = np.diff(prices)
    fft = median_seconds(lambda: (ts.autocorr_fft(r, max_lag), ts.autocorr_fft(np.abs(r), max_lag)),
                         args.repeats)
    fft_err = float(np.max(np.abs(ts.autocorr_fft(r, max_lag) - reference[2])))
    rows.append({"variant": "numpy fft (rho only)", "kernel_seconds": None, "wall_seconds": fft,
                 "rho_abs_err": fft_err})
    if device == "cuda":
        cupy_row = cupy_fft_row(r, max_lag, reference[2], args.repeats)
        if cupy_row:
            rows.append(cupy_row)

    for row in rows:
        best = row["kernel_seconds"] or row["wall_seconds"]
        row["speedup_vs_numpy"] = numpy_seconds / best
        row["wall_speedup_vs_numpy"] = numpy_seconds / row["wall_seconds"]
    print(f"H and rho, {len(prices):,} prices ({source}), lags 1..{max_lag}")
    print(f"{'variant':<28} {'kernel ms':>10} {'wall ms':>10} {'x numpy':>9} {'H err':>9} "
          f"{'rho err':>9}")
    for row in rows:
        k = f"{row['kernel_seconds'] * 1e3:10.2f}" if row["kernel_seconds"] else f"{'-':>10}"
        h = f"{row['hurst_abs_err']:9.1e}" if "hurst_abs_err" in row else f"{'-':>9}"
        rho = f"{row['rho_abs_err']:9.1e}" if "rho_abs_err" in row else f"{'-':>9}"
        print(f"{row['variant']:<28} {k} {row['wall_seconds'] * 1e3:10.2f} "
              f"{row['speedup_vs_numpy']:9.1f} {h} {rho}")
    result = {"benchmark": "timeseries", "source": source, "prices": int(len(prices)),
              "max_lag": max_lag, "device": device, "cpu_threads": numba.get_num_threads(),
              "goal": ">= 100x numpy for H + rho", "rows": rows}
    if device == "cuda":
        from numba import cuda

        name = cuda.get_current_device().name
        result["gpu"] = name.decode() if isinstance(name, bytes) else str(name)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
