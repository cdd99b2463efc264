"""Tick path cost: validation and the engine's per-tick work, without sockets.

Encodes synthetic ticks once (the frames the subscriber hands over), then times, per
tick, `Validator.validate_many` alone and `Engine.consume` (validation + bar update +
bar events with sma-cross), in batches of the subscriber's size. Median of `--rounds`.
The socket side is `replay_throughput.py`'s; this isolates what the engine adds to it.
Times are this process's CPU time (`time.process_time`): on a machine whose cores other
work shares, it moves far less than wall time, and it is what the engine takes from them.
`--base TREE` times another checkout's validator and engine too, alternating with this
tree's in every round (a before/after that shares the machine's moods), and checks that
both give the same orders, fills and equity.

    python benchmarks/tick_path.py [--ticks 300000] [--symbols 100] [--rounds 5]
        [--base PATH] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import engine.trading.core  # noqa: E402
import feeds.validation  # noqa: E402
from benchmarks.common import write_json  # noqa: E402
from engine.settings.config import EngineConfig  # noqa: E402
from feeds.synthetic import SyntheticMarket  # noqa: E402
from feeds.wire_encode import ChunkEncoder  # noqa: E402
from strategies.sma_cross import SmaCross  # noqa: E402

BATCH = 8192  # the subscriber drains at most this many messages a batch
Frames = list[tuple[bytes, bytes]]


def frames_of(ticks: int, symbols: int) -> tuple[list[str], Frames]:
    """The [topic, payload] pairs a publisher sends for the synthetic market."""
    src = SyntheticMarket(n_symbols=symbols, n_ticks=ticks, seed=7)
    enc = ChunkEncoder(list(src.symbols), 0)
    out: Frames = []
    for chunk in src.chunks():
        payloads, offsets = enc.encode(chunk)
        bounds = offsets.tolist()
        for kind, sym, a, b in zip(chunk["kind"].tolist(), chunk["sym"].tolist(), bounds,
                                   bounds[1:], strict=False):
            out.append((enc.topics[kind][sym], payloads[a:b]))
    return list(src.symbols), out


def time_validator(val: ModuleType, frames: Frames) -> float:
    """CPU ns per frame of `validate_many`."""
    v = val.Validator()
    t0 = time.process_time()
    for i in range(0, len(frames), BATCH):
        v.validate_many(frames[i:i + BATCH])
    return (time.process_time() - t0) / len(frames) * 1e9


def time_engine(core: ModuleType, val: ModuleType, symbols: list[str],
                frames: Frames) -> tuple[float, tuple[Any, ...]]:
    """CPU ns per frame of `Engine.consume`, and what the engine traded."""
    v = val.Validator()
    eng = core.Engine(list(symbols), SmaCross(), EngineConfig())

    async def run() -> float:
        t0 = time.process_time()
        for i in range(0, len(frames), BATCH):
            await eng.consume(frames[i:i + BATCH], v)
        return time.process_time() - t0

    seconds = asyncio.run(run())
    return seconds / len(frames) * 1e9, (eng.stats.orders, eng.stats.fills, eng.broker.equity())


def load_tree(base: Path) -> tuple[ModuleType, ModuleType]:
    """Another checkout's validator and engine core, beside this tree's."""
    mods = []
    for name, rel in (("base_validation", "feeds/validation.py"),
                      ("base_core", "engine/trading/core.py")):
        spec = importlib.util.spec_from_file_location(name, base / rel)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # dataclasses look their module up
        spec.loader.exec_module(mod)
        mods.append(mod)
    return mods[0], mods[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=300_000)
    ap.add_argument("--symbols", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--base", type=Path, help="another checkout, timed alternately")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    symbols, frames = frames_of(args.ticks, args.symbols)
    trees = {"this": (feeds.validation, engine.trading.core)}
    if args.base is not None:
        trees = {"base": load_tree(args.base), **trees}
    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        row: dict[str, Any] = {"round": r}
        traded = set()
        for name, (val, core) in trees.items():
            row[f"validate_ns_{name}"] = time_validator(val, frames)
            row[f"consume_ns_{name}"], result = time_engine(core, val, symbols, frames)
            traded.add(result)
        assert len(traded) == 1, f"the trees trade differently: {traded}"
        rows.append(row)
        print(f"round {r}: " + ", ".join(f"{k} {v:.0f}" for k, v in row.items() if k != "round"),
              flush=True)
    med = {k: statistics.median(row[k] for row in rows) for k in rows[0] if k != "round"}
    print("median CPU ns per tick: " + ", ".join(f"{k} {v:.0f}" for k, v in med.items())
          + f" ({len(frames):,} frames, {args.symbols} symbols)")
    if args.json is not None:
        meta = {"machine": platform.node(), "cpu_count": __import__("os").cpu_count(),
                "python": platform.python_version(), "date": datetime.now(UTC).isoformat(),
                "frames": len(frames), "symbols": args.symbols, "batch": BATCH,
                "clock": "time.process_time", "base": str(args.base) if args.base else None}
        write_json(args.json, {"meta": meta, "rows": rows, "medians": med})


if __name__ == "__main__":
    main()
