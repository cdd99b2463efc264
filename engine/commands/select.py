"""`select`: the k least-correlated strategies of a returns file, by exact search on the GPU.

    python run_engine.py select --returns RETURNS.csv --k 5 [--max-search-seconds S]
        [--device auto|cpu|cuda] [--plot PNG] [--json PATH]

Searches all C(n, k) combinations of the n strategy columns for the one whose k×k
correlation sub-matrix is closest to the identity (Frobenius distance; gpu/subset/search.py).
The returns file format is in strategies/selection.py; `evolve --returns-out` writes one.
The `--json` output can be given to a GP strategy file as `best.json#ensemble:select=FILE`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import UserError
from engine.reporting.plots import plot_selection
from engine.settings.flags import deprecated_alias
from gpu.device import DeviceUnavailable, resolve_device
from gpu.subset.search import SearchTooLong
from strategies.selection import (
    clone_warning,
    largest_abs_correlation,
    read_returns,
    select_least_correlated,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--returns", type=Path, required=True, metavar="CSV",
                   help="daily returns, one column per strategy (optional first column date)")
    p.add_argument("--k", type=int, default=5, help="strategies to choose (default 5)")
    p.add_argument("--max-search-seconds", type=float, default=600.0, metavar="S",
                   help="refuse a search estimated to take longer (default 600)")
    deprecated_alias(p, "--max-seconds", dest="max_search_seconds",
                     new="--max-search-seconds", type=float,
                     why="--max-seconds stops live and feed after that long")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--plot", type=Path, metavar="PNG",
                   help="correlation matrix with the chosen strategies marked")


def run(args: argparse.Namespace) -> dict[str, Any]:
    try:
        device = resolve_device(args.device, "subset search")
    except (ValueError, DeviceUnavailable) as e:
        raise UserError(str(e)) from None
    if not args.max_search_seconds > 0:
        raise UserError(f"--max-search-seconds must be positive, got {args.max_search_seconds}")
    if args.plot:  # before the search: never overwrite a file that is not a PNG
        from engine.reporting.outputs import check_own_kind, check_writable_file

        check_writable_file(args.plot, "--plot")
        check_own_kind(args.plot, "png", "--plot")
    try:
        table = read_returns(args.returns)
    except ValueError as e:
        raise UserError(str(e)) from None
    if table.constant:
        print(f"set aside {len(table.constant)} strategies with constant returns: "
              f"{', '.join(table.constant[:10])}", file=sys.stderr)
    if table.dropped_rows:
        print(f"dropped {table.dropped_rows} day(s) with a missing or non-finite return",
              file=sys.stderr)

    def progress(done: int, total: int, seconds: float) -> None:
        if done < total or seconds > 1.0:
            print(f"searched {done:,} of {total:,} combinations in {seconds:.2f} s",
                  file=sys.stderr, flush=True)

    try:
        result = select_least_correlated(table, args.k, device, args.max_search_seconds, progress)
    except SearchTooLong as e:
        raise UserError(str(e)) from None
    except ValueError as e:
        raise UserError(f"{args.returns}: {e}") from None
    names = [table.names[i] for i in result.subset]
    corr = table.correlation()
    sub = corr[np.ix_(result.subset, result.subset)]
    largest = largest_abs_correlation(sub)
    distinct = table.distinct_behaviours
    n_input = len(table.names) + len(table.constant)
    warning = clone_warning(largest, args.k, distinct)
    print(f"least-correlated {args.k} of {len(table.names)}: {', '.join(names)}")
    print(f"distance to identity {result.distance:.6f} (largest |correlation| "
          f"{largest:.4f}); {result.combinations:,} combinations "
          f"in {result.seconds * 1e3:.2f} ms on {result.device} "
          f"({result.combinations_per_second:.3g}/s)")
    print(f"the input holds {distinct} distinct behaviour(s) in {n_input} columns "
          "(identical returns count once)")
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    if args.plot:
        plot_selection(args.plot, table, result)
        print(f"wrote {args.plot}")
    return {
        "subset": names,
        "subset_indices": list(result.subset),
        "distance": result.distance,
        "sum_squared_correlation": result.objective,
        "combinations": result.combinations,
        "seconds": result.seconds,
        "combinations_per_second": result.combinations_per_second,
        "device": result.device,
        "k": args.k,
        "n": len(table.names),
        "days": int(table.returns.shape[0]),
        "dropped_rows": table.dropped_rows,
        "constant": list(table.constant),
        "distinct_behaviours": distinct,
        "largest_abs_correlation": largest,
        "warning": warning,
        "correlation": [[float(x) for x in row] for row in sub],
        "returns": str(args.returns),
    }
