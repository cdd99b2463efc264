"""`journal`: read a live daemon's journal without SQL, and reset its risk kill switch.

Orders, fills, positions, cash, risk events and stream positions.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.live.journal import Journal, JournalError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--journal", required=True, help="SQLite journal of `live`")
    p.add_argument("--reset-kill-switch", action="store_true",
                   help="allow entries again after the daily-loss kill switch (a running "
                        "daemon picks it up within a second)")
    p.add_argument("--drop-snapshot", action="store_true",
                   help="delete the journal's snapshot (one this version cannot read, such "
                        "as the old pickle format): the daemon then restarts from the "
                        "journaled fills with cold indicators; refused while a daemon runs")


def run(args: argparse.Namespace) -> dict[str, Any]:
    try:
        if args.reset_kill_switch or args.drop_snapshot:
            if not Path(args.journal).is_file():  # never create a journal by mistyping one
                raise UserError(f"--journal {args.journal}: no such journal")
            # the kill switch is reset under a running daemon (it reads it every second);
            # a snapshot is dropped only with the daemon's lock
            j = Journal(args.journal, lock=args.drop_snapshot)
            if args.reset_kill_switch:
                j.set_meta("kill_switch", "0")
            if args.drop_snapshot:
                dropped = j.drop_snapshot()
                print(f"  snapshot {'dropped' if dropped else 'absent'}", file=sys.stderr)
        else:
            j = Journal(args.journal, lock=False, readonly=True)
        data = j.export()
        j.close()
    except JournalError as exc:
        raise UserError(str(exc)) from None
    print(f"journal {args.journal}: {len(data['orders'])} orders, {len(data['fills'])} fills, "
          f"{len(data['risk_events'])} risk events, {len(data['streams'])} streams",
          file=sys.stderr)
    # `--json /dev/stdout | jq`: stdout is the JSON's alone, the table goes to stderr
    table = sys.stderr if _is_stdout(args.json) else sys.stdout
    for sym, pos in sorted(data["positions"].items()):
        print(f"  {sym:<12} position {pos:>12g}  cash flow {data['cash'].get(sym, 0.0):>14,.2f}",
              file=table)
    counts: dict[str, int] = {}
    for e in data["risk_events"]:
        counts[e["limit"]] = counts.get(e["limit"], 0) + 1
    if counts:
        print("  risk events: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
              file=table)
    for v in data.get("rule_versions", []):  # the GP rules the daemon traded, in order
        print(f"  rule version {v['version']} ({v.get('origin', '')}): trained "
              f"{v['train_start']}..{v['train_end']}, seed {v['seed']}, fitness "
              f"{v['fitness']:+.4f}", file=table)
    states: dict[str, int] = {}
    for st in data.get("order_states", []):  # limit, stop and bracket orders' lives
        states[st["state"]] = states.get(st["state"], 0) + 1
    if states:
        print("  order states: " + ", ".join(f"{k} {v}" for k, v in sorted(states.items())),
              file=table)
    if args.reset_kill_switch:
        print("  kill switch reset", file=sys.stderr)
    return data


def _is_stdout(path: Path | None) -> bool:
    """Whether `path` is this process's standard output (/dev/stdout, /proc/self/fd/1)."""
    if path is None:
        return False
    try:
        a, b = os.stat(path), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
