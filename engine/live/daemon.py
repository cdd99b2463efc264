"""The live paper-trading daemon's loop: receive, validate, trade, journal, publish, report.

Per received batch: validate (bad frames counted and skipped), drop the feed's
end-of-stream (a feed ending never liquidates a live book), conflate market data when the
batch shows the daemon is behind, run the engine, check the day's loss, then one journal
transaction with the batch's orders, fills, risk rejections, stream positions and, every
few bars, a snapshot; only after the commit are orders, fills and rejections published, so
whatever a reader saw is journaled. Between batches: the heartbeat timeout (stale feed), the
status line and JSON, and the operator's kill-switch reset.

`kill -9` is SIGTERM: each step's raw frames go into the journal's input log in the step's
own transaction, with the flags that decided it besides the frames (conflated, feed
stale, kill switch on), and a snapshot empties the log. A restart restores the snapshot
and re-applies the logged steps through the same `_apply` as live (validation included,
so the validator's state is rebuilt too), without journaling or publishing anything:
indicators, strategy, signals, pending orders and the book end exactly where the killed
daemon was. The orders and fills the replay makes are checked against the journal's; on
any difference the daemon says so and falls back to the snapshot plus the journaled fills.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import signal
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import msgspec
import zmq
import zmq.asyncio

from engine.live.journal import Journal, JournalState
from engine.live.reevolution import LiveReevolution
from engine.live.risk_gate import RiskGate
from engine.live.snapshot import capture, restore, warmup_guard
from engine.settings.config import EngineConfig
from engine.trading.core import Engine, EngineHooks
from engine.trading.orders import OrderHooks, StateChange
from feeds.messages import Fill, Heartbeat, Message, Order, Quote, Trade
from feeds.transport import Publisher, Subscriber, transport_cap
from strategies.base import Strategy

log = logging.getLogger("live")

#: market data is conflated once this many received batches in a row were full
CONFLATE_AFTER_FULL_BATCHES = 4
#: at most this many messages validated, processed, journaled and published as one step of
#: a batch (a step also ends at a bar close, `Daemon._apply`)
STEP = 64
#: the WAL is checkpointed after this many commits (a few pages each, and a snapshot's
#: now and then: about SQLite's own 1000 pages), once the step has published
#: (`_after_commit`); more often costs the orders' latency too (the caches it empties)
CHECKPOINT_AFTER_COMMITS = 256
#: flags of a logged step: what decided it besides its frames
LOG_CONFLATE, LOG_STALE, LOG_KILLED = 1, 2, 4
_frames_encoder = msgspec.msgpack.Encoder()
_frames_decoder = msgspec.msgpack.Decoder(list[list[bytes]])
#: latency histogram bucket upper bounds, microseconds (the last bucket is open)
LATENCY_BOUNDS_US = (5, 10, 20, 50, 100, 250, 500, 1000, 2500, 10_000, 100_000)


class LatencyHistogram:
    """Receive-to-publish times of orders and fills: fixed buckets plus exact recent
    percentiles (the newest 100,000 samples)."""

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BOUNDS_US) + 1)
        self.recent: deque[float] = deque(maxlen=100_000)

    def add(self, us: float) -> None:
        i = 0
        for b in LATENCY_BOUNDS_US:
            if us <= b:
                break
            i += 1
        self.counts[i] += 1
        self.recent.append(us)

    def summary(self) -> dict[str, Any]:
        xs = sorted(self.recent)

        def pct(q: float) -> float | None:
            return round(xs[min(len(xs) - 1, int(q * len(xs)))], 1) if xs else None

        labels = [f"<={b}us" for b in LATENCY_BOUNDS_US] + [f">{LATENCY_BOUNDS_US[-1]}us"]
        return {"n": sum(self.counts), "p50_us": pct(0.5), "p90_us": pct(0.9),
                "p99_us": pct(0.99), "max_us": round(xs[-1], 1) if xs else None,
                "buckets": dict(zip(labels, self.counts, strict=True))}


class Daemon:
    def __init__(self, *, cfg: EngineConfig, strategy: Strategy, journal: Journal,
                 state: JournalState, sub: Subscriber, out: Publisher, device: str,
                 status_file: Path | None, max_seconds: float, ticks: str,
                 status_json: bool = False, reevolution: LiveReevolution | None = None
                 ) -> None:
        self.cfg = cfg
        #: the daily re-evolution of a GP strategy ([reevolve]; engine/live/reevolution.py)
        self.reevolution = reevolution
        self.opts = cfg.live
        self.journal = journal
        self.sub = sub
        self.validator = sub.validator
        self.out = out
        self.device = device
        self.status_file = status_file
        self.status_json = status_json
        self.max_seconds = max_seconds
        self.latency = LatencyHistogram()
        self.conflated = 0
        self.stale = False
        self.stale_episodes = 0
        self.feed_ended = 0
        self.orders_out = 0
        self.fills_out = 0
        self.rejections_out = 0
        self.last_batch = 0
        self.max_batch = 0
        self._outbox: list[Any] = []
        #: when the transaction that steps left open began (perf_counter s; None: none
        #: open), and how long one may stay open (`[live] commit_within_ms`)
        self._held_since: float | None = None
        self._hold_s = cfg.live.commit_within_ms / 1000.0
        # the WAL is checkpointed after publishing, not by SQLite inside some commit
        # (`_after_commit`); commits counted since the last checkpoint
        journal.defer_checkpoints()
        self._commits_unchecked = 0
        self._full_streak = 0
        self._bar_events_at_snapshot = 0
        self._risk_day_journaled = state.risk_day
        self._state = state
        self._strategy = strategy
        #: the logged steps to re-apply (`recover`), and where a replay puts its orders
        self._pending_log: list[tuple[int, bytes]] = []
        self._replay_sink: tuple[list[Order], list[Fill]] | None = None
        self.restored = self._build_engine(strategy, state, use_log=self.opts.log_input)
        self._after_build()
        self.ticks = ticks
        self.disconnects = 0
        # the status can be asked for before `run` (which restarts both): a daemon driven
        # step by step, a status written before the first message
        self.t0 = time.monotonic()
        self._ticks_at_status = (self.t0, self.engine.stats.market_data)
        # connection events of the tick socket: ZeroMQ retries a dropped connection by
        # itself but gives up after a protocol error (a frame above the transport's hard
        # cap, `feeds.transport.transport_cap`, far above max_message_bytes, whose larger
        # messages are only counted; a failed handshake such as an impostor without the
        # CURVE keys); the daemon then reconnects (see _watch_connection)
        assert sub.monitor is not None, "the daemon's subscriber is opened with monitor=True"
        self._monitor = sub.monitor
        self._gave_up_at: float | None = None
        _warm_up_compiled_code()

    # ------------------------------------------------------------------ start
    def _after_build(self) -> None:
        """Bookkeeping of what the journal holds, once the engine is (re)built."""
        self._known = len(self.engine.symbols)
        for i, s in enumerate(self.engine.symbols):
            self.journal.record_symbol(s, i)
        self._session_seen = self.validator.session
        self._session_changes_journaled = self.validator.session_changes
        self._session_journaled = self._state.session

    def _build_engine(self, strategy: Strategy, state: JournalState, use_log: bool) -> str:
        """The engine as the journal leaves it: the snapshot (or nothing), then either the
        logged input still to re-apply (`recover`) or the journaled fills on top."""
        cfg = self.cfg
        self.risk = RiskGate(cfg.risk)
        option_book = None
        if cfg.options:  # option groups repriced after each underlying tick, values published
            from engine.options.book import open_option_book

            option_book = open_option_book(list(cfg.options), device=self.device,
                                           timezone=cfg.timezone,
                                           every_ms=cfg.options_every_ms)
        snap = state.snapshot
        if snap is not None and snap.state.get("strategy_name") != strategy.name:
            log.warning("snapshot taken with strategy %s, now %s: starting cold",
                        snap.state.get("strategy_name"), strategy.name)
            snap = None
        origin = state.input_log_from
        replay = bool(use_log and state.input_log
                      and ((snap is not None and origin == "snapshot")
                           or (state.snapshot is None and origin == "start")))
        if snap is not None:
            symbols = list(snap.state["symbols"])
        else:
            symbols = [] if replay else list(state.symbols)
        hooks = EngineHooks(OrderHooks(on_order=self._on_order, on_fill=self._on_fill,
                                       on_state=self._on_order_state,
                                       risk_check=self.risk.check),
                            session=self.reevolution)
        # a bar close's equity point is taken after its orders are published (`_step`)
        self.engine = Engine(symbols, strategy, cfg, option_book=option_book, hooks=hooks,
                             defer_equity=True)
        self.risk.watch(self.engine)
        v = self.validator
        if replay:  # `recover` re-applies the log; the journal's truth comes after it
            self._pending_log = list(state.input_log)
            if snap is not None:
                restore(self.engine, v, snap.state,
                        [o for o in state.orders if o.order_id <= snap.last_order_id],
                        [f for f in state.fills if f.fill_id <= snap.last_fill_id],
                        snap.last_fill_id, snap.last_order_id)
                self.risk.restore(snap.state.get("risk", {}))
                self._bar_events_at_snapshot = self.engine.stats.bar_events
            return "snapshot" if snap is not None else "log"
        self._pending_log = []
        if use_log:  # a log that cannot rebuild this state is void from here on
            if state.snapshot is None and not state.fills and not state.orders:
                self.journal.restart_input_log("start")
            elif snap is None:
                self.journal.restart_input_log("cold")
        if snap is not None:
            restore(self.engine, v, snap.state, state.orders, state.fills,
                    snap.last_fill_id, snap.last_order_id)
            self.risk.restore(snap.state.get("risk", {}))
            for s in state.symbols:  # symbols journaled after the snapshot
                if s not in self.engine.sym_index:
                    self.engine.register(s)
            self._bar_events_at_snapshot = self.engine.stats.bar_events
            how = "snapshot"
        else:
            self.engine.restore(state.orders, state.fills)
            if state.snapshot is not None:  # another strategy's: its risk state still holds
                self.risk.restore(state.snapshot.state.get("risk", {}))
            _warn_unfilled(state)
            held = self.engine.decisions.signal.copy()
            if held.any():  # cold: keep positions through the indicators' warm-up
                self.engine.strategy = warmup_guard(self.engine, held)
            how = "cold" if state.fills else "new"
        self._journal_truth(state)
        # limit, stop and bracket orders still working when the daemon stopped
        self.engine.orders.restore_working(
            [StateChange.from_row(r) for r in self.journal.order_states()])
        return how

    def _journal_truth(self, state: JournalState) -> None:
        """What the journal says over what a snapshot (or a replay) holds."""
        v = self.validator
        if state.risk_day is not None:  # journaled every batch: never behind a snapshot
            self.risk.restore_day(*state.risk_day)
        # the journal's stream positions are the truth (ahead of a snapshot after kill -9)
        # (a snapshot's may hold streams of a feed session since replaced)
        v.last_seq = dict(state.last_seq)
        if state.session is not None:
            v.session = state.session
        if self.risk.killed and not state.kill_switch:  # reset while the daemon was down
            self.risk.reset_kill_switch()
        self.risk.killed = state.kill_switch  # the journal's word is the operator's

    async def recover(self) -> None:
        """Re-apply the input logged since the snapshot (a daemon killed with -9): the
        same steps through the same code, nothing journaled or published again."""
        steps = self._pending_log
        if not steps:
            return
        self._pending_log = []
        st = self._state
        snap = st.snapshot if self.restored == "snapshot" else None
        base_order = snap.last_order_id if snap is not None else 0
        base_fill = snap.last_fill_id if snap is not None else 0
        made: tuple[list[Order], list[Fill]] = ([], [])
        self._replay_sink = made
        n_frames = 0
        try:
            for flags, blob in steps:
                raw = _frames_decoder.decode(blob)
                n_frames += len(raw)
                self.risk.stale = bool(flags & LOG_STALE)
                if self.risk.killed and not flags & LOG_KILLED:  # the operator's reset
                    self.risk.reset_kill_switch()
                elif flags & LOG_KILLED:  # on when the step ran (the journal's word then)
                    self.risk.killed = True
                await self._apply(raw, bool(flags & LOG_CONFLATE))
                self.risk.rejections.clear()  # journaled (and published) the first time
        finally:
            self._replay_sink = None
        self.risk.stale = False
        orders = [o for o in st.orders if o.order_id > base_order]
        fills = [f for f in st.fills if f.fill_id > base_fill]
        if _same_trading(made, orders, fills):
            log.info("re-applied %d logged steps (%d messages) since the %s: state rebuilt "
                     "exactly (%d orders, %d fills as journaled)", len(steps), n_frames,
                     "snapshot" if snap is not None else "journal's start", len(orders),
                     len(fills))
            self.engine.broker.orders = list(st.orders)
            self.engine.broker.fills = list(st.fills)  # with their journal fill ids
            for s in st.symbols:
                if s not in self.engine.sym_index:
                    self.engine.register(s)
            self._journal_truth(st)
        else:
            log.warning("re-applying the logged input made %d orders and %d fills where the "
                        "journal holds %d and %d: restoring from the snapshot and the "
                        "journaled fills instead", len(made[0]), len(made[1]), len(orders),
                        len(fills))
            self.validator.__init__(self.validator.limits)  # type: ignore[misc]
            self.restored = self._build_engine(self._strategy, st, use_log=False)
        self._after_build()

    # ------------------------------------------------------------------ callbacks
    def _on_order(self, o: Order) -> None:
        if self._replay_sink is not None:  # journaled when it was first made
            self._replay_sink[0].append(o)
            return
        self.journal.record_order(o)  # in the batch's transaction; published after commit
        self._outbox.append(o)

    def _on_order_state(self, c: StateChange) -> None:
        """An order's state change, journaled in the batch's transaction (issue 29)."""
        if self._replay_sink is None:  # re-applied input: journaled when it first happened
            self.journal.record_order_state(c)

    def _on_fill(self, f: Fill) -> None:
        if self._replay_sink is not None:
            self._replay_sink[1].append(f)
            return
        fill_id = self.journal.record_fill(f)
        self._outbox.append(msgspec.structs.replace(f, seq=fill_id, fill_id=fill_id))

    # ------------------------------------------------------------------ loop
    async def run(self, stop: asyncio.Event, status_now: asyncio.Event,
                  topics: list[bytes]) -> None:
        await self.recover()  # after kill -9: the logged input, before any new one
        for t in topics:  # ready: the feed may start
            self.sub.socket.setsockopt(zmq.SUBSCRIBE, t)
        engine = self.engine
        sync: zmq.Socket[bytes] = zmq.Socket.shadow(self.sub.socket.underlying)
        opts = self.opts
        t0 = time.monotonic()
        self.t0 = t0
        last_msg = t0
        next_status = t0 + opts.status_every_seconds if opts.status_every_seconds else math.inf
        next_meta = t0 + 1.0
        self._ticks_at_status = (t0, engine.stats.market_data)
        while not stop.is_set():
            now = time.monotonic()
            if self.max_seconds and now - t0 > self.max_seconds:
                break
            busy = engine.poll_options()
            # a blocking poll of the synchronous view: asyncio's wake-up on a ZeroMQ socket
            # costs milliseconds (measured: p50 16 ms receive-to-publish), this one
            # microseconds; the event loop gets control between polls (signals, strategies)
            got = sync.poll(0)
            if not got:  # idle: the held steps commit now, off any order's path
                self.commit_held()
                got = sync.poll(1 if busy else 50)
            await asyncio.sleep(0)
            if got:
                raw = await self.sub.raw_batch()
                t_recv = time.perf_counter()
                last_msg = time.monotonic()
                if self.stale:
                    self._set_stale(False)
                await self._batch(raw, t_recv)
            held = self._held_since
            if held is not None and time.perf_counter() - held >= self._hold_s:
                self.commit_held()  # a feed that never pauses: at most this old
            self._watch_connection()
            if self.reevolution is not None:  # data time against [reevolve] at: cheap
                self.reevolution.poll(engine._now)
            while engine.option_values:  # theoretical values and greeks, newest last
                self.out.send(engine.option_values.popleft())
            now = time.monotonic()
            timeout = opts.heartbeat_timeout_seconds
            if timeout and not self.stale and now - last_msg > timeout:
                self._set_stale(True)
            if now >= next_meta:  # the operator may reset the kill switch meanwhile
                next_meta = now + 1.0
                self._check_kill_switch_reset()
            if now >= next_status or status_now.is_set():
                status_now.clear()
                if now >= next_status:
                    next_status = now + opts.status_every_seconds
                    line = (json.dumps({"ts": round(time.time(), 6), "level": "STATUS",
                                        "logger": "live", "status": self.status()},
                                       default=str)
                            if self.status_json else self.status_line())
                    print(line, file=sys.stderr, flush=True)
                self.write_status()
        self.commit_held()

    def _watch_connection(self) -> None:
        """Reconnect when ZeroMQ gave up on the feed: a disconnect that no retry followed
        within half a second (a plain disconnect is followed by CONNECT_RETRIED at once).
        One connection to the feed at any time, so no message arrives twice."""
        from zmq.utils.monitor import parse_monitor_message

        mon = self._monitor
        while mon.poll(0):
            event = parse_monitor_message(mon.recv_multipart())["event"]
            if event == zmq.EVENT_DISCONNECTED:
                self._gave_up_at = time.monotonic() + 0.5
            elif event in (zmq.EVENT_CONNECT_RETRIED, zmq.EVENT_CONNECTED,
                           zmq.EVENT_CONNECT_DELAYED):
                self._gave_up_at = None
        if self._gave_up_at is None or time.monotonic() < self._gave_up_at:
            return
        self._gave_up_at = None
        self.disconnects += 1
        if self.disconnects <= 10 or self.disconnects % 1000 == 0:  # not a log flood
            log.warning("feed connection dropped by a protocol error (a frame above the "
                        "transport's hard cap of %d bytes, or a failed handshake: no CURVE "
                        "keys?); reconnecting to %s (%d so far)",
                        transport_cap(self.opts.max_message_bytes), self.ticks,
                        self.disconnects)
        sock = self.sub.socket
        with contextlib.suppress(zmq.ZMQError):
            sock.disconnect(self.ticks)
        sock.connect(self.ticks)

    async def _batch(self, raw: list[Any], t_recv: float) -> None:
        n_raw = len(raw)
        self.last_batch = n_raw
        self.max_batch = max(self.max_batch, n_raw)
        # a backlog, not a burst: several full batches in a row
        limit = self.opts.conflate_above
        self._full_streak = (self._full_streak + 1
                             if limit and n_raw >= min(limit, self.sub.max_batch) else 0)
        hold = self._hold_s > 0.0
        if self._full_streak >= CONFLATE_AFTER_FULL_BATCHES:
            await self._step(raw, t_recv, conflate=True, hold=hold)
            return
        # small steps, each committed (or held, `_step`) and published before the next,
        # and a step ends at a bar close: an order waits for the messages before it, not
        # for the batch behind it
        i = 0
        while i < n_raw:
            i += await self._step(raw[i:i + STEP], t_recv, conflate=False, hold=hold,
                                  split=True)

    async def _apply(self, raw: list[Any], conflate: bool, split: bool = False) -> int:
        """A step's frames through validation, the engine and the risk gate: everything
        that decides orders (live, and again after kill -9 from the input log). `split`:
        the step ends after the first trade at or past the open bar's end (the close
        there decides orders: they need not wait for the frames behind it). Returns the
        frames taken (the step's, logged as such)."""
        engine = self.engine
        v = self.validator
        engine.take_spots_from(v)  # the option worker's spots, handed out while validating
        boundary = engine.clock.next_boundary
        msgs = v.validate_many(raw, boundary if split and boundary >= 0 else None)
        engine.validated(v)
        if v.session != self._session_seen:
            log.info("feed session %s%s", v.session,
                     "" if self._session_seen is None else
                     f" replaces {self._session_seen}: sequence check reset")
            self._session_seen = v.session
        msgs = [m for m in msgs if not self._is_end_of_feed(m)]
        if conflate:
            msgs = self._conflate(msgs)
        await engine.process(msgs)
        if self.risk.after_batch():
            log.error("kill switch: daily loss limit hit, flattening every position")
            engine.flatten()
        return v.consumed

    async def _step(self, raw: list[Any], t_recv: float, conflate: bool,
                    hold: bool = False, split: bool = False) -> int:
        """One step of a batch: applied, journaled, committed, then its orders, fills and
        rejections published. `hold` (the loop's steps, `[live] commit_within_ms` > 0): a
        step with nothing to publish leaves its transaction open for the next steps
        (`commit_held`), so the steps between two bar closes do not each pay a commit,
        and neither does the close's step the cache misses their writes would leave."""
        risk = self.risk
        flags = ((LOG_CONFLATE if conflate else 0) | (LOG_STALE if risk.stale else 0)
                 | (LOG_KILLED if risk.killed else 0))
        if self._held_since is None:
            self.journal.begin()
        try:
            taken = await self._apply(raw, conflate, split)
            if taken < len(raw):  # ended at a bar close (`split`): the rest is a next step
                raw = raw[:taken]
            self._journal_step(raw, flags)
            if hold and self._may_hold():
                if self._held_since is None:
                    self._held_since = time.perf_counter()
                self.engine.take_equity_point()  # as after a commit (nothing to publish)
                return taken
            self.journal.commit()
        except BaseException:
            self._held_since = None
            self.journal.rollback()
            raise
        self._held_since = None
        self._publish(t_recv)
        self._after_commit()
        return taken

    def _journal_step(self, raw: list[Any], flags: int) -> None:
        """A step's writes besides its orders and fills (journaled as they are made):
        rejections, the risk day, new symbols, stream positions, the session, the input."""
        engine = self.engine
        v = self.validator
        baseline = self.risk.day_baseline
        if baseline is not None and baseline != self._risk_day_journaled:
            self.journal.record_risk_day(*baseline)
            self._risk_day_journaled = baseline
        if self.risk.rejections:
            for r in self.risk.rejections:
                rid = self.journal.record_rejection(r)
                self._outbox.append(msgspec.structs.replace(r, seq=rid))
            self.risk.rejections.clear()
            if self.risk.killed:
                self.journal.set_meta("kill_switch", "1")
        if len(engine.symbols) > self._known:  # symbols first seen in this batch
            for i in range(self._known, len(engine.symbols)):
                self.journal.record_symbol(engine.symbols[i], i)
            self._known = len(engine.symbols)
        if v.session_changes != self._session_changes_journaled:
            self._session_changes_journaled = v.session_changes
            self.journal.replace_seqs(v.last_seq)  # the old session's streams are void
        else:
            self.journal.record_seqs(v.last_seq)
        if v.session != self._session_journaled:
            self._session_journaled = v.session
            self.journal.set_meta("session", str(v.session))
        if self.opts.log_input:  # committed with the batch it rebuilds
            self.journal.log_input(flags, _frames_encoder.encode(raw))

    def _snapshot_due(self) -> bool:
        return (self.engine.stats.bar_events - self._bar_events_at_snapshot
                >= self.opts.snapshot_every_bars)

    def _may_hold(self) -> bool:
        """Whether the step just journaled may leave its transaction open: nothing to
        publish, no snapshot due, and the open transaction younger than the limit."""
        if self._outbox or self._snapshot_due():
            return False
        since = self._held_since
        return since is None or time.perf_counter() - since < self._hold_s

    def commit_held(self) -> None:
        """Commit the transaction steps left open (`_step`'s `hold`), if any: the loop
        calls it whenever no message is waiting (idle time, off any order's path), once
        the transaction is `commit_within_ms` old, and before it stops."""
        if self._held_since is None:
            return
        self._held_since = None
        try:
            self.journal.commit()
        except BaseException:
            self.journal.rollback()
            raise
        self._after_commit()

    def _after_commit(self) -> None:
        """What follows a commit, off the orders' latency: the bar close's equity point,
        a snapshot when due (the state is still exactly the one of the stream positions
        just committed), a WAL checkpoint when due, a bounded equity curve."""
        engine = self.engine
        engine.take_equity_point()  # the bar close's work its orders did not need
        self._commits_unchecked += 1
        if self._snapshot_due():
            self.journal.begin()
            try:
                self.snapshot()
                self.journal.commit()
            except BaseException:
                self.journal.rollback()
                raise
        if self._commits_unchecked >= CHECKPOINT_AFTER_COMMITS:
            self.journal.checkpoint()
            self._commits_unchecked = 0
        if len(engine.equity_curve) > 2_000:  # a long-running daemon keeps memory bounded
            del engine.equity_curve[:-1_000]

    def _is_end_of_feed(self, m: Message) -> bool:
        if type(m) is Heartbeat and m.final:
            self.feed_ended += 1
            log.info("feed sent end of stream (session %s): the book stays as it is",
                     m.session)
            return True
        return False

    def _conflate(self, msgs: list[Message]) -> list[Message]:
        """Keep the newest trade and quote per symbol of a backlog (and everything else)."""
        newest: dict[tuple[type, str], int] = {}
        for i, m in enumerate(msgs):
            t = type(m)
            if t is Trade or t is Quote:
                newest[(t, m.symbol)] = i
        keep = set(newest.values())
        out = [m for i, m in enumerate(msgs)
               if i in keep or (type(m) is not Trade and type(m) is not Quote)]
        self.conflated += len(msgs) - len(out)
        return out

    def _publish(self, t_recv: float) -> None:
        box = self._outbox
        if not box:
            return
        send = self.out.send
        for m in box:
            send(m)
            t = type(m)
            if t is Order:
                self.orders_out += 1
            elif t is Fill:
                self.fills_out += 1
            else:
                self.rejections_out += 1
        us = (time.perf_counter() - t_recv) * 1e6
        for m in box:
            if type(m) is Order:
                self.latency.add(us)
        box.clear()

    def snapshot(self) -> None:
        """The engine's state into the journal (inside the current transaction)."""
        state = capture(self.engine, self.validator, {"risk": self.risk.state()})
        self.journal.record_snapshot(state, self.engine.stats.bar_events)
        self._bar_events_at_snapshot = self.engine.stats.bar_events

    def shutdown_snapshot(self) -> None:
        self.commit_held()
        self.journal.begin()
        try:
            self.journal.record_seqs(self.validator.last_seq)
            self.snapshot()
            self.journal.commit()
        except BaseException:
            self.journal.rollback()
            raise

    def _set_stale(self, stale: bool) -> None:
        self.stale = stale
        self.risk.stale = stale
        if stale:
            self.stale_episodes += 1
            log.warning("feed stale: no message for %.1f s; new entries blocked",
                        self.opts.heartbeat_timeout_seconds)
        else:
            log.info("feed recovered: data flowing again")

    def _check_kill_switch_reset(self) -> None:
        if not self.risk.killed:
            return
        if self.journal.meta().get("kill_switch") == "0":
            self.risk.reset_kill_switch()
            log.warning("kill switch reset by the operator: entries allowed again")

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        e = self.engine
        v = self.validator
        now = time.monotonic()
        t_prev, ticks_prev = self._ticks_at_status
        rate = (e.stats.market_data - ticks_prev) / max(now - t_prev, 1e-9)
        self._ticks_at_status = (now, e.stats.market_data)
        equity = e.broker.equity()
        return {
            "status": "running",
            "pid": os.getpid(),
            "seconds": now - self.t0,
            "restored_from": self.restored,
            "messages": v.received,
            "ticks": e.stats.market_data,
            "trades": e.stats.trades,
            "ticks_per_s": rate,
            "bars": e.stats.bars,
            "bar_events": e.stats.bar_events,
            "queue_depth": self.last_batch,
            "max_batch": self.max_batch,
            "conflated": self.conflated,
            "skipped": dict(v.skipped.counts),
            # messages held ahead of the stream's clock so far, and held now (waiting for
            # the stream to agree: a daily stream's new day until a second symbol has it)
            "validator": {"held_ahead": v.held_ahead, "held": v.held},
            "rejected": dict(self.risk.rejected),
            "kill_switch": self.risk.killed,
            "stale": self.stale,
            "stale_episodes": self.stale_episodes,
            "feed_session": v.session,
            "feed_session_changes": v.session_changes,
            "feed_ended": self.feed_ended,
            "feed_disconnects": self.disconnects,
            "orders": len(e.broker.orders),
            "fills": len(e.broker.fills),
            "published": {"orders": self.orders_out, "fills": self.fills_out,
                          "rejections": self.rejections_out},
            "equity": equity,
            "pnl": equity - e.broker.initial_capital(),
            "positions": {s: a.position for s, a in zip(e.symbols, e.broker.accounts,
                                                         strict=True) if a.position},
            "device": self.device,
            "latency": self.latency.summary(),
            # the GP rule in use and the next re-evolution (engine/live/reevolution.py)
            **(self.reevolution.status() if self.reevolution is not None else {}),
        }

    def status_line(self) -> str:
        s = self.status()
        lat = s["latency"]
        return (f"live status ticks_per_s={s['ticks_per_s']:.0f} ticks={s['ticks']} "
                f"queue={s['queue_depth']} conflated={s['conflated']} "
                f"skipped={sum(s['skipped'].values())} rejected={sum(s['rejected'].values())} "
                f"stale={int(s['stale'])} kill={int(s['kill_switch'])} orders={s['orders']} "
                f"fills={s['fills']} pnl={s['pnl']:.2f} device={s['device']} "
                f"p50_us={lat['p50_us']} p99_us={lat['p99_us']}" + _rule_words(s))

    def close(self) -> None:
        self.sub.validator.skipped.log_totals()  # the true counts (the first logged alone)
        self.sub.close_monitor()  # through its owner: see Subscriber.close_monitor

    def write_status(self, status: dict[str, Any] | None = None) -> None:
        if self.status_file is None:
            return
        data = status or self.status()
        tmp = self.status_file.with_name(self.status_file.name + ".tmp")
        try:
            tmp.write_text(json.dumps(data, indent=2, default=str))
            os.replace(tmp, self.status_file)  # readers never see half a file
        except OSError as exc:
            log.warning("cannot write status file %s: %s", self.status_file, exc.strerror)


def _same_trading(made: tuple[list[Order], list[Fill]], orders: list[Order],
                  fills: list[Fill]) -> bool:
    """Whether a replay made exactly the journal's orders and fills (ids, times, sizes,
    prices)."""
    def order_key(o: Order) -> tuple[Any, ...]:
        return (o.order_id, o.ts, o.symbol, o.side, o.quantity, o.reason)

    def fill_key(f: Fill) -> tuple[Any, ...]:
        return (f.order_id, f.ts, f.symbol, f.side, f.quantity, f.price, f.commission)

    return ([order_key(o) for o in made[0]] == [order_key(o) for o in orders]
            and [fill_key(f) for f in made[1]] == [fill_key(f) for f in fills])


def _rule_words(s: dict[str, Any]) -> str:
    """The status line's GP rule in use and next re-evolution ([reevolve] only)."""
    rule, re = s.get("rule"), s.get("reevolution")
    if rule is None or re is None:
        return ""
    return (f" rule=v{rule['version']} trained={rule['train_start']}..{rule['train_end']} "
            f"next_evolution={re['next_at']} evolution_failures="
            f"{re['failed'] + re['over_budget']}")


def _warn_unfilled(state: JournalState) -> None:
    """A restart without a snapshot cannot tell an order still pending from one the broker
    refused at fill time (neither has a fill), so it re-sends none of them: say which."""
    filled = {f.order_id for f in state.fills}
    unfilled = [o for o in state.orders if o.order_id not in filled]
    if unfilled:
        log.warning("restart without a snapshot: %d journaled order(s) without a fill are not "
                    "re-sent (e.g. order %d, %s %s); positions are the journaled fills",
                    len(unfilled), unfilled[-1].order_id, unfilled[-1].reason,
                    unfilled[-1].symbol)


def _warm_up_compiled_code() -> None:
    """Compile the indicator kernels now, not at the first bar close (seconds of JIT that
    would otherwise sit in the first order's latency)."""
    import numpy as np

    from engine.trading import compiled_close
    from gpu.indicators.compute import IndicatorBank

    bank = IndicatorBank(1)
    one = np.ones(1)
    bank.update(np.zeros(1, np.int32), one, one, one, one, one)
    compiled_close.warm_up()  # a covered strategy's bar close (one compiled call)


def install_signals(stop: asyncio.Event, status_now: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, status_now.set)


def open_sockets(ctx: zmq.asyncio.Context, ticks: str, orders: str, cfg: EngineConfig,
                 topics: list[bytes], curve: Any) -> tuple[Subscriber, Publisher]:
    from engine.errors import UserError

    opts = cfg.live
    try:
        out = Publisher(orders, zmq.Context.shadow(ctx.underlying), nodrop=False,
                        sndhwm=opts.orders_hwm,
                        curve_server=curve.server if curve is not None else None)
    except zmq.ZMQError as exc:
        raise UserError(f"cannot bind --orders {orders}: {exc}") from None
    try:
        # no subscription yet: a feed waits for one, so nothing queues up while the daemon
        # restores its state and compiles (Daemon.run subscribes)
        sub = Subscriber(ticks, ctx, topics=(), limits=cfg.validation,
                         max_batch=cfg.receive_batch_in_force,
                         rcvhwm=opts.receive_hwm, max_message_bytes=opts.max_message_bytes,
                         curve_client=curve.client if curve is not None else None,
                         monitor=True)
    except zmq.ZMQError as exc:
        out.close()
        raise UserError(f"cannot connect --ticks {ticks}: {exc}") from None
    if out.endpoint.startswith("ipc://"):  # only this user may read orders and fills
        with contextlib.suppress(OSError):
            os.chmod(out.endpoint[len("ipc://"):], 0o600)
    return sub, out
