#!/usr/bin/env python3
"""Live daemon benchmark: order latency, restart equality at full size, and overload.

Three runs with real processes on loopback (the daemon, `feed`, SQLite):

1. latency: the SMA strategy (no GPU work) fed at `--rate` messages/s; the daemon's
   receive-to-publish histogram of its orders (goal: p50 <= 50 us, p99 <= 250 us);
2. restart: a `--restart-ticks` stream (the issue's 200k) run once whole and once stopped
   with SIGTERM at three points and resumed with `feed --skip`: the journals must agree
   fill for fill;
3. overload: a lossy feed as fast as it goes for `--overload-seconds` (the issue's 30 s):
   the daemon's resident memory, market data conflated, orders and fills lost between the
   journal and a reader of the orders socket (must be 0).

    python benchmarks/live_latency.py --json out.json [--plot out.png] [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.live_procs import (  # noqa: E402 - after the path set-up
    endpoints,
    fills,
    flood,
    orders,
    run_feed,
    start_daemon,
    stop_daemon,
    wait_processed,
)


def latency_run(tmp: Path, n: int, rate: float, log_input: bool = True) -> dict[str, Any]:
    ticks, out = endpoints()
    j = tmp / f"lat-{time.monotonic_ns()}.db"  # a fresh journal per run (--rounds)
    cfg = tmp / "lat.toml"
    cfg.write_text("[broker]\nsizing = \"fixed\"\nquantity = 10.0\n"
                   f"[live]\nlog_input = {str(log_input).lower()}\n")
    d = start_daemon(j, ticks, out, tmp / "lat.json", "--config", str(cfg))
    t0 = time.perf_counter()
    run_feed(ticks, "--ticks", str(n), "--n-symbols", "10", "--rate", str(rate),
             "--feed-session", "1", timeout=3600)
    wait_processed(j, n, d, timeout=600)
    st = stop_daemon(d, tmp / "lat.json")
    return {"messages": n, "rate": rate, "seconds": time.perf_counter() - t0,
            "orders": st["orders"], "latency": st["latency"]}


def restart_run(tmp: Path, n: int) -> dict[str, Any]:
    def piece(j: Path, name: str, a: int, b: int | None) -> dict[str, Any]:
        ticks, out = endpoints()
        d = start_daemon(j, ticks, out, tmp / f"{name}.json")
        extra = ["--skip", str(a)] + ([] if b is None else ["--count", str(b - a)])
        run_feed(ticks, "--ticks", str(n), "--feed-session", "5", *extra, timeout=3600)
        wait_processed(j, n if b is None else b, d, timeout=600)
        return stop_daemon(d, tmp / f"{name}.json")

    t0 = time.perf_counter()
    whole = tmp / "whole.db"
    piece(whole, "whole", 0, None)
    cut = tmp / "cut.db"
    cuts = [0, n // 5 + 13, n // 2 + 7, (4 * n) // 5 + 1]
    for k, a in enumerate(cuts):
        b = cuts[k + 1] if k + 1 < len(cuts) else None
        piece(cut, f"cut{k}", a, b)
    fw, fc = fills(whole), fills(cut)
    return {"messages": n, "sigterm_points": cuts[1:], "fills": len(fw),
            "orders": len(orders(whole)), "identical": fw == fc and orders(whole) == orders(cut),
            "seconds": time.perf_counter() - t0}


def plot(path: Path, lat: dict[str, Any], ov: dict[str, Any] | None) -> None:
    """The latency histogram and (with an overload run) the daemon's memory under
    overload, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2 if ov else 1, figsize=(11 if ov else 6, 4), squeeze=False)
    a1 = axes[0][0]
    labels = list(lat["buckets"])
    a1.bar(range(len(labels)), list(lat["buckets"].values()))
    a1.set_xticks(range(len(labels)), labels, rotation=60, fontsize=7)
    a1.set_title(f"receive-to-publish per order (p50 {lat['p50_us']} us, "
                 f"p99 {lat['p99_us']} us)")
    a1.set_ylabel("orders")
    if not ov:
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        return
    a2 = axes[0][1]
    xs = [0.2 * i for i in range(len(ov["rss_samples_mb"]))]
    a2.plot(xs, ov["rss_samples_mb"])
    a2.set_xlabel("seconds of overload")
    a2.set_ylabel("daemon RSS (MB)")
    a2.set_title(f"overload: {ov['conflated']:,} conflated, {ov['lost']} lost")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def overload_summary(o: dict[str, Any], seconds: float) -> dict[str, Any]:
    """What the overload run's status and journal say: throughput, memory, losses."""
    st = o["status"]
    return {
        "seconds": seconds, "ticks_processed": st["ticks"],
        "messages_received": st["messages"], "conflated": st["conflated"],
        "rss_base_mb": o["rss_base_mb"], "rss_peak_mb": o["rss_peak_mb"],
        "rss_samples_mb": o["rss_samples"],
        "orders_journal": o["journal_orders"], "fills_journal": o["journal_fills"],
        "orders_seen": o["seen"]["O"], "fills_seen": o["seen"]["F"],
        "lost": (o["journal_orders"] - o["seen"]["O"]) + (o["journal_fills"]
                                                           - o["seen"]["F"]),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path, help="write the results as JSON")
    ap.add_argument("--plot", type=Path, help="PNG of the latency histogram and memory")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (a laptop, CI)")
    ap.add_argument("--latency-ticks", type=int, default=200_000)
    ap.add_argument("--rate", type=float, default=20_000, help="latency run: messages/s")
    ap.add_argument("--restart-ticks", type=int, default=200_000)
    ap.add_argument("--overload-seconds", type=float, default=30.0)
    ap.add_argument("--overload-ticks", type=int, default=20_000_000)
    ap.add_argument("--input-log", choices=("on", "off", "both"), default="on",
                    help="latency run: the daemon's input log ([live] log_input); both: "
                         "alternate off and on, --rounds times each (its cost)")
    ap.add_argument("--rounds", type=int, default=1, help="latency runs per setting")
    ap.add_argument("--only", choices=("latency", "restart", "overload"),
                    help="run one of the three")
    args = ap.parse_args(argv)
    if args.quick:
        args.latency_ticks, args.restart_ticks = 20_000, 12_000
        args.overload_seconds, args.overload_ticks = 3.0, 2_000_000
    res: dict[str, Any] = {}
    want = {args.only} if args.only else {"latency", "restart", "overload"}
    with tempfile.TemporaryDirectory(prefix="live-bench-") as d:
        tmp = Path(d)
        if "latency" in want:
            print(f"latency: {args.latency_ticks:,} messages at {args.rate:,.0f}/s ...",
                  file=sys.stderr, flush=True)
            settings = {"on": [True], "off": [False], "both": [False, True]}[args.input_log]
            runs = []
            for k in range(args.rounds):
                for log_input in (settings if k % 2 == 0 else settings[::-1]):
                    run = latency_run(tmp, args.latency_ticks, args.rate, log_input)
                    run["log_input"] = log_input
                    lat = run["latency"]
                    print(f"  round {k + 1} log_input={log_input}: p50 {lat['p50_us']} us, "
                          f"p99 {lat['p99_us']} us, {run['seconds']:.2f} s",
                          file=sys.stderr, flush=True)
                    runs.append(run)
            res["latency"] = runs[-1]
            res["latency_runs"] = runs
        if "restart" in want:
            print(f"restart: {args.restart_ticks:,} messages, whole vs 3 SIGTERMs ...",
                  file=sys.stderr, flush=True)
            res["restart"] = restart_run(tmp, args.restart_ticks)
        if "overload" in want:
            print(f"overload: {args.overload_seconds:g} s of a lossy feed ...",
                  file=sys.stderr, flush=True)
            res["overload"] = overload_summary(
                flood(tmp, args.overload_seconds, args.overload_ticks), args.overload_seconds)
    print(f"{'run':<10} result")
    lat = res.get("latency", {}).get("latency")
    if lat:
        print(f"{'latency':<10} p50 {lat['p50_us']} us, p90 {lat['p90_us']} us, p99 "
              f"{lat['p99_us']} us over {lat['n']} orders (goal p50 <= 50, p99 <= 250)")
    r = res.get("restart")
    if r:
        print(f"{'restart':<10} {r['messages']:,} msgs, {r['fills']} fills, SIGTERM at "
              f"{r['sigterm_points']}: identical={r['identical']}")
    ov = res.get("overload")
    if ov:
        print(f"{'overload':<10} {ov['seconds']:g} s: {ov['messages_received']:,} received, "
              f"{ov['conflated']:,} conflated, RSS {ov['rss_base_mb']:.0f} -> peak "
              f"{ov['rss_peak_mb']:.0f} MB, orders/fills lost {ov['lost']}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    if args.plot and lat:
        plot(args.plot, lat, ov)
    ok = (not r or r["identical"]) and (not ov or ov["lost"] == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
