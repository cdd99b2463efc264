"""The LEAN reader alone: the feed process's share of a LEAN replay (issue 27, goal 1).

Reads the LEAN SPY + BAC trades of the shared data (2,461,080 ticks, 5 days) through
`feeds.sources.open_sources`, as the replay's feed does, and times it in CPU and wall
seconds, split into reading (unzip, parse, merge: `Source.chunks`) and encoding the batch
frames the replay sends (`feeds.trade_batch.encode_batches`, 4,096 trades a frame). Each
run is a fresh process after one untimed read (compiled code loaded, files in the page
cache). `--roots A B` runs each code tree (e.g. the commit before a change and after it)
alternately, round by round, so a loaded machine moves both alike.

    python benchmarks/lean_reader.py [--roots DIR ...] [--rounds 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def measure(frame_ticks: int) -> dict[str, Any]:
    from feeds.datadir import data_dir
    from feeds.records import KIND_TRADE
    from feeds.sources import open_sources
    from feeds.trade_batch import encode_batches, warm_up
    from feeds.wire_encode import ChunkEncoder

    warm_up()
    lean = data_dir() / "lean_ticks_2013-10" / "equity" / "usa" / "tick"
    paths = [str(lean / "spy"), str(lean / "bac")]

    def once() -> dict[str, float]:
        src = open_sources(paths, kinds=("trade",))
        encoder = ChunkEncoder(list(src.symbols), 86_400 * 10**9)
        symbols = list(src.symbols)
        read_cpu = encode_cpu = 0.0
        n = 0
        wall0 = time.perf_counter()
        chunks = src.chunks()
        while True:
            t0 = time.process_time()
            chunk = next(chunks, None)
            t1 = time.process_time()
            read_cpu += t1 - t0
            if chunk is None:
                break
            encode_batches(symbols, chunk["sym"], chunk["ts"], chunk["f0"], chunk["f1"],
                           encoder.counters[KIND_TRADE], frame_ticks)
            encode_cpu += time.process_time() - t1
            n += len(chunk)
        return {"ticks": n, "wall_s": time.perf_counter() - wall0, "read_cpu_s": read_cpu,
                "encode_cpu_s": encode_cpu}

    once()  # untimed: compiled code loaded, the zips in the page cache
    return once()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--roots", type=Path, nargs="+", default=[ROOT])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--frame-ticks", type=int, default=4096)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:  # one run of the tree `--worker`, the result on stdout
        sys.path.insert(0, str(args.worker))
        print(json.dumps(measure(args.frame_ticks)))
        return 0
    sys.path.insert(0, str(ROOT))  # this tree's helpers (a worker runs another tree)
    from benchmarks.common import alternate_trees, write_json
    from feeds.datadir import data_dir

    # every tree reads the same files, wherever it sits
    env = {**os.environ, "TRADING_DATA_DIR": str(data_dir())}
    runs: dict[str, list[dict[str, Any]]] = {str(r): [] for r in args.roots}
    for k, root, res in alternate_trees(__file__, args.roots, args.rounds,
                                        ["--frame-ticks", str(args.frame_ticks)], env):
        runs[str(root)].append(res)
        print(f"round {k + 1} {root}: {res['ticks']:,} ticks, read {res['read_cpu_s']:.3f}"
              f" CPU-s, encode {res['encode_cpu_s']:.3f} CPU-s, wall {res['wall_s']:.3f} s",
              flush=True)
    summary = {}
    for tree, rs in runs.items():
        summary[tree] = {k: statistics.median(r[k] for r in rs)
                         for k in ("read_cpu_s", "encode_cpu_s", "wall_s")}
        s = summary[tree]
        print(f"{tree}: medians of {len(rs)}: read {s['read_cpu_s']:.3f} CPU-s, encode "
              f"{s['encode_cpu_s']:.3f} CPU-s, wall {s['wall_s']:.3f} s "
              f"({rs[0]['ticks'] / s['wall_s']:,.0f} ticks/s read and encoded)")
    if args.json:
        write_json(args.json, {"args": vars(args), "runs": runs, "summary": summary},
                   default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
