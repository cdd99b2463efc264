#!/usr/bin/env python3
"""Options/s of the engine's one-shot path, `FdPricingEngine.price` on CUDA (issue 30,
goal 2: >= 2e7 options/s at the default grid), code trees side by side.

Each tree runs in its own process (`--roots A B ...`, alternating, `--rounds` times) on
the American reference portfolio (1,000 calls and puts with dividend yields,
`benchmarks/reference/american_reference.csv`) tiled to each `--sizes` count: per size
the median wall time of `engine.price(contracts, market)` (contracts and market inputs
in, values on the host out: rows built and checked, launch, wait, values copied), the
kernel alone on rows already on the device (CUDA events, `benchmarks.options.time_gpu`),
and a digest of the prices, so trees that should agree bit for bit can be seen to.

    python benchmarks/price_path.py [--roots BEFORE AFTER] [--rounds 3]
        [--sizes 1000 10000 100000] [--grid default] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def measure(sizes: list[int], grid_name: str, repeats: int) -> dict[str, Any]:
    """One tree, in this process (the tree first on sys.path)."""
    import hashlib

    from benchmarks.options import time_gpu
    from benchmarks.reference.american import load_reference
    from gpu.options import core
    from gpu.options.engines import FdPricingEngine, contract_rows

    ref = load_reference()
    engine = FdPricingEngine(grid_name, "cuda")
    out: dict[str, Any] = {"core": core.__file__, "sizes": {}}
    for n in sizes:
        big = ref.tiled(n)
        values = engine.price(big.contracts, big.market)  # compiles or loads; the workspace
        times = []
        for _ in range(max(3, repeats * 10_000 // max(n, 10_000))):
            t0 = time.perf_counter()
            values = engine.price(big.contracts, big.market)
            times.append(time.perf_counter() - t0)
        wall = statistics.median(times)
        kernel = time_gpu(contract_rows(big.contracts, big.market), engine.grid,
                          max(5, repeats // 2))
        out["sizes"][str(n)] = {
            "wall_us": wall * 1e6, "options_per_second": n / wall,
            "kernel_us": kernel["seconds"] * 1e6,
            "kernel_options_per_second": kernel["options_per_second"],
            "host_us": (wall - kernel["seconds"]) * 1e6,
            "price_digest": hashlib.sha256(values.price.tobytes()).hexdigest()[:16],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--roots", type=Path, nargs="+", default=[ROOT])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=30,
                    help="timed calls at 10,000 contracts (fewer above, at least 3)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    ap.add_argument("--grid", default="default")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.repeats < 1 or min(args.sizes) < 1:
        ap.error("--rounds, --repeats and every --sizes must be at least 1")
    if args.worker is not None:  # one run of the tree `--worker`, the result on stdout
        import json

        sys.path.insert(0, str(args.worker))
        print(json.dumps(measure(args.sizes, args.grid, args.repeats)))
        return 0
    sys.path.insert(0, str(ROOT))  # this tree's helpers (a worker runs another tree)
    from benchmarks.common import alternate_trees, write_tree_runs

    runs: dict[str, list[dict[str, Any]]] = {str(r): [] for r in args.roots}
    worker_args = ["--repeats", str(args.repeats), "--grid", args.grid,
                   "--sizes", *map(str, args.sizes)]
    for k, root, res in alternate_trees(__file__, args.roots, args.rounds, worker_args):
        runs[str(root)].append(res)
        print(f"round {k + 1} {root}: " + "; ".join(
            f"{n}: {s['options_per_second']:.3e}/s (kernel {s['kernel_us']:.0f} us, host "
            f"{s['host_us']:.0f} us, {s['price_digest']})" for n, s in res["sizes"].items()),
            flush=True)
    print(f"\n`FdPricingEngine.price` on CUDA, {args.grid} grid, median of rounds\n"
          "| tree | contracts | options/s | wall µs | kernel µs | host µs | prices |\n"
          "|---|---:|---:|---:|---:|---:|---|")
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for tree, rs in runs.items():
        summary[tree] = {}
        for n in map(str, args.sizes):
            med = {key: statistics.median(r["sizes"][n][key] for r in rs)
                   for key in ("options_per_second", "wall_us", "kernel_us", "host_us")}
            digests = sorted({r["sizes"][n]["price_digest"] for r in rs})
            summary[tree][n] = {**med, "price_digests": digests}
            print(f"| {tree} | {int(n):,} | {med['options_per_second']:.3e} | "
                  f"{med['wall_us']:.0f} | {med['kernel_us']:.0f} | {med['host_us']:.0f} | "
                  f"{' '.join(digests)} |")
    if args.json:
        write_tree_runs(args.json, args, runs, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
