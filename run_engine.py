#!/usr/bin/env python3
"""Command line of the engine: parse, wire, run. No logic of its own (see engine/commands/)."""
# (the module docstring is for developers; users read DESCRIPTION in --help)

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
    "journal": "export a live daemon's journal (orders, fills, positions, risk events)",
    "keys": "write CURVE key pairs for live --curve and feed --curve",
    "timeseries": "lag-dependent Hurst exponent and autocorrelations of tick or daily prices",
    "select": "least-correlated k of n strategies (exact search over all combinations)",
    "ising": "2D/3D Ising Metropolis on the GPU: observables, Binder cumulants, Tc",
}


DESCRIPTION = """\
An event-driven trading engine that backtests, paper-trades and prices options, using the GPU
(CUDA) where there is one and the CPU otherwise.

examples:
  python run_engine.py replay --data AAPL.csv --strategy sma-cross:10,50 --out out/
  python run_engine.py evolve --stocks 32 --generations 30 --out best.json
  python run_engine.py price --chain chain.csv --iv --plot smile.png
  python run_engine.py COMMAND --help     (the options of one command)
"""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows each option's default unless its help already names one (or it has none)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("default" not in text and action.default not in (None, False, argparse.SUPPRESS)
                and action.option_strings and action.nargs != 0):
            text += " (default: %(default)s)"
        return text


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="run_engine.py", description=DESCRIPTION,
                                     formatter_class=HelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.command_parsers = {}  # type: ignore[attr-defined]
    for name, help_text in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text,
                           formatter_class=HelpFormatter)
        parser.command_parsers[name] = p  # type: ignore[attr-defined]
        p.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
        if only is None or only == name:
            importlib.import_module(f"engine.commands.{name}").add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    wanted = next((a for a in argv if a in COMMANDS), None)
    parser = build_parser(wanted)
    args, extra = parser.parse_known_args(argv)
    if extra:  # the command's own usage, not the top level's
        parser.command_parsers[args.command].error(  # type: ignore[attr-defined]
            f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr,
    )
    # numba's CUDA driver logs every allocation at INFO: keep the summary readable
    logging.getLogger("numba").setLevel(logging.WARNING)
    from engine.errors import UserError
    from engine.outputs import check_writable_file
    from gpu.device import DeviceUnavailable, SettingError

    module = importlib.import_module(f"engine.commands.{args.command}")
    try:
        if args.json:  # refused before the work, not after it
            check_writable_file(args.json, "--json")
        from engine.affinity import check_env, pin_engine

        check_env()  # CPU placement (ENGINE_CPUS, REPLAY_FEED_CPUS, OPTION_WORKER_CPUS)
        pin_engine()
        results: dict[str, Any] = module.run(args)
        if args.json:
            try:
                args.json.write_text(json.dumps(results, indent=2, default=str))
            except BrokenPipeError:
                raise
            except OSError as exc:
                raise UserError(f"--json {args.json}: cannot write: {exc.strerror}") from None
    except BrokenPipeError:  # the reader of our output left (`... | head`): nothing to say
        _quiet_stdout()
        return 141  # as a shell reports a command ended by SIGPIPE
    except (UserError, DeviceUnavailable, SettingError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 2))  # 2, or an error's own (3: journal I/O)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug of ours: one line, the traceback with -v
        logging.getLogger("run_engine").debug("internal error", exc_info=True)
        print(f"error: internal error in {args.command}: {type(exc).__name__}: {exc} "
              "(run with -v for the traceback)", file=sys.stderr)
        return 1
    return 0


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush finds no closed pipe."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
