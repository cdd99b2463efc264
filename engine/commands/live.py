"""`live`: the paper-trading daemon.

Subscribes to ticks on `--ticks`, runs the same Engine as replay, journals every order and
fill to SQLite before publishing it on `--orders`, and commits the last processed sequence
number of each stream after every batch. On SIGTERM or SIGINT it finishes the batch in hand,
prints its status (and writes it with --json) and exits 0. Restarted on the same journal it
rebuilds cash, positions and stream positions; indicators warm up again from the stream.
Bad input is counted and skipped (see feeds/transport.py); the daemon keeps running.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from typing import Any

import zmq
import zmq.asyncio

from engine.config import load_config
from engine.core import Engine
from engine.errors import UserError
from engine.journal import Journal
from feeds.messages import Fill, Order
from feeds.transport import Publisher, Subscriber
from gpu.device import resolve_device
from strategies.registry import load_strategy


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ticks", required=True, help="endpoint to subscribe to (connect)")
    p.add_argument("--orders", required=True, help="endpoint to publish orders and fills (bind)")
    p.add_argument("--journal", required=True, help="SQLite journal path")
    p.add_argument("--strategy", default="sma-cross",
                   help="built-in name or strategy file, as for replay")
    p.add_argument("--config", help="engine TOML config (default: built-in defaults)")
    p.add_argument("--symbols", help="comma-separated symbols to subscribe to (default all)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="device of GPU-capable work (strategies, option groups)")
    p.add_argument("--max-seconds", type=float, default=0.0,
                   help="stop by itself after this long (0 = run until SIGTERM)")


async def run_live(args: argparse.Namespace) -> dict[str, Any]:
    resolve_device(args.device, "engine")  # --device cuda without a GPU: a clear error now
    cfg = load_config(args.config)
    try:
        strategy = load_strategy(args.strategy, device=args.device)
        journal = Journal(args.journal)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    state = journal.load()
    ctx = zmq.asyncio.Context()
    topics = ([f"{k}.{s.strip()}".encode() for s in args.symbols.split(",") for k in "TQB"]
              if args.symbols else [b""])
    try:
        out = Publisher(args.orders, zmq.Context.shadow(ctx.underlying), nodrop=False)
        sub = Subscriber(args.ticks, ctx, topics=topics, limits=cfg.validation)
    except zmq.ZMQError as exc:
        raise UserError(f"cannot open endpoints: {exc}") from None
    sub.validator.last_seq.update(state.last_seq)

    def on_order(o: Order) -> None:
        journal.record_order(o)  # committed before it is published
        out.send(o)

    def on_fill(f: Fill) -> None:
        journal.record_fill(f)
        out.send(f)

    option_book = None
    if cfg.options:  # option groups repriced after each underlying tick, values published
        from engine.option_book import OptionBook

        option_book = OptionBook(list(cfg.options), device=args.device, timezone=cfg.timezone)
    engine = Engine(list(state.symbols), strategy, cfg, option_book=option_book,
                    on_order=on_order, on_fill=on_fill)
    engine.restore(state.orders, state.fills)
    known = len(engine.symbols)
    for i, s in enumerate(engine.symbols):
        journal.record_symbol(s, i)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"live: {strategy.name}, ticks from {args.ticks}, orders on {out.endpoint}, "
          f"journal {args.journal} ({len(state.fills)} fills restored)", file=sys.stderr,
          flush=True)
    t0 = time.perf_counter()
    try:
        while not stop.is_set():
            if args.max_seconds and time.perf_counter() - t0 > args.max_seconds:
                break
            # while option groups are repricing, wake up often to publish their results
            # even when the tick stream has gone quiet
            busy = engine.poll_options()
            got = await sub.socket.poll(1 if busy else 100)
            if got:
                await engine.consume(await sub.raw_batch(), sub.validator)
            while engine.option_values:  # theoretical values and greeks, newest last
                out.send(engine.option_values.popleft())
            if not got:
                continue
            if len(engine.symbols) > known:  # symbols first seen in this batch
                for i in range(known, len(engine.symbols)):
                    journal.record_symbol(engine.symbols[i], i)
                known = len(engine.symbols)
            journal.record_seqs(sub.validator.last_seq)
    finally:
        status = {
            "status": "stopped",
            "seconds": time.perf_counter() - t0,
            "messages": sub.validator.received,
            "ticks": engine.stats.ticks,
            "bars": engine.stats.bars,
            "orders": len(engine.broker.orders),
            "fills": len(engine.broker.fills),
            "equity": engine.broker.equity(),
            "positions": {s: a.position for s, a in zip(engine.symbols, engine.broker.accounts,
                                                         strict=True) if a.position},
            "skipped": dict(sub.validator.skipped.counts),
        }
        journal.close()
        sub.close()
        out.close()
        ctx.destroy(linger=0)
    print(f"live stopped: {status['messages']:,} messages, {status['ticks']:,} ticks, "
          f"{status['fills']} fills, equity {status['equity']:,.2f}, "
          f"skipped {status['skipped']}", flush=True)
    return status


def run(args: argparse.Namespace) -> dict[str, Any]:
    return asyncio.run(run_live(args))
