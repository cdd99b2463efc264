"""Time the 31-terminal indicator kernels: whole-history panel on CUDA vs the CPU twin, and
the incremental bank's update throughput.

    python benchmarks/indicators.py [--device auto|cpu|cuda] [--repeats 7] [--json PATH]

Data: the 470 S&P 500 stocks with all 1,259 days (`sp500_5yr_daily`, read from
`feeds.datadir.data_dir()` or --data). CUDA times come from CUDA events after a warm-up
launch (kernel only, inputs already on the device) plus the wall time of the whole
`compute_panel` call (transfers included); CPU times are wall times on all numba threads.
Medians over --repeats runs. Prints a table and writes JSON (default
benchmarks/out/indicators.json).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numba
import numpy as np
import pandas as pd

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.common import log, median_seconds, write_json  # noqa: E402
from feeds.datadir import data_dir  # noqa: E402
from gpu.device import DeviceUnavailable, resolve_device  # noqa: E402
from gpu.indicators import compute as indicators  # noqa: E402
from gpu.indicators.catalogue import N_FLOAT, TERMINALS  # noqa: E402

FIELDS = ("open", "high", "low", "close", "volume")
SP500 = Path("sp500_5yr_daily") / "all_stocks_5yr.csv.gz"
BLOCK_SIZES = (32, 64, 128)
BANK_SYMBOLS = 500

Market = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # OHLCV


def load_sp500(path: Path) -> tuple[Market, list[str]]:
    """(days x stocks) float64 OHLCV of the tickers that have every trading day."""
    if not path.exists():
        raise FileNotFoundError(f"S&P data not found at {path} (use --data or TRADING_DATA_DIR)")
    df = pd.read_csv(path)
    counts = df.groupby("Name").size()
    complete = counts[counts == counts.max()].index
    df = df[df["Name"].isin(complete)]
    frames = [df.pivot(index="date", columns="Name", values=f).astype(float) for f in FIELDS]
    o, h, l, c, v = (np.ascontiguousarray(f.to_numpy()) for f in frames)
    return (o, h, l, c, v), list(frames[0].columns)


def time_panel_cuda(arrays: Market, repeats: int) -> dict[str, Any]:
    from numba import cuda

    n_days, n_stocks = arrays[3].shape
    stream = cuda.stream()
    o, h, l, c, v = (cuda.to_device(a, stream=stream) for a in arrays)
    state = cuda.device_array((indicators.STATE_LEN, n_stocks), np.float64, stream=stream)
    out = cuda.device_array((n_days, len(TERMINALS), n_stocks), np.float32, stream=stream)
    kernel_ms: dict[str, float] = {}
    for block in BLOCK_SIZES:
        indicators._panel_cuda_device(o, h, l, c, v, state, out, block=block, stream=stream)
        stream.synchronize()
        times = []
        for _ in range(repeats):
            start, end = cuda.event(), cuda.event()
            start.record(stream)
            indicators._panel_cuda_device(o, h, l, c, v, state, out, block=block, stream=stream)
            end.record(stream)
            end.synchronize()
            times.append(start.elapsed_time(end))
        kernel_ms[str(block)] = statistics.median(times)
        log(f"  cuda kernel, block {block}: {kernel_ms[str(block)]:.3f} ms")
    end_to_end = median_seconds(lambda: indicators.compute_panel(*arrays, device="cuda"), repeats)
    return {"kernel_ms_by_block": kernel_ms, "kernel_ms": min(kernel_ms.values()),
            "end_to_end_ms": end_to_end * 1e3}


def agreement(gpu: np.ndarray, cpu: np.ndarray) -> dict[str, Any]:
    """How far the CUDA panel is from the CPU panel (FMA contraction on the GPU)."""
    both = ~np.isnan(cpu[:, :N_FLOAT]) & ~np.isnan(gpu[:, :N_FLOAT])
    a, b = gpu[:, :N_FLOAT][both].astype(np.float64), cpu[:, :N_FLOAT][both].astype(np.float64)
    rel = np.abs(a - b) / np.maximum(np.abs(b), 1e-30)
    flags_gpu, flags_cpu = gpu[:, N_FLOAT:], cpu[:, N_FLOAT:]
    flips = (flags_gpu != flags_cpu) & ~np.isnan(flags_cpu)
    return {
        "nan_pattern_equal": bool(np.array_equal(np.isnan(gpu), np.isnan(cpu))),
        "bitwise_equal_fraction": float(np.mean((gpu == cpu) | (np.isnan(gpu) & np.isnan(cpu)))),
        "float_max_rel_diff": float(rel.max()) if rel.size else 0.0,
        "bool_flips": int(flips.sum()),
        "bool_values": int((~np.isnan(flags_cpu)).sum()),
    }


def synthetic_bars(n_steps: int, n_symbols: int, seed: int = 0) -> Market:
    rng = np.random.default_rng(seed)
    close = 50.0 * np.exp(np.cumsum(rng.normal(0.0, 0.01, (n_steps, n_symbols)), axis=0))
    high = close * (1.0 + rng.uniform(0.0, 0.01, close.shape))
    low = close * (1.0 - rng.uniform(0.0, 0.01, close.shape))
    volume = rng.integers(1, 100, close.shape).astype(float) * 100.0
    return close.copy(), high, low, close, volume


def time_bank(device: str, n_steps: int, per_symbol_steps: int) -> dict[str, float]:
    bars = synthetic_bars(n_steps, BANK_SYMBOLS)
    symbols = np.arange(BANK_SYMBOLS, dtype=np.int32)
    bank = indicators.IndicatorBank(BANK_SYMBOLS, device=device)
    bank.update(symbols, *(b[0] for b in bars))  # compile / warm up
    bank.reset()
    t0 = time.perf_counter()
    for d in range(n_steps):
        bank.update(symbols, bars[0][d], bars[1][d], bars[2][d], bars[3][d], bars[4][d])
    batch = time.perf_counter() - t0
    result = {"update_calls": n_steps, "update_ms_per_call": batch / n_steps * 1e3,
              "update_bars_per_s": n_steps * BANK_SYMBOLS / batch}
    if device == "cpu":
        rows = [[b[d].tolist() for b in bars] for d in range(per_symbol_steps)]
        update_one = bank.update_one
        update_one(0, *(float(b[0, 0]) for b in bars))  # compile / warm up
        bank.reset()
        t0 = time.perf_counter()
        for o, h, l, c, v in rows:
            for s in range(BANK_SYMBOLS):
                update_one(s, o[s], h[s], l[s], c[s], v[s])
        single = time.perf_counter() - t0
        result["update_one_bars_per_s"] = per_symbol_steps * BANK_SYMBOLS / single
        result["update_one_us_per_bar"] = single / (per_symbol_steps * BANK_SYMBOLS) * 1e6
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--bank-steps", type=int, default=2000,
                        help="IndicatorBank.update calls of 500 symbols each")
    parser.add_argument("--data", type=Path, default=None, help="all_stocks_5yr.csv.gz")
    parser.add_argument("--json", type=Path, default=REPO_ROOT / "benchmarks/out/indicators.json")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.bank_steps < 1:
        print("error: --repeats and --bank-steps must be >= 1", file=sys.stderr)
        return 2
    try:
        backend = resolve_device(args.device, "indicator benchmark")
        log("loading S&P 500 daily data")
        arrays, tickers = load_sp500(args.data or data_dir() / SP500)
    except (DeviceUnavailable, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    n_days, n_stocks = arrays[3].shape
    log(f"{n_stocks} stocks x {n_days} days; cpu threads {numba.get_num_threads()}")

    report: dict[str, Any] = {
        "device": backend, "n_days": n_days, "n_stocks": n_stocks, "repeats": args.repeats,
        "cpu_threads": numba.get_num_threads(), "n_terminals": len(TERMINALS),
    }
    log("panel on cpu")
    cpu_s = median_seconds(lambda: indicators.compute_panel(*arrays, device="cpu"), args.repeats)
    report["panel_cpu_ms"] = cpu_s * 1e3
    if backend == "cuda":
        log("panel on cuda")
        report["panel_cuda"] = time_panel_cuda(arrays, args.repeats)
        report["panel_speedup_kernel_vs_cpu"] = cpu_s * 1e3 / report["panel_cuda"]["kernel_ms"]
        report["panel_speedup_end_to_end_vs_cpu"] = (
            cpu_s * 1e3 / report["panel_cuda"]["end_to_end_ms"])
        report["agreement"] = agreement(
            indicators.compute_panel(*arrays, device="cuda"),
            indicators.compute_panel(*arrays, device="cpu"),
        )
    log("indicator bank on cpu")
    report["bank_cpu"] = time_bank("cpu", args.bank_steps, max(1, args.bank_steps // 10))
    if backend == "cuda":
        log("indicator bank on cuda")
        report["bank_cuda"] = time_bank("cuda", max(1, args.bank_steps // 4), 0)

    bars_per_panel = n_days * n_stocks
    rows = [("panel cpu (all threads)", f"{report['panel_cpu_ms']:.2f} ms",
             f"{bars_per_panel / cpu_s / 1e6:.1f} M bars/s")]
    if backend == "cuda":
        cu = report["panel_cuda"]
        rows.append(("panel cuda kernel", f"{cu['kernel_ms']:.3f} ms",
                     f"x{report['panel_speedup_kernel_vs_cpu']:.1f} vs cpu"))
        rows.append(("panel cuda end to end", f"{cu['end_to_end_ms']:.2f} ms",
                     f"x{report['panel_speedup_end_to_end_vs_cpu']:.1f} vs cpu"))
    b = report["bank_cpu"]
    rows.append(("bank.update cpu, 500 sym", f"{b['update_ms_per_call'] * 1e3:.1f} us/call",
                 f"{b['update_bars_per_s'] / 1e6:.2f} M bars/s"))
    rows.append(("bank.update_one cpu", f"{b['update_one_us_per_bar']:.2f} us/bar",
                 f"{b['update_one_bars_per_s'] / 1e6:.2f} M bars/s"))
    if backend == "cuda":
        b = report["bank_cuda"]
        rows.append(("bank.update cuda, 500 sym", f"{b['update_ms_per_call'] * 1e3:.1f} us/call",
                     f"{b['update_bars_per_s'] / 1e6:.2f} M bars/s"))
    print(f"indicators: {n_stocks} stocks x {n_days} days, 31 terminals, medians of "
          f"{args.repeats}")
    for name, time_text, rate in rows:
        print(f"  {name:<28}{time_text:>16}  {rate}")
    if "agreement" in report:
        a = report["agreement"]
        print(f"  cuda vs cpu: max float rel diff {a['float_max_rel_diff']:.2e}, "
              f"{a['bool_flips']} of {a['bool_values']} booleans flipped")

    write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
