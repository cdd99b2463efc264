#!/usr/bin/env python3
"""Command line of the engine: parse, wire, run. No logic of its own (see engine/commands/)."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

COMMANDS: dict[str, str] = {
    "replay": "backtest from files or the built-in synthetic market",
    "evolve": "evolve GP trading strategies over many stocks and days",
    "price": "reprice an option chain on the GPU and solve implied vols",
    "live": "the paper-trading daemon: ZeroMQ ticks in, journaled orders and fills out",
    "feed": "publish files or the synthetic market on a ZeroMQ endpoint",
    "ising": "2D/3D Ising Metropolis on the GPU: observables, Binder cumulants, Tc",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="run_engine.py", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
        if only is None or only == name:
            importlib.import_module(f"engine.commands.{name}").add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    wanted = next((a for a in argv if a in COMMANDS), None)
    args = build_parser(wanted).parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr,
    )
    # numba's CUDA driver logs every allocation at INFO: keep the summary readable
    logging.getLogger("numba").setLevel(logging.WARNING)
    from engine.errors import UserError
    from gpu.device import DeviceUnavailable

    module = importlib.import_module(f"engine.commands.{args.command}")
    try:
        results: dict[str, Any] = module.run(args)
    except (UserError, DeviceUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
