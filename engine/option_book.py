"""Option groups repriced after every tick of their underlying, without blocking the loop.

A group (`OptionGroupConfig`) is the options on one underlying: the product of its strikes,
expiries and rights. Two ways to dispatch the repricings (`dispatch=`):

- "process" (the default on CUDA): a GPU worker process (`engine.option_worker`) owns the
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
import datetime as dt
import itertools
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from engine.errors import UserError
from feeds.messages import OptionGroupValues, OptionValue
from feeds.option_chain import DAYS_PER_YEAR, option_symbol
from gpu.device import resolve_device
from gpu.instruments import MarketInputs, OptionContracts, check_dividend_yield
from gpu.options import GRIDS, FdPricingEngine, OptionGroupPricer, make_grid

NS_PER_DAY = 86_400 * 1_000_000_000

#: what the book publishes
OptionMessage = OptionValue | OptionGroupValues

log = logging.getLogger(__name__)


class OptionGroupConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One option group: every (strike, expiry, right) combination on `underlying`.

    expiries: days to expiry (int, fixed whatever the date) or expiry dates (the time to
      expiry then shrinks with the ticks' date at the exchange: calendar days / 365).
    style: "american" or "european"; vol, rate and dividend_yield per year (continuously
      compounded; dividend_yield in [-1, 1], default 0);
    grid: "seed" (fastest), "default" or "fine"; price_steps/time_steps > 0 override it.
    """

    underlying: str
    strikes: tuple[float, ...]
    expiries: tuple[int | dt.date, ...]
    rights: tuple[str, ...] = ("C", "P")
    style: str = "american"
    vol: float = 0.25
    rate: float = 0.0
    dividend_yield: float = 0.0
    grid: str = "seed"
    price_steps: int = 0
    time_steps: int = 0
    #: "group": one OptionGroupValues message per repricing (arrays; the default);
    #: "option": one OptionValue message per contract and repricing (as before)
    messages: str = "group"

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
        check_dividend_yield(self.dividend_yield, f"option group {self.underlying}: "
                                                  f"dividend_yield")
        if self.grid not in GRIDS:
            raise ValueError(f"option group {self.underlying}: grid must be one of {list(GRIDS)}")
        if self.price_steps < 0 or self.time_steps < 0:
            raise ValueError(f"option group {self.underlying}: step counts must be ≥ 0")
        if self.messages not in ("group", "option"):
            raise ValueError(f"option group {self.underlying}: messages must be group/option")


@dataclass
class _Group:
    """One group at run time: its contracts, its pricing engine and the pricer the engine
    made for them (the group never asks which device prices it)."""

    config: OptionGroupConfig
    contracts: OptionContracts
    engine: FdPricingEngine
    pricer: OptionGroupPricer
    symbols: tuple[str, ...]
    expiry_days: list[int | None]  # fixed days, or None for a dated expiry
    expiry_dates: list[dt.date | None]
    pending: tuple[float, int] | None = None  # newest (spot, ts) not yet launched
    launched: tuple[float, int, int] | None = None  # (spot, ts, perf_counter_ns at launch)
    last_date: dt.date | None = None
    latencies_ns: list[int] = field(default_factory=list)
    repricings: int = 0
    coalesced: int = 0
    since_check: int = 0  # coalesced ticks since the event was last queried
    #: any expiry given as a date (times to expiry then change with the tick's date)
    dated: bool = False
    #: (spot, prices, deltas, gammas) of the newest repricing
    last_values: tuple[float, list[float], list[float], list[float]] | None = None
    expired_warned: int = 0  # expired contracts already reported in the log


#: while a group is busy, query its event on every this many underlying ticks
CHECK_EVERY_TICKS = 8


EXCHANGE_TZ = "America/New_York"

DISPATCHES = ("auto", "inline", "process")


def _tick_date(ts: int, tz: dt.tzinfo) -> dt.date:
    """The exchange's date of a tick (an expiry date ends at the exchange's midnight)."""
    return dt.datetime.fromtimestamp(ts // 1_000_000_000, tz=tz).date()


def contract_symbols(cfg: OptionGroupConfig) -> tuple[str, ...]:
    """The group's contracts in pricing order: expiry, then strike, then right."""
    return tuple(
        option_symbol(cfg.underlying, e, r, k)
        if isinstance(e, dt.date)
        else f"{cfg.underlying}+{e}D{r}{int(round(k * 1000)):08d}"
        for e, k, r in itertools.product(cfg.expiries, cfg.strikes, cfg.rights)
    )


def group_contracts(cfg: OptionGroupConfig) -> OptionContracts:
    """The group's contracts in pricing order (as `contract_symbols`); a dated expiry's
    time to expiry is 0 until the first tick's date sets it (`prepare_launch`)."""
    combos = list(itertools.product(cfg.expiries, cfg.strikes, cfg.rights))
    return OptionContracts.of(
        [k for _, k, _ in combos],
        [e / DAYS_PER_YEAR if isinstance(e, int) else 0.0 for e, _, _ in combos],
        [r == "C" for _, _, r in combos],
        cfg.style == "american",
    )


def group_engine(cfg: OptionGroupConfig, device: str) -> FdPricingEngine:
    """The engine that prices the group: its grid (with overrides) on `device`."""
    grid = make_grid(
        cfg.grid,
        price_steps=cfg.price_steps or None,
        time_steps=cfg.time_steps or None,
    )
    return FdPricingEngine(grid, device)


def build_group(cfg: OptionGroupConfig, device: str, background: bool,
                warmed: set[tuple[object, ...]]) -> _Group:
    """A group's contracts, engine, symbols and pricer (the engine's and the worker's one
    recipe): the device is chosen here, once, by the engine."""
    engine = group_engine(cfg, device)
    contracts = group_contracts(cfg)
    combos = list(itertools.product(cfg.expiries, cfg.strikes, cfg.rights))
    days = [e if isinstance(e, int) else None for e, _, _ in combos]
    dates = [e if isinstance(e, dt.date) else None for e, _, _ in combos]
    key = (engine.grid, engine.device)
    if key not in warmed:  # JIT before the first tick, not on it
        engine.warm_up()
        warmed.add(key)
    # spot 1.0 until the first tick writes the real one
    pricer = engine.group_pricer(contracts, MarketInputs(1.0, cfg.vol, cfg.rate,
                                                         cfg.dividend_yield),
                                 background=background)
    return _Group(cfg, contracts, engine, pricer, contract_symbols(cfg), days, dates,
                  dated=any(d is not None for d in dates))


def prepare_launch(g: _Group, spot: float, ts: int, tz: dt.tzinfo) -> None:
    """Write a tick's spot (and, when the date rolled, the times to expiry) into the group."""
    if g.dated:  # only dated expiries depend on the tick's date (a few microseconds)
        day = _tick_date(ts, tz)
        if day != g.last_date:
            expiry = [
                ((e - day).days if e is not None else (d or 0)) / DAYS_PER_YEAR
                for e, d in zip(g.expiry_dates, g.expiry_days, strict=True)
            ]
            g.contracts = g.contracts.with_expiry(expiry)
            g.pricer.set_expiry(g.contracts.expiry)
            gone = [sym for sym, e, t in zip(g.symbols, g.expiry_dates, expiry, strict=True)
                    if e is not None and t < 0]
            if len(gone) > g.expired_warned:
                # an expired contract's published value is its intrinsic value: say so once
                # each time more contracts expire, not silently on every tick
                g.expired_warned = len(gone)
                log.warning("%s: %d contract(s) expired before %s (e.g. %s); their values "
                             "are intrinsic", g.config.underlying, len(gone), day, gone[0])
        g.last_date = day
    g.pricer.set_spot(spot)


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
        self._groups: dict[str, list[_Group]] = {}
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
            from engine.option_worker import open_workers

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

    def _launch(self, g: _Group, spot: float, ts: int) -> None:
        prepare_launch(g, spot, ts, self.tz)
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
