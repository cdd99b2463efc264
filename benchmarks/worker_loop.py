"""The option worker alone: repricings per second it sustains and where its loop's time goes.

No feed and no engine: this process plays the engine's side (`WorkerClient`), asking for a
new spot of the 102-option SPY group (examples/spy_options.toml) on every loop turn, as
fast as Python goes (about the rate of the 390k ticks/s SPY replay), and polling for
results every 16 requests. The worker runs with OPTION_WORKER_TIMING, so each row also
says how long each step of the worker's loop took (launch with work, launch with nothing
to do, collect). One row per variant, each the same seconds of requests:

- numba's launcher for bound launches, rows regathered every launch, a request written on
  every tick (before);
- + the rows kept in place (only the spot column written: OPTION_BATCH_IN_PLACE);
- + the driver called through ctypes (GPU_RAW_LAUNCH), for launches, records and queries;
- + requests on demand (OPTION_REQUEST_EVERY=0: a tick writes a request only while the
  worker wants one);
- the last with 1, 3 and 4 launches in flight.

    python benchmarks/worker_loop.py [--seconds S] [--json PATH] [--device cuda|cpu]

Prints a table, writes JSON (machine and date included).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from benchmarks.common import gpu_name, log, scoped_env, write_json  # noqa: E402
from engine.options.worker_client import WorkerClient  # noqa: E402
from engine.settings.config import load_config  # noqa: E402

VARIANTS: list[tuple[str, dict[str, str]]] = [
    ("numba launcher, rows regathered, a request every tick (before)",
     {"GPU_RAW_LAUNCH": "0", "OPTION_BATCH_IN_PLACE": "0", "OPTION_WORKER_SLOTS": "2",
      "OPTION_REQUEST_EVERY": "1"}),
    ("+ rows in place", {"GPU_RAW_LAUNCH": "0", "OPTION_BATCH_IN_PLACE": "1",
                         "OPTION_WORKER_SLOTS": "2", "OPTION_REQUEST_EVERY": "1"}),
    ("+ ctypes driver calls", {"GPU_RAW_LAUNCH": "1", "OPTION_BATCH_IN_PLACE": "1",
                               "OPTION_WORKER_SLOTS": "2", "OPTION_REQUEST_EVERY": "1"}),
    ("+ requests on demand", {"GPU_RAW_LAUNCH": "1", "OPTION_BATCH_IN_PLACE": "1",
                              "OPTION_WORKER_SLOTS": "2", "OPTION_REQUEST_EVERY": "0"}),
    *((f"+ ctypes, {k} in flight", {"GPU_RAW_LAUNCH": "1", "OPTION_BATCH_IN_PLACE": "1",
                                    "OPTION_WORKER_SLOTS": str(k)}) for k in (1, 3, 4)),
]


def drive(client: WorkerClient, seconds: float) -> dict[str, Any]:
    """Requests for `seconds`: a random-walk spot, one per turn, a poll every 16."""
    rng = np.random.default_rng(7)
    steps = 150.0 + np.cumsum(rng.normal(0.0, 0.01, 1 << 20))
    ts0 = 1_380_807_000_000_000_000  # 2013-10-03 13:30 UTC, a trading day's morning
    requests = 0
    start = time.perf_counter()
    end = start + seconds
    before = client.stats()["worker_repricings"]
    while True:
        for _ in range(16):
            client.on_spot("SPY", float(steps[requests & 0xFFFFF]),
                                      ts0 + requests * 10_000)
            requests += 1
        client.poll()
        if time.perf_counter() >= end:
            break
    wall = time.perf_counter() - start
    stats = client.stats()
    lat = np.asarray(stats["latencies_ns"], dtype=np.float64) / 1e3
    return {"requests": requests, "requests_per_s": requests / wall, "seconds": wall,
            "worker_repricings": stats["worker_repricings"] - before,
            "worker_repricings_per_s": (stats["worker_repricings"] - before) / wall,
            "collected": stats["repricings"],
            "latency_us_p50": float(np.median(lat)) if lat.size else None,
            "latency_us_p99": float(np.percentile(lat, 99)) if lat.size else None}


def run_variant(name: str, env: dict[str, str], device: str, seconds: float,
                tmp: Path) -> dict[str, Any]:
    cfg = load_config(ROOT / "examples" / "spy_options.toml").options[0]
    timing = tmp / f"timing{len(list(tmp.iterdir()))}"
    with scoped_env({**env, "OPTION_WORKER_TIMING": str(timing)}):
        client = WorkerClient([cfg], device, "America/New_York")
        try:
            drive(client, 0.3)  # first launches, warm caches: not counted
            row = drive(client, seconds)
        finally:
            client.close()
    files = glob.glob(f"{timing}.*")
    if files:
        steps = json.loads(Path(files[0]).read_text())
        row["worker_steps_us_each"] = steps["us_each"]
        row["worker_steps_counts"] = steps["counts"]
        row["worker_busy_share"] = sum(steps["ns"].values()) / steps["wall_ns"]
    row.update(variant=name, env=env)
    log(f"  {name}: {row['worker_repricings_per_s']:,.0f} repricings/s "
        f"p50 {row['latency_us_p50']} us; steps {row.get('worker_steps_us_each')}")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.seconds <= 0:
        ap.error("--seconds must be > 0")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, env in VARIANTS:
            rows.append(run_variant(name, env, args.device, args.seconds, Path(tmp)))
    print("| variant | repricings/s (worker) | requests/s | p50 µs | p99 µs | "
          "launch µs | collect µs |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        each = r.get("worker_steps_us_each", {})
        print(f"| {r['variant']} | {r['worker_repricings_per_s']:,.0f} | "
              f"{r['requests_per_s']:,.0f} | {r['latency_us_p50'] or 0:.1f} | "
              f"{r['latency_us_p99'] or 0:.1f} | {each.get('launch', 0):.1f} | "
              f"{each.get('collect', 0):.1f} |")
    meta = {"machine": platform.node(), "cpu_count": os.cpu_count(),
            "gpu": gpu_name() if args.device == "cuda" else None,
            "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "device": args.device, "seconds": args.seconds}
    if args.json:
        write_json(args.json, {"meta": meta, "rows": rows})


if __name__ == "__main__":
    main()
