"""Replay throughput: the engine's ticks/s against the raw transport limit, side by side.

Workloads: 1,000,000 synthetic ticks over 100 symbols, and the real SPY + BAC trades of
lean_ticks_2013-10 (2.46 M ticks). For each transport, in the same run: the raw limit
(publish -> receive -> decode, no engine) and the full engine with the sma-cross strategy.
Runs here (no GPU needed). Prints a table and writes JSON.

    python benchmarks/replay_throughput.py [--transports ipc,inproc] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.config import EngineConfig  # noqa: E402
from engine.replay import raw_limit_async, replay_async  # noqa: E402
from feeds.datadir import data_dir  # noqa: E402
from feeds.sources import open_sources  # noqa: E402
from feeds.synthetic import SyntheticMarket  # noqa: E402
from strategies.sma_cross import SmaCross  # noqa: E402


def workloads(ticks: int, symbols: int) -> dict[str, functools.partial]:
    w = {f"synthetic {ticks:,} ticks x {symbols} symbols":
         functools.partial(SyntheticMarket, n_symbols=symbols, n_ticks=ticks, seed=7)}
    lean = data_dir() / "lean_ticks_2013-10" / "equity" / "usa" / "tick"
    if lean.is_dir():
        w["real SPY + BAC trades (LEAN, 5 days)"] = functools.partial(
            open_sources, [str(lean / "spy"), str(lean / "bac")], kinds=("trade",))
    return w


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transports", default="ipc,inproc")
    ap.add_argument("--ticks", type=int, default=1_000_000)
    ap.add_argument("--symbols", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", type=Path, default=Path("benchmarks/out/replay_throughput.json"))
    args = ap.parse_args()
    rows = []
    for wname, factory in workloads(args.ticks, args.symbols).items():
        for transport in args.transports.split(","):
            for rep in range(args.repeats):
                n_raw, t_raw = asyncio.run(raw_limit_async(factory, transport))
                cfg = EngineConfig(transport=transport)  # type: ignore[arg-type]
                res = asyncio.run(replay_async(factory, SmaCross(), cfg))
                eng = res.engine.stats
                n_eng = eng.ticks + eng.quotes
                row = {
                    "workload": wname, "transport": transport, "repeat": rep,
                    "messages": n_raw, "raw_seconds": t_raw, "raw_per_second": n_raw / t_raw,
                    "engine_ticks": n_eng, "engine_seconds": res.wall_seconds,
                    "engine_per_second": n_eng / res.wall_seconds,
                    "bars": eng.bars, "orders": eng.orders, "fills": eng.fills,
                }
                row["engine_over_raw"] = row["engine_per_second"] / row["raw_per_second"]
                rows.append(row)
                print(f"{wname:45s} {transport:7s} raw {row['raw_per_second']:>10,.0f}/s  "
                      f"engine {row['engine_per_second']:>10,.0f}/s  "
                      f"ratio {row['engine_over_raw']:.2f}  ({n_eng:,} ticks, "
                      f"{eng.bars:,} bars, {eng.fills:,} fills)", flush=True)
    meta = {"machine": platform.node(), "cpu_count": __import__("os").cpu_count(),
            "python": platform.python_version(), "date": datetime.now(UTC).isoformat(),
            "strategy": "sma-cross(10,50)", "time": time.time()}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print("\n| workload | transport | raw msgs/s | engine ticks/s | engine/raw |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['workload']} | {r['transport']} | {r['raw_per_second']:,.0f} | "
              f"{r['engine_per_second']:,.0f} | {r['engine_over_raw']:.2f} |")


if __name__ == "__main__":
    main()
