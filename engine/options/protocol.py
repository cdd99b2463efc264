"""What the engine uses of its options: the `OptionPricing` protocol, and the pieces both
implementations share (messages, draining, the summary).

Two implementations: `engine.options.in_process.InProcessOptions` (every group's pricer in
the engine's process: a CUDA stream per group, or the CPU twin on a worker thread) and
`engine.options.worker_options.WorkerOptions` (a GPU worker process fed through shared
memory); `engine.options.book.open_option_book` picks one. The engine holds the protocol,
never asks which it has, and hands it spots through one entry point, `on_spot`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from engine.errors import UserError
from engine.options.group import OptionGroupConfig, PricedGroup, contract_symbols
from feeds.messages import OptionGroupValues, OptionValue

#: what the options publish
OptionMessage = OptionValue | OptionGroupValues
#: where a spot goes: (underlying, price, ts)
SpotSink = Callable[[str, float, int], None]
#: per group, its contract symbols and its newest (spot, prices, deltas, gammas)
LastValues = Iterable[tuple[tuple[str, ...], tuple[float, Any, Any, Any]]]

#: how long the end of a run waits for a repricing in flight to finish: the wait starts
#: again whenever one finishes, so a slow but working book (one 1,000-option group
#: on the CPU twin's default grid took 1.4 s on the 2-core review VM, under load) is never
#: taken for a hung one, however many groups it has
DRAIN_TIMEOUT_S = 60.0

log = logging.getLogger("engine.options")


class OptionPricingStalled(UserError):
    """Repricings did not finish in time: the device or the worker process hung."""


@runtime_checkable
class OptionPricing(Protocol):
    """Theoretical values of configured option groups, kept current with their underlyings.

    A spot given to `on_spot` reprices the underlying's groups (at once, or, while a
    repricing is in flight, as the newest spot, launched when it completes: nothing
    queues); `poll` hands out the messages of finished repricings and never blocks."""

    #: the device that prices ("cpu" or "cuda") and how ("inline" or "process")
    device: str
    dispatch: str
    #: every how many accepted trades of an underlying the engine hands its spot over from
    #: validation (`Validator.tap_trades`); 0: every tick, from the engine's hot loop
    tap_every: int
    #: option values handed out by poll()/drain() (a group message counts per contract)
    values_published: int

    @property
    def underlyings(self) -> set[str]: ...

    @property
    def in_flight(self) -> int:
        """Repricings requested and not yet handed out."""
        ...

    def on_spot(self, symbol: str, spot: float, ts: int) -> None:
        """A new underlying price (anything but a finite positive one is ignored)."""
        ...

    def begin_batch(self) -> None:
        """The engine starts applying a received batch."""
        ...

    def poll(self) -> list[OptionMessage]: ...

    async def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> list[OptionMessage]:
        """Await every repricing in flight (and those it triggers)."""
        ...

    def summary(self) -> dict[str, object]: ...

    def close(self) -> None: ...


def group_message(seq: int, ts: int, underlying: str, spot: float, symbols: tuple[str, ...],
                  price: np.ndarray, delta: np.ndarray, gamma: np.ndarray) -> OptionGroupValues:
    """One repricing as one message: the arrays' float64 little-endian bytes."""
    return OptionGroupValues(seq, ts, underlying, spot, symbols,
                             price.astype("<f8", copy=False).tobytes(),
                             delta.astype("<f8", copy=False).tobytes(),
                             gamma.astype("<f8", copy=False).tobytes())


def repricing_messages(g: PricedGroup, seq: int, ts: int, spot: float, price: np.ndarray,
                       delta: np.ndarray, gamma: np.ndarray) -> tuple[list[OptionMessage], int]:
    """A finished repricing of group `g` as its messages (one group message, or one per
    contract where the group's `messages = "option"`) numbered after `seq`, and the last
    number used; the group keeps the values as its newest (`last_values`)."""
    underlying = g.config.underlying
    if g.config.messages == "group":
        g.last_values = (spot, price, delta, gamma)  # type: ignore[assignment]
        return [group_message(seq + 1, ts, underlying, spot, g.symbols, price, delta,
                              gamma)], seq + 1
    prices, deltas, gammas = price.tolist(), delta.tolist(), gamma.tolist()
    # one comprehension over plain lists: a busy group publishes millions of these
    msgs: list[OptionMessage] = [
        OptionValue(seq + i + 1, ts, sym, underlying, spot, p, d, gm)
        for i, (sym, p, d, gm) in enumerate(zip(g.symbols, prices, deltas, gammas,
                                                strict=True))]
    g.last_values = (spot, prices, deltas, gammas)
    return msgs, seq + len(g.symbols)


def values_in(msgs: list[Any]) -> int:
    """Option values carried by messages (a group message carries one per contract)."""
    return sum(len(m.options) if type(m) is OptionGroupValues else 1 for m in msgs)


def per_option(msgs: list[OptionValue | OptionGroupValues]) -> list[OptionValue]:
    """Per-contract messages of a mixed list (group messages expanded, seq renumbered)."""
    out: list[OptionValue] = []
    for m in msgs:
        if isinstance(m, OptionValue):
            out.append(m)
        elif hasattr(m, "option_values"):
            out.extend(m.option_values(len(out) + 1))
    return out


async def drain_repricings(pricing: OptionPricing, timeout_s: float) -> list[OptionMessage]:
    """Await all in-flight repricings (and the ones they trigger) by polling with
    `asyncio.sleep(0)`; when none finished for `timeout_s` (a hung device or worker) it is
    an error that names how many are left, not a replay that never ends."""
    deadline = time.monotonic() + timeout_s
    out = pricing.poll()
    while pricing.in_flight:
        if time.monotonic() > deadline:
            raise OptionPricingStalled(
                f"{pricing.in_flight} option group repricing(s) still unfinished, none "
                f"finished for {timeout_s:g} s on {pricing.device} ({pricing.dispatch})")
        await asyncio.sleep(0)
        finished = pricing.poll()
        if finished:  # progress: the book is slow, not hung
            deadline = time.monotonic() + timeout_s
            out.extend(finished)
    return out


@dataclass
class Counts:
    """An implementation's counts for `summarize`."""

    groups: int
    options: int
    ticks: int
    repricings: int
    coalesced: int
    latencies_ns: list[int]


def summarize(pricing: OptionPricing, configs: list[OptionGroupConfig], counts: Counts,
              last_items: LastValues) -> dict[str, object]:
    """Counts, latency (spot handed over → results on the engine's side) and last values.
    `ticks` counts the spots handed over: every good underlying tick, or, with spots from
    validation (`tap_every`), every tap_every-th accepted trade and each batch's newest;
    `coalesced_ticks` those never priced (a newer one came first)."""
    last: dict[str, dict[str, float]] = {}
    for symbols, (spot, prices, deltas, gammas) in last_items:
        for sym, p, d, gm in zip(symbols, prices, deltas, gammas, strict=True):
            last[sym] = {"spot": spot, "price": float(p), "delta": float(d),
                         "gamma": float(gm)}
    never = sorted({c.underlying for c in configs
                    if not any(s in last for s in contract_symbols(c))})
    if never:  # a mistyped underlying or a feed without it: say so, not an empty book
        log.warning("option groups never priced (no valid tick of their underlying): %s",
                    ", ".join(never))
    lat = counts.latencies_ns
    lat_us = np.array(lat, dtype=np.float64) / 1e3
    return {
        "never_priced": never,
        "device": pricing.device,
        "dispatch": pricing.dispatch,
        "groups": counts.groups,
        "options": counts.options,
        "ticks": counts.ticks,
        "repricings": counts.repricings,
        "coalesced_ticks": counts.coalesced,
        "latency_us_mean": float(lat_us.mean()) if lat else None,
        "latency_us_p50": float(np.median(lat_us)) if lat else None,
        "latency_us_p99": float(np.percentile(lat_us, 99)) if lat else None,
        "latency_us_max": float(lat_us.max()) if lat else None,
        "last": last,
    }


def summarize_groups(pricing: OptionPricing, configs: list[OptionGroupConfig],
                     groups: list[PricedGroup], ticks: int) -> dict[str, object]:
    """`summarize` for a book that holds its groups in this process (their own counts,
    latencies and newest values)."""
    counts = Counts(
        groups=len(groups), options=sum(g.pricer.n for g in groups), ticks=ticks,
        repricings=sum(g.repricings for g in groups),
        coalesced=sum(g.coalesced for g in groups),
        latencies_ns=[x for g in groups for x in g.latencies_ns])
    last = [(g.symbols, g.last_values) for g in groups if g.last_values is not None]
    return summarize(pricing, configs, counts, last)
