"""Pool the rounds of several `between_ticks.py` runs: the SPY and 10 x 1,000 ratios are
quoted as medians over rounds, because the host's replay speed moves between rounds.

Per round, a row's ticks/s is divided by the same round's replay without options of its
workload (runs of `--repeat N` interleave their rounds, so round i of every row ran at the
same moment). Rows of the same name are pooled over the files: median and range of the
ratio, how many rounds met the ratio goal (0.9 for SPY, 0.8 for 10 x 1,000) and, for SPY,
how many met it with at least 100,000 repricings too; median and range of the repricings;
the range of the files' tick -> values p50 and p99; and the longest wait for a newer spot
of each file's median run (a file keeps that run's latencies and waits only). Run as
`between_ticks.py --pool FILE...`.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

#: the ratio to the replay without options each workload's rows aim at
GOALS = {"10x1,000": 0.8, "": 0.9}
#: the repricings per replay a SPY row aims at beside its ratio
SPY_REPRICINGS_GOAL = 100_000


def _goal(row: str) -> float:
    return next(g for prefix, g in GOALS.items() if row.startswith(prefix))


def _span(xs: list[float]) -> str:
    return f"{min(xs):,.0f}-{max(xs):,.0f}" if xs else "–"


def pooled_rounds(files: list[Path]) -> dict[str, dict[str, list[float]]]:
    """Per row name: every round's ratio and repricings, and each file's longest wait."""
    pooled: dict[str, dict[str, list[float]]] = {}
    for path in files:
        rows: list[dict[str, Any]] = json.loads(path.read_text())["rows"]
        bases = {r["workload"]: r["ticks_per_second_runs"] for r in rows
                 if r.get("repricings") is None}
        for r in rows:
            if r.get("repricings") is None or r["workload"] not in bases:
                continue
            p = pooled.setdefault(r["row"], {"ratio": [], "repricings": [], "wait": [],
                                             "p50": [], "p99": [], "both": []})
            base = bases[r["workload"]]
            p["ratio"] += [a / b for a, b in zip(r["ticks_per_second_runs"], base, strict=True)]
            p["repricings"] += [x for x in r["repricings_runs"] if x is not None]
            goal = _goal(r["row"])
            p["both"] += [float(a / b >= goal and (n or 0) >= SPY_REPRICINGS_GOAL)
                          for a, b, n in zip(r["ticks_per_second_runs"], base,
                                             r["repricings_runs"], strict=True)]
            for q in ("p50", "p99"):
                if r.get(f"latency_us_{q}") is not None:
                    p[q].append(r[f"latency_us_{q}"])
            if r.get("max_newer_spot_wait_ms") is not None:
                p["wait"].append(r["max_newer_spot_wait_ms"])
    return pooled


def pooled_table(files: list[Path]) -> str:
    """A markdown table of the pooled rounds (one line per row name)."""
    lines = ["| row (files " + ", ".join(f.stem for f in files) + ") | rounds | "
             "ratio median [range] | ratio goal met | SPY: with >= 100k repricings | "
             "repricings median [range] | p50 µs | p99 µs | longest newer-spot wait per "
             "file, data ms |", "|---|---:|---|---:|---:|---|---|---|---|"]
    for row, p in pooled_rounds(files).items():
        ratio, reps, goal = p["ratio"], p["repricings"], _goal(row)
        met = sum(x >= goal for x in ratio)
        reprice = (f"{statistics.median(reps):,.0f} [{min(reps):,.0f}-{max(reps):,.0f}]"
                   if reps else "–")
        both = ("–" if row.startswith("10x1,000")
                else f"{int(sum(p['both']))}/{len(p['both'])}")
        lines.append(f"| {row} | {len(ratio)} | {statistics.median(ratio):.2f} "
                     f"[{min(ratio):.2f}-{max(ratio):.2f}] | {met}/{len(ratio)} (>= {goal}) | "
                     f"{both} | {reprice} | {_span(p['p50'])} | {_span(p['p99'])} | "
                     + ", ".join(f"{w:.1f}" for w in p["wait"]) + " |")
    return "\n".join(lines)
