#!/usr/bin/env python3
"""Command line of the engine: parse, wire, run. No logic of its own (see engine/commands/)."""
# (the module docstring is for developers; users read DESCRIPTION in --help)

from __future__ import annotations

import argparse
import contextlib
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
    """Shows each option's default unless its help already names one (or it has none).

    0, 0.0 and "" are defaults like any other and are shown (a test of `x in (None, False)`
    also dropped 0, which equals False); only None (no value), False (a switch) and an
    empty list (a repeatable option given no times) are not."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        d = action.default
        if ("default" not in text and d is not None and d is not False
                and d is not argparse.SUPPRESS and d != []
                and action.option_strings and action.nargs != 0):
            text += ' (default: "")' if d == "" else " (default: %(default)s)"
        return text


def version() -> str:
    """The installed package's version (pyproject.toml's), else "unknown"."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("gpu-trading-engine")
    except PackageNotFoundError:
        return "unknown"


class _VersionAction(argparse._VersionAction):
    """argparse's --version, its text looked up only when --version is given: the
    installed package's metadata (importlib.metadata, some 0.1 s of a cold start's
    bytecode compiling, issue 27) is then read by no other run."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        self.version = f"%(prog)s {version()}"
        super().__call__(parser, namespace, values, option_string)


def _common_flags(p: argparse.ArgumentParser, top: bool) -> None:
    """-v/-q on the top level and on every command, so either place on the line works.
    A command's copy defaults to SUPPRESS: it sets the value only when given, and never
    resets what the top level parsed (argparse lets a subparser's default win)."""
    default: Any = False if top else argparse.SUPPRESS
    verbosity = p.add_mutually_exclusive_group()
    verbosity.add_argument("-v", "--verbose", action="store_true", default=default,
                           help="debug logging (and tracebacks of internal errors)")
    verbosity.add_argument("-q", "--quiet", action="store_true", default=default,
                           help="warnings and errors only: no progress lines")


def build_parser(only: str | None = None, prog: str = "run_engine.py"
                 ) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION,
                                     formatter_class=HelpFormatter)
    parser.add_argument("--version", action=_VersionAction)
    _common_flags(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.command_parsers = {}  # type: ignore[attr-defined]
    for name, help_text in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text,
                           formatter_class=HelpFormatter)
        parser.command_parsers[name] = p  # type: ignore[attr-defined]
        p.add_argument("--json", type=Path, metavar="PATH",
                       help="write the results as JSON; - writes them to stdout (the "
                            "summary then goes to stderr)")
        _common_flags(p, top=False)
        if only is None or only == name:
            importlib.import_module(f"engine.commands.{name}").add_arguments(p)
    return parser


def _prog() -> str:
    """The name the user typed: the console command, else run_engine.py (tests, python)."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name == CONSOLE_COMMAND else "run_engine.py"


#: commands whose module has a `first_run_work` (known before it is imported, for the
#: early compile workers; tests/test_architecture.py keeps this in step with the modules)
FIRST_RUN_WORK = frozenset({"evolve", "price"})

#: the console command pyproject.toml installs ([project.scripts])
CONSOLE_COMMAND = "gte"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    wanted = next((a for a in argv if a in COMMANDS), None)
    early = _early_compile_workers(wanted, argv)  # before the command's imports
    try:
        return _main(argv, wanted, early)
    finally:
        if early is not None:
            early.release()  # (a no-op once prewarm has given them their shares)


def _early_compile_workers(command: str | None, argv: list[str]) -> Any:
    """With empty caches, start the compile workers (gpu/compile_cache.py) before the
    command's module and numba are imported: their own imports then use the CPUs this
    process leaves idle while it imports. None when warm (a few file checks), for --help,
    and for commands with no compile manifest."""
    if command is None or "-h" in argv or "--help" in argv:
        return None
    from gpu import compile_cache

    return compile_cache.start_early(command, busy_first=command in FIRST_RUN_WORK)


def _main(argv: list[str], wanted: str | None, early: Any) -> int:
    parser = build_parser(wanted, _prog())
    args, extra = parser.parse_known_args(argv)
    if extra:  # the command's own usage, not the top level's
        parser.command_parsers[args.command].error(  # type: ignore[attr-defined]
            f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING if args.quiet
        else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr,
    )
    # numba's CUDA driver logs every allocation at INFO: keep the summary readable
    logging.getLogger("numba").setLevel(logging.WARNING)
    from engine.errors import UserError
    from engine.reporting.outputs import check_own_kind, check_writable_file
    from gpu.device import DeviceUnavailable, SettingError

    module = importlib.import_module(f"engine.commands.{args.command}")
    to_stdout = args.json is not None and str(args.json) == "-"
    exported: dict[str, str] = {}
    prewarm: Any = None
    finished = False  # the command ran to its end (else the workers' work is dropped)
    try:
        if args.json and not to_stdout:  # refused before the work, not after it
            check_writable_file(args.json, "--json")
            check_own_kind(args.json, "json", "--json")
        from engine.settings.flags import check_numbers

        # NaN, inf, huge or negative numbers: one line, exit 2, before any work
        check_numbers(parser.command_parsers[args.command],  # type: ignore[attr-defined]
                      args.command, args)
        exported = _export_gpu_settings(args)
        prewarm = _first_run_compiles(module, args, early)  # before pin_engine: all CPUs
        from engine.affinity import check_env, pin_engine

        check_env()  # CPU placement (ENGINE_CPUS, ..._CPUS) and ENGINE_RT_PRIORITY
        pin_engine()
        if to_stdout:  # stdout carries the JSON alone: the summary goes to stderr
            with contextlib.redirect_stdout(sys.stderr):
                results: dict[str, Any] = module.run(args)
            sys.stdout.write(json.dumps(results, indent=2, default=str) + "\n")
            sys.stdout.flush()
        else:
            results = module.run(args)
        if args.json and not to_stdout:
            try:
                args.json.write_text(json.dumps(results, indent=2, default=str))
            except BrokenPipeError:
                raise
            except OSError as exc:
                raise UserError(f"--json {args.json}: cannot write: {exc.strerror}") from None
        finished = True
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
    finally:
        if prewarm is not None:  # a worker left running would race the next run's cache
            prewarm.wait() if finished else prewarm.stop()
        if exported:  # (the settings module imports msgspec: not for a run without [gpu])
            from engine.settings.gpu import unexport_env

            unexport_env(exported)
    return 0


def _first_run_compiles(module: Any, args: argparse.Namespace, early: Any = None) -> Any:
    """With empty caches, start compiling the command's recorded kernels in parallel
    processes (gpu/compile_cache.py; the command runs on meanwhile) and say so; with warm
    caches this costs a few file checks. GTE_PREWARM=0 turns the parallel compile off (the
    announcement stays). Where this process compiles a part, it first does the command's
    `first_run_work(args)` if it has one: a job that needs no kernel and would otherwise
    follow the compiling (reading data, importing matplotlib), while the workers take the
    first entries of the queue. Returns the workers' handle, or None."""
    import os

    from gpu import compile_cache

    if not args.quiet:  # (a command that never imports numba never compiles: no line)
        compile_cache.announce_compiles()
    if os.environ.get("GTE_PREWARM", "1") == "0":
        return None
    choose = getattr(module, "compile_profile", None)
    profile = choose(args) if choose is not None else args.command
    if not profile:
        return None
    work = getattr(module, "first_run_work", None)
    job = work(args) if work is not None else None
    handle = compile_cache.prewarm(profile, message=None if args.quiet else
                                   compile_cache.NOTICE, early=early,
                                   busy_first=job is not None)
    if handle is not None:
        handle.defer()
        if job is not None and handle.compiles_here:
            _run_quietly(job)
        handle.compile_own()
    return handle


def _run_quietly(job: Any) -> None:
    """A command's `first_run_work` (work of its own that needs no kernel, done while the
    workers compile): a failure is left for the command itself to meet and report."""
    with contextlib.suppress(Exception):
        job()


def _export_gpu_settings(args: argparse.Namespace) -> dict[str, str]:
    """The config file's `[gpu]` table published to the environment variables the kernels,
    the CPU placement and the GPU worker read (engine/settings/gpu.py), before anything
    reads them; a variable already set wins. Returns what it set."""
    if getattr(args, "config", None) is None:
        return {}
    from engine.settings.config import load_config
    from engine.settings.gpu import export_env

    return export_env(load_config(args.config).gpu)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush finds no closed pipe."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def entry() -> int:
    """The process's entry (`python run_engine.py`, the `gte` console command): `main`,
    then the objects it leaves are frozen out of the cyclic garbage collector. The
    interpreter's final collections would otherwise walk every object that numba's
    compiler and type system made, which cost 0.3-0.7 s of every command's exit (the
    headline `evolve` on a 16-core H200 host: 0.47-0.74 s from `main`'s return to the
    process's end, 2026-11-28, benchmarks/results/h200-2026-11-28i/; a CPU `evolve` on the
    2-core VM 0.45 s). Exit handlers, `weakref.finalize` callbacks and the flush of
    stdout and stderr all still run; only objects in reference cycles are left to the
    operating system. Callers of `main` inside a longer-lived process (tests, notebooks)
    keep their collector as it was."""
    import gc

    code = main()
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(entry())
