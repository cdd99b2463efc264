"""One option group's state while priced, built by one recipe for both implementations
(`engine.options.in_process` in the engine's process, `engine.options.worker_server` in a
worker process). Its configuration, `OptionGroupConfig`, is in engine/options/config.py
(no pricing code there) and is imported here too."""

from __future__ import annotations

import datetime as dt
import itertools
import logging
from dataclasses import dataclass, field

from engine.options.config import OptionGroupConfig
from feeds.option_chain import DAYS_PER_YEAR, option_symbol
from gpu.options.engines import FdPricingEngine, OptionGroupPricer, make_grid
from gpu.options.instruments import MarketInputs, OptionContracts

# the options' logger (the never-priced warning is on it too)
log = logging.getLogger("engine.options")


@dataclass
class PricedGroup:
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


class AllWarm(set[tuple[object, ...]]):
    """For groups that keep only their parameter rows on the host while a
    `gpu.options.batch.BatchPricer` prices them (the worker's, the clocked book's):
    `build_group` has nothing to compile for them."""

    def __contains__(self, item: object) -> bool:
        return True


def build_group(cfg: OptionGroupConfig, device: str, background: bool,
                warmed: set[tuple[object, ...]]) -> PricedGroup:
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
    return PricedGroup(cfg, contracts, engine, pricer, contract_symbols(cfg), days, dates,
                  dated=any(d is not None for d in dates))


def prepare_launch(g: PricedGroup, spot: float, ts: int, tz: dt.tzinfo) -> None:
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
