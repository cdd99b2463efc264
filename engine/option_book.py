"""Option groups repriced after every tick of their underlying, without blocking the loop.

A group (`OptionGroupConfig`) is the options on one underlying: the product of its strikes,
expiries and rights. `OptionBook.on_underlying_tick` writes the new spot into the group's
mapped host memory and launches one repricing kernel on the group's own CUDA stream; if a
repricing of that group is still in flight it only remembers the newest spot and launches
again when the running one completes, so the newest spot is always priced and nothing
queues without bound. `poll()` checks recorded events (never blocks) and turns finished
results into `OptionValue` messages; `drain()` awaits all in-flight work by polling with
`asyncio.sleep(0)`. On the CPU backend the repricing runs synchronously inside
`on_underlying_tick` and `poll()` returns it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import math
import time
from dataclasses import dataclass, field

import msgspec
import numpy as np

from feeds.messages import OptionValue
from feeds.option_chain import DAYS_PER_YEAR, option_symbol
from gpu import options_core as core
from gpu.device import resolve_device
from gpu.options import GRIDS, OptionGroupPricer, make_grid, option_params, warm_up

NS_PER_DAY = 86_400 * 1_000_000_000


class OptionGroupConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One option group: every (strike, expiry, right) combination on `underlying`.

    expiries: days to expiry (int, fixed whatever the date) or expiry dates (the time to
      expiry then shrinks with the ticks' date at the exchange: calendar days / 365).
    style: "american" or "european"; vol and rate per year (continuously compounded);
    grid: "seed" (fastest), "default" or "fine"; price_steps/time_steps > 0 override it.
    """

    underlying: str
    strikes: tuple[float, ...]
    expiries: tuple[int | dt.date, ...]
    rights: tuple[str, ...] = ("C", "P")
    style: str = "american"
    vol: float = 0.25
    rate: float = 0.0
    grid: str = "seed"
    price_steps: int = 0
    time_steps: int = 0

    def __post_init__(self) -> None:
        if not self.underlying:
            raise ValueError("option group: underlying must not be empty")
        if not self.strikes or any(not (k > 0 and np.isfinite(k)) for k in self.strikes):
            raise ValueError(f"option group {self.underlying}: strikes must be positive")
        if not self.expiries:
            raise ValueError(f"option group {self.underlying}: no expiries")
        for e in self.expiries:
            if isinstance(e, int) and e < 0:
                raise ValueError(f"option group {self.underlying}: negative days to expiry {e}")
        if not self.rights or any(r not in ("C", "P") for r in self.rights):
            raise ValueError(f"option group {self.underlying}: rights must be 'C' or 'P'")
        if self.style not in ("american", "european"):
            raise ValueError(f"option group {self.underlying}: style must be american/european")
        if not (self.vol > 0 and np.isfinite(self.vol)):
            raise ValueError(f"option group {self.underlying}: vol must be > 0")
        if not np.isfinite(self.rate):
            raise ValueError(f"option group {self.underlying}: rate must be finite")
        if self.grid not in GRIDS:
            raise ValueError(f"option group {self.underlying}: grid must be one of {list(GRIDS)}")
        if self.price_steps < 0 or self.time_steps < 0:
            raise ValueError(f"option group {self.underlying}: step counts must be ≥ 0")


@dataclass
class _Group:
    config: OptionGroupConfig
    pricer: OptionGroupPricer
    symbols: list[str]
    expiry_days: list[int | None]  # fixed days, or None for a dated expiry
    expiry_dates: list[dt.date | None]
    pending: tuple[float, int] | None = None  # newest (spot, ts) not yet launched
    launched: tuple[float, int, int] | None = None  # (spot, ts, perf_counter_ns at launch)
    last_date: dt.date | None = None
    latencies_ns: list[int] = field(default_factory=list)
    repricings: int = 0
    coalesced: int = 0
    since_check: int = 0  # coalesced ticks since the event was last queried
    #: (spot, prices, deltas, gammas) of the newest repricing
    last_values: tuple[float, list[float], list[float], list[float]] | None = None


#: while a group is busy, query its event on every this many underlying ticks
CHECK_EVERY_TICKS = 8


EXCHANGE_TZ = "America/New_York"


def _tick_date(ts: int, tz: dt.tzinfo) -> dt.date:
    """The exchange's date of a tick (an expiry date ends at the exchange's midnight)."""
    return dt.datetime.fromtimestamp(ts // 1_000_000_000, tz=tz).date()


class OptionBook:
    """Theoretical values of configured option groups, kept current with their underlyings."""

    def __init__(self, groups: list[OptionGroupConfig], device: str = "auto",
                 timezone: str = EXCHANGE_TZ) -> None:
        from zoneinfo import ZoneInfo

        self.device = resolve_device(device, "option book")
        self.tz = ZoneInfo(timezone)
        self._groups: dict[str, list[_Group]] = {}
        self._ready: list[OptionValue] = []
        self._seq = 0
        self._ticks = 0
        warmed: set[tuple[object, ...]] = set()
        for cfg in groups:
            grid = make_grid(
                cfg.grid,
                price_steps=cfg.price_steps or None,
                time_steps=cfg.time_steps or None,
            )
            combos = list(itertools.product(cfg.expiries, cfg.strikes, cfg.rights))
            days = [e if isinstance(e, int) else None for e, _, _ in combos]
            dates = [e if isinstance(e, dt.date) else None for e, _, _ in combos]
            symbols = [
                option_symbol(cfg.underlying, e, r, k)
                if isinstance(e, dt.date)
                else f"{cfg.underlying}+{e}D{r}{int(round(k * 1000)):08d}"
                for e, k, r in combos
            ]
            expiry = [d / DAYS_PER_YEAR if d is not None else 0.0 for d in days]
            params = option_params(
                1.0,
                [k for _, k, _ in combos],
                expiry,
                cfg.vol,
                cfg.rate,
                [r == "C" for _, _, r in combos],
                cfg.style == "american",
            )
            key = (grid, self.device)
            if key not in warmed:  # JIT before the first tick, not on it
                warm_up(grid, self.device)
                warmed.add(key)
            # on the CPU the group reprices on a worker thread so the loop never waits
            pricer = OptionGroupPricer(params, grid, self.device, background=True)
            group = _Group(cfg, pricer, symbols, days, dates)
            self._groups.setdefault(cfg.underlying, []).append(group)

    @property
    def underlyings(self) -> set[str]:
        return set(self._groups)

    @property
    def in_flight(self) -> int:
        return sum(g.pricer.in_flight for gs in self._groups.values() for g in gs)

    # -- ticks ---------------------------------------------------------------------------

    def on_underlying_tick(self, symbol: str, spot: float, ts: int) -> None:
        """A new underlying price: reprice its groups (launch, or remember if busy)."""
        groups = self._groups.get(symbol)
        if groups is None:
            return
        if not (0.0 < spot < math.inf):  # NaN fails too; called on every underlying tick
            return  # bad prices are the feed's to count; a group is never priced on one
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

    def _launch(self, g: _Group, spot: float, ts: int) -> None:
        day = _tick_date(ts, self.tz)
        if day != g.last_date and any(d is not None for d in g.expiry_dates):
            expiry = [
                ((e - day).days if e is not None else (d or 0)) / DAYS_PER_YEAR
                for e, d in zip(g.expiry_dates, g.expiry_days, strict=True)
            ]
            g.pricer.set_column(core.EXPIRY, expiry)
        g.last_date = day
        g.pricer.set_spot(spot)
        g.launched = (spot, ts, time.perf_counter_ns())
        g.pricer.launch()

    def _collect(self, g: _Group) -> None:
        assert g.launched is not None
        spot, ts, t0 = g.launched
        values = g.pricer.results()
        g.latencies_ns.append(time.perf_counter_ns() - t0)
        g.repricings += 1
        g.launched = None
        underlying = g.config.underlying
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

    def poll(self) -> list[OptionValue]:
        """Messages of every repricing finished since the last call; never blocks."""
        for groups in self._groups.values():
            for g in groups:
                if g.pricer.in_flight and g.pricer.done():
                    self._collect(g)
        out, self._ready = self._ready, []
        return out

    async def drain(self) -> list[OptionValue]:
        """Await all in-flight repricings (and the ones they trigger) by polling."""
        out = self.poll()
        while self.in_flight:
            await asyncio.sleep(0)
            out.extend(self.poll())
        return out

    def _last_by_symbol(self) -> dict[str, dict[str, float]]:
        last: dict[str, dict[str, float]] = {}
        for gs in self._groups.values():
            for g in gs:
                if g.last_values is None:
                    continue
                spot, prices, deltas, gammas = g.last_values
                for sym, p, d, gm in zip(g.symbols, prices, deltas, gammas, strict=True):
                    last[sym] = {"spot": spot, "price": p, "delta": d, "gamma": gm}
        return last

    def summary(self) -> dict[str, object]:
        """Counts, latency (launch → results on the host, as observed by poll) and last values."""
        lat = [x for gs in self._groups.values() for g in gs for x in g.latencies_ns]
        lat_us = np.array(lat, dtype=np.float64) / 1e3
        return {
            "device": self.device,
            "groups": sum(len(gs) for gs in self._groups.values()),
            "options": sum(g.pricer.n for gs in self._groups.values() for g in gs),
            "ticks": self._ticks,
            "repricings": sum(g.repricings for gs in self._groups.values() for g in gs),
            "coalesced_ticks": sum(g.coalesced for gs in self._groups.values() for g in gs),
            "latency_us_mean": float(lat_us.mean()) if lat else None,
            "latency_us_p50": float(np.median(lat_us)) if lat else None,
            "latency_us_max": float(lat_us.max()) if lat else None,
            "last": self._last_by_symbol(),
        }
