"""Option groups repriced in the engine's own process, without blocking its loop.

`on_spot` writes the spot into the group's mapped host memory and launches one kernel on
the group's own CUDA stream (on the CPU the twin runs on a worker thread); `poll()`
queries recorded events. While a repricing of a group is in flight only the newest spot
is remembered and launched when it completes, so the newest spot is always priced and
nothing queues. Finished repricings become one `OptionGroupValues` message per group
(arrays), or one `OptionValue` per contract where the group's `messages = "option"`.
"""

from __future__ import annotations

import math
import time
from zoneinfo import ZoneInfo

from engine.options.group import OptionGroupConfig, PricedGroup, build_group, prepare_launch
from engine.options.protocol import (
    DRAIN_TIMEOUT_S,
    OptionMessage,
    drain_repricings,
    repricing_messages,
    summarize_groups,
    values_in,
)

#: while a group is busy, query its event on every this many underlying ticks
CHECK_EVERY_TICKS = 8


class InProcessOptions:
    """`OptionPricing` with every group's pricer in this process (dispatch "inline")."""

    def __init__(self, groups: list[OptionGroupConfig], device: str, timezone: str) -> None:
        """`device`: "cpu" or "cuda", resolved (`gpu.device.resolve_device`)."""
        self.device = device
        self.dispatch = "inline"
        self.tz = ZoneInfo(timezone)
        #: spots come from the engine's hot loop, every tick
        self.tap_every = 0
        self.values_published = 0
        self._configs = list(groups)
        self._groups: dict[str, list[PricedGroup]] = {}
        self._ready: list[OptionMessage] = []
        self._seq = 0
        self._ticks = 0
        warmed: set[tuple[object, ...]] = set()
        for cfg in groups:
            # on the CPU the group reprices on a worker thread so the loop never waits
            group = build_group(cfg, device, True, warmed)
            self._groups.setdefault(cfg.underlying, []).append(group)

    @property
    def underlyings(self) -> set[str]:
        return set(self._groups)

    @property
    def in_flight(self) -> int:
        return sum(g.pricer.in_flight for gs in self._groups.values() for g in gs)

    def close(self) -> None:
        """Nothing to stop: the pricers go with the object."""

    def begin_batch(self) -> None:
        """Nothing to do: a spot is launched or held as it comes."""

    def on_spot(self, symbol: str, spot: float, ts: int) -> None:
        """A new underlying price: reprice its groups (launch, or remember if busy)."""
        if not (0.0 < spot < math.inf):  # NaN fails too; called on every underlying tick
            return  # bad prices are the feed's to count; a group is never priced on one
        groups = self._groups.get(symbol)
        if groups is None:
            return
        self._ticks += 1
        for g in groups:
            if g.pricer.in_flight:
                if g.pending is not None:
                    g.coalesced += 1
                g.pending = (spot, ts)
                # the engine polls once per received batch; while the underlying ticks
                # densely, also look at the group's event every few ticks, so a finished
                # repricing is collected and the newest spot launched without waiting
                # for the batch to end (an event query costs a few microseconds)
                g.since_check += 1
                if g.since_check >= CHECK_EVERY_TICKS:
                    g.since_check = 0
                    if g.pricer.done():
                        self._collect(g)
                continue
            self._launch(g, spot, ts)

    def _launch(self, g: PricedGroup, spot: float, ts: int) -> None:
        prepare_launch(g, spot, ts, self.tz)
        g.launched = (spot, ts, time.perf_counter_ns())
        g.pricer.launch()

    def _collect(self, g: PricedGroup) -> None:
        assert g.launched is not None
        spot, ts, t0 = g.launched
        values = g.pricer.results()
        g.latencies_ns.append(time.perf_counter_ns() - t0)
        g.repricings += 1
        g.launched = None
        msgs, self._seq = repricing_messages(g, self._seq, ts, spot, values.price,
                                             values.delta, values.gamma)
        self._ready.extend(msgs)
        if g.pending is not None:
            spot, ts = g.pending
            g.pending = None
            self._launch(g, spot, ts)

    def poll(self) -> list[OptionMessage]:
        """Messages of every repricing finished since the last call; never blocks."""
        for groups in self._groups.values():
            for g in groups:
                if g.pricer.in_flight and g.pricer.done():
                    self._collect(g)
        out, self._ready = self._ready, []
        if out:
            self.values_published += values_in(out)
        return out

    async def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> list[OptionMessage]:
        return await drain_repricings(self, timeout_s)

    def summary(self) -> dict[str, object]:
        gs_all = [g for gs in self._groups.values() for g in gs]
        return summarize_groups(self, self._configs, gs_all, self._ticks)
