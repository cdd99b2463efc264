"""`timeseries`: lag-dependent Hurst exponent and autocorrelations of each symbol's prices.

    python run_engine.py timeseries --data PATH [--data PATH ...] [--symbols A,B]
        [--start D --end D] --max-lag 1024 [--precision float64|float32]
        [--device auto|cpu|cuda] [--out DIR] [--json PATH]

Prices: the trade prices of tick data (LEAN zips, tick CSV) and the daily closes of daily
files, in time order; Δt counts ticks (or days). Definitions and kernels:
gpu/timeseries/analysis.py.
Non-finite or non-positive prices are counted and skipped. Without `--symbols`, symbols
too short for `--max-lag` are skipped (and counted); a requested symbol that is too short
is an error. `--out DIR` gets one log-log PNG per symbol.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import UserError
from engine.reporting.plots import plot_statistics
from feeds.records import KIND_BAR, KIND_TRADE, parse_date
from feeds.sources import open_sources
from gpu.device import DeviceUnavailable, resolve_device
from gpu.timeseries.analysis import LagStatistics, check_max_lag, lag_statistics

SHOWN_LAGS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 4096)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", action="append", required=True, metavar="PATH",
                   help="market data (repeatable): LEAN tick zips or folders, tick CSV "
                        "ts,symbol,price,size, daily OHLCV CSV(.gz) or a folder holding one")
    p.add_argument("--symbols", help="comma-separated symbols (default: all in the data)")
    p.add_argument("--start", help="first date YYYY-MM-DD (New York), inclusive")
    p.add_argument("--end", help="last date YYYY-MM-DD (New York), inclusive")
    p.add_argument("--max-lag", type=int, default=1024,
                   help="largest lag Δt in ticks (default 1024)")
    p.add_argument("--precision", choices=("float64", "float32"), default="float64",
                   help="arithmetic of the kernels (default float64)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--out", type=Path, metavar="DIR", help="folder for the PNG plots")


def _bounds(args: argparse.Namespace) -> tuple[int | None, int | None]:
    try:
        start = parse_date(args.start) if args.start else None
        end = parse_date(args.end, end_of_day=True) if args.end else None
    except ValueError as e:
        raise UserError(str(e)) from None
    return start, end


def price_series(paths: list[str], symbols: list[str] | None = None, start: int | None = None,
                 end: int | None = None) -> tuple[dict[str, np.ndarray], int]:
    """Time-ordered prices per symbol (trades, daily closes) and how many were bad.

    `start`/`end`: ns bounds, start <= ts < end; bad = non-finite or non-positive.
    """
    try:
        source = open_sources(paths, symbols, start, end)
        parts: dict[int, list[np.ndarray]] = {}
        bad = 0
        for chunk in source.chunks():
            # trades (the only LEAN kind asked for) and daily bars, valued at the close
            price = np.where(chunk["kind"] == KIND_BAR, chunk["f3"], chunk["f0"])
            known = np.isin(chunk["kind"], (KIND_TRADE, KIND_BAR))
            good = known & np.isfinite(price) & (price > 0)
            bad += int(np.count_nonzero(~good))
            sym = chunk["sym"][good]
            price = price[good]
            for s in np.unique(sym):
                parts.setdefault(int(s), []).append(price[sym == s])
    except (ValueError, OSError) as e:
        raise UserError(str(e)) from None
    series = {source.symbols[s]: np.concatenate(v) for s, v in sorted(parts.items())}
    return series, bad


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _value(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _points(stats: LagStatistics, values: np.ndarray, symbol: str) -> list[dict[str, Any]]:
    return [{"symbol": symbol, "lag": int(lag), "value": _value(v)}
            for lag, v in zip(stats.lags, values, strict=True)]


def run(args: argparse.Namespace) -> dict[str, Any]:
    t_start = time.perf_counter()
    try:
        device = resolve_device(args.device, "time-series kernels")
    except (ValueError, DeviceUnavailable) as e:
        raise UserError(str(e)) from None
    if args.max_lag < 1:
        raise UserError(f"--max-lag must be at least 1, got {args.max_lag}")
    if args.out:  # refused now, not after the kernels ran
        from engine.reporting.outputs import check_writable_dir

        check_writable_dir(Path(args.out), "--out")
    wanted = [s.strip() for s in args.symbols.split(",") if s.strip()] if args.symbols else None
    series, bad = price_series(args.data, wanted, *_bounds(args))
    if not series:
        raise UserError("no prices in the data for the chosen symbols and dates")
    too_short = {s: len(p) for s, p in series.items() if len(p) < args.max_lag + 2}
    if too_short and (wanted is not None or len(too_short) == len(series)):
        sym, n = next(iter(too_short.items()))
        try:
            check_max_lag(n, args.max_lag)
        except ValueError as e:
            raise UserError(f"{sym}: {e}") from None
    skipped_short = sorted(too_short)
    if skipped_short:
        _progress(f"skipping {len(skipped_short)} symbol(s) shorter than --max-lag + 2 prices "
                  f"(e.g. {', '.join(skipped_short[:5])})")
    if bad:
        _progress(f"skipped {bad} records with a non-finite or non-positive price")

    results: dict[str, Any] = {"hurst": [], "autocorr": [], "autocorr_abs": [], "symbols": {}}
    plots: list[str] = []
    kernel_seconds = 0.0
    shown = [lag for lag in SHOWN_LAGS if lag <= args.max_lag]
    print(f"{'symbol':<8} {'prices':>10}  {'lag':>5} {'H':>8} {'rho':>9} {'rho_abs':>9}")
    for sym, prices in series.items():
        if sym in too_short:
            continue
        _progress(f"{sym}: {len(prices):,} prices, lags 1..{args.max_lag} on {device}")
        try:
            stats = lag_statistics(prices, args.max_lag, device, args.precision)
        except ValueError as e:
            raise UserError(f"{sym}: {e}") from None
        kernel_seconds += stats.seconds
        results["hurst"] += _points(stats, stats.hurst, sym)
        results["autocorr"] += _points(stats, stats.autocorr, sym)
        results["autocorr_abs"] += _points(stats, stats.autocorr_abs, sym)
        results["symbols"][sym] = {
            "prices": stats.n_prices, "seconds": stats.seconds,
            "mean_abs_change": [_value(v) for v in stats.mean_abs_change],
        }
        for lag in shown:
            i = lag - 1
            print(f"{sym:<8} {stats.n_prices:>10,}  {lag:>5} {stats.hurst[i]:>8.4f} "
                  f"{stats.autocorr[i]:>+9.4f} {stats.autocorr_abs[i]:>+9.4f}")
        if args.out:
            png = Path(args.out) / f"timeseries_{sym}.png"
            plot_statistics(png, sym, stats)
            plots.append(str(png))
    if plots:
        print(f"wrote {len(plots)} plot(s) to {args.out}")
    results.update({
        "max_lag": args.max_lag, "device": device, "precision": args.precision,
        "skipped_records": bad, "skipped_symbols": skipped_short, "plots": plots,
        "kernel_seconds": kernel_seconds, "seconds": time.perf_counter() - t_start,
    })
    return results
