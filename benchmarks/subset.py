"""Time the least-correlated k of n search: GPU vs CPU twin vs itertools brute force.

    python benchmarks/subset.py [--device auto|cpu|cuda] [--repeats 5] [--quick] [--json PATH]

Cases: n=50, k=5 (the seed paper: 171 ms on a 2015 GPU), n=64, k=7 and n=100, k=5, on the
correlation matrix of 500 days of seeded random returns. Each variant searches all C(n, k)
combinations; times are the search after a warm-up launch (`SubsetResult.seconds`: every
launch, the transfer of the per-block minima and the host's final minimum), medians over
--repeats. `itertools` (plain Python over `itertools.combinations`, the reference the tests
use) runs only where C(n, k) ≤ --itertools-max. Every variant must return the same subset;
the script says so. Goals: n=50, k=5 in ≤ 5 ms; ≥ 1e9 combinations/s. `--quick`: small
cases for a smoke run. Writes JSON (default benchmarks/out/subset.json).
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numba
import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.common import device_or_none, log, write_json  # noqa: E402
from gpu.subset.search import least_correlated  # noqa: E402

CASES = ((50, 5), (64, 7), (100, 5))
QUICK_CASES = ((20, 4), (24, 5))


def correlation(n: int, seed: int = 1, days: int = 500) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(days, n))
    return np.asarray(np.corrcoef(x, rowvar=False))


def itertools_search(corr: np.ndarray, k: int) -> tuple[tuple[int, ...], float]:
    q = (corr ** 2).tolist()
    best: tuple[int, ...] = ()
    best_v = math.inf
    for s in itertools.combinations(range(corr.shape[0]), k):
        v = 0.0
        for i in range(1, k):
            row = q[s[i]]
            for j in range(i):
                v += row[s[j]]
        if v < best_v:
            best, best_v = s, v
    return best, best_v


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="small cases (smoke run)")
    ap.add_argument("--itertools-max", type=int, default=3_000_000,
                    help="largest C(n, k) searched by plain itertools (default 3e6)")
    ap.add_argument("--json", type=Path, default=REPO_ROOT / "benchmarks/out/subset.json")
    args = ap.parse_args()
    device = device_or_none(args.device, "subset benchmark")
    if device is None:
        return 2
    devices = ["cuda", "cpu"] if device == "cuda" else ["cpu"]
    rows: list[dict[str, Any]] = []
    for n, k in QUICK_CASES if args.quick else CASES:
        corr = correlation(n)
        total = math.comb(n, k)
        found: dict[str, tuple[int, ...]] = {}
        for dev in devices:
            log(f"n={n} k={k} ({total:,} combinations) on {dev} ...")
            runs = [least_correlated(corr, k, dev) for _ in range(args.repeats)]
            secs = statistics.median(r.seconds for r in runs)
            found[dev] = runs[0].subset
            rows.append({"n": n, "k": k, "combinations": total,
                         "variant": "gpu" if dev == "cuda" else "cpu twin",
                         "seconds": secs, "combinations_per_second": total / secs,
                         "subset": list(runs[0].subset), "distance": runs[0].distance})
            if dev == "cuda":  # stepping vs unranking every combination (one rank per thread)
                runs = [least_correlated(corr, k, dev, chunk=1) for _ in range(args.repeats)]
                secs = statistics.median(r.seconds for r in runs)
                found["gpu unrank each"] = runs[0].subset
                rows.append({"n": n, "k": k, "combinations": total,
                             "variant": "gpu unrank each", "seconds": secs,
                             "combinations_per_second": total / secs,
                             "subset": list(runs[0].subset), "distance": runs[0].distance})
        if total <= args.itertools_max:
            log(f"n={n} k={k} by itertools ...")
            t0 = time.perf_counter()
            subset, value = itertools_search(corr, k)
            secs = time.perf_counter() - t0
            found["itertools"] = subset
            rows.append({"n": n, "k": k, "combinations": total, "variant": "itertools",
                         "seconds": secs, "combinations_per_second": total / secs,
                         "subset": list(subset), "distance": math.sqrt(2 * value)})
        agree = len(set(found.values())) == 1
        for row in rows:
            if row["n"] == n and row["k"] == k:
                row["all_variants_agree"] = agree
                base = next((r["seconds"] for r in rows if r["n"] == n and r["k"] == k
                             and r["variant"] == "cpu twin"), None)
                row["speedup_vs_cpu_twin"] = base / row["seconds"] if base else None
    print(f"least-correlated k of n, exhaustive; CPU threads {numba.get_num_threads()}")
    print(f"{'n':>4} {'k':>3} {'combinations':>14} {'variant':<16} {'ms':>10} {'comb/s':>10} "
          f"{'x cpu':>7} agree")
    for r in rows:
        x = f"{r['speedup_vs_cpu_twin']:7.1f}" if r["speedup_vs_cpu_twin"] else f"{'-':>7}"
        print(f"{r['n']:>4} {r['k']:>3} {r['combinations']:>14,} {r['variant']:<16} "
              f"{r['seconds'] * 1e3:10.3f} {r['combinations_per_second']:10.3g} {x} "
              f"{'yes' if r['all_variants_agree'] else 'NO'}")
    result: dict[str, Any] = {"benchmark": "subset", "device": device,
                              "cpu_threads": numba.get_num_threads(),
                              "goals": {"n50_k5_seconds": 0.005, "combinations_per_second": 1e9},
                              "rows": rows}
    write_json(args.json, result)
    return 0 if all(r["all_variants_agree"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
