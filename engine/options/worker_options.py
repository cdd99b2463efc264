"""Option groups repriced by GPU worker processes (dispatch "process"): the engine only
writes spots into shared memory (about a microsecond) and `poll()` reads finished
results from it. The launch, the event polling and the copying cost the engine's
interpreter nothing (with one interpreter every microsecond of it, even on a thread, is
taken from the tick loop by the GIL). The pieces: `worker_layout` (the shared memory),
`worker_client` (the engine's side), `worker_server` (the worker's loop),
`worker_settings` (OPTION_* settings), `worker_timing` (the loop's diagnostic timing) and
`worker_pool` (one worker per GPU)."""

from __future__ import annotations

from engine.options.group import OptionGroupConfig
from engine.options.protocol import (
    DRAIN_TIMEOUT_S,
    Counts,
    OptionMessage,
    SpotSink,
    drain_repricings,
    summarize,
    values_in,
)
from engine.options.worker_pool import open_workers


class WorkerOptions:
    """`OptionPricing` through one or more worker processes (`open_workers`)."""

    #: the engine calls the worker client's request directly: no layer on the tick path
    #: (with several GPU workers, one dict lookup picks the underlying's worker)
    on_spot: SpotSink

    def __init__(self, groups: list[OptionGroupConfig], device: str, timezone: str) -> None:
        """`device`: "cpu" or "cuda", resolved (`gpu.device.resolve_device`); starts the
        worker processes and waits until they have warmed up."""
        self.device = device
        self.dispatch = "process"
        self._configs = list(groups)
        self.client = open_workers(self._configs, device, timezone)
        self.on_spot = self.client.on_spot
        #: the worker's spots come from validation (OPTION_TAP_EVERY)
        self.tap_every = self.client.tap_every
        self.values_published = 0

    @property
    def underlyings(self) -> set[str]:
        return self.client.underlyings

    @property
    def in_flight(self) -> int:
        return int(self.client.in_flight())

    def close(self) -> None:
        """Stop the worker processes (also done at exit)."""
        self.client.close()

    def begin_batch(self) -> None:
        """The client dates the ticks it holds from now (one clock read a batch)."""
        self.client.begin_batch()

    def poll(self) -> list[OptionMessage]:
        """Messages of every repricing finished since the last call; never blocks."""
        out = self.client.poll()
        if out:
            self.values_published += values_in(out)
        return out

    async def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> list[OptionMessage]:
        return await drain_repricings(self, timeout_s)

    def summary(self) -> dict[str, object]:
        """`summarize`'s, with `worker_repricings`: those the workers published (the engine
        may read fewer, as a result slot holds only the newest)."""
        w = self.client.stats()
        counts = Counts(groups=w["groups"], options=w["options"], ticks=self.client.ticks,
                        repricings=w["repricings"], coalesced=w["coalesced"],
                        latencies_ns=w["latencies_ns"])
        return {"worker_repricings": w["worker_repricings"],
                **summarize(self, self._configs, counts, self.client.last_values())}
