"""The engine's side of the option worker: it writes spots into shared memory
(`worker_layout`) and reads finished repricings from it; the worker process
(`worker_server`) owns the pricers.

The client writes the newest spot, the tick's timestamp and the time of the request into
a shared-memory slot per group, and `poll()` reads a counter per group and, when it moved,
copies the finished arrays out (one `OptionGroupValues` message). The engine hands the
client its spots from validation: every OPTION_TAP_EVERY-th accepted trade of an
underlying (default 8) as the validator accepts it, while the batch is still being
received, and each batch's newest right after validation
(`engine.trading.core.Engine.take_spots_from`). By default every spot handed over writes its
request (four stores); the worker takes the newest when it can launch. Requests can also
go on demand (OPTION_REQUEST_EVERY=0): the worker raises a group's WANT flag when it could
launch the group at once, and only then does a spot write its request; other spots are
kept in the client as the group's pending one (one list store, dated from the start of the
engine's batch) and the first tick that finds WANT raised, or the next poll() (after every
received batch), sends the newest. k >= 2 sends every k-th held tick as well
(`request_every`). A held tick still collects a finished repricing (one more
shared-memory read), so no result waits for a request. What each choice cost and gave,
measured: benchmarks/results/h200-2026-11-23-between-ticks/README.md.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
import time
import weakref
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from engine.affinity import WORKER_ENV, cpus_from_env
from engine.options.group import contract_symbols
from engine.options.worker_layout import (
    FAILED,
    HEADER,
    LAUNCHES,
    PRICED,
    READY,
    REQ_SLOT,
    REQ_SPOT,
    REQ_T0,
    REQ_TS,
    RES,
    RES_REQ,
    RES_SPOT,
    RES_T0,
    RES_TS,
    SLOT,
    STOP,
    Layout,
    group_sizes,
    shm_buffer,
    words_by_symbol,
)
from engine.options.worker_settings import request_every, tap_every, worker_settings
from feeds.messages import OptionGroupValues, OptionValue

START_TIMEOUT_S = 600.0
_INF = math.inf
_now_ns = time.perf_counter_ns


class WorkerClient:
    """The engine's side: request repricings and collect results through shared memory."""

    def __init__(self, configs: list[Any], device: str, timezone: str,
                 visible_devices: str | None = None, wait: bool = True,
                 seq: list[int] | None = None) -> None:
        """`visible_devices`: the worker process's CUDA_VISIBLE_DEVICES (None: inherited),
        so that each of several workers owns its own GPU (`open_workers`). `wait=False`
        returns once the worker is started; `wait_ready` then waits for it (several
        workers compile and warm up side by side). `seq`: the one-cell message sequence
        counter, shared by several clients whose messages form one sequence."""
        worker_settings()  # a bad OPTION_WORKER_* value: the user's error, before any start
        cpus_from_env(WORKER_ENV)
        self.tap_every = tap_every()
        self._send_every = request_every()
        self.configs = configs
        self.device = device
        self.visible_devices = visible_devices
        # the contracts' symbols, by the same recipe as the worker (no pricer needed here)
        self.symbols: list[tuple[str, ...]] = [contract_symbols(c) for c in configs]
        self.layout = Layout(group_sizes(configs))
        self._map_memory(configs)
        self._by_symbol = words_by_symbol(configs)
        self.underlyings = set(self._by_symbol)
        self._init_requests(len(configs))
        self._out: list[OptionValue | OptionGroupValues] = []  # collected, not yet polled
        #: the newest message's sequence number (one cell: several clients may share it,
        #: and a result is collected on a tick as well as on a poll)
        self._seq = seq if seq is not None else [0]
        self.latencies_ns: list[int] = []
        self.repricings = 0
        self._last: list[OptionGroupValues | None] = [None] * len(configs)
        # numpy scalars (a strike from an array) encode as plain floats
        payload = msgspec.json.encode(list(configs), enc_hook=_plain_number)
        self._start(payload, device, timezone, visible_devices)
        if wait:
            self.wait_ready()

    def _map_memory(self, configs: list[Any]) -> None:
        """Create the zeroed shared memory and the views `_collect` reads results through."""
        self._shm = shared_memory.SharedMemory(create=True, size=8 * self.layout.words)
        self._q: Any = shm_buffer(self._shm).cast("q")
        self._d: Any = shm_buffer(self._shm).cast("d")
        for i in range(self.layout.words):
            self._q[i] = 0
        self._res = self.layout.result_views(self._shm.buf)
        #: per group, what `_collect` reads: its words' base, its underlying and contract
        #: symbols, whether it publishes group messages, and its price, delta and gamma
        #: rows as byte views (each copied out once per repricing)
        self._collected = [
            (HEADER + SLOT * g, c.underlying, syms, c.messages == "group",
             *(row.view(np.uint8) for row in r))
            for g, (c, syms, r) in enumerate(zip(configs, self.symbols, self._res, strict=True))]

    def _init_requests(self, n_groups: int) -> None:
        """The request side's state per group: nothing requested, seen or held yet."""
        self._seen = [0] * n_groups  # result counter last read per group
        self._requests = [0] * n_groups  # requests made per group
        #: per group, the newest tick (spot, ts) kept while the worker did not want one;
        #: it is dated from the start of the engine's batch (`batch_t0`) when it is sent
        self._pending: list[tuple[float, int] | None] = [None] * n_groups
        #: when the engine began applying its current batch (`begin_batch`): the held
        #: ticks' arrival, read once a batch instead of a clock read a tick
        self.batch_t0 = time.perf_counter_ns()
        #: per group, ticks held since its last request; at OPTION_REQUEST_EVERY one is sent
        self._unsent = [0] * n_groups
        self._counts_held = self._send_every != sys.maxsize
        self._every_tick = self._send_every == 1  # OPTION_REQUEST_EVERY=1: no holding

    def _start(self, payload: bytes, device: str, timezone: str,
               visible_devices: str | None) -> None:
        """Start the worker process on the shared memory and hand it its groups."""
        # a fresh interpreter (CUDA does not survive fork, and multiprocessing's spawn would
        # re-import the caller's __main__); the groups travel as JSON on stdin
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        if visible_devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible_devices
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "engine.options.worker_server", self._shm.name, device, timezone,
             str(os.getpid())],
            stdin=subprocess.PIPE, env=env, cwd=root)
        # registered before the payload is written: a child that dies at once (broken pipe)
        # still has its process waited for and the segment freed; the views go with it, as
        # the segment can be closed only once they are
        self._finalizer = weakref.finalize(self, _shut_down, self._shm, self._proc,
                                           [self._q, self._d], self._res, self._collected)
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(payload)
            self._proc.stdin.close()
        except BrokenPipeError:
            self._finalizer()
            raise RuntimeError("option worker process exited before it read its groups"
                               ) from None

    def wait_ready(self) -> None:
        """Until the worker has built and warmed its pricers (an error if it died or took
        longer than START_TIMEOUT_S)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._q[READY]:
            self._check_alive()
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("option worker did not start in time")
            time.sleep(0.01)

    def _check_alive(self) -> None:
        if self._q[FAILED] or self._proc.poll() is not None:
            self.close()
            raise RuntimeError("option worker failed (its traceback is on stderr)")

    def begin_batch(self) -> None:
        """The engine starts applying a received batch: held ticks are dated from now (one
        clock read a batch, not one a tick)."""
        self.batch_t0 = _now_ns()

    def on_spot(self, symbol: str, spot: float, ts: int) -> None:
        """Ask for the groups of `symbol` at `spot` (the newest request wins); the engine
        calls this directly on every tick of an underlying. By default the request is
        written at once (four shared-memory stores). On demand (OPTION_REQUEST_EVERY=0)
        it is written only while the worker has raised the group's WANT flag (a free
        launch slot, the spacing passed); otherwise the tick is kept as the group's
        pending one (one list store) and sent by the first tick that finds WANT raised
        or by the next poll(), at the cost of a flag read and a results check."""
        entry = self._by_symbol.get(symbol)
        if entry is None or not (0.0 < spot < _INF):  # NaN fails too: never priced
            return
        groups, ticks = entry
        ticks[0] += 1
        q, seen = self._q, self._seen
        for g, req, want, res, slot0, slot1 in groups:
            if self._every_tick or q[want]:
                # request n into slot n % 2, then n published (as _request, inlined: this
                # runs on every tick of the underlying by default)
                requests = self._requests
                n = requests[g] + 1
                requests[g] = n
                i_spot, i_ts, i_t0 = slot1 if n & 1 else slot0
                self._d[i_spot] = spot
                q[i_ts] = ts
                q[i_t0] = _now_ns()
                q[req] = n
                if not self._every_tick:
                    self._pending[g] = None
                    self._unsent[g] = 0
                if q[res] != seen[g]:
                    self._collect(g)
                continue
            if q[res] != seen[g]:
                # a repricing finished: take it now, before the worker's next one replaces
                # it (results wait for no request; with 2 in flight they would be lost)
                self._collect(g)
            if self._counts_held:
                self._hold_counted(g, spot, ts)
            else:
                self._pending[g] = (spot, ts)

    def _hold_counted(self, g: int, spot: float, ts: int) -> None:
        """OPTION_REQUEST_EVERY=k: every k-th tick held for group g is written anyway, so a
        recent spot is already waiting when the worker gets ready."""
        unsent = self._unsent
        unsent[g] += 1
        if unsent[g] >= self._send_every:
            self._request(g, spot, ts, time.perf_counter_ns())
        else:
            self._pending[g] = (spot, ts)

    def _request(self, g: int, spot: float, ts: int, t0: int) -> None:
        """Write request n for group g into slot n % 2, then publish n; collect g's
        finished results on the way (a request goes out about once per repricing)."""
        q = self._q
        b = HEADER + SLOT * g
        n = self._requests[g] + 1
        self._requests[g] = n
        s = b + REQ_SLOT * (n & 1)
        self._d[s + REQ_SPOT] = spot
        q[s + REQ_TS] = ts
        q[s + REQ_T0] = t0
        q[b] = n
        self._pending[g] = None
        self._unsent[g] = 0
        if q[b + RES] != self._seen[g]:
            self._collect(g)

    @property
    def ticks(self) -> int:
        """Underlying ticks asked for (good prices only)."""
        return sum(n for _, (n,) in self._by_symbol.values())

    def in_flight(self) -> int:
        """Groups whose newest request has not been priced and collected yet."""
        q = self._q
        busy = 0
        for g in range(self.layout.n_groups):
            b = HEADER + SLOT * g
            if (self._requests[g] > q[b + RES_REQ] or q[b + RES] != self._seen[g]
                    or self._pending[g] is not None):
                busy += 1
        if busy and (q[FAILED] or self._proc.poll() is not None):
            self._check_alive()
        return busy

    def poll(self) -> list[OptionValue | OptionGroupValues]:
        """Messages of repricings finished since the last call; never blocks."""
        q, seen, pending = self._q, self._seen, self._pending
        for g in range(self.layout.n_groups):
            held = pending[g]
            if held is not None:
                # sent whether or not the worker wants it yet: the engine polls after each
                # batch of ticks and while it is idle, and the newest spot must not wait
                # for a later tick that may never come (a quiet underlying); the worker
                # takes it as soon as it is ready
                self._request(g, held[0], held[1], self.batch_t0)
            elif q[HEADER + SLOT * g + RES] != seen[g]:
                self._collect(g)
        out = self._out
        if not out:
            return []
        self._out = []
        return out

    def _collect(self, g: int) -> None:
        """Read group g's newest results (skipped if torn by the worker: read next time).
        The engine's cost per repricing (a busy group gives it 20k+ a second): a few
        shared-memory reads, one copy per array, one message (measured:
        benchmarks/results/h200-2026-11-23-between-ticks/README.md)."""
        q = self._q
        b, underlying, symbols, group_msgs, prices, deltas, gammas = self._collected[g]
        c = q[b + RES]
        if c == self._seen[g] or c & 1:
            return
        seq = self._seq[0] + 1
        msg = OptionGroupValues(seq, q[b + RES_TS], underlying, self._d[b + RES_SPOT],
                                symbols, prices.tobytes(), deltas.tobytes(), gammas.tobytes())
        t0 = q[b + RES_T0]
        if q[b + RES] != c:
            return  # overwritten while read: the next poll takes the newer one
        self._seen[g] = c
        self.latencies_ns.append(_now_ns() - t0)
        self.repricings += 1
        if group_msgs:
            self._seq[0] = seq
            self._out.append(msg)
        else:
            per_contract = msg.option_values(seq)
            self._seq[0] = seq + len(per_contract) - 1
            self._out.extend(per_contract)
        self._last[g] = msg  # its arrays are decoded only when asked for (summary)

    def last_values(self) -> list[tuple[tuple[str, ...], tuple[float, Any, Any, Any]]]:
        return [(s, (m.spot, m.prices(), m.deltas(), m.gammas()))
                for s, m in zip(self.symbols, self._last, strict=True) if m is not None]

    def stats(self) -> dict[str, Any]:
        q = self._q
        return {
            "groups": self.layout.n_groups, "options": sum(self.layout.sizes),
            "repricings": self.repricings, "latencies_ns": list(self.latencies_ns),
            "worker_repricings": sum(int(q[HEADER + SLOT * g + PRICED])
                                     for g in range(self.layout.n_groups)),
            # ticks whose spot was never priced: a newer one of the same group replaced it
            "coalesced": sum(len(groups) * n for groups, (n,) in self._by_symbol.values()) - sum(
                int(q[HEADER + SLOT * g + LAUNCHES]) for g in range(self.layout.n_groups)),
        }

    def close(self) -> None:
        """Stop the worker and free the shared memory (views released first)."""
        self._finalizer()


def _plain_number(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    raise NotImplementedError(f"cannot send {type(obj).__name__} to the option worker")


def _shut_down(shm: shared_memory.SharedMemory, proc: Any, views: list[Any],
               arrays: list[np.ndarray], byte_views: list[Any]) -> None:
    views[0][STOP] = 1
    for view in views:
        view.release()
    arrays.clear()
    byte_views.clear()
    try:
        proc.wait(5.0)
    except subprocess.TimeoutExpired:
        proc.terminate()
        proc.wait(1.0)
    with contextlib.suppress(BufferError):  # a view alive elsewhere: unlinked anyway
        shm.close()
    with contextlib.suppress(FileNotFoundError):
        shm.unlink()

