#!/usr/bin/env python3
"""Where a live order's receive-to-publish time goes: the daemon's own step (validation,
the engine and its bar close, the risk gate, the journal's writes and commit, publishing)
driven in process over the synthetic market's frames, a few messages a step as the daemon
receives them at 20,000 messages/s, with real SQLite (WAL) and a real orders socket.

Each received batch goes through the daemon's own `_batch` (its steps, and a step that
publishes nothing may leave its transaction open as in the daemon's loop, committed once
`[live] commit_within_ms` old). The order latency is the daemon's own histogram
(`Daemon.latency`: step start to the end of publishing, so the socket receive is not in
it); the spans are wall-clock
`perf_counter` intervals around each part, medians over the steps that published an order;
`step_cpu` is the CPU time of such a whole step (`thread_time`, equity point and snapshot
after publishing included), which other work on a shared machine inflates far less than
wall-clock time.
`--roots A B ...` runs each code tree (e.g. the commit before a change and after it) in
its own process, alternating, `--rounds` times each, on the same frames.

    python benchmarks/live_step_spans.py [--roots DIR ...] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: (object attribute path on the daemon, method, span name)
SPANS = (("validator", "validate_many", "validate"), ("engine", "process", "engine"),
         ("engine", "_close_bars", "bar_close"), ("risk", "after_batch", "risk"),
         ("journal", "record_seqs", "journal_seqs"), ("journal", "log_input", "input_log"),
         ("journal", "commit", "commit"), ("", "_publish", "publish"),
         ("engine", "take_equity_point", "equity_after_publish"))


def timed(f: Any, key: str, cur: dict[str, float]) -> Any:
    """`f` (a function or coroutine function) adding its wall-clock seconds to `cur[key]`."""
    import asyncio
    import time

    if asyncio.iscoroutinefunction(f):
        async def g(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return await f(*a, **k)
            finally:
                cur[key] = cur.get(key, 0.0) + time.perf_counter() - t
        return g

    def h(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            cur[key] = cur.get(key, 0.0) + time.perf_counter() - t
    return h


def measure(ticks: int, symbols: int, step: int) -> dict[str, Any]:
    """One run in this process (the code tree first on sys.path)."""
    import asyncio
    import tempfile
    import time

    import zmq.asyncio

    from benchmarks.tick_path import frames_of
    from engine.live.daemon import Daemon, open_sockets
    from engine.live.journal import Journal
    from engine.settings.config import BrokerConfig, EngineConfig
    from strategies.sma_cross import SmaCross
    from tests.live_procs import endpoints

    _, pairs = frames_of(ticks, symbols)
    frames = [list(p) for p in pairs]
    cfg = EngineConfig(broker=BrokerConfig(sizing="fixed", quantity=10.0))
    cur: dict[str, float] = {}

    with tempfile.TemporaryDirectory(prefix="step-spans-") as tmp:
        ctx = zmq.asyncio.Context()
        journal = Journal(Path(tmp) / "j.db")
        ticks_ep, orders_ep = endpoints()
        sub, out = open_sockets(ctx, ticks_ep, orders_ep, cfg, [b""], None)
        d = Daemon(cfg=cfg, strategy=SmaCross(5, 10), journal=journal, state=journal.load(),
                   sub=sub, out=out, device="cpu", status_file=None, max_seconds=0.0,
                   ticks=ticks_ep)
        for owner, name, key in SPANS:
            obj = getattr(d, owner) if owner else d
            if hasattr(obj, name):  # take_equity_point: only after the change
                setattr(obj, name, timed(getattr(obj, name), key, cur))
        rows: list[dict[str, float]] = []

        # the loop's commit of a transaction its steps left open (`Daemon.commit_held`,
        # once `[live] commit_within_ms` old; a tree without it commits every step)
        commit_held = getattr(d, "commit_held", None)

        async def go() -> None:
            for i in range(0, len(frames), step):
                cur.clear()
                n0 = d.orders_out
                c0 = time.thread_time()
                await d._batch(frames[i:i + step], time.perf_counter())
                if d.orders_out > n0:
                    cur["step_cpu"] = time.thread_time() - c0
                    rows.append(dict(cur))
                held = getattr(d, "_held_since", None)
                if commit_held is not None and held is not None and \
                        time.perf_counter() - held >= d._hold_s:
                    commit_held()
            if commit_held is not None:
                commit_held()

        asyncio.run(go())
        lat = d.latency.summary()
        d.close()
        sub.close()
        out.close()
        journal.close()
        ctx.destroy(linger=0)
    keys = [k for _, _, k in SPANS] + ["step_cpu"]
    spans = {k: round(statistics.median(r.get(k, 0.0) for r in rows) * 1e6, 1) for k in keys}
    return {"order_steps": len(rows), "p50_us": lat["p50_us"], "p99_us": lat["p99_us"],
            "span_median_us": spans}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--roots", type=Path, nargs="+", default=[ROOT])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ticks", type=int, default=200_000)
    ap.add_argument("--symbols", type=int, default=10)
    ap.add_argument("--step", type=int, default=2, help="messages a step")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:  # one run of the tree `--worker`, the result on stdout
        sys.path.insert(0, str(args.worker))
        print(json.dumps(measure(args.ticks, args.symbols, args.step)))
        return 0
    sys.path.insert(0, str(ROOT))  # this tree's helpers (a worker runs another tree)
    from benchmarks.common import alternate_trees, write_json

    runs: dict[str, list[dict[str, Any]]] = {str(r): [] for r in args.roots}
    worker_args = ["--ticks", str(args.ticks), "--symbols", str(args.symbols), "--step",
                   str(args.step)]
    for k, root, res in alternate_trees(__file__, args.roots, args.rounds, worker_args):
        runs[str(root)].append(res)
        print(f"round {k + 1} {root}: p50 {res['p50_us']} us, p99 {res['p99_us']} us, "
              f"spans {res['span_median_us']}", flush=True)
    summary = {}
    for tree, rs in runs.items():
        summary[tree] = {
            "p50_us_median": statistics.median(r["p50_us"] for r in rs),
            "p99_us_median": statistics.median(r["p99_us"] for r in rs),
            "span_median_us": {k: statistics.median(r["span_median_us"][k] for r in rs)
                               for k in rs[0]["span_median_us"]}}
        print(f"{tree}: p50 {summary[tree]['p50_us_median']} us, p99 "
              f"{summary[tree]['p99_us_median']} us (medians of {len(rs)} rounds)")
    if args.json:
        write_json(args.json, {"args": vars(args), "runs": runs, "summary": summary},
                   default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
