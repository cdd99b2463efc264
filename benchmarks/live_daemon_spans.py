#!/usr/bin/env python3
"""Where a live order's receive-to-publish time goes end to end: the daemon as its own
process (forked as `live_latency.py` forks it), the feed publishing the synthetic market
at `--rate` over TCP on loopback, and wall-clock `perf_counter` spans around each part of
the daemon's steps that published an order (validation, the engine, the bar close and its
compiled call, the decisions, the journal's writes and commit, publishing), medians over
those steps, with the order latency of the same steps (`Daemon.latency`).

`benchmarks/live_step_spans.py` measures the same parts in one process with no feed
running beside it; here the parts run as they do in a deployment on two cores, next to
the feed's process and both processes' ZeroMQ I/O threads, with idle time between the
feed's bursts (measured 2026-11-28: each part 1.5-3x its in-process time). The timers'
own cost (about 0.5-1 us each, a few per span) is in the spans and in the latency.

Each tree of `--roots` runs in its own process, alternating, `--rounds` times each:

    python benchmarks/live_daemon_spans.py [--roots DIR ...] [--rounds 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: the daemon process writes its spans here at exit (the environment it is started with)
OUT_ENV = "LIVE_DAEMON_SPANS_OUT"
#: (object attribute path on the daemon, method, span name)
SPANS = (("validator", "validate_many", "validate"), ("engine", "process", "engine"),
         ("engine", "_close_bars", "bar_close"), ("engine", "_close_compiled", "close_compiled"),
         ("engine.decisions", "decide", "decide"), ("journal", "record_order", "journal_orders"),
         ("journal", "begin", "begin"), ("journal", "record_seqs", "journal_seqs"),
         ("journal", "log_input", "input_log"), ("journal", "commit", "commit"),
         ("risk", "after_batch", "risk"), ("", "_publish", "publish"))


def _load_step_spans() -> Any:
    """This tree's `live_step_spans.py`, loaded by its path: in the daemon's process the
    measured tree's folder comes first on sys.path, so `benchmarks` may be another tree's."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("live_step_spans_here",
                                                  HERE / "live_step_spans.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: `f` (a function or coroutine function) adding its wall-clock seconds to `cur[key]`
timed = _load_step_spans().timed


def install(d: Any) -> None:
    """Timers on one daemon's parts and steps; the medians written at the process's exit."""
    import engine.trading.core as core

    cur: dict[str, float] = {}
    for owner, name, key in SPANS:
        obj = d
        for part in filter(None, owner.split(".")):
            obj = getattr(obj, part)
        if hasattr(obj, name):
            setattr(obj, name, timed(getattr(obj, name), key, cur))
    core.sma_cross_close = timed(core.sma_cross_close, "compiled_call", cur)
    rows: list[dict[str, float]] = []
    step = d._step

    async def timed_step(raw: Any, t_recv: float, *a: Any, **k: Any) -> int:
        cur.clear()
        n0 = d.orders_out
        taken: int = await step(raw, t_recv, *a, **k)
        if d.orders_out > n0:
            rows.append({**cur, "latency": d.latency.recent[-1] / 1e6,
                         "orders": (d.orders_out - n0) / 1e6, "messages": taken / 1e6})
        return taken

    d._step = timed_step

    def dump() -> None:
        keys = sorted({k for r in rows for k in r})
        med = {k: round(statistics.median(r.get(k, 0.0) for r in rows) * 1e6, 1)
               for k in keys}
        Path(os.environ[OUT_ENV]).write_text(json.dumps({"order_steps": len(rows),
                                                         "span_median_us": med}))
    atexit.register(dump)


def _patch_daemon() -> None:
    """In the daemon's process (this module is preloaded by its fork server)."""
    from engine.live.daemon import Daemon

    run = Daemon.run

    async def run_timed(self: Any, *a: Any, **k: Any) -> None:
        install(self)
        await run(self, *a, **k)

    Daemon.run = run_timed  # type: ignore[method-assign]


def measure(rate: float, ticks: int, out: Path) -> dict[str, Any]:
    """One latency run of the tree first on sys.path, its daemon timed."""
    import tempfile

    import tests.live_procs as procs
    from benchmarks.live_latency import latency_run

    procs.PRELOAD.append("live_daemon_spans")  # imported by the daemon's fork server
    os.environ[OUT_ENV] = str(out)
    with tempfile.TemporaryDirectory(prefix="daemon-spans-") as d:
        run = latency_run(Path(d), ticks, rate)
    spans = json.loads(out.read_text())
    return {"p50_us": run["latency"]["p50_us"], "p99_us": run["latency"]["p99_us"],
            "orders": run["orders"], **spans}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--roots", type=Path, nargs="+", default=[HERE.parent])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rate", type=float, default=20_000)
    ap.add_argument("--ticks", type=int, default=200_000)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:  # one run of the tree `--worker`; the result on stdout
        sys.path[:0] = [str(args.worker), str(HERE)]
        out = Path(os.environ.get("TMPDIR", "/tmp")) / f"daemon-spans-{os.getpid()}.json"
        print(json.dumps(measure(args.rate, args.ticks, out)))
        out.unlink(missing_ok=True)
        return 0
    runs: dict[str, list[dict[str, Any]]] = {str(r): [] for r in args.roots}
    for k in range(args.rounds):
        for root in args.roots:
            env = {**os.environ, "PYTHONPATH": str(root)}
            t = time.strftime("%H:%M:%S", time.gmtime())
            load = Path("/proc/loadavg").read_text().split()[:3]
            res = json.loads(subprocess.run(
                [sys.executable, __file__, "--worker", str(root), "--rate", str(args.rate),
                 "--ticks", str(args.ticks)], env=env, cwd=root, check=True,
                capture_output=True, text=True).stdout.splitlines()[-1])
            res.update(utc=t, load=load)
            runs[str(root)].append(res)
            print(f"{t} load {' '.join(load)} round {k + 1} {root}: p50 {res['p50_us']} us, "
                  f"p99 {res['p99_us']} us, spans {res['span_median_us']}", flush=True)
    summary = {tree: {"p50_us_median": statistics.median(r["p50_us"] for r in rs),
                      "p99_us_median": statistics.median(r["p99_us"] for r in rs),
                      "span_median_us": {k: statistics.median(r["span_median_us"].get(k, 0.0)
                                                              for r in rs)
                                         for k in rs[0]["span_median_us"]}}
               for tree, rs in runs.items()}
    for tree, s in summary.items():
        print(f"{tree}: p50 {s['p50_us_median']} us, p99 {s['p99_us_median']} us "
              f"(medians of {args.rounds} rounds); spans {s['span_median_us']}")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args), "runs": runs,
                                         "summary": summary}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
elif os.environ.get(OUT_ENV):  # preloaded by the daemon's fork server
    _patch_daemon()
