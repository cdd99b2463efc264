"""A GPU worker process reprices option groups; the engine only writes spots into shared memory.

With one Python interpreter every microsecond of GPU dispatch (kernel launch, event query,
copying results) is taken from the tick loop, even on a thread, because of the GIL. Here a
second process owns the pricers: the engine's side (`WorkerClient`) writes the newest spot,
the tick's timestamp and the time of the request into a shared-memory slot per group, and
`poll()` reads a counter per group and, when it moved, copies the finished arrays out (one
`OptionGroupValues` message). The engine hands the client its spots from validation: every
OPTION_TAP_EVERY-th accepted trade of an underlying (default 8) as the validator accepts it,
while the batch is still being received, and each batch's newest right after validation
(`engine.core.Engine.take_spots_from`). On the H200 that gave the SPY replay 133k
repricings a replay at 0.99 of the tick rate without options, against 76k and 0.88 with
every tick sent from the engine's hot loop (OPTION_TAP_EVERY=0), the median of 20 rounds
each (benchmarks/results/h200-2026-11-23-session4): the hot loop is a quarter of the
engine's time, receiving and validating most of the rest. By default every spot handed
over writes its request (four stores); the worker takes the newest when it can launch.
Requests can also go on demand (OPTION_REQUEST_EVERY=0): the worker raises a group's WANT
flag when it could launch the group at once, and only then does a spot write its request;
other spots are kept in the client as the group's pending one (one list store, dated from
the start of the engine's batch) and the first tick that finds WANT raised, or the next
poll() (after every received batch), sends the newest. k >= 2 sends every k-th held tick as well
(`request_every`). Measured in the third session, with spots from the hot loop: on demand
a tick cost the engine about 0.43 µs in all (0.72 µs when it
writes its request); a request on every tick, written inline, 0.67 µs (2-core dev VM, worker
stopped, 2026-11-23, before inlining 0.82-0.85 µs); on the H200 host the SPY replay kept
the same share of its tick rate either way (0.91-0.92 of the replay without options,
the median of 20 rounds each), but on demand the engine received about half the
repricings (58k a replay against 102k), since ticks wait in the client while it receives
and decodes. A held tick still collects a finished repricing (one more shared-memory read), so no
result waits for a request. The worker (`worker_main`) spins over its batches, each a
`gpu.option_batch.BatchPricer`: up to OPTION_WORKER_SLOTS launches are in flight per batch
(each its own buffers and stream), spaced a slot's share of a launch's latency apart, so
the GPU works on the next spot while the previous results are still on their way.
Finished launches are published oldest first (in request order). Every launch takes the
newest requested spot of each group (coalescing), as in-process. With
OPTION_WORKER_BATCH=1 the groups of one grid share a batch: one launch reprices every
group that has a new spot (one block per option across groups) instead of one launch per
group.

Defaults, from the H200 replays (benchmarks/results/h200-2026-11-23-between-ticks): two
launches in flight doubled the repricings of the 102-option SPY group (34k -> 65k-102k per
replay) and cut its p99 latency from 418 to 143 µs; three or four gave no more. Batching
is off: with ten groups of 1,000 options the GPU is already saturated (one round of 10,000
options takes about 1 ms), and one launch per round made the host's gather and scatter
serial with it, so each group was repriced less often (largest gap 396 ms of data time
against 150-190 ms with one launch per group); it pays only where launches are small. On
that saturated GPU more launches in flight do not pay either (3 per group: largest gap
374 ms, p50 2.1 ms, against 192 ms and 1.1 ms with one): OPTION_WORKER_SLOTS=1 there.

Neither side ever waits for the other. Results use a sequence lock (a counter that is odd
while the slot is written; the reader retries when it read an odd value or the counter
moved during its read). Requests, the engine's hot path, use two slots: the engine writes
request n into slot n % 2 and then publishes n (four stores, no loads); the worker reads n,
the slot, and n again, and retries unless n is unchanged (so the slot was not being
rewritten for request n + 2). Shared-memory layout (int64 unless noted):

    header, one cache line: READY, STOP, FAILED, spare...
    per group g, two cache lines (the engine writes only the first, the worker only the
    second, so neither side's writes evict what the other one polls):
      request: REQ (the number of the newest request), then two slots of (REQ_TS, REQ_T0,
               REQ_SPOT float64): request n lives in slot n % 2, written before REQ = n
      result:  RES (seqlock), RES_REQ (request number priced), RES_TS, RES_T0,
               RES_SPOT (float64), LAUNCHES (repricings started), PRICED
               (repricings the worker published; the engine may read fewer, as a
               result slot holds only the newest), WANT (1 while the worker would
               launch the group at once: the engine sends its newest spot only then)
    per group g, float64[3, n_g]: price, delta, gamma of the newest finished repricing

Values are the same pricer's (`OptionGroupPricer`), built by the same recipe
(`engine.options.group.build_group`), so they equal the in-process ones for the same spot;
which spots get priced depends on timing.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import subprocess
import sys
import time
import traceback
import weakref
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import numpy as np

from feeds.messages import OptionGroupValues, OptionValue

READY, STOP, FAILED = 0, 1, 2
HEADER = 8  # words (8 bytes each): one 64-byte cache line
SLOT = 16  # words per group: a request line and a result line
REQ = 0
REQ_TS, REQ_T0, REQ_SPOT = range(1, 4)  # slot 0; slot 1 is 3 words further
REQ_SLOT = 3
RES, RES_REQ, RES_TS, RES_T0, RES_SPOT, LAUNCHES, PRICED, WANT = range(8, 16)
#: idle spins of the worker before it naps (a nap adds up to NAP_S to the next latency)
IDLE_SPINS = 50_000
NAP_S = 0.0002
START_TIMEOUT_S = 600.0
#: launches in flight per batch (OPTION_WORKER_SLOTS), and whether groups of one grid share
#: a launch (OPTION_WORKER_BATCH=1; default one launch per group): see the docstring
SLOTS_ENV, BATCH_ENV = "OPTION_WORKER_SLOTS", "OPTION_WORKER_BATCH"
YIELD_ENV = "OPTION_WORKER_YIELD"
#: OPTION_WORKER_SPACING: while launches are in flight, the next waits this fraction of a
#: slot's share of the measured latency (1: evenly spaced repricings; 0: whenever a slot is
#: free and a newer spot is waiting)
SPACING_ENV = "OPTION_WORKER_SPACING"
#: OPTION_WORKER_PROFILE=PATH: the worker runs under cProfile and writes PATH.<pid> at exit
PROFILE_ENV = "OPTION_WORKER_PROFILE"
#: OPTION_WORKER_TIMING=PATH: the worker times its loop's steps (a clock read around each,
#: far lighter than cProfile) and writes PATH.<pid> (JSON) at exit
TIMING_ENV = "OPTION_WORKER_TIMING"
DEFAULT_SLOTS = 2
DEFAULT_SPACING = 1.0
#: OPTION_REQUEST_EVERY: 1 (the default) a request on every tick; 0 requests only on
#: demand; k >= 2 on demand and every k-th held tick
REQUEST_EVERY_ENV = "OPTION_REQUEST_EVERY"
DEFAULT_REQUEST_EVERY = 1
#: OPTION_TAP_EVERY: every how many accepted trades of an underlying the engine hands its
#: spot over from validation (`engine.core.Engine`, `feeds.validation.Validator.tap_trades`);
#: 0: every tick from the engine's hot loop instead
TAP_EVERY_ENV = "OPTION_TAP_EVERY"
DEFAULT_TAP_EVERY = 8
_INF = math.inf
_now_ns = time.perf_counter_ns
#: a group's words as the tick path uses them: group, REQ, WANT, RES, and the (spot, ts, t0)
#: words of request slots 0 and 1
_GroupWords = tuple[int, int, int, int, tuple[int, int, int], tuple[int, int, int]]


class _Layout:
    """Offsets (in 8-byte words) of every slot, from the groups' sizes."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.n_groups = len(sizes)
        base = HEADER + SLOT * self.n_groups
        self.results: list[int] = []
        for n in sizes:
            self.results.append(base)
            base += 3 * n
        self.words = max(base, 1)

    def result_views(self, buf: Any) -> list[np.ndarray]:
        return [np.ndarray((3, n), dtype=np.float64, buffer=buf, offset=8 * off)
                for n, off in zip(self.sizes, self.results, strict=True)]


def _sizes(configs: list[Any]) -> list[int]:
    return [len(c.strikes) * len(c.expiries) * len(c.rights) for c in configs]


def _words_by_symbol(configs: list[Any]) -> dict[str, tuple[list[_GroupWords], list[int]]]:
    """Per underlying: its groups, each with the offsets of its REQ, WANT and RES words and
    of its two request slots' (spot, ts, t0) words (the tick path computes no offset), and
    a one-cell tick counter (cheaper than a dict count)."""
    by_symbol: dict[str, tuple[list[_GroupWords], list[int]]] = {}
    for g, c in enumerate(configs):
        b = HEADER + SLOT * g
        slot0, slot1 = ((s + REQ_SPOT, s + REQ_TS, s + REQ_T0)
                        for s in (b, b + REQ_SLOT))
        by_symbol.setdefault(c.underlying, ([], [0]))[0].append(
            (g, b + REQ, b + WANT, b + RES, slot0, slot1))
    return by_symbol


class WorkerClient:
    """The engine's side: request repricings and collect results through shared memory."""

    def __init__(self, configs: list[Any], device: str, timezone: str,
                 visible_devices: str | None = None, wait: bool = True) -> None:
        """`visible_devices`: the worker process's CUDA_VISIBLE_DEVICES (None: inherited),
        so that each of several workers owns its own GPU (`open_workers`). `wait=False`
        returns once the worker is started; `wait_ready` then waits for it (several
        workers compile and warm up side by side)."""
        from engine.affinity import WORKER_ENV, cpus_from_env
        from engine.options.group import contract_symbols

        worker_settings()  # a bad OPTION_WORKER_* value: the user's error, before any start
        cpus_from_env(WORKER_ENV)
        self.tap_every = tap_every()
        self._send_every = request_every()
        self.configs = configs
        self.device = device
        self.visible_devices = visible_devices
        # the contracts' symbols, by the same recipe as the worker (no pricer needed here)
        self.symbols: list[tuple[str, ...]] = [contract_symbols(c) for c in configs]
        self.layout = _Layout(_sizes(configs))
        # numpy scalars (a strike from an array) encode as plain floats
        payload = msgspec.json.encode(list(configs), enc_hook=_plain_number)
        self._shm = shared_memory.SharedMemory(create=True, size=8 * self.layout.words)
        self._q: Any = _buf(self._shm).cast("q")
        self._d: Any = _buf(self._shm).cast("d")
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
        self._by_symbol = _words_by_symbol(configs)
        self.underlyings = set(self._by_symbol)
        self._seen = [0] * len(configs)  # result counter last read per group
        self._requests = [0] * len(configs)  # requests made per group
        #: per group, the newest tick (spot, ts) kept while the worker did not want one;
        #: it is dated from the start of the engine's batch (`batch_t0`) when it is sent
        self._pending: list[tuple[float, int] | None] = [None] * len(configs)
        #: when the engine began applying its current batch (OptionBook.begin_batch): the
        #: held ticks' arrival, read once a batch instead of a clock read a tick
        self.batch_t0 = time.perf_counter_ns()
        #: per group, ticks held since its last request; at OPTION_REQUEST_EVERY one is sent
        self._unsent = [0] * len(configs)
        self._counts_held = self._send_every != sys.maxsize
        self._every_tick = self._send_every == 1  # OPTION_REQUEST_EVERY=1: no holding
        self._out: list[OptionValue | OptionGroupValues] = []  # collected, not yet polled
        self._seq = 0
        self.latencies_ns: list[int] = []
        self.repricings = 0
        self._last: list[OptionGroupValues | None] = [None] * len(configs)
        self._start(payload, device, timezone, visible_devices)
        if wait:
            self.wait_ready()

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
            [sys.executable, "-m", "engine.options.worker", self._shm.name, device, timezone,
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

    def on_underlying_tick(self, symbol: str, spot: float, ts: int) -> None:
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
        shared-memory reads, one copy per array, one message: 1.2 µs on the 2-core dev VM
        (1.65 µs when it copied the three rows at once and sliced the copy, 2026-11-23)."""
        q = self._q
        b, underlying, symbols, group_msgs, prices, deltas, gammas = self._collected[g]
        c = q[b + RES]
        if c == self._seen[g] or c & 1:
            return
        seq = self._seq + 1
        msg = OptionGroupValues(seq, q[b + RES_TS], underlying, self._d[b + RES_SPOT],
                                symbols, prices.tobytes(), deltas.tobytes(), gammas.tobytes())
        t0 = q[b + RES_T0]
        if q[b + RES] != c:
            return  # overwritten while read: the next poll takes the newer one
        self._seen[g] = c
        self.latencies_ns.append(_now_ns() - t0)
        self.repricings += 1
        self._seq = seq
        if group_msgs:
            self._out.append(msg)
        else:
            per_contract = msg.option_values(self._seq)
            self._seq += len(per_contract) - 1
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


#: OPTION_WORKER_GPUS: how many GPU worker processes share the option groups (default 1)
GPUS_ENV = "OPTION_WORKER_GPUS"


def worker_gpus() -> int:
    """OPTION_WORKER_GPUS, an integer >= 1 (default 1): one worker process per GPU."""
    return _count_from_env(GPUS_ENV, 1, minimum=1)


def split_groups(configs: list[Any], n_workers: int) -> list[list[int]]:
    """Group indices per worker: every group of one underlying on the same worker (a tick
    goes to one client), underlyings dealt largest first (by options) to the worker with
    the fewest options so far. Workers left without a group are dropped."""
    by_underlying: dict[str, list[int]] = {}
    for g, c in enumerate(configs):
        by_underlying.setdefault(c.underlying, []).append(g)
    sizes = _sizes(configs)
    load = [0] * n_workers
    shares: list[list[int]] = [[] for _ in range(n_workers)]
    for groups in sorted(by_underlying.values(),
                         key=lambda gs: (-sum(sizes[g] for g in gs), gs[0])):
        w = min(range(n_workers), key=lambda i: (load[i], i))
        shares[w].extend(groups)
        load[w] += sum(sizes[g] for g in groups)
    return [sorted(share) for share in shares if share]


def open_workers(configs: list[Any], device: str, timezone: str
                 ) -> WorkerClient | MultiWorkerClient:
    """The option groups' worker processes: one (`WorkerClient`), or with
    OPTION_WORKER_GPUS=N > 1 up to N, each owning one GPU (the i-th of the engine's
    CUDA_VISIBLE_DEVICES, or device i when it is unset) and a share of the groups
    (`split_groups`), behind one `MultiWorkerClient`."""
    from engine.errors import UserError

    n = worker_gpus()
    if n == 1:
        return WorkerClient(configs, device, timezone)
    shares = split_groups(configs, n)
    visible: list[str | None] = [None] * len(shares)
    if device == "cuda":
        listed = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = ([d.strip() for d in listed.split(",") if d.strip()] if listed is not None
               else [str(i) for i in range(n)])
        if len(ids) < n:
            raise UserError(f"{GPUS_ENV}={n} but CUDA_VISIBLE_DEVICES lists {len(ids)} "
                            f"device(s): {listed!r}")
        visible = list(ids[:len(shares)])
    return MultiWorkerClient(configs, shares, device, timezone, visible)


class MultiWorkerClient:
    """Several worker processes (one per GPU) behind the one client interface the option
    book uses: a tick goes to the worker that holds its underlying's groups (one dict
    lookup more than a single worker), results come from all of them numbered in one
    sequence, counts are summed."""

    def __init__(self, configs: list[Any], shares: list[list[int]], device: str,
                 timezone: str, visible: list[str | None]) -> None:
        self.configs = configs
        self.shares = shares
        self.clients: list[WorkerClient] = []
        try:
            for share, dev in zip(shares, visible, strict=True):
                self.clients.append(WorkerClient([configs[g] for g in share], device,
                                                 timezone, dev, wait=False))
            for c in self.clients:  # started side by side, waited for in turn
                c.wait_ready()
        except BaseException:
            self.close()
            raise
        self.tap_every = self.clients[0].tap_every
        self._route = {sym: c.on_underlying_tick for c in self.clients for sym in c.underlyings}
        self.underlyings = set(self._route)
        self._seq = 0

    def on_underlying_tick(self, symbol: str, spot: float, ts: int) -> None:
        ask = self._route.get(symbol)
        if ask is not None:
            ask(symbol, spot, ts)

    @property
    def batch_t0(self) -> int:
        return self.clients[0].batch_t0

    @batch_t0.setter
    def batch_t0(self, t0: int) -> None:
        for c in self.clients:
            c.batch_t0 = t0

    @property
    def ticks(self) -> int:
        return sum(c.ticks for c in self.clients)

    def in_flight(self) -> int:
        return sum(c.in_flight() for c in self.clients)

    def poll(self) -> list[OptionValue | OptionGroupValues]:
        out: list[OptionValue | OptionGroupValues] = []
        for c in self.clients:
            c._seq = self._seq  # one sequence across the workers' messages
            got = c.poll()
            self._seq = c._seq
            if got:
                out.extend(got)
        return out

    def last_values(self) -> list[tuple[tuple[str, ...], tuple[float, Any, Any, Any]]]:
        return [v for c in self.clients for v in c.last_values()]

    def stats(self) -> dict[str, Any]:
        parts = [c.stats() for c in self.clients]
        out: dict[str, Any] = {k: sum(p[k] for p in parts) for k in (
            "groups", "options", "repricings", "worker_repricings", "coalesced")}
        out["latencies_ns"] = [x for p in parts for x in p["latencies_ns"]]
        out["workers"] = len(parts)
        return out

    def close(self) -> None:
        for c in self.clients:
            c.close()


def _buf(shm: shared_memory.SharedMemory) -> memoryview:
    buf = shm.buf
    assert buf is not None, "shared memory already closed"
    return buf


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


def worker_main(shm_name: str, configs: list[Any], device: str, timezone: str,
                parent_pid: int) -> None:
    """The worker process: build the pricers, then spin launching and collecting."""
    from multiprocessing import resource_tracker
    from zoneinfo import ZoneInfo

    from engine.affinity import WORKER_ENV, pin_from_env

    pin_from_env(WORKER_ENV)  # checked by the client before the start: cannot fail here
    shm = shared_memory.SharedMemory(name=shm_name)
    # the engine owns the segment; without this the tracker would unlink it twice
    resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
    q: Any = _buf(shm).cast("q")
    profile_to = os.environ.get(PROFILE_ENV)
    profiler = None
    if profile_to:  # where the worker's own time goes (a diagnostic, off by default)
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    try:
        _serve(shm, q, configs, device, ZoneInfo(timezone), parent_pid)
    except BaseException:
        q[FAILED] = 1
        traceback.print_exc()
        raise
    finally:
        if profiler is not None and profile_to:
            profiler.disable()
            profiler.dump_stats(f"{profile_to}.{os.getpid()}")
        q.release()
        shm.close()


class _AllWarm(set[tuple[object, ...]]):
    """The worker's groups keep only their parameter rows on the host (the batches price
    them), so `build_group` has nothing to compile for them."""

    def __contains__(self, item: object) -> bool:
        return True


class _Flight(NamedTuple):
    """A launch in flight: its slot, what it prices, and when it started."""

    slot: int
    parts: list[tuple[int, int, float, int, int]]  # (group, request, spot, ts, t0)
    launched_ns: int


class _Batch:
    """Groups of one grid, priced together by one `BatchPricer` with a few slots."""

    def __init__(self, members: list[int], pricer: Any) -> None:
        self.members = members
        self.pricer = pricer
        self.flights: collections.deque[_Flight] = collections.deque()
        self.last_launch_ns = 0
        self.latency_ns = 0.0  # launch -> results seen, smoothed: paces the launches


def request_every() -> int:
    """How many held ticks make a request written anyway, from OPTION_REQUEST_EVERY (an
    integer >= 0). 1, the default: every tick writes its request. 0: none, requests go
    only on demand. k >= 2: every k-th tick held while the worker wanted none is written
    too, so a recent spot is already waiting when the worker gets ready. SPY replays
    with the 102-option group on the H200 host, 2026-11-23 (third session, after the
    underlying's ticks went straight from the hot loop to the client), the median of
    each round's ticks/s over the same round's replay without options and the
    repricings per replay: 1 gave 0.92 and 102k (20 rounds), 0 0.91 and 58k (20
    rounds); with the request then written inline, 1 gave 0.94 and 77k (13 rounds, the
    host faster: a shorter replay has fewer repricings;
    benchmarks/results/h200-2026-11-23-session3/pooled.md; the host's speed moved by up
    to 40 % between rounds)."""
    return _count_from_env(REQUEST_EVERY_ENV, DEFAULT_REQUEST_EVERY) or sys.maxsize


def _count_from_env(name: str, default: int, minimum: int = 0) -> int:
    """An integer >= `minimum` from the environment variable `name` (`default` when
    unset); any other text is the user's one-line error."""
    from engine.errors import UserError

    raw = os.environ.get(name, str(default))
    try:
        count = int(raw)
    except ValueError:
        count = minimum - 1
    if count < minimum or str(count) != raw.strip():
        raise UserError(f"{name} must be an integer >= {minimum}, got {raw!r}")
    return count


def tap_every() -> int:
    """OPTION_TAP_EVERY (an integer >= 0): every how many accepted trades of an underlying
    the engine hands its spot to the worker from validation, while a batch is still being
    received; the batch's newest spot goes right after validation. 0: every tick from
    the engine's hot loop, which feeds the worker only while a batch is applied (the
    receive and the validation of a batch took 65 % of a SPY replay's time on the dev
    machine, the hot loop 23 %)."""
    return _count_from_env(TAP_EVERY_ENV, DEFAULT_TAP_EVERY)


def worker_settings() -> tuple[int, float]:
    """OPTION_WORKER_SLOTS (an integer, at least 1) and OPTION_WORKER_SPACING (a number,
    at least 0), with OPTION_WORKER_BATCH and OPTION_WORKER_YIELD checked (0 or 1) and
    GPU_FD_SOLVER (lanes or pcr) and GPU_FD_MAX_REGISTERS; the
    client checks them before it starts the worker, so a mistyped value is one line to
    the user, not a traceback from the worker process."""
    from engine.errors import UserError

    # anything but "1" read as off: "true" would be too
    for flag in (BATCH_ENV, YIELD_ENV):
        if os.environ.get(flag, "0") not in ("0", "1"):
            raise UserError(f"{flag} must be 0 or 1, got {os.environ[flag]!r}")
    from gpu.device import SettingError, fd_max_registers, fd_solver

    try:  # GPU_FD_SOLVER, GPU_FD_MAX_REGISTERS: read where the pricers start, in the worker
        fd_solver()
        fd_max_registers()
    except SettingError as exc:
        raise UserError(str(exc)) from None
    raw_slots = os.environ.get(SLOTS_ENV, str(DEFAULT_SLOTS))
    raw_spacing = os.environ.get(SPACING_ENV, str(DEFAULT_SPACING))
    try:
        slots = int(raw_slots)
    except ValueError:
        slots = 0
    if slots < 1:
        raise UserError(f"{SLOTS_ENV} must be an integer >= 1, got {raw_slots!r}")
    try:
        spacing = float(raw_spacing)
    except ValueError:
        spacing = math.nan
    if not (spacing >= 0 and math.isfinite(spacing)):
        raise UserError(f"{SPACING_ENV} must be a number >= 0, got {raw_spacing!r}")
    return slots, spacing


def _batches(groups: list[Any], device: str) -> list[_Batch]:
    """One batch per group; with OPTION_WORKER_BATCH=1 groups of the same grid share one."""
    from gpu.option_batch import BatchPricer
    from gpu.options import warm_up

    together = os.environ.get(BATCH_ENV, "0") == "1"
    members: dict[Any, list[int]] = {}
    for g, grp in enumerate(groups):
        members.setdefault(grp.pricer.grid if together else g, []).append(g)
    out = []
    warmed: set[Any] = set()
    for idx in members.values():
        grid = groups[idx[0]].pricer.grid
        if grid not in warmed:  # JIT before the first tick, not on it
            warm_up(grid, device)
            warmed.add(grid)
        pricer = BatchPricer([groups[g].pricer.n for g in idx], grid, device,
                             worker_settings()[0])
        out.append(_Batch(idx, pricer))
    return out


class _Server:
    """The worker's loop state: the shared memory, the groups' rows, their batches."""

    def __init__(self, shm: shared_memory.SharedMemory, q: Any, configs: list[Any],
                 device: str, tz: Any) -> None:
        from engine.options.group import build_group, prepare_launch

        self.prepare_launch = prepare_launch
        self.q = q
        self.d: Any = _buf(shm).cast("d")
        self.tz = tz
        self.res = _Layout(_sizes(configs)).result_views(shm.buf)
        # each group's parameter rows live on the host; the batches price them
        self.groups = [build_group(c, "cpu", False, _AllWarm()) for c in configs]
        self.batches = _batches(self.groups, device)
        self.launched = [0] * len(configs)  # request number launched last
        self.launches = [0] * len(configs)
        #: the WANT flag as this side last wrote it (written only when it changes)
        self.wanted = [False] * len(configs)
        self.want_since = [0] * len(configs)
        #: WANT raised -> request taken (ns), per launch that waited for one; kept only
        #: under OPTION_WORKER_TIMING (a diagnostic, not the hot path's business)
        self.waits: collections.deque[int] | None = None
        self.spacing = worker_settings()[1]

    def collect(self, batch: _Batch) -> bool:
        """Publish the batch's finished launches, oldest first (results in request order)."""
        q, d, flights = self.q, self.d, batch.flights
        work = False
        while flights and batch.pricer.done(flights[0].slot):
            flight = flights.popleft()
            seen = time.perf_counter_ns() - flight.launched_ns
            batch.latency_ns += (seen - batch.latency_ns) * 0.1 if batch.latency_ns else seen
            pricer = batch.pricer
            o = 0
            for g, req, spot, ts, t0 in flight.parts:
                b = HEADER + SLOT * g
                c = q[b + RES] + 1
                q[b + RES] = c
                dest = self.res[g]
                pricer.results_into(flight.slot, o, dest)
                o += dest.shape[1]
                q[b + RES_REQ] = req
                q[b + RES_TS] = ts
                q[b + RES_T0] = t0
                d[b + RES_SPOT] = spot
                q[b + PRICED] += 1
                q[b + RES] = c + 1
            pricer.release(flight.slot)
            work = True
        return work

    def launch(self, batch: _Batch) -> bool:
        """Launch the newest requested spot of every group of the batch that has one, in a
        free slot; while others are in flight, only once a slot's share of a launch's
        latency has passed since the last (evenly spaced repricings, not bursts)."""
        slot = batch.pricer.free_slot()
        if slot is None:
            return False
        now = time.perf_counter_ns()
        if batch.flights and now - batch.last_launch_ns < self.spacing * batch.latency_ns / \
                batch.pricer.slots:
            return False
        q, d = self.q, self.d
        prepare_launch = self.prepare_launch
        parts: list[tuple[int, int, float, int, int]] = []
        rows = []
        key: list[Any] = []
        for g in batch.members:
            b = HEADER + SLOT * g
            req = q[b]
            if req == self.launched[g]:
                if not self.wanted[g]:
                    q[b + WANT] = 1  # ready for this group: the engine sends its next tick
                    self.wanted[g] = True
                    self.want_since[g] = now
                continue
            s = b + REQ_SLOT * (req & 1)
            spot = d[s + REQ_SPOT]
            ts, t0 = q[s + REQ_TS], q[s + REQ_T0]
            if q[b] != req:
                continue  # the engine is rewriting this slot: read the newer one next
            self.launched[g] = req
            if self.wanted[g]:  # after the read: a request written meanwhile stays for later
                q[b + WANT] = 0
                self.wanted[g] = False
                if self.waits is not None:
                    self.waits.append(now - self.want_since[g])
            self.launches[g] += 1
            q[b + LAUNCHES] = self.launches[g]
            grp = self.groups[g]
            prepare_launch(grp, spot, ts, self.tz)
            parts.append((g, req, spot, ts, t0))
            rows.append(grp.pricer.params)
            key.append((g, grp.last_date))
        if not parts:
            return False
        # one group: its rows changed only in their spot unless its key (date) moved
        batch.pricer.launch(slot, rows, tuple(key), parts[0][2] if len(parts) == 1 else None)
        batch.flights.append(_Flight(slot, parts, now))
        batch.last_launch_ns = now
        return True

    def run(self, parent_pid: int) -> None:
        q = self.q
        idle = 0
        spins = 0
        # OPTION_WORKER_YIELD=1: while only waiting on the GPU, give the core away each spin
        polite = os.environ.get(YIELD_ENV, "0") == "1"
        while not q[STOP]:
            work = False
            moved = False
            for batch in self.batches:
                if batch.flights:
                    moved = self.collect(batch) or moved
                    work = work or bool(batch.flights)
                moved = self.launch(batch) or moved
            work = work or moved
            if polite and work and not moved:
                os.sched_yield()
            spins += 1
            if spins >= 4096:  # busy or not, notice an engine that died without stopping us
                spins = 0
                if os.getppid() != parent_pid:
                    return
            if work:
                idle = 0
                continue
            idle += 1
            if idle >= IDLE_SPINS:
                time.sleep(NAP_S)
            else:
                os.sched_yield()

    def close(self) -> None:
        self.res.clear()
        self.d.release()


class _StepTimes:
    """Where the worker's loop spends its time: each step's calls that did work and those
    that found nothing to do, with their nanoseconds."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = collections.defaultdict(int)
        self.ns: dict[str, int] = collections.defaultdict(int)
        self.started = time.perf_counter_ns()

    def wrap(self, name: str, step: Any) -> Any:
        clock, counts, ns = time.perf_counter_ns, self.counts, self.ns

        def timed(batch: _Batch) -> bool:
            t = clock()
            did = step(batch)
            kind = name if did else name + "_nothing"
            ns[kind] += clock() - t
            counts[kind] += 1
            return bool(did)

        return timed

    def write(self, path: str, server: _Server) -> None:
        import resource

        wall = time.perf_counter_ns() - self.started
        use = resource.getrusage(resource.RUSAGE_SELF)
        # a worker pushed off its core by other busy threads shows many involuntary switches
        report = {"wall_ns": wall, "counts": dict(self.counts), "ns": dict(self.ns),
                  "us_each": {k: self.ns[k] / 1e3 / c for k, c in self.counts.items() if c},
                  "cpu_s": use.ru_utime + use.ru_stime, "involuntary_switches": use.ru_nivcsw,
                  "voluntary_switches": use.ru_nvcsw,
                  "launch_latency_us": [b.latency_ns / 1e3 for b in server.batches]}
        waits = np.array(server.waits or (), dtype=np.float64) / 1e3
        if waits.size:  # how long a raised WANT waited for the engine's request
            report["want_wait_us"] = {"launches": int(waits.size),
                                      "p50": float(np.median(waits)),
                                      "p90": float(np.percentile(waits, 90)),
                                      "mean": float(waits.mean())}
        Path(path).write_bytes(msgspec.json.encode(report))


def _serve(shm: shared_memory.SharedMemory, q: Any, configs: list[Any], device: str,
           tz: Any, parent_pid: int) -> None:
    from engine.gcpause import freeze_for_life

    server = _Server(shm, q, configs, device, tz)
    timing_to = os.environ.get(TIMING_ENV)
    times = _StepTimes() if timing_to else None
    if times is not None:  # instance attributes shadow the methods the loop calls
        server.waits = collections.deque(maxlen=1 << 20)
        server.collect = times.wrap("collect", server.collect)  # type: ignore[method-assign]
        server.launch = times.wrap("launch", server.launch)  # type: ignore[method-assign]
    # the pricers, numba and CUDA are built: full collections need not walk them again
    # (engine.gcpause, which says what was and was not measured)
    freeze_for_life()
    q[READY] = 1
    try:
        server.run(parent_pid)
    finally:
        server.close()
        if times is not None and timing_to:
            times.write(f"{timing_to}.{os.getpid()}", server)


def per_option(msgs: list[OptionValue | OptionGroupValues]) -> list[OptionValue]:
    """Per-contract messages of a mixed list (group messages expanded, seq renumbered)."""
    out: list[OptionValue] = []
    for m in msgs:
        if isinstance(m, OptionValue):
            out.append(m)
        elif hasattr(m, "option_values"):
            out.extend(m.option_values(len(out) + 1))
    return out


def main(argv: list[str]) -> None:
    """`python -m engine.options.worker SHM DEVICE TIMEZONE PARENT_PID` (groups on stdin)."""
    from engine.options.group import OptionGroupConfig

    shm_name, device, timezone, parent = argv
    configs = msgspec.json.decode(sys.stdin.buffer.read(), type=list[OptionGroupConfig])
    worker_main(shm_name, configs, device, timezone, int(parent))


if __name__ == "__main__":
    main(sys.argv[1:])
