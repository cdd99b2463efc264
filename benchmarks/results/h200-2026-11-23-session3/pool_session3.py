"""Pool the SPY rows of this folder's between_ticks runs by request protocol and placement.

Each round's ticks/s of a row is divided by the same round's replay without options (pinned
rows by the pinned replay without options), and rounds of the same protocol are pooled. Runs
5, 7, 8, 17, 18 and 19 also recorded the engine process's CPU time per tick; its ratio (no group's
CPU time per tick over the row's) is pooled where present. From run 8 on the default worker
requests on every tick.

    python benchmarks/results/h200-2026-11-23-session3/pool_session3.py
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = {2: "between_ticks_run2_placement.json", 4: "between_ticks_run4_placement.json",
        5: "between_ticks_run5.json", 7: "between_ticks_run7.json",
        8: "between_ticks_run8.json", 17: "between_ticks_run17.json",
        18: "between_ticks_run18.json", 19: "between_ticks_run19.json"}


def protocol(run: int, name: str) -> str | None:
    """The request protocol of a SPY row, or None (a replay without options, 10 x 1,000).
    The default worker requested only on demand up to run 7 and on every tick from run 8;
    from run 18 that request is written inline in the tick hook (the final code)."""
    if name.startswith("10x") or name.startswith("no group"):
        return None
    place = " [pinned]" if name.endswith("[pinned]") else ""
    if "only on demand" in name:
        return "only on demand" + place
    if "every 4th" in name:
        return "on demand + every 4th held tick" + place
    if "2 in flight, + ctypes" in name:
        return "every tick" + place
    if "default worker" in name:
        if run >= 18:  # the request on every tick written inline (the final code)
            spaced = name.partition("launches spaced ")[2]
            return "every tick, written inline" + (f", spaced {spaced}" if spaced else "")
        return ("every tick" if run >= 8 else "only on demand") + place
    return None


def _range(xs: list[float], fmt: str) -> str:
    return f"{format(statistics.median(xs), fmt)} [{format(min(xs), fmt)}-{format(max(xs), fmt)}]"


def main() -> None:
    pool: dict[str, dict[str, list[float]]] = {}
    for run, name in RUNS.items():
        rows = json.loads((HERE / name).read_text())["rows"]
        base = {r["workload"]: r for r in rows if r.get("repricings") is None}
        for r in rows:
            p = protocol(run, r["row"])
            if p is None:
                continue
            b = base[r["workload"]]
            entry = pool.setdefault(p, {"ratio": [], "cpu": [], "rep": [], "p50": [],
                                        "p99": []})
            entry["ratio"] += [x / y for x, y in zip(r["ticks_per_second_runs"],
                                                     b["ticks_per_second_runs"], strict=True)]
            entry["cpu"] += [y / x for x, y in zip(r.get("engine_cpu_us_per_tick_runs", []),
                                                   b.get("engine_cpu_us_per_tick_runs", []),
                                                   strict=True)]
            entry["rep"] += [float(x) for x in r["repricings_runs"]]
            entry["p50"].append(r["latency_us_p50"])
            entry["p99"].append(r["latency_us_p99"])
    print("| protocol | rounds | ratio median [range] | engine CPU ratio (runs 5-19) | "
          "repricings median [range] | p50 µs (row medians) | p99 µs (row medians) |")
    print("|---|---:|---|---|---|---|---|")
    for p, e in pool.items():
        cpu = _range(e["cpu"], ".2f") if e["cpu"] else "–"
        print(f"| {p} | {len(e['ratio'])} | {_range(e['ratio'], '.2f')} | {cpu} | "
              f"{_range(e['rep'], ',.0f')} | {min(e['p50']):.0f}-{max(e['p50']):.0f} | "
              f"{min(e['p99']):.0f}-{max(e['p99']):.0f} |")


if __name__ == "__main__":
    main()
