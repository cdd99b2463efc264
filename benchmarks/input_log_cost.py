#!/usr/bin/env python3
"""What the daemon's input log costs its tick path: the daemon's own step (validation, the
engine with sma-cross, the risk gate, the journal transaction and publishing) over the
frames of the synthetic market, with `[live] log_input` on and off, alternating in every
round on one machine (its other work hits both alike). Real SQLite (WAL) and a real
orders socket; the frames are handed over in the daemon's step size, as after a receive.
Per tick: this process's CPU time (`time.process_time`) over the whole stream.

    python benchmarks/input_log_cost.py [--ticks 60000] [--symbols 20] [--rounds 3]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import zmq.asyncio  # noqa: E402

from benchmarks.common import write_json  # noqa: E402
from benchmarks.tick_path import frames_of  # noqa: E402
from engine.live.daemon import STEP, Daemon, open_sockets  # noqa: E402
from engine.live.journal import Journal  # noqa: E402
from engine.settings.config import EngineConfig  # noqa: E402
from engine.settings.live import LiveOptions  # noqa: E402
from strategies.sma_cross import SmaCross  # noqa: E402
from tests.live_procs import endpoints  # noqa: E402


def step_ns_per_tick(frames: list[Any], log_input: bool, folder: Path) -> float:
    cfg = EngineConfig(bar_seconds=60.0, live=LiveOptions(log_input=log_input))
    ctx = zmq.asyncio.Context()
    journal = Journal(folder / f"j-{log_input}-{time.monotonic_ns()}.db")
    ticks, orders = endpoints()
    sub, out = open_sockets(ctx, ticks, orders, cfg, [b""], None)
    daemon = Daemon(cfg=cfg, strategy=SmaCross(10, 50), journal=journal,
                    state=journal.load(), sub=sub, out=out, device="cpu", status_file=None,
                    max_seconds=0.0, ticks=ticks)

    async def go() -> float:
        t0 = time.process_time()
        for i in range(0, len(frames), STEP):
            await daemon._step(frames[i:i + STEP], time.perf_counter(), False)
        return time.process_time() - t0

    seconds = asyncio.run(go())
    daemon.close()
    sub.close()
    out.close()
    journal.close()
    ctx.destroy(linger=0)
    return seconds / len(frames) * 1e9


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--ticks", type=int, default=60_000)
    ap.add_argument("--symbols", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    _, pairs = frames_of(args.ticks, args.symbols)
    frames = [list(p) for p in pairs]
    rows: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="input-log-") as d:
        for r in range(args.rounds):
            for name in (("off", "on") if r % 2 == 0 else ("on", "off")):
                ns = step_ns_per_tick(frames, name == "on", Path(d))
                rows[name].append(ns)
                print(f"round {r + 1} log {name:<3} {ns:8.0f} ns/tick", flush=True)
    off, on = statistics.median(rows["off"]), statistics.median(rows["on"])
    print(f"median: off {off:.0f} ns/tick, on {on:.0f} ns/tick, cost {on / off - 1:+.1%}")
    if args.json:
        write_json(args.json, {"ticks": args.ticks, "symbols": args.symbols,
                               "ns_per_tick": rows, "median_ratio": on / off})
    return 0


if __name__ == "__main__":
    sys.exit(main())
