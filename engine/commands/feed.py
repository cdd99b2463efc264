"""`feed`: publish files, the synthetic market or Binance's public streams on a ZeroMQ
endpoint (for `live`).

With `--source binance` the feed is a venue adapter (feeds/binance.py): it stays connected
until SIGTERM/SIGINT (or `--max-seconds`), publishes each normalised trade and quote as it
arrives, with the same encoder, frames and heartbeats as a file feed, and never waits for a
slow reader (a market cannot be paused: what a reader's queue cannot hold is dropped, and
the reader's sequence check counts it). Each start is a new feed session.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import signal
import sys
import time
from pathlib import Path
from typing import Any

import zmq

from engine.commands.replay import source_factory
from engine.errors import UserError
from engine.settings.flags import deprecated_alias
from feeds.publish import publish_source
from feeds.transport import Publisher

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--publish", required=True, help="endpoint to bind, e.g. tcp://127.0.0.1:5555")
    p.add_argument("--rate", type=float, default=0.0,
                   help="messages per second, a finite number >= 0 (0 = as fast as possible)")
    p.add_argument("--wait", type=float, default=30.0,
                   help="seconds to wait for a subscriber before giving up (--source "
                        "binance: 0 = start without one)")
    p.add_argument("--data", action="append", default=[], metavar="PATH",
                   help="files to publish, as for replay (default: the synthetic market)")
    p.add_argument("--symbols", help="comma-separated symbols of --data (default: all), or "
                                     "to subscribe to with --source binance (required)")
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
    p.add_argument("--feed-session", type=int, default=None, metavar="ID",
                   help="feed session id (epoch) stamped on the stream; a resumed stream "
                        "(--skip) passes its original one (default: a new epoch, the "
                        "current time in ms)")
    deprecated_alias(p, "--session", dest="feed_session", new="--feed-session", type=int,
                     why="--session is the trading schedule in replay")
    p.add_argument("--heartbeat", type=float, default=1.0,
                   help="seconds between heartbeats while publishing (0 = none)")
    p.add_argument("--lossy", action="store_true",
                   help="never wait for slow readers (a market feed: messages beyond a "
                        "reader's queue are dropped) instead of pacing to the slowest")
    p.add_argument("--curve", metavar="DIR",
                   help="CURVE keys folder (from `keys`): serve the stream to key holders only")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a tcp --publish endpoint beyond loopback without --curve "
                        "(as live)")
    b = p.add_argument_group("venue feed (--source binance)")
    b.add_argument("--source", default="files",
                   help="files (--data or the synthetic market) or binance (public streams)")
    b.add_argument("--market", default="spot", help="spot or usdm (USD-M futures)")
    b.add_argument("--streams", default="trade,bookTicker",
                   help="comma-separated streams: trade, aggTrade, bookTicker")
    b.add_argument("--url", help="websocket base URL (default: the market's, "
                                 "wss://stream.binance.com:9443 or wss://fstream.binance.com)")
    b.add_argument("--record", metavar="PATH",
                   help="append every frame to this gzip file as '<receive ns> <json>' lines "
                        "(replay it with --data PATH)")
    b.add_argument("--stale-after", type=float, default=60.0,
                   help="seconds without an event before a stream is marked stale")
    b.add_argument("--reconnect-after", type=float, default=23.5 * 3600,
                   help="seconds after which to reconnect before the venue's 24-hour cut")
    b.add_argument("--max-seconds", type=float, default=0.0,
                   help="stop after this long (0 = run until SIGTERM or SIGINT)")


def check_options(args: argparse.Namespace) -> None:
    """What both sources share, refused before anything binds: rates and times finite
    and >= 0 (`--rate -5` ran at full speed), and live's rule for endpoints: a tcp
    --publish beyond loopback needs --curve or --allow-remote (anyone on the network could
    read the stream, or the feed would bind every interface in the clear)."""
    from engine.commands.live import _check_loopback

    for name in ("rate", "wait", "heartbeat"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value >= 0):
            raise UserError(f"--{name} {value}: expected a finite number >= 0")
    if not args.curve and not args.allow_remote:
        _check_loopback("--publish", args.publish)


def run(args: argparse.Namespace) -> dict[str, Any]:
    check_options(args)
    if args.source == "binance":
        return run_binance(args)
    if args.source != "files":
        raise UserError(f"--source {args.source!r}: expected files or binance")
    venue_only = [f"--{k.replace('_', '-')}" for k in ("url", "record") if getattr(args, k)]
    if venue_only:
        raise UserError(f"{', '.join(venue_only)} apply to --source binance only")
    if args.skip < 0 or (args.count is not None and args.count < 0):
        raise UserError("--skip and --count must be >= 0")
    session = args.feed_session if args.feed_session is not None else time.time_ns() // 1_000_000
    factory = source_factory(args)
    source = factory()
    ctx = zmq.Context()
    auth = None
    server = None
    if args.curve:
        from engine.live.curve_keys import load_keys, start_authenticator

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
        if not args.quiet:  # -q: no progress lines
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


def _binance_settings(args: argparse.Namespace) -> tuple[list[str], Any]:
    """The subscribed symbols and the client's settings; bad options are one line."""
    from feeds.binance import (
        MARKET_URLS,
        MAX_STREAMS,
        ClientSettings,
        parse_market,
        parse_streams,
        parse_symbols,
        stream_names,
        stream_url,
    )

    given = [f"--{k}" for k in ("data", "skip", "count", "quotes", "start", "end")
             if getattr(args, k)]
    if given:
        raise UserError(f"{', '.join(given)} select from files; --source binance streams live")
    try:
        market = parse_market(args.market)
        symbols = parse_symbols(args.symbols)
        streams = parse_streams(args.streams)
        url = stream_url(args.url or MARKET_URLS[market])
    except ValueError as exc:
        raise UserError(str(exc)) from None
    for name in ("stale_after", "reconnect_after", "heartbeat", "max_seconds"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value >= 0) or (value == 0 and name in (
                "stale_after", "reconnect_after")):
            raise UserError(f"--{name.replace('_', '-')} {value}: expected a number of "
                            "seconds > 0" + ("" if "after" in name else " (or 0)"))
    if args.record:
        parent = Path(args.record).parent
        if not parent.is_dir():
            raise UserError(f"--record {args.record}: folder {parent} does not exist")
        from engine.reporting.outputs import check_own_kind, check_writable_file

        check_writable_file(Path(args.record), "--record")
        check_own_kind(Path(args.record), "gzip", "--record")  # appends: a recording only
    names = stream_names(symbols, streams)
    if len(names) > MAX_STREAMS:
        raise UserError(f"{len(names)} streams ({len(symbols)} symbols x {len(streams)}): "
                        f"Binance allows at most {MAX_STREAMS} on one connection")
    settings = ClientSettings(url=url, streams=tuple(names),
                              stale_after=args.stale_after,
                              reconnect_after=args.reconnect_after)
    return symbols, settings


def run_binance(args: argparse.Namespace) -> dict[str, Any]:
    """`feed --source binance`: the venue adapter, until SIGTERM/SIGINT or --max-seconds."""
    symbols, settings = _binance_settings(args)
    session = args.feed_session if args.feed_session is not None else time.time_ns() // 1_000_000
    ctx = zmq.Context()
    auth = None
    server = None
    if args.curve:
        from engine.live.curve_keys import load_keys, start_authenticator

        keys = load_keys(args.curve)
        auth = start_authenticator(ctx, keys)
        server = keys.server
    try:
        pub = Publisher(args.publish, ctx, curve_server=server, nodrop=False)
    except zmq.ZMQError as exc:
        raise UserError(f"cannot bind {args.publish}: {exc}") from None
    print(f"publishing binance {args.market} {','.join(settings.streams)} from {settings.url} "
          f"on {pub.endpoint}, session {session}", file=sys.stderr, flush=True)
    try:
        if args.wait > 0:
            pub.wait_for_subscriber(args.wait)
        t0 = time.perf_counter()
        result = asyncio.run(_serve_binance(args, symbols, settings, pub, session))
    except TimeoutError as exc:
        raise UserError(str(exc)) from None
    finally:
        pub.close()
        if auth is not None:
            auth.stop()
        ctx.term()
    seconds = time.perf_counter() - t0
    c = result["binance"]
    print(f"sent {result['sent']:,} messages in {seconds:.2f} s: {c['trades']:,} trades, "
          f"{c['quotes']:,} quotes of {c['frames']:,} frames; skipped "
          f"{sum(c['skipped'].values()):,}, trade-id gaps {sum(c['gaps'].values()):,}, "
          f"connections {c['connections']}, stale marks {sum(c['stale_marks'].values())}")
    return {**result, "seconds": seconds, "endpoint": pub.endpoint, "session": session}


async def _serve_binance(args: argparse.Namespace, symbols: list[str], settings: Any,
                         pub: Publisher, session: int) -> dict[str, Any]:
    """Client, normaliser, publisher, recorder, stale watch and heartbeats, until stopped."""
    from feeds.binance import BinanceClient, FeedCounters, FrameNormaliser, StaleWatch
    from feeds.publish import LiveStream
    from feeds.recording import RecordingWriter

    counters = FeedCounters()
    norm = FrameNormaliser(symbols, counters)
    stream = LiveStream(pub, norm.symbols, session, args.heartbeat)
    try:
        recorder = RecordingWriter(args.record) if args.record else None
    except OSError as exc:
        raise UserError(f"--record {args.record}: cannot write: {exc.strerror}") from None
    recording = recorder is not None

    def on_frame(recv_ns: int, text: str) -> None:
        nonlocal recording
        if recording and recorder is not None:
            try:
                recorder.write(recv_ns, text)
            except OSError as exc:  # a full disk stops the recording, not the feed
                log.error("--record %s: cannot write (%s): recording stopped", args.record,
                          exc)
                counters.skipped.add("recording_stopped", 1, str(exc))
                recording = False
        norm.add(recv_ns, text)
        stream.send(norm.take())  # at once: a live frame must not wait for company

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if args.max_seconds > 0:
        loop.call_later(args.max_seconds, stop.set)
    def on_sent(ns: int, text: str) -> None:
        if recording and recorder is not None:
            with contextlib.suppress(OSError):  # on_frame reports a failing recorder
                recorder.write(ns, text)

    client = BinanceClient(settings, on_frame, counters, on_sent=on_sent)
    watch = StaleWatch(settings.streams, norm.last_seen, counters, settings.stale_after)
    try:
        await asyncio.gather(client.run(stop), watch.run(stop), _beats(stream, stop))
    finally:
        sent = stream.close(final=False)  # a venue's stream does not end: no liquidation
        if recorder is not None:
            with contextlib.suppress(OSError):  # already reported by on_frame
                recorder.close()
    out: dict[str, Any] = {"sent": sent, "binance": counters.as_dict()}
    if recorder is not None:
        out["recorded_lines"] = recorder.lines
    return out


async def _beats(stream: Any, stop: asyncio.Event) -> None:
    """Heartbeats while the market is quiet (LiveStream.beat sends only when one is due)."""
    while not stop.is_set():
        stream.beat()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.2)
