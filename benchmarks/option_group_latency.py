#!/usr/bin/env python3
"""The 1,000-option group's latency (issue 30, goal 2: p50 <= 50 us at the default grid),
code trees side by side, with where the time goes on the host.

Each tree runs in its own process (`--roots A B ...`, alternating, `--rounds` times), on
the default grid's reference rows (American calls and puts with dividend yields): a new
spot written into the group (`OptionGroupPricer.set_spot`), `launch`, polling `done` until
the values are in, `results`. Per tree it reports that whole path's p50/p99, the same path
with expired rows (its floor: the kernel writes closed-form values at once), and the
medians of each host-side span (set_spot, launch, the wait while polling, results) and of
one poll.

    python benchmarks/option_group_latency.py [--roots BEFORE AFTER] [--rounds 3] [--options 1000]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

SPANS = ("set_spot", "launch", "wait", "results", "total")


def measure(repeats: int, options: int = 1000) -> dict[str, Any]:
    """One tree, in this process (the tree first on sys.path): a group of `options` of the
    reference rows."""
    import numpy as np

    from benchmarks.options import reference_rows
    from gpu.options import core
    from gpu.options.engines import GRIDS, OptionGroupPricer

    out: dict[str, Any] = {"core": core.__file__}
    for name in ("reference", "expired"):
        rows = reference_rows(options)
        if name == "expired":
            rows[:, core.EXPIRY] = 0.0
        group = OptionGroupPricer(rows, GRIDS["default"], "cuda")
        spans: dict[str, list[float]] = {k: [] for k in (*SPANS, "polls", "per_poll")}
        for i in range(repeats + 20):
            t0 = time.perf_counter_ns()
            group.set_spot(100.0 + 0.01 * (i % 7))
            t1 = time.perf_counter_ns()
            group.launch()
            t2 = time.perf_counter_ns()
            polls = 0
            while not group.done():
                polls += 1
            t3 = time.perf_counter_ns()
            values = group.results()
            t4 = time.perf_counter_ns()
            assert np.isfinite(values.price).all()
            if i >= 20:  # the first launches warm up
                for k, ns in zip(SPANS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0),
                                 strict=True):
                    spans[k].append(ns / 1e3)
                spans["polls"].append(polls)
                spans["per_poll"].append((t3 - t2) / 1e3 / max(polls, 1))
        total = np.array(spans["total"])
        out[name] = {"p50_us": float(np.percentile(total, 50)),
                     "p99_us": float(np.percentile(total, 99)),
                     **{f"{k}_median_us": statistics.median(spans[k]) for k in SPANS[:-1]},
                     "polls_median": statistics.median(spans["polls"]),
                     "threads": int(getattr(group, "_threads", 0)),
                     "launcher": str(getattr(group, "launcher", None)),
                     # the wait divided by its polls: what one `done()` costs in flight
                     "per_poll_median_us": statistics.median(spans["per_poll"])}
        t0 = time.perf_counter_ns()
        for _ in range(1000):  # the driver query `done` makes while a launch is in flight
            group._query()
        out[name]["one_poll_us"] = (time.perf_counter_ns() - t0) / 1e6
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--roots", type=Path, nargs="+", default=[ROOT])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=500)
    ap.add_argument("--options", type=int, default=1000, help="the group's size")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.repeats < 1 or args.options < 1:
        ap.error("--rounds, --repeats and --options must be at least 1")
    if args.worker is not None:  # one run of the tree `--worker`, the result on stdout
        import json

        sys.path.insert(0, str(args.worker))
        print(json.dumps(measure(args.repeats, args.options)))
        return 0
    sys.path.insert(0, str(ROOT))  # this tree's helpers (a worker runs another tree)
    from benchmarks.common import alternate_trees, write_tree_runs

    runs: dict[str, list[dict[str, Any]]] = {str(r): [] for r in args.roots}
    for k, root, res in alternate_trees(__file__, args.roots, args.rounds,
                                        ["--repeats", str(args.repeats),
                                         "--options", str(args.options)]):
        runs[str(root)].append(res)
        ref, floor = res["reference"], res["expired"]
        print(f"round {k + 1} {root}: group p50 {ref['p50_us']:.1f} us, p99 "
              f"{ref['p99_us']:.1f} us; floor p50 {floor['p50_us']:.1f} us; host: set_spot "
              f"{ref['set_spot_median_us']:.1f}, launch {ref['launch_median_us']:.1f}, "
              f"results {ref['results_median_us']:.1f} us, a poll "
              f"{ref['one_poll_us']:.2f} us", flush=True)
    print("| tree | group p50 µs | p99 µs | floor p50 µs | set_spot µs | launch µs | "
          "results µs |\n|---|---:|---:|---:|---:|---:|---:|")
    summary = {}
    for tree, rs in runs.items():
        med = {key: statistics.median(r["reference"][key] for r in rs)
               for key in ("p50_us", "p99_us", "set_spot_median_us", "launch_median_us",
                           "results_median_us")}
        med["floor_p50_us"] = statistics.median(r["expired"]["p50_us"] for r in rs)
        summary[tree] = med
        print(f"| {tree} | {med['p50_us']:.1f} | {med['p99_us']:.1f} | "
              f"{med['floor_p50_us']:.1f} | {med['set_spot_median_us']:.1f} | "
              f"{med['launch_median_us']:.1f} | {med['results_median_us']:.1f} |")
    if args.json:
        write_tree_runs(args.json, args, runs, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
