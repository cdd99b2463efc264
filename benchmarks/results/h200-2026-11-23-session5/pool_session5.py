"""Pool the fifth session's between_ticks rounds (lanes solver, the default, against the
PCR solver, before): per round, a row's ticks/s over the same round's replay without
options; medians and ranges over every round, how many rounds met the ratio goal (0.9 for
SPY, 0.8 for 10 x 1,000), the repricings of every round, and the longest wait for a
newer spot of each file's median run (the JSON keeps that run's waits only).

    python benchmarks/results/h200-2026-11-23-session5/pool_session5.py > pooled.md
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: full-speed runs of the final code, in the order they ran
FILES = ("run1.json", "full_speed.json", "ten_6rounds.json")


def main() -> None:
    pooled: dict[str, dict[str, list[float]]] = {}
    for name in FILES:
        rows = json.loads((HERE / name).read_text())["rows"]
        bases = {r["workload"]: r["ticks_per_second_runs"] for r in rows
                 if r.get("repricings") is None}
        for r in rows:
            if r.get("repricings") is None or r["workload"] not in bases:
                continue
            p = pooled.setdefault(r["row"], {"ratio": [], "repricings": [], "wait": []})
            base = bases[r["workload"]]
            p["ratio"] += [a / b for a, b in zip(r["ticks_per_second_runs"], base, strict=True)]
            p["repricings"] += r["repricings_runs"]
            p["wait"].append(r["max_newer_spot_wait_ms"])
    print("| row (files " + ", ".join(f.removesuffix(".json") for f in FILES) + ") | rounds | "
          "ratio median [range] | ratio goal met | repricings median [range] | longest "
          "newer-spot wait per file, data ms |")
    print("|---|---:|---|---:|---|---|")
    for row, p in pooled.items():
        ratio, reps = p["ratio"], p["repricings"]
        goal = 0.8 if row.startswith("10x1,000") else 0.9
        met = sum(x >= goal for x in ratio)
        print(f"| {row} | {len(ratio)} | {statistics.median(ratio):.2f} "
              f"[{min(ratio):.2f}-{max(ratio):.2f}] | {met}/{len(ratio)} (>= {goal}) | "
              f"{statistics.median(reps):,.0f} [{min(reps):,.0f}-{max(reps):,.0f}] | "
              + ", ".join(f"{w:.1f}" for w in p["wait"]) + " |")


if __name__ == "__main__":
    main()
