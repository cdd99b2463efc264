"""Tick path cost: validation and the engine's per-tick work, without sockets.

Encodes synthetic ticks once (the frames the subscriber hands over), then times, per
tick, `Validator.validate_many` alone and `Engine.consume` (validation + bar update +
bar events with sma-cross), in batches of the subscriber's size. Median of `--rounds`.
The socket side is `replay_throughput.py`'s; this isolates what the engine adds to it.
Times are this process's CPU time (`time.process_time`): on a machine whose cores other
work shares, it moves far less than wall time, and it is what the engine takes from them.

    python benchmarks/tick_path.py [--ticks 300000] [--symbols 100] [--rounds 5] [--json P]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.config import EngineConfig  # noqa: E402
from engine.core import Engine  # noqa: E402
from feeds.synthetic import SyntheticMarket  # noqa: E402
from feeds.validation import Validator  # noqa: E402
from feeds.wire_encode import ChunkEncoder  # noqa: E402
from strategies.sma_cross import SmaCross  # noqa: E402

BATCH = 8192  # the subscriber drains at most this many messages a batch


def frames_of(ticks: int, symbols: int) -> tuple[list[str], list[tuple[bytes, bytes]]]:
    """The [topic, payload] pairs a publisher sends for the synthetic market."""
    src = SyntheticMarket(n_symbols=symbols, n_ticks=ticks, seed=7)
    enc = ChunkEncoder(list(src.symbols), 0)
    out: list[tuple[bytes, bytes]] = []
    for chunk in src.chunks():
        payloads, offsets = enc.encode(chunk)
        bounds = offsets.tolist()
        for kind, sym, a, b in zip(chunk["kind"].tolist(), chunk["sym"].tolist(), bounds,
                                   bounds[1:], strict=False):
            out.append((enc.topics[kind][sym], payloads[a:b]))
    return list(src.symbols), out


def time_validator(frames: list[tuple[bytes, bytes]]) -> float:
    v = Validator()
    t0 = time.process_time()
    for i in range(0, len(frames), BATCH):
        v.validate_many(frames[i:i + BATCH])
    return time.process_time() - t0


def time_engine(symbols: list[str], frames: list[tuple[bytes, bytes]]) -> float:
    v = Validator()
    eng = Engine(list(symbols), SmaCross(), EngineConfig())

    async def run() -> float:
        t0 = time.process_time()
        for i in range(0, len(frames), BATCH):
            await eng.consume(frames[i:i + BATCH], v)
        return time.process_time() - t0

    return asyncio.run(run())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=300_000)
    ap.add_argument("--symbols", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    symbols, frames = frames_of(args.ticks, args.symbols)
    n = len(frames)
    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        tv = time_validator(frames)
        te = time_engine(symbols, frames)
        rows.append({"round": r, "validate_ns_per_tick": tv / n * 1e9,
                     "consume_ns_per_tick": te / n * 1e9})
        print(f"round {r}: validate {tv / n * 1e9:6.0f} ns/tick   "
              f"consume (validate + engine) {te / n * 1e9:6.0f} ns/tick", flush=True)
    med = {k: statistics.median(row[k] for row in rows)
           for k in ("validate_ns_per_tick", "consume_ns_per_tick")}
    print(f"median: validate {med['validate_ns_per_tick']:.0f} ns/tick, consume "
          f"{med['consume_ns_per_tick']:.0f} ns/tick ({n:,} frames, {args.symbols} symbols)")
    if args.json is not None:
        meta = {"machine": platform.node(), "cpu_count": __import__("os").cpu_count(),
                "python": platform.python_version(), "date": datetime.now(UTC).isoformat(),
                "frames": n, "symbols": args.symbols}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": meta, "rows": rows, "medians": med}, indent=2))


if __name__ == "__main__":
    main()
