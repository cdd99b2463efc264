"""Option groups repriced after every tick of their underlying, without blocking the loop.

A group (`OptionGroupConfig`) is the options on one underlying: the product of its strikes,
expiries and rights. Two ways to dispatch the repricings (`dispatch=`):

- "process" (the default on CUDA): a GPU worker process (`engine.options.worker`) owns the
  pricers; `on_underlying_tick` only writes the newest spot into shared memory (about a
  microsecond) and `poll()` reads finished results from it. The launch, the event polling
  and the copying cost the engine's interpreter nothing (with one interpreter every
  microsecond of it, even on a thread, is taken from the tick loop by the GIL).
- "inline" (the default on the CPU): `on_underlying_tick` writes the spot into the group's
  mapped host memory and launches one kernel on the group's own CUDA stream (on the CPU the
  twin runs on a worker thread); `poll()` queries recorded events.

Either way, while a repricing of a group is in flight only the newest spot is remembered
and launched when it completes, so the newest spot is always priced and nothing queues.
Finished repricings become one `OptionGroupValues` message per group (arrays), or one
`OptionValue` per contract where the group's `messages = "option"`. `drain()` awaits all
in-flight work by polling with `asyncio.sleep(0)`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

import numpy as np

from engine.errors import UserError

# the group's pieces live in engine.options.group (the worker builds groups by the same
# recipe without importing the book); they stay importable from here, hence the noqa
from engine.options.group import (  # noqa: F401
    OptionGroupConfig,
    PricedGroup,
    _tick_date,
    build_group,
    contract_symbols,
    group_contracts,
    group_engine,
    prepare_launch,
)
from feeds.messages import OptionGroupValues, OptionValue
from gpu.device import resolve_device

NS_PER_DAY = 86_400 * 1_000_000_000

#: what the book publishes
OptionMessage = OptionValue | OptionGroupValues

log = logging.getLogger(__name__)


#: while a group is busy, query its event on every this many underlying ticks
CHECK_EVERY_TICKS = 8


EXCHANGE_TZ = "America/New_York"

DISPATCHES = ("auto", "inline", "process")


def group_message(seq: int, ts: int, underlying: str, spot: float, symbols: tuple[str, ...],
                  price: np.ndarray, delta: np.ndarray, gamma: np.ndarray) -> OptionGroupValues:
    """One repricing as one message: the arrays' float64 little-endian bytes."""
    return OptionGroupValues(seq, ts, underlying, spot, symbols,
                             price.astype("<f8", copy=False).tobytes(),
                             delta.astype("<f8", copy=False).tobytes(),
                             gamma.astype("<f8", copy=False).tobytes())


def values_in(msgs: list[Any]) -> int:
    """Option values carried by messages (a group message carries one per contract)."""
    return sum(len(m.options) if type(m) is OptionGroupValues else 1 for m in msgs)


#: how long the end of a run waits for a repricing in flight to finish: the wait starts
#: again whenever one finishes, so a slow but working book (one 1,000-option group
#: on the CPU twin's default grid took 1.4 s on the 2-core review VM, under load) is never
#: taken for a hung one, however many groups it has
DRAIN_TIMEOUT_S = 60.0


class OptionPricingStalled(UserError):
    """Repricings did not finish in time: the device or the worker process hung."""


class OptionBook:
    """Theoretical values of configured option groups, kept current with their underlyings."""

    def __init__(self, groups: list[OptionGroupConfig], device: str = "auto",
                 timezone: str = EXCHANGE_TZ, dispatch: str = "auto") -> None:
        from zoneinfo import ZoneInfo

        if dispatch not in DISPATCHES:
            raise ValueError(f"dispatch must be one of {DISPATCHES}, got {dispatch!r}")
        self.device = resolve_device(device, "option book")
        if dispatch == "auto":
            dispatch = "process" if self.device == "cuda" else "inline"
        self.dispatch = dispatch
        self.tz = ZoneInfo(timezone)
        self._groups: dict[str, list[PricedGroup]] = {}
        self._ready: list[OptionMessage] = []
        self._seq = 0
        self._ticks = 0
        #: option values handed out by poll()/drain() (a group message counts per contract)
        self.values_published = 0
        self._worker: Any = None
        self._configs = list(groups)
        #: every how many accepted trades of an underlying the engine hands its spot to
        #: the book from validation (`Validator.tap_trades`); 0: every tick, from the hot
        #: loop. The worker process's (OPTION_TAP_EVERY); in-process dispatch keeps 0
        self.tap_every = 0
        if dispatch == "process":
            from engine.options.worker import open_workers

            self._worker = open_workers(list(groups), self.device, timezone)
            # the engine calls the worker's request directly: no layer on the tick path
            # (with several GPU workers, one dict lookup picks the underlying's worker)
            self.on_underlying_tick = self._worker.on_underlying_tick  # type: ignore[method-assign]
            self.tap_every = self._worker.tap_every
            return
        warmed: set[tuple[object, ...]] = set()
        for cfg in groups:
            # on the CPU the group reprices on a worker thread so the loop never waits
            group = build_group(cfg, self.device, True, warmed)
            self._groups.setdefault(cfg.underlying, []).append(group)

    @property
    def underlyings(self) -> set[str]:
        if self._worker is not None:
            return self._worker.underlyings
        return set(self._groups)

    @property
    def in_flight(self) -> int:
        if self._worker is not None:
            return int(self._worker.in_flight())
        return sum(g.pricer.in_flight for gs in self._groups.values() for g in gs)

    def close(self) -> None:
        """Stop the worker process, if any (also done at exit)."""
        if self._worker is not None:
            self._worker.close()

    # -- ticks ---------------------------------------------------------------------------

    def begin_batch(self) -> None:
        """The engine starts applying a received batch: the worker's client dates the
        ticks it holds from now (one clock read a batch, not one a tick)."""
        if self._worker is not None:
            self._worker.batch_t0 = time.perf_counter_ns()

    def on_underlying_tick(self, symbol: str, spot: float, ts: int) -> None:
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
        underlying = g.config.underlying
        if g.config.messages == "group":
            self._seq += 1
            self._ready.append(group_message(self._seq, ts, underlying, spot, g.symbols,
                                             values.price, values.delta, values.gamma))
            g.last_values = (spot, values.price, values.delta, values.gamma)  # type: ignore[assignment]
        else:
            prices, deltas, gammas = (
                values.price.tolist(), values.delta.tolist(), values.gamma.tolist())
            seq0 = self._seq
            # one comprehension over plain lists: a busy group publishes millions of these
            self._ready.extend([
                OptionValue(seq0 + i + 1, ts, sym, underlying, spot, p, d, gm)
                for i, (sym, p, d, gm) in enumerate(
                    zip(g.symbols, prices, deltas, gammas, strict=True))
            ])
            self._seq = seq0 + len(g.symbols)
            g.last_values = (spot, prices, deltas, gammas)
        if g.pending is not None:
            spot, ts = g.pending
            g.pending = None
            self._launch(g, spot, ts)

    # -- results ---------------------------------------------------------------------------

    def poll(self) -> list[OptionMessage]:
        """Messages of every repricing finished since the last call; never blocks."""
        if self._worker is not None:
            out = self._worker.poll()
        else:
            for groups in self._groups.values():
                for g in groups:
                    if g.pricer.in_flight and g.pricer.done():
                        self._collect(g)
            out, self._ready = self._ready, []
        if out:
            self.values_published += values_in(out)
        return out

    async def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> list[OptionMessage]:
        """Await all in-flight repricings (and the ones they trigger) by polling; when
        none finished for `timeout_s` (a hung device or worker) it is an error that names
        how many are left, not a replay that never ends."""
        deadline = time.monotonic() + timeout_s
        out = self.poll()
        while self.in_flight:
            if time.monotonic() > deadline:
                raise OptionPricingStalled(
                    f"{self.in_flight} option group repricing(s) still unfinished, none "
                    f"finished for {timeout_s:g} s on {self.device} ({self.dispatch})")
            await asyncio.sleep(0)
            finished = self.poll()
            if finished:  # progress: the book is slow, not hung
                deadline = time.monotonic() + timeout_s
                out.extend(finished)
        return out

    def _last_by_symbol(self) -> dict[str, dict[str, float]]:
        last: dict[str, dict[str, float]] = {}
        if self._worker is not None:
            items = self._worker.last_values()
        else:
            items = [(g.symbols, g.last_values) for gs in self._groups.values() for g in gs
                     if g.last_values is not None]
        for symbols, (spot, prices, deltas, gammas) in items:
            for sym, p, d, gm in zip(symbols, prices, deltas, gammas, strict=True):
                last[sym] = {"spot": spot, "price": float(p), "delta": float(d),
                             "gamma": float(gm)}
        return last

    def summary(self) -> dict[str, object]:
        """Counts, latency (spot handed over → results on the engine's side) and last
        values. `ticks` counts the spots the book was handed: every good underlying tick,
        or, with spots from validation (`tap_every`), every tap_every-th accepted trade and
        each batch's newest; `coalesced_ticks` those never priced (a newer one came first)."""
        if self._worker is not None:
            w = self._worker.stats()
            lat = w["latencies_ns"]
            groups, options = w["groups"], w["options"]
            repricings, coalesced = w["repricings"], w["coalesced"]
        else:
            gs_all = [g for gs in self._groups.values() for g in gs]
            lat = [x for g in gs_all for x in g.latencies_ns]
            groups, options = len(gs_all), sum(g.pricer.n for g in gs_all)
            repricings = sum(g.repricings for g in gs_all)
            coalesced = sum(g.coalesced for g in gs_all)
        lat_us = np.array(lat, dtype=np.float64) / 1e3
        extra = {} if self._worker is None else {"worker_repricings": w["worker_repricings"]}
        last = self._last_by_symbol()
        never = sorted({c.underlying for c in self._configs
                        if not any(s in last for s in contract_symbols(c))})
        if never:  # a mistyped underlying or a feed without it: say so, not an empty book
            log.warning("option groups never priced (no valid tick of their underlying): %s",
                        ", ".join(never))
        return {
            **extra,
            "never_priced": never,
            "device": self.device,
            "dispatch": self.dispatch,
            "groups": groups,
            "options": options,
            "ticks": self._worker.ticks if self._worker is not None else self._ticks,
            "repricings": repricings,
            "coalesced_ticks": coalesced,
            "latency_us_mean": float(lat_us.mean()) if lat else None,
            "latency_us_p50": float(np.median(lat_us)) if lat else None,
            "latency_us_p99": float(np.percentile(lat_us, 99)) if lat else None,
            "latency_us_max": float(lat_us.max()) if lat else None,
            "last": last,
        }
