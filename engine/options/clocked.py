"""Option groups repriced on a data-time clock: every group whose underlying moved, once
every `every_ms` milliseconds of data time, at the spots as of each boundary.

The other books (`in_process`, `worker_options`) reprice a group as its underlying ticks,
the newest spot whenever the previous repricing is done: which spots get priced depends
on how fast the replay runs against the device, so a backtest's option values change
from run to run and fall behind the data without bound when the replay outruns the GPU.
Here the data's clock decides:

- Spots are only remembered as they come (`on_spot`). When a spot crosses the next
  boundary B (a multiple of `every_ms` since the epoch), every group with a spot newer
  than its last repricing is launched with its newest spot from before B, in one launch
  per grid (`gpu.options.batch.BatchPricer`, one block per option across groups), and its
  values are stamped B: they use nothing the market had not shown by B.
- A grid keeps at most LAUNCHES_IN_FLIGHT (2) launches in flight: with both busy, the
  boundary waits for the oldest, so the published values never run more than two
  intervals behind the data. On a replay that wait slows the replay to what the device
  can price (back-pressure); while the device works, the replay goes on with the
  interval's ticks, and the next boundary's launch queues behind the running one.

Which spots are priced and the values are then a function of the data alone: the same
replay publishes the same messages whatever the machine's speed. The book knows the time
only from its spots: a boundary is passed when the first spot beyond it arrives (or at the
end, `drain`), so live, an interval's values wait for the next tick of an underlying.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

from engine.options.config import MAX_EVERY_MS as MAX_EVERY_MS  # re-exported
from engine.options.config import check_every_ms
from engine.options.group import (
    AllWarm,
    OptionGroupConfig,
    PricedGroup,
    build_group,
    prepare_launch,
)
from engine.options.protocol import (
    DRAIN_TIMEOUT_S,
    OptionMessage,
    OptionPricingStalled,
    drain_repricings,
    repricing_messages,
    summarize_groups,
    values_in,
)

#: launches of one grid in flight at once: the boundary after the next one waits for the
#: oldest, so the published values are never more than this many intervals behind the
#: data, and the GPU starts the next boundary's launch while the host hands out the last
LAUNCHES_IN_FLIGHT = 2
#: latencies and boundary waits kept for the summary, the newest (a live book sees one
#: boundary every interval for as long as it runs: 8.6 million a day at 10 ms)
KEEP_TIMINGS = 100_000


class _Batch:
    """The groups of one grid and the launch slots that reprice them."""

    def __init__(self, members: list[PricedGroup], device: str) -> None:
        from gpu.options.batch import BatchPricer

        self.members = members
        self.pricer = BatchPricer([g.pricer.n for g in members], members[0].pricer.grid,
                                  device, slots=LAUNCHES_IN_FLIGHT)


class _Flight(NamedTuple):
    """One launch in flight: its batch and slot, what it prices (group, spot, boundary
    ns, in launch order) and when it started."""

    batch: _Batch
    slot: int
    parts: list[tuple[PricedGroup, float, int]]
    launched_ns: int


class ClockedOptions:
    """`OptionPricing` on a data-time clock (dispatch "clocked"; see the module)."""

    def __init__(self, groups: list[OptionGroupConfig], device: str, timezone: str,
                 every_ms: float) -> None:
        """`device`: "cpu" or "cuda", resolved (`gpu.device.resolve_device`)."""
        self.device = device
        self.dispatch = "clocked"
        self.every_ns = max(1, round(check_every_ms(every_ms) * 1e6))
        self.tz = ZoneInfo(timezone)
        #: every tick's spot from the engine's hot loop: the newest before each boundary
        self.tap_every = 0
        self.values_published = 0
        self._configs = list(groups)
        # each group's rows on the host (the batches price them, as the worker's do): on
        # CUDA nothing of the CPU twin needs compiling for them
        warmed: set[tuple[object, ...]] = set() if device == "cpu" else AllWarm()
        built = [build_group(c, "cpu", False, warmed) for c in groups]
        self._groups: dict[str, list[PricedGroup]] = {}
        by_grid: dict[Any, list[PricedGroup]] = {}
        for g in built:
            self._groups.setdefault(g.config.underlying, []).append(g)
            by_grid.setdefault(g.pricer.grid, []).append(g)
        if device != "cpu":
            from gpu.options.engines import warm_up

            for grid in by_grid:  # JIT before the first tick, not on it
                warm_up(grid, device)
        self._batches = [_Batch(members, device) for members in by_grid.values()]
        #: every launch in flight, oldest first: handed out strictly in this order
        self._flights: deque[_Flight] = deque()
        self._next_ns: int | None = None  # the boundary that ends the open interval
        self._ready: list[OptionMessage] = []
        self._seq = 0
        self._ticks = 0
        self.boundaries = 0  # boundaries at which something was repriced
        #: how long each boundary that found a grid's slots busy waited for one
        self.waits_ns: deque[int] = deque(maxlen=KEEP_TIMINGS)

    @property
    def underlyings(self) -> set[str]:
        return set(self._groups)

    @property
    def in_flight(self) -> int:
        """Repricings launched and not yet handed out, and those waiting for the boundary."""
        pending = sum(g.pending is not None for gs in self._groups.values() for g in gs)
        return pending + sum(len(f.parts) for f in self._flights)

    def close(self) -> None:
        """Nothing to stop: the pricers go with the object."""

    def begin_batch(self) -> None:
        """Nothing to do: spots wait for their boundary."""

    def on_spot(self, symbol: str, spot: float, ts: int) -> None:
        """A new underlying price: remembered for the boundary that ends its interval; a
        spot past that boundary first reprices the interval's spots."""
        if not (0.0 < spot < math.inf):  # NaN fails too; called on every underlying tick
            return  # bad prices are the feed's to count; a group is never priced on one
        groups = self._groups.get(symbol)
        if groups is None:
            return
        self._ticks += 1
        nxt = self._next_ns
        if nxt is None or ts >= nxt:
            if nxt is not None:
                self._reprice_at(nxt)
            self._next_ns = (ts // self.every_ns + 1) * self.every_ns
        for g in groups:
            if g.pending is not None:
                g.coalesced += 1
                if ts < g.pending[1]:
                    continue  # a late, older tick: the interval's newest spot stays
            g.pending = (spot, ts)

    def _reprice_at(self, boundary: int) -> None:
        """Launch every group with a spot pending, at that spot, stamped `boundary`, one
        launch a grid; a grid with every slot busy first waits for (and hands out) the
        launches before, oldest first."""
        self.boundaries += 1
        for batch in self._batches:
            parts = [g for g in batch.members if g.pending is not None]
            if not parts:
                continue
            slot = batch.pricer.free_slot()
            if slot is None:
                t0 = time.perf_counter_ns()
                while slot is None:
                    self._hand_out_oldest()
                    slot = batch.pricer.free_slot()
                self.waits_ns.append(time.perf_counter_ns() - t0)
            rows, key, priced, spots = [], [], [], []
            for g in parts:
                assert g.pending is not None
                spot, ts = g.pending
                g.pending = None
                prepare_launch(g, spot, ts, self.tz)
                rows.append(g.pricer.params)
                key.append((id(g), g.last_date))
                priced.append((g, spot, boundary))
                spots.append(spot)
            # the same groups on the same dates as the slot's last launch: only their spots
            # are written (the key names the dates, so a date roll regathers)
            batch.pricer.launch(slot, rows, tuple(key), spots=spots)
            self._flights.append(_Flight(batch, slot, priced, time.perf_counter_ns()))

    def _hand_out_oldest(self) -> None:
        """Wait for the oldest launch in flight (a spin: a fraction of a millisecond) and
        hand out its messages."""
        flight = self._flights[0]
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while not flight.batch.pricer.done(flight.slot):
            if time.monotonic() > deadline:
                raise OptionPricingStalled(
                    f"an option repricing on {self.device} did not finish in "
                    f"{DRAIN_TIMEOUT_S:g} s (clocked book)")
        self._publish(self._flights.popleft())

    def _publish(self, flight: _Flight) -> None:
        """A finished launch's messages, after every older launch's: the messages and
        their numbers do not depend on when the book is polled."""
        # a fresh array, a row per output: each group's values are contiguous slices of it
        out = flight.batch.pricer.results_by_column(flight.slot)
        seen = time.perf_counter_ns() - flight.launched_ns
        row = 0
        for g, spot, boundary in flight.parts:
            end = row + g.pricer.n
            g.latencies_ns.append(seen)
            if len(g.latencies_ns) >= 2 * KEEP_TIMINGS:
                del g.latencies_ns[:KEEP_TIMINGS]  # the newest KEEP_TIMINGS stay
            g.repricings += 1
            msgs, self._seq = repricing_messages(
                g, self._seq, boundary, spot, out[0, row:end], out[1, row:end],
                out[2, row:end])
            self._ready.extend(msgs)
            row = end

    def poll(self) -> list[OptionMessage]:
        """Messages of every repricing finished since the last call; never blocks."""
        flights = self._flights
        while flights and flights[0].batch.pricer.done(flights[0].slot):
            self._publish(flights.popleft())
        out, self._ready = self._ready, []
        if out:
            self.values_published += values_in(out)
        return out

    async def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> list[OptionMessage]:
        """The end of the data: the open interval's spots are priced at its boundary."""
        if self._next_ns is not None and any(
                g.pending is not None for gs in self._groups.values() for g in gs):
            self._reprice_at(self._next_ns)
        return await drain_repricings(self, timeout_s)

    def summary(self) -> dict[str, object]:
        gs_all = [g for gs in self._groups.values() for g in gs]
        out = summarize_groups(self, self._configs, gs_all, self._ticks)
        waits = sorted(self.waits_ns)
        out.update({"every_ms": self.every_ns / 1e6, "boundaries": self.boundaries,
                    "boundary_wait_us_p50": waits[len(waits) // 2] / 1e3 if waits else None,
                    "boundary_wait_us_max": waits[-1] / 1e3 if waits else None})
        return out
