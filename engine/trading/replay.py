"""Historical replay: the live engine's code fed from a Source through real ZeroMQ sockets.

The source is published by a feed (a thread for inproc; a separate process for ipc and tcp,
so that reading files and encoding messages does not share the engine's interpreter) and
received by the same Subscriber and Engine the daemon uses. Data time drives everything,
so two replays of the same inputs produce the same report apart from timing fields.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import zmq
import zmq.asyncio

from engine.affinity import FEED_ENV, cpus_from_env, pin_from_env
from engine.errors import UserError
from engine.gcpause import startup_objects_frozen
from engine.options.protocol import OptionPricing
from engine.settings.config import EngineConfig
from engine.trading.bars import warm_up as warm_bars
from engine.trading.core import Engine, EngineHooks, SessionHook
from feeds.publish import publish_source
from feeds.records import Source
from feeds.trade_batch import warm_up as warm_batches
from feeds.transport import Publisher, Subscriber
from strategies.base import Strategy

SourceFactory = Callable[[], Source]


@dataclass
class ReplayResult:
    engine: Engine
    wall_seconds: float
    source_name: str
    skipped: dict[str, int] = field(default_factory=dict)
    #: records the file readers skipped or repaired (bad rows), by kind
    source_skipped: dict[str, int] = field(default_factory=dict)
    received: int = 0
    sent: int = 0
    transport: str = "inproc"
    #: CPU seconds of the engine's process from the feed's start to the end of data, and
    #: of the feed process while it published (ipc/tcp; 0.0 for inproc): what each side
    #: took, which a machine shared with other work moves far less than wall time
    cpu_seconds: float = 0.0
    feed_cpu_seconds: float = 0.0


def _endpoint(transport: str, tmpdir: str) -> str:
    name = f"replay-{uuid.uuid4().hex[:12]}"
    if transport == "inproc":
        return f"inproc://{name}"
    if transport == "ipc":
        return f"ipc://{os.path.join(tmpdir, name)}.sock"
    if transport == "tcp":
        return "tcp://127.0.0.1:*"
    raise UserError(f"unknown transport {transport!r}: expected inproc, ipc or tcp")


def _source_skips(source: Source) -> dict[str, int]:
    """Records the readers counted and skipped (or repaired) while reading the files."""
    counter = getattr(source, "skipped", None)
    return dict(getattr(counter, "counts", {}) or {})


#: how long a finished feed process keeps its socket open for an engine that lags behind
FEED_HOLD_SECONDS = 3600.0


def _feed_process(factory: SourceFactory, endpoint: str, conn: Any, release: Any,
                  go: Any, rate: float = 0.0, frame_ticks: int = 0) -> None:
    """Child process: bind, report the endpoint, wait for the subscriber and for the engine's
    start (`go`), publish, then keep the socket open until the engine has read everything
    (`release`)."""
    try:
        pin_from_env(FEED_ENV)  # checked by the parent before the start
        source = factory()
        pub = Publisher(endpoint, zmq.Context())
        conn.send(("endpoint", pub.endpoint))
        pub.wait_for_subscriber(30.0)
        if frame_ticks > 0:
            warm_batches()  # its compiled encoder is loaded before the clock starts
        conn.send(("ready", None))  # the parent starts its clock after this (`wait_ready`)
        # the engine's clock starts when it sets `go`: publishing before it would make a
        # paced replay look faster than its rate and the reported ticks/s too high
        if not go.wait(FEED_HOLD_SECONDS):
            raise TimeoutError("the engine never started reading")
        cpu = time.process_time()
        sent = publish_source(source, pub, rate, frame_ticks=frame_ticks)
        conn.send(("cpu", time.process_time() - cpu))
        conn.send(("source_skipped", _source_skips(source)))
        conn.send(("done", sent))
        # Closing now would lose the tail of the stream when the engine lags: its receive
        # queue is full, so unread bytes wait in the connection, and libzmq drops them
        # when the peer goes away (a one-day SPY replay with an option group lost ~500
        # trades and the final heartbeat this way). The parent releases us when done.
        release.wait(FEED_HOLD_SECONDS)
        pub.close()
        pub.context.term()
    except BaseException as exc:  # reported to the parent as one line
        conn.send(("error", f"{type(exc).__name__}: {exc}"))


class _StoppableSource:
    """A Source whose chunks stop when `stop` is set: an aborted replay ends its feed
    thread between chunks instead of leaving it publishing into a closed context."""

    def __init__(self, source: Source, stop: threading.Event) -> None:
        self._source = source
        self._stop = stop

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)

    def chunks(self) -> Any:
        for chunk in self._source.chunks():
            if self._stop.is_set():
                return
            yield chunk


def open_source(factory: SourceFactory) -> Any:
    """`factory()` in the engine's process, whatever the transport: a bad file fails now
    with one line, and the engine needs the symbol table (sources are lazy, so this reads
    little)."""
    try:
        return factory()
    except (ValueError, OSError) as exc:
        raise UserError(str(exc)) from None


def feed_transport(choice: str, strategy: Strategy, n_symbols: int) -> str:
    """The transport a replay's feed takes: `choice`, or for "auto" a process of its own
    (ipc) when the strategy's bar closes run on the GPU, else a thread of the engine's
    process (inproc, which starts no process and is the faster one on the CPU). Why: a GPU
    bar close is mostly short host calls into the driver, each letting go of the GIL for an
    instant, so a feed thread of the same process gets the GIL a few messages at a time and
    the engine receives the bars in thousands of small batches instead of a few dozen
    (benchmarks/gp_replay.py --transports; benchmarks/results/h200-2026-11-28/README.md)."""
    if choice != "auto":
        return choice
    backend_for = getattr(strategy, "backend_for", None)
    on_gpu = backend_for is not None and backend_for(n_symbols) == "cuda"
    return "ipc" if on_gpu else "inproc"


class _Feed:
    """The publishing side of a replay, as a thread (inproc) or a process (ipc/tcp)."""

    def __init__(self, factory: SourceFactory, transport: str, ctx: zmq.asyncio.Context,
                 tmpdir: str, rate: float = 0.0, frame_ticks: int = 0,
                 source: Any = None) -> None:
        """`frame_ticks` > 0: runs of trades go as batches of that many per frame.
        `source`: `factory()` already opened (`open_source`)."""
        self.transport = transport
        self.error: str | None = None
        self.sent = 0
        self.finished = False
        self.source_skipped: dict[str, int] = {}
        self.cpu_seconds = 0.0  # the feed process's, while it published
        self.ready = False  # a feed process set up to publish (`wait_ready`)
        self._stop = threading.Event()
        endpoint = _endpoint(transport, tmpdir)
        self.source = source if source is not None else open_source(factory)
        if transport == "inproc":
            self.pub = Publisher(endpoint, zmq.Context.shadow(ctx.underlying))
            self.endpoint = self.pub.endpoint

            def run() -> None:
                try:
                    self.pub.wait_for_subscriber(30.0)
                    stoppable: Any = _StoppableSource(self.source, self._stop)
                    self.sent = publish_source(stoppable, self.pub, rate,
                                               frame_ticks=frame_ticks)
                except BaseException as exc:
                    self.error = f"{type(exc).__name__}: {exc}"

            self.thread: threading.Thread | None = threading.Thread(
                target=run, name="replay-feed", daemon=True)
            self.proc = None
        else:
            self.thread = None
            cpus_from_env(FEED_ENV)  # a typo is the user's one-line error, not the child's
            mpctx = mp.get_context("spawn")
            self.conn, child = mpctx.Pipe(duplex=False)
            self._release = mpctx.Event()
            self._go = mpctx.Event()
            self.proc = mpctx.Process(target=_feed_process,
                                      args=(factory, endpoint, child, self._release, self._go,
                                            rate, frame_ticks),
                                      daemon=True)
            self.proc.start()
            kind, value = "error", "feed process did not start within 60 s"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if self.conn.poll(0.05):
                    kind, value = self.conn.recv()
                    break
                if not self.proc.is_alive():
                    # spawn re-imports the caller's main module: a script that calls
                    # replay() at import time without a main guard kills the child
                    kind, value = "error", (
                        f"feed process exited with code {self.proc.exitcode} before it "
                        "started; a script calling replay() with ipc/tcp must do so under "
                        "`if __name__ == '__main__':`")
                    break
            if kind != "endpoint":
                raise UserError(f"replay feed failed: {value}")
            self.endpoint = value

    def start(self) -> None:
        if self.thread is not None:
            self.thread.start()
        else:
            self._go.set()

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Return once a feed process has seen the subscriber and loaded its compiled
        encoder, so that a clock started now times publishing, not the child's set-up (a
        raw-limit run that started its clock at once measured slower than the replay
        itself). A feed thread sets up after `start`: nothing to wait for."""
        if self.proc is None:
            return
        deadline = time.monotonic() + timeout_s
        while not self.ready:
            self._collect()
            if self.error is not None or not self.proc.is_alive():
                raise UserError(f"replay feed failed: {self.error or 'the process exited'}")
            if time.monotonic() > deadline:
                raise UserError(f"replay feed not ready within {timeout_s:.0f} s")
            self.conn.poll(0.01)

    def alive(self) -> bool:
        """Still publishing: a feed process that reported "done" is finished, although it
        keeps its socket open until `close` releases it."""
        if self.thread is not None:
            return self.thread.is_alive()
        assert self.proc is not None
        self._collect()
        return self.proc.is_alive() and not self.finished

    def _collect(self) -> None:
        if self.proc is not None:
            while self.conn.poll():
                try:
                    kind, value = self.conn.recv()
                except EOFError:  # the child exited and closed its end
                    break
                if kind == "error":
                    self.error = value
                elif kind == "ready":
                    self.ready = True
                elif kind == "cpu":
                    self.cpu_seconds = float(value)
                elif kind == "source_skipped":
                    self.source_skipped = dict(value)
                elif kind == "done":
                    self.sent = int(value)
                    self.finished = True

    def abort(self) -> None:
        """The engine failed: stop publishing now (the subscriber is closed first, so a
        send blocked on a full queue returns)."""
        self._stop.set()
        if self.proc is not None and self.proc.is_alive():
            self.proc.terminate()

    def close(self) -> None:
        if self.thread is not None:
            if self.thread.ident is not None:
                self.thread.join(timeout=30)
            if self.thread.is_alive():  # never close a socket another thread still uses
                raise RuntimeError("replay feed thread did not stop")
            self.pub.close()
            self.source_skipped = _source_skips(self.source)
        elif self.proc is not None:
            self._release.set()
            self.proc.join(timeout=10)
            self._collect()
            if self.proc.is_alive():
                self.proc.terminate()


async def replay_async(
    factory: SourceFactory,
    strategy: Strategy,
    config: EngineConfig | None = None,
    option_book: OptionPricing | None = None,
    progress: Callable[[int], None] | None = None,
    publish_rate: float = 0.0,
    trade_from: int | None = None,
    session_hook: SessionHook | None = None,
) -> ReplayResult:
    """Replay `factory`'s records through the engine. `publish_rate` > 0 paces the feed at
    that many messages per second (a market played back at a chosen speed, as a live
    feed would arrive); 0 publishes as fast as the engine takes them. `trade_from` (ns):
    the records before it only warm the indicators (`Engine.warm_until`). `session_hook`: the
    engine's work at each session boundary (re-evolution, engine/live/reevolution.py)."""
    config = config or EngineConfig()
    ctx = zmq.asyncio.Context()
    tmpdir = tempfile.mkdtemp(prefix="replay-ipc-")
    # batches of trades unless paced (a market played back tick by tick) or with option
    # groups (repriced after every underlying tick: their spots come per message)
    frame_ticks = 0 if publish_rate > 0 or option_book is not None else config.replay_frame_ticks
    source = open_source(factory)
    transport = feed_transport(config.transport, strategy, len(source.symbols))
    feed = _Feed(factory, transport, ctx, tmpdir, publish_rate, frame_ticks, source=source)
    sub = Subscriber(feed.endpoint, ctx, limits=config.validation,
                     max_batch=config.receive_batch_in_force)
    last_progress = 0
    failed = True
    frozen = contextlib.ExitStack()
    try:
        engine = Engine(list(feed.source.symbols), strategy, config, option_book=option_book,
                        hooks=EngineHooks(session=session_hook))
        if trade_from is not None:
            engine.warm_until(trade_from)
        if frame_ticks > 0:  # the compiled batch paths are loaded before the clock starts
            warm_batches()
            warm_bars()
        frozen.enter_context(startup_objects_frozen())  # no full collection walks them
        feed.wait_ready()
        t0, cpu0 = time.perf_counter(), time.process_time()
        feed.start()
        while not engine.finished:
            # repricings finished while the feed is quiet are collected within a
            # millisecond, not when the next batch arrives (a paced feed idles between)
            busy = engine.poll_options()
            if not await sub.socket.poll(1 if busy else 250):
                if not feed.alive():
                    # the feed ended; anything it sent is already queued: drain once more
                    if await sub.socket.poll(500):
                        continue
                    raise UserError(f"replay feed stopped before the end of data: "
                                    f"{feed.error or 'no final heartbeat received'}")
                continue
            await engine.consume(await sub.lazy_batch(), sub.validator)
            if progress is not None and engine.stats.market_data - last_progress >= 250_000:
                last_progress = engine.stats.market_data
                progress(engine.stats.market_data)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        failed = False
    finally:
        frozen.close()
        # the subscriber goes first: with no subscriber the publisher drops instead of
        # blocking, so the feed thread can see the stop and end before its socket closes
        sub.close()
        if failed:
            feed.abort()
        feed.close()
        ctx.destroy(linger=0)
        with contextlib.suppress(OSError):
            os.rmdir(tmpdir)
    if feed.error:
        raise UserError(f"replay feed failed: {feed.error}")
    return ReplayResult(
        engine=engine, wall_seconds=wall, source_name=getattr(feed.source, "name", "source"),
        skipped=dict(sub.validator.skipped.counts), source_skipped=feed.source_skipped,
        received=sub.validator.received, sent=feed.sent, transport=feed.transport,
        cpu_seconds=cpu, feed_cpu_seconds=feed.cpu_seconds,
    )


def replay(factory: SourceFactory, strategy: Strategy, config: EngineConfig | None = None,
           option_book: OptionPricing | None = None, progress: Callable[[int], None] | None = None,
           publish_rate: float = 0.0, trade_from: int | None = None,
           session_hook: SessionHook | None = None) -> ReplayResult:
    return asyncio.run(replay_async(factory, strategy, config, option_book, progress,
                                    publish_rate, trade_from, session_hook))


async def raw_limit_async(factory: SourceFactory, transport: str = "inproc",
                          frame_ticks: int = 0) -> tuple[int, float]:
    """The transport's own limit for this source: publish -> receive -> decode, no engine.

    Returns (messages decoded, wall seconds), timed like `replay_async` from the feed's start
    to the final heartbeat. `frame_ticks` > 0: the replay's batch frames, decoded into
    their columns (numpy views) and counted by rows.
    """
    from feeds.messages import Heartbeat, TradeBatch, make_decoder
    from feeds.trade_batch import batch_columns

    ctx = zmq.asyncio.Context()
    tmpdir = tempfile.mkdtemp(prefix="replay-ipc-")
    feed = _Feed(factory, transport, ctx, tmpdir, frame_ticks=frame_ticks)
    sub = Subscriber(feed.endpoint, ctx)
    decode = make_decoder().decode
    n = 0
    if frame_ticks > 0:  # as the replay: the compiled batch decoding loaded before the clock
        warm_batches()
    feed.wait_ready()
    t0 = time.perf_counter()
    feed.start()
    try:
        done = False
        while not done:
            if not await sub.socket.poll(250):
                if not feed.alive() and not await sub.socket.poll(500):
                    raise UserError(f"feed stopped early: {feed.error}")
                continue
            for _topic, payload in await sub.lazy_batch():
                m = decode(payload)
                if type(m) is TradeBatch:
                    n += batch_columns(m).times.shape[0]  # type: ignore[union-attr]
                    continue
                n += 1
                if type(m) is Heartbeat and m.final:
                    done = True
        wall = time.perf_counter() - t0
    finally:
        feed.close()
        sub.close()
        ctx.destroy(linger=0)
    return n, wall
