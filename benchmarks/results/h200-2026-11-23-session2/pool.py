"""Pool the SPY rows of this folder's between_ticks runs by request protocol.

Each round's ticks/s of a row is divided by the same round's replay without options (the
machine's speed moved by +-20 % between rounds, so single medians mislead), and the
rounds of rows with the same protocol are pooled. Row names changed during the session,
so each run's rows are classed by name and run number (see `protocol`).

    python benchmarks/results/h200-2026-11-23-session2/pool.py
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = {3: "between_ticks_run3.json", 4: "between_ticks_run4.json",
        5: "between_ticks_run5.json", 6: "between_ticks_run6.json", 7: "between_ticks_run7.json",
        9: "between_ticks_run9.json", 10: "between_ticks_run10.json",
        11: "between_ticks_run11.json", 12: "between_ticks_run12.json",
        13: "between_ticks_run13.json", 14: "between_ticks_run14.json"}


def protocol(run: int, name: str) -> str | None:
    """The request protocol and launch path of a SPY row, or None (not pooled). From run 13
    on, a held tick also collects a finished repricing (before, only a written request or
    a poll did, and a result replaced before either came was never seen by the engine)."""
    if name.startswith("10x") or name == "no group" or "spaced" in name:
        return None
    late = ", held ticks collect" if run >= 13 else ""
    if "default worker" in name:  # the default changed during the session
        if run == 3:
            return "every tick, ctypes"
        return ("on demand + every 4th held tick" + late if run in (12, 13)
                else "only on demand")
    if "only on demand" in name:
        return "only on demand" + late
    if "every 4th" in name:
        return "on demand + every 4th held tick" + late
    if "+ 2 launches in flight" in name:
        return "before: numba launcher, rows regathered, every tick"
    if "2 in flight, + ctypes" in name:
        return "every tick, ctypes"
    if name.endswith("+ requests on demand"):
        return "only on demand"
    if "rows in place" in name:
        return "rows in place, numba launcher, every tick"
    return None


def main() -> None:
    pool: dict[str, list[tuple[float, int, int, float, float]]] = {}
    for run, name in RUNS.items():
        rows = json.loads((HERE / name).read_text())["rows"]
        base = next(r for r in rows if r["row"] == "no group")["ticks_per_second_runs"]
        for r in rows:
            p = protocol(run, r["row"])
            if p is None:
                continue
            for i, (tps, rep) in enumerate(zip(r["ticks_per_second_runs"],
                                               r["repricings_runs"], strict=True)):
                pool.setdefault(p, []).append((tps / base[i], rep, run,
                                               r["latency_us_p50"], r["latency_us_p99"]))
    print("| protocol | rounds | ratio median [range] | repricings median [range] | "
          "p50 µs (row medians) | p99 µs (row medians) |")
    print("|---|---:|---|---|---|---|")
    for p, v in pool.items():
        ratios = [x[0] for x in v]
        reps = [x[1] for x in v]
        p50 = sorted({round(x[3]) for x in v})
        p99 = sorted({round(x[4]) for x in v})
        print(f"| {p} | {len(v)} | {statistics.median(ratios):.2f} "
              f"[{min(ratios):.2f}-{max(ratios):.2f}] | {statistics.median(reps):,.0f} "
              f"[{min(reps):,}-{max(reps):,}] | {p50[0]}-{p50[-1]} | {p99[0]}-{p99[-1]} |")


if __name__ == "__main__":
    main()
