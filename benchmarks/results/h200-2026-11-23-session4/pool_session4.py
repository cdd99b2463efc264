"""Pool the fourth session's SPY rounds: per round, a row's ticks/s over the same round's
replay without options; medians and ranges over every round of the runs given, and how
many rounds met both goals at once (ratio >= 0.9 and >= 100,000 repricings).

    python benchmarks/results/h200-2026-11-23-session4/pool_session4.py > pooled.md
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: runs of the final code (run 1 had the hot loop keep each underlying's newest tick)
FINAL = ("run2.json", "run4.json")


def pooled(files: tuple[str, ...]) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {}
    for name in files:
        rows = json.loads((HERE / name).read_text())["rows"]
        base = next(r for r in rows if r["row"] == "no group")["ticks_per_second_runs"]
        for r in rows:
            if r.get("repricings") is None:
                continue
            p = out.setdefault(r["row"], {"ratio": [], "repricings": [], "p50": [], "p99": []})
            p["ratio"] += [a / b for a, b in zip(r["ticks_per_second_runs"], base, strict=True)]
            p["repricings"] += r["repricings_runs"]
            p["p50"].append(r["latency_us_p50"])
            p["p99"].append(r["latency_us_p99"])
    return out


def main() -> None:
    print("| SPY row (runs " + ", ".join(f.removesuffix(".json") for f in FINAL) + ") | rounds "
          "| ratio median [range] | repricings median [range] | both goals | p50 µs | p99 µs |")
    print("|---|---:|---|---|---:|---|---|")
    for row, p in pooled(FINAL).items():
        ratio, reps = p["ratio"], p["repricings"]
        both = sum(a >= 0.9 and n >= 100_000 for a, n in zip(ratio, reps, strict=True))
        print(f"| {row} | {len(ratio)} | {statistics.median(ratio):.2f} "
              f"[{min(ratio):.2f}-{max(ratio):.2f}] | {statistics.median(reps):,.0f} "
              f"[{min(reps):,.0f}-{max(reps):,.0f}] | {both}/{len(ratio)} | "
              f"{min(p['p50']):.0f}-{max(p['p50']):.0f} | "
              f"{min(p['p99']):.0f}-{max(p['p99']):.0f} |")


if __name__ == "__main__":
    main()
