"""`live`: the paper-trading daemon.

Subscribes (connects) to ticks on `--ticks`, runs the same Engine as replay, binds
`--orders` where it publishes orders, fills and risk rejections, each journaled to SQLite
before it is published (engine/live/daemon.py). Restarted on the same journal it restores the
last snapshot of its state and the journal's orders, fills and stream positions, so a
daemon stopped with SIGTERM and fed the rest of the stream trades exactly as one that never
stopped. A feed's end of stream does not liquidate the book. Bad input is counted and
skipped; a stale feed blocks new entries; risk limits ([risk] in the TOML) gate entries.
SIGTERM or SIGINT: finish the batch, snapshot, flush, exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import logging
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec
import zmq
import zmq.asyncio

from engine.affinity import realtime_from_env
from engine.errors import UserError
from engine.gcpause import startup_objects_frozen
from engine.live.journal import Journal, JournalError, JournalState, JournalWriteError
from engine.settings.flags import deprecated_alias
from engine.settings.resolve import config_option, settings
from engine.settings.resolve import resolve_device as check_device
from gpu.device import resolve_device

log = logging.getLogger("live")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--market-data", "--ticks-endpoint", dest="ticks", metavar="ENDPOINT",
                   help="endpoint of the market-data (tick) feed to connect to; required")
    deprecated_alias(p, "--ticks", dest="ticks", new="--market-data",
                     why="--ticks is a count in replay and feed")
    p.add_argument("--orders", required=True,
                   help="endpoint to bind, where orders, fills and risk rejections go out")
    p.add_argument("--journal", required=True, help="SQLite journal path")
    p.add_argument("--strategy", default="sma-cross",
                   help="built-in name or strategy file, as for replay")
    p.add_argument("--config", help="engine TOML config (default: built-in defaults)")
    p.add_argument("--symbols", help="comma-separated symbols to subscribe to (default all)")
    config_option(p, "--device", key="device", choices=("auto", "cpu", "cuda"),
                  help="device of GPU-capable work (strategies, option groups)")
    p.add_argument("--max-seconds", type=float, default=0.0,
                   help="stop by itself after this long (0 = run until SIGTERM)")
    p.add_argument("--curve", metavar="DIR",
                   help="CURVE keys folder (from `keys`): both sockets encrypted, key "
                        "holders only")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow tcp endpoints beyond loopback without --curve")
    p.add_argument("--log-json", action="store_true",
                   help="log lines and status lines as JSON objects (one per line)")
    p.add_argument("--status-file", type=Path, metavar="PATH",
                   help="status as JSON, rewritten every status interval and on SIGUSR1")


def _check_loopback(name: str, endpoint: str) -> None:
    """Without CURVE, tcp endpoints must stay on this machine (strangers kept out)."""
    if not endpoint.startswith("tcp://"):
        return
    host = urlsplit(endpoint).hostname or ""
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise UserError(f"{name} {endpoint} is not a loopback address: anyone on the network "
                    "could read or feed it; use --curve DIR (see `keys`) or --allow-remote")


class JsonLogFormatter(logging.Formatter):
    """One JSON object per log line: time, level, logger, message."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"ts": round(record.created, 6), "level": record.levelname,
                           "logger": record.name, "msg": record.getMessage()})


def _check_command_line(args: argparse.Namespace) -> None:
    """What the command line alone can refuse, before the journal or a socket opens."""
    if args.ticks is None:
        raise UserError("live needs --market-data ENDPOINT (the tick feed to connect to)")
    if args.status_file is not None:  # else the operator's status would only be warnings
        from engine.reporting.outputs import check_writable_file

        check_writable_file(args.status_file, "--status-file")


async def run_live(args: argparse.Namespace) -> dict[str, Any]:
    from engine.live.daemon import Daemon, install_signals, open_sockets

    if args.log_json:
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonLogFormatter())

    _check_command_line(args)
    cfg = settings(args)  # default < --config file < flags given (engine/settings/resolve.py)
    check_device(cfg.device, "engine", args)  # cuda without a GPU: one line, naming whence
    device = resolve_device(cfg.device, "engine")
    if not args.curve and not args.allow_remote:
        _check_loopback("--market-data", args.ticks)
        _check_loopback("--orders", args.orders)
    curve = None
    if args.curve:
        from engine.live.curve_keys import load_keys

        curve = load_keys(args.curve)
    strategy = _load_strategy(args.strategy, cfg.device)
    journal, state = _open_journal(args.journal, cfg.live.journal_sync)
    reevolution = None
    if cfg.reevolve.enabled:  # the GP rule re-evolved daily (engine/live/reevolution.py)
        strategy, reevolution = _reevolution(cfg, args, strategy, journal)
    ctx = zmq.asyncio.Context()
    auth = None
    topics = ([f"{k}.{s.strip()}".encode() for s in args.symbols.split(",") for k in "TQB"]
              + [b"H."] if args.symbols else [b""])
    try:
        if curve is not None:
            from engine.live.curve_keys import start_authenticator

            auth = start_authenticator(zmq.Context.shadow(ctx.underlying), curve)
        sub, out = open_sockets(ctx, args.ticks, args.orders, cfg, topics, curve)
    except BaseException:
        if auth is not None:
            auth.stop()
        journal.close()
        ctx.destroy(linger=0)
        raise
    daemon = None
    try:
        try:
            daemon = Daemon(cfg=cfg, strategy=strategy, journal=journal, state=state,
                            sub=sub, out=out, device=device, status_file=args.status_file,
                            max_seconds=args.max_seconds, ticks=args.ticks,
                            status_json=args.log_json, reevolution=reevolution)
            stop = asyncio.Event()
            status_now = asyncio.Event()
            install_signals(stop, status_now)
            log.info("%s, ticks from %s, orders on %s, journal %s (%d fills, restored: %s)%s",
                     strategy.name, args.ticks, out.endpoint, args.journal, len(state.fills),
                     daemon.restored, ", CURVE on" if curve else "")
            # the loop's thread under SCHED_FIFO if asked (engine/affinity.py says why);
            # the sockets' I/O threads, started already, keep the normal policy
            realtime_from_env()
            with startup_objects_frozen():  # no full collection walks the start-up objects
                await daemon.run(stop, status_now, topics)
            daemon.shutdown_snapshot()
        except sqlite3.Error as exc:  # disk full, I/O error: the real cause, one line
            raise JournalWriteError.of(journal.path, exc) from None
        status = daemon.status()
        status["status"] = "stopped"
        daemon.write_status(status)
    finally:
        if daemon is not None:
            daemon.close()
        if reevolution is not None:
            reevolution.close()
        journal.close()
        sub.close()
        out.close()
        if auth is not None:
            auth.stop()
        ctx.destroy(linger=0)
    print(f"live stopped: {status['messages']:,} messages, {status['ticks']:,} ticks, "
          f"{status['fills']} fills, equity {status['equity']:,.2f}, "
          f"skipped {status['skipped']}", flush=True)
    return status


def _load_strategy(spec: str, device: str) -> Any:
    try:
        from strategies.registry import strategy_from_spec

        return strategy_from_spec(spec, device=device)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - a missing, unreadable or broken strategy file
        raise UserError(f"cannot load strategy {spec!r}: {type(exc).__name__}: {exc}") from None


def _open_journal(path: str, sync: str) -> tuple[Journal, JournalState]:
    """The journal, locked, and what it holds (a foreign or unreadable file: one line);
    `sync`: [live] journal_sync."""
    try:
        journal = Journal(path, sync=sync)
    except JournalError as exc:
        raise UserError(str(exc)) from None
    try:
        return journal, journal.load()
    except JournalError as exc:
        journal.close()  # the lock goes with the refusal
        raise UserError(str(exc)) from None


def _reevolution(cfg: Any, args: argparse.Namespace, strategy: Any, journal: Journal
                 ) -> tuple[Any, Any]:
    """The swappable GP strategy and its re-evolution: the rule version the journal last
    adopted (a restart resumes with the rule it traded), else the strategy file's."""
    from engine.live.reevolution import LiveReevolution, initial_version
    from gpu.gp.core import cost_tuple
    from strategies.gp.reevolve import RuleVersion
    from strategies.gp.strategy import GPEnsemble, SwappableGP

    if not isinstance(strategy, GPEnsemble) or not args.strategy.partition("#")[0].endswith(
            ".json"):
        raise UserError("[reevolve] re-evolves GP rules: --strategy must be a GP strategy "
                        "file (*.json, from evolve)")
    try:
        versions = journal.rule_versions()
        current = (msgspec.convert({k: v for k, v in versions[-1].items()
                                    if k != "adopted_ts"}, RuleVersion)
                   if versions else initial_version(strategy, args.strategy))
        swappable = SwappableGP(current.gp_rules(), device=cfg.device, name=strategy.name)
    except (ValueError, msgspec.ValidationError) as exc:
        raise UserError(f"[reevolve]: the rule to resume with: {exc}") from None
    symbols = ([s.strip() for s in args.symbols.split(",")] if args.symbols
               else list(current.symbols))
    costs = cost_tuple(cfg.broker.commission, cfg.broker.slippage_bps)
    log.info("trading %s; re-evolution daily at %s %s", current.describe(), cfg.reevolve.at,
             cfg.timezone)
    return swappable, LiveReevolution(cfg.reevolve, swappable, journal, current, cfg.timezone,
                                      symbols, costs)


def run(args: argparse.Namespace) -> dict[str, Any]:
    return asyncio.run(run_live(args))
