"""Replay throughput: the engine's ticks/s against the raw transport limit, side by side.

Workloads: 1,000,000 synthetic ticks over 100 symbols, and the real SPY + BAC trades of
lean_ticks_2013-10 (2.46 M ticks). For each transport, in the same run: the raw limit
(publish -> receive -> decode, no engine) and the full engine with the sma-cross strategy.
A "pre-filled" row first publishes everything into an inproc socket and then times only
the receiving side, raw and engine: the engine's capacity when no feed shares its cores.
Runs here (no GPU needed). Prints a table and writes JSON.

`--frame-ticks 4096,0` times, in every round and side by side, the replay's batch frames
(4,096 trades per frame, feeds/trade_batch.py: the default) and one tick per message (0),
each against its own raw limit: the same frames published by the feed process and received
and decoded (a batch into its numpy columns) with no engine. The rounds alternate the
modes, so a machine whose load changes during the run weighs on both alike.

    python benchmarks/replay_throughput.py [--transports ipc,inproc] [--frame-ticks 4096,0]
        [--repeats N] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import zmq  # noqa: E402
import zmq.asyncio  # noqa: E402

from engine.settings.config import EngineConfig  # noqa: E402
from engine.trading.core import Engine  # noqa: E402
from engine.trading.replay import raw_limit_async, replay_async  # noqa: E402
from feeds.datadir import data_dir  # noqa: E402
from feeds.messages import Heartbeat, make_decoder  # noqa: E402
from feeds.publish import publish_source  # noqa: E402
from feeds.sources import open_sources  # noqa: E402
from feeds.synthetic import SyntheticMarket  # noqa: E402
from feeds.transport import Publisher, Subscriber  # noqa: E402
from strategies.sma_cross import SmaCross  # noqa: E402


async def prefilled(factory: functools.partial, with_engine: bool) -> tuple[int, float, Any]:
    """Publish everything into an inproc socket first, then time only the receiving side.

    This separates the engine's own capacity (receive, decode, validate, bars, strategy,
    orders) from the feed's, which on a small machine shares its cores.
    """
    ctx = zmq.asyncio.Context()
    name = f"inproc://prefill-{time.monotonic_ns()}"
    pub = Publisher(name, zmq.Context.shadow(ctx.underlying), sndhwm=0)
    sub = Subscriber(name, ctx, rcvhwm=0)
    pub.wait_for_subscriber(5.0)
    source = factory()
    publish_source(source, pub)
    engine = Engine(list(source.symbols), SmaCross(), EngineConfig()) if with_engine else None
    decode = make_decoder().decode
    n = 0
    t0 = time.perf_counter()
    if engine is not None:
        while not engine.finished:
            await engine.consume(await sub.lazy_batch(), sub.validator)
        n = engine.stats.market_data
    else:
        done = False
        while not done:
            for _topic, payload in await sub.lazy_batch():
                m = decode(payload)
                n += 1
                done = type(m) is Heartbeat and m.final
    wall = time.perf_counter() - t0
    pub.close()
    sub.close()
    ctx.destroy(linger=0)
    return n, wall, engine


def workloads(ticks: int, symbols: int) -> dict[str, functools.partial[Any]]:
    w: dict[str, functools.partial[Any]] = {f"synthetic {ticks:,} ticks x {symbols} symbols":
         functools.partial(SyntheticMarket, n_symbols=symbols, n_ticks=ticks, seed=7)}
    lean = data_dir() / "lean_ticks_2013-10" / "equity" / "usa" / "tick"
    if lean.is_dir():
        w["real SPY + BAC trades (LEAN, 5 days)"] = functools.partial(
            open_sources, [str(lean / "spy"), str(lean / "bac")], kinds=("trade",))
    return w


def replay_row(wname: str, factory: functools.partial, transport: str, rep: int,
               frame_ticks: int) -> dict[str, Any]:
    """One round of one mode: the raw limit of its frames, then the engine's replay. Wall
    time as the replay reports it, and the CPU seconds of the receiving process and of the
    feed process (a child, for ipc and tcp), which a busy machine moves far less: ticks per
    CPU second of each side is what it could do on a core of its own."""
    cpu = _Cpu()
    n_raw, t_raw = asyncio.run(raw_limit_async(factory, transport, frame_ticks))
    raw_cpu, raw_feed_cpu = cpu.lap()
    cfg = EngineConfig(transport=transport, replay_frame_ticks=frame_ticks)  # type: ignore[arg-type]
    res = asyncio.run(replay_async(factory, SmaCross(), cfg))
    eng_cpu, eng_feed_cpu = cpu.lap()
    eng = res.engine.stats
    n_eng = eng.market_data
    mode = f"{transport} {frame_ticks}/frame" if frame_ticks else f"{transport} 1/message"
    row: dict[str, Any] = {
        "workload": wname, "transport": mode, "frame_ticks": frame_ticks, "repeat": rep,
        "messages": n_raw, "raw_seconds": t_raw, "raw_per_second": n_raw / t_raw,
        "engine_ticks": n_eng, "engine_seconds": res.wall_seconds,
        "engine_per_second": n_eng / res.wall_seconds,
        "bars": eng.bars, "orders": eng.orders, "fills": eng.fills,
        "final_equity": res.engine.broker.equity(),
        "raw_receiver_cpu_seconds": raw_cpu, "raw_feed_cpu_seconds": raw_feed_cpu,
        "engine_cpu_seconds": eng_cpu, "engine_feed_cpu_seconds": eng_feed_cpu,
        # while the clock ran: the engine's process, and the feed process publishing
        "engine_timed_cpu_seconds": res.cpu_seconds,
        "feed_timed_cpu_seconds": res.feed_cpu_seconds,
        "engine_ticks_per_cpu_second": n_eng / res.cpu_seconds,
        "feed_ticks_per_cpu_second": (n_eng / res.feed_cpu_seconds
                                      if res.feed_cpu_seconds > 0 else None),
    }
    row["engine_over_raw"] = row["engine_per_second"] / row["raw_per_second"]
    print(f"{wname:45s} {mode:18s} raw {row['raw_per_second']:>10,.0f}/s  "
          f"engine {row['engine_per_second']:>10,.0f}/s  "
          f"ratio {row['engine_over_raw']:.2f}  ({n_eng:,} ticks, "
          f"{eng.bars:,} bars, {eng.fills:,} fills; CPU s while timed: engine "
          f"{res.cpu_seconds:.2f}, its feed {res.feed_cpu_seconds:.2f})", flush=True)
    return row


class _Cpu:
    """CPU seconds of this process and of its finished children since the last lap."""

    def __init__(self) -> None:
        self.last = self._now()

    @staticmethod
    def _now() -> tuple[float, float]:
        import resource

        child = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.process_time(), child.ru_utime + child.ru_stime

    def lap(self) -> tuple[float, float]:
        now = self._now()
        own, children = now[0] - self.last[0], now[1] - self.last[1]
        self.last = now
        return own, children


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transports", default="ipc,inproc")
    ap.add_argument("--ticks", type=int, default=1_000_000)
    ap.add_argument("--symbols", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--workload", default="",
                    help="only the workloads whose name contains this (e.g. LEAN)")
    ap.add_argument("--frame-ticks", default="4096",
                    help="comma-separated trades per frame to time side by side (0: one "
                         "message per tick)")
    ap.add_argument("--no-prefilled", dest="prefilled", action="store_false",
                    help="skip the pre-filled socket rows (engine capacity without the feed)")
    ap.add_argument("--json", type=Path, default=Path("benchmarks/out/replay_throughput.json"))
    args = ap.parse_args()
    rows = []
    for wname, factory in workloads(args.ticks, args.symbols).items():
        if args.workload not in wname:
            continue
        for rep in range(args.repeats if args.prefilled else 0):
            n_raw, t_raw, _ = asyncio.run(prefilled(factory, with_engine=False))
            n_eng, t_eng, eng_obj = asyncio.run(prefilled(factory, with_engine=True))
            row = {
                "workload": wname, "transport": "inproc pre-filled", "repeat": rep,
                "messages": n_raw, "raw_seconds": t_raw, "raw_per_second": n_raw / t_raw,
                "engine_ticks": n_eng, "engine_seconds": t_eng,
                "engine_per_second": n_eng / t_eng, "bars": eng_obj.stats.bars,
                "orders": eng_obj.stats.orders, "fills": eng_obj.stats.fills,
            }
            row["engine_over_raw"] = row["engine_per_second"] / row["raw_per_second"]
            rows.append(row)
            print(f"{wname:45s} prefill raw {row['raw_per_second']:>10,.0f}/s  "
                  f"engine {row['engine_per_second']:>10,.0f}/s  "
                  f"ratio {row['engine_over_raw']:.2f}", flush=True)
        for transport in args.transports.split(","):
            for rep in range(args.repeats):
                for frame_ticks in (int(f) for f in args.frame_ticks.split(",")):
                    rows.append(replay_row(wname, factory, transport, rep, frame_ticks))
    meta = {"machine": platform.node(), "cpu_count": __import__("os").cpu_count(),
            "python": platform.python_version(), "date": datetime.now(UTC).isoformat(),
            "strategy": "sma-cross(10,50)", "time": time.time()}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print("\nmedians over repeats")
    print("| workload | transport | runs | raw ticks/s | engine ticks/s | engine/raw "
          "| engine ticks per CPU s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["workload"], r["transport"]), []).append(r)
    summary = []
    for (w, t), rs in groups.items():
        raw = statistics.median(r["raw_per_second"] for r in rs)
        eng = statistics.median(r["engine_per_second"] for r in rs)
        ratio = statistics.median(r["engine_over_raw"] for r in rs)
        cpu = statistics.median(r["engine_ticks_per_cpu_second"] for r in rs)
        summary.append({"workload": w, "transport": t, "runs": len(rs),
                        "raw_per_second": raw, "engine_per_second": eng, "engine_over_raw": ratio,
                        "engine_ticks_per_cpu_second": cpu})
        print(f"| {w} | {t} | {len(rs)} | {raw:,.0f} | {eng:,.0f} | {ratio:.2f} | {cpu:,.0f} |")
    args.json.write_text(json.dumps({"meta": meta, "rows": rows, "medians": summary}, indent=2))


if __name__ == "__main__":
    main()
