"""`feed`: publish files or the synthetic market on a ZeroMQ endpoint (for `live`)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import zmq

from engine.commands.replay import source_factory
from engine.errors import UserError
from feeds.publish import publish_source
from feeds.transport import Publisher


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--publish", required=True, help="endpoint to bind, e.g. tcp://127.0.0.1:5555")
    p.add_argument("--rate", type=float, default=0.0, help="messages per second (0 = max)")
    p.add_argument("--wait", type=float, default=30.0,
                   help="seconds to wait for a subscriber before giving up")
    p.add_argument("--data", action="append", default=[], metavar="PATH",
                   help="files to publish, as for replay (default: the synthetic market)")
    p.add_argument("--symbols", help="comma-separated symbols of --data (default: all)")
    p.add_argument("--start", help="first date YYYY-MM-DD of --data (default: first)")
    p.add_argument("--end", help="last date YYYY-MM-DD of --data (default: last)")
    p.add_argument("--quotes", action="store_true", help="also publish LEAN quote ticks")
    p.add_argument("--ticks", type=int, default=200_000, help="synthetic market: ticks")
    p.add_argument("--n-symbols", type=int, default=10, help="synthetic market: symbols")
    p.add_argument("--seed", type=int, default=1, help="synthetic market: random seed")
    p.add_argument("--skip", type=int, default=0,
                   help="start at message N of the stream (same sequence numbers)")
    p.add_argument("--count", type=int, default=None,
                   help="publish at most M messages (default: to the end of the stream)")
    p.add_argument("--session", type=int, default=None,
                   help="session id (epoch) stamped on the stream; a resumed stream "
                        "(--skip) passes its original one (default: a new epoch, the "
                        "current time in ms)")
    p.add_argument("--heartbeat", type=float, default=1.0,
                   help="seconds between heartbeats while publishing (0 = none)")
    p.add_argument("--lossy", action="store_true",
                   help="never wait for slow readers (a market feed: messages beyond a "
                        "reader's queue are dropped) instead of pacing to the slowest")
    p.add_argument("--curve", metavar="DIR",
                   help="CURVE keys folder (from `keys`): serve the stream to key holders only")


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.skip < 0 or (args.count is not None and args.count < 0):
        raise UserError("--skip and --count must be >= 0")
    session = args.session if args.session is not None else time.time_ns() // 1_000_000
    factory = source_factory(args)
    source = factory()
    ctx = zmq.Context()
    auth = None
    server = None
    if args.curve:
        from engine.curve import load_keys, start_authenticator

        keys = load_keys(args.curve)
        auth = start_authenticator(ctx, keys)
        server = keys.server
    try:
        pub = Publisher(args.publish, ctx, curve_server=server, nodrop=not args.lossy)
    except zmq.ZMQError as exc:
        raise UserError(f"cannot bind {args.publish}: {exc}") from None
    print(f"publishing {getattr(source, 'name', 'source')} on {pub.endpoint}, session "
          f"{session}" + (f", from message {args.skip:,}" if args.skip else ""),
          file=sys.stderr)
    try:
        pub.wait_for_subscriber(args.wait)
    except TimeoutError as exc:
        raise UserError(str(exc)) from None
    t0 = time.perf_counter()

    def progress(n: int) -> None:
        print(f"  ... {n:,} sent", file=sys.stderr, flush=True)

    sent = publish_source(source, pub, rate=args.rate, progress=progress, session=session,
                          skip=args.skip, count=args.count, heartbeat_s=args.heartbeat)
    seconds = time.perf_counter() - t0
    pub.close()
    if auth is not None:
        auth.stop()
    ctx.term()
    print(f"sent {sent:,} messages in {seconds:.2f} s ({sent / max(seconds, 1e-9):,.0f}/s)")
    return {"sent": sent, "seconds": seconds, "endpoint": pub.endpoint, "session": session,
            "skip": args.skip}
