"""The option worker process: it owns the pricers, and the engine only writes spots into
shared memory (`worker_layout`) through its client (`worker_client`).

With one Python interpreter every microsecond of GPU dispatch (kernel launch, event query,
copying results) is taken from the tick loop, even on a thread, because of the GIL; here
a second process spins over its batches, each a `gpu.options.batch.BatchPricer`: up to
OPTION_WORKER_SLOTS launches are in flight per batch (each its own buffers and stream),
spaced a slot's share of a launch's latency apart, so the GPU works on the next spot while
the previous results are still on their way. Finished launches are published oldest first
(in request order). Every launch takes the newest requested spot of each group
(coalescing), as in-process. With OPTION_WORKER_BATCH=1 the groups of one grid share a
batch: one launch reprices every group that has a new spot (one block per option across
groups) instead of one launch per group. It pays only where launches are small; on a
saturated GPU neither batching nor more launches in flight pay (the measurements behind
the defaults: benchmarks/results/h200-2026-11-23-between-ticks/README.md).

Values are the same pricer's (`OptionGroupPricer`), built by the same recipe
(`engine.options.group.build_group`), so they equal the in-process ones for the same spot;
which spots get priced depends on timing.

`python -m engine.options.worker_server SHM DEVICE TIMEZONE PARENT_PID` (groups on stdin)
is how the client starts it.
"""

from __future__ import annotations

import collections
import os
import sys
import time
import traceback
from multiprocessing import shared_memory
from typing import Any, NamedTuple

import msgspec

from engine.options.group import AllWarm, OptionGroupConfig, build_group, prepare_launch
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
    WANT,
    Layout,
    group_sizes,
    shm_buffer,
)
from engine.options.worker_settings import (
    BATCH_ENV,
    PROFILE_ENV,
    TIMING_ENV,
    YIELD_ENV,
    worker_settings,
)
from engine.options.worker_timing import Step, StepTimes

#: idle spins of the worker before it naps (a nap adds up to NAP_S to the next latency)
IDLE_SPINS = 50_000
NAP_S = 0.0002


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


def _batches(groups: list[Any], device: str) -> list[_Batch]:
    """One batch per group; with OPTION_WORKER_BATCH=1 groups of the same grid share one."""
    from gpu.options.batch import BatchPricer
    from gpu.options.engines import warm_up

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
        self.q = q
        self.d: Any = shm_buffer(shm).cast("d")
        self.tz = tz
        self.res = Layout(group_sizes(configs)).result_views(shm.buf)
        # each group's parameter rows live on the host; the batches price them
        self.groups = [build_group(c, "cpu", False, AllWarm()) for c in configs]
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

    def run(self, parent_pid: int, collect: Step | None = None,
            launch: Step | None = None) -> None:
        """Spin collecting and launching until the engine sets STOP or dies; `collect` and
        `launch` stand in for the server's own steps (timed ones, `worker_timing`)."""
        collect = collect or self.collect
        launch = launch or self.launch
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
                    moved = collect(batch) or moved
                    work = work or bool(batch.flights)
                moved = launch(batch) or moved
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


def _serve(shm: shared_memory.SharedMemory, q: Any, configs: list[Any], device: str,
           tz: Any, parent_pid: int) -> None:
    from engine.gcpause import freeze_for_life

    server = _Server(shm, q, configs, device, tz)
    timing_to = os.environ.get(TIMING_ENV)
    times = StepTimes() if timing_to else None
    collect: Step | None = None
    launch: Step | None = None
    if times is not None:  # the loop runs timed steps in place of the server's own
        server.waits = collections.deque(maxlen=1 << 20)
        collect = times.wrap("collect", server.collect)
        launch = times.wrap("launch", server.launch)
    # the pricers, numba and CUDA are built: full collections need not walk them again
    # (engine.gcpause, which says what was and was not measured)
    freeze_for_life()
    q[READY] = 1
    try:
        server.run(parent_pid, collect, launch)
    finally:
        server.close()
        if times is not None and timing_to:
            times.write(f"{timing_to}.{os.getpid()}",
                        [b.latency_ns for b in server.batches], server.waits or ())


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
    q: Any = shm_buffer(shm).cast("q")
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


def main(argv: list[str]) -> None:
    """`python -m engine.options.worker_server SHM DEVICE TIMEZONE PARENT_PID` (groups on
    stdin)."""
    shm_name, device, timezone, parent = argv
    configs = msgspec.json.decode(sys.stdin.buffer.read(), type=list[OptionGroupConfig])
    worker_main(shm_name, configs, device, timezone, int(parent))


if __name__ == "__main__":
    main(sys.argv[1:])
