"""Position sizing: how many units an entry takes. One protocol, several models.

The account is one account (`engine.trading.broker.PaperBroker`): its capital is set once and
shared by all symbols; a symbol that appears later never adds money. A sizing model says
how much of that account one entry may use; the broker then checks cash, short margin and
gross exposure at the fill and cuts the entry to what passes (engine/trading/broker.py).

Models (`[broker] sizing`, `--sizing`):
- `per-symbol`: the GP paper's model, kept by name so the evaluator's parity stands: the
  capital is split evenly over the symbols known at the start, each symbol trades its own
  sleeve all-in (the most whole units its sleeve's cash buys after commission) and can
  never spend another's. A symbol first seen later has an empty sleeve and cannot enter.
- `equal-weight`: equity / (number of symbols whose signal is active, at least 1).
- `fixed-fraction`: `fraction` x equity per entry.
- `volatility-target`: equity x min(1, target / sigma), sigma the symbol's annualised
  volatility of its last `volatility_lookback` bar returns (close to close, x sqrt of
  `bars_per_year`); no entry until the lookback has its bars.
- `fixed`: `quantity` units per entry.

Every model but `fixed` turns a notional budget into units at the fill price:
floor((budget - commission) / (fill price x multiplier x margin)), margin being 1 for a buy
and the short margin for a short sale, so that the entry passes the margin check it sized
for. Entries are sized when they fill (the fill price is known then; a switch of sides has
closed its old position by then), not when the order is placed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

SIZING_MODELS = ("per-symbol", "equal-weight", "fixed-fraction", "volatility-target", "fixed")
#: old names still read from config files: "all-in" was the per-symbol model's name
OLD_NAMES = {"all-in": "per-symbol"}


class SizingAccount(Protocol):
    """What a sizing model reads from the account (PaperBroker provides it)."""

    commission: float
    #: symbols whose signal is active now (set by the engine at each bar event)
    active_signals: int

    def equity(self) -> float: ...

    def sleeve_cash(self, sym: int) -> float: ...

    def margin_per_notional(self, side: int) -> float: ...

    def multiplier(self, sym: int) -> float: ...


class SizingModel(Protocol):
    """Units one entry of `side` in `sym` takes at `fill_price` (0: none)."""

    @property
    def name(self) -> str: ...

    @property
    def exact(self) -> bool:
        """True: an entry that fails the account's checks is refused, not cut (a user
        who names the units wants those units or none)."""
        ...

    def entry_units(self, account: SizingAccount, sym: int, side: int,
                    fill_price: float) -> float: ...


def units_for(budget: float, account: SizingAccount, sym: int, side: int,
              fill_price: float) -> float:
    """Whole units a notional `budget` buys at `fill_price` after commission (0 or more)."""
    per_unit = fill_price * account.multiplier(sym) * account.margin_per_notional(side)
    if not (per_unit > 0.0 and budget > account.commission):
        return 0.0
    units = (budget - account.commission) / per_unit
    # beyond 2**53 a float has no fraction left to floor; the risk limits bound it
    return float(math.floor(units)) if math.isfinite(units) else 0.0


@dataclass(frozen=True)
class PerSymbol:
    """The GP paper's isolated sleeve per symbol, all-in (see the module docstring)."""

    name: str = "per-symbol"
    exact: bool = True

    def entry_units(self, account: SizingAccount, sym: int, side: int,
                    fill_price: float) -> float:
        # the same expression as the GP evaluator (floor((cash - fee) / price)): to the cent
        cash = account.sleeve_cash(sym)
        per_unit = fill_price * account.margin_per_notional(side) * account.multiplier(sym)
        return float(max(0, math.floor((cash - account.commission) / per_unit)))


@dataclass(frozen=True)
class EqualWeight:
    name: str = "equal-weight"
    exact: bool = False

    def entry_units(self, account: SizingAccount, sym: int, side: int,
                    fill_price: float) -> float:
        budget = account.equity() / max(1, account.active_signals)
        return units_for(budget, account, sym, side, fill_price)


@dataclass(frozen=True)
class FixedFraction:
    fraction: float
    name: str = "fixed-fraction"
    exact: bool = False

    def entry_units(self, account: SizingAccount, sym: int, side: int,
                    fill_price: float) -> float:
        return units_for(self.fraction * account.equity(), account, sym, side, fill_price)


@dataclass(frozen=True)
class VolatilityTarget:
    """Budget equity x min(1, target / sigma_annualised); `closes(sym, n)` gives the
    symbol's last `n` bar closes (the engine's bar history)."""

    target: float
    lookback: int
    bars_per_year: float
    closes: Callable[[int, int], np.ndarray]
    name: str = "volatility-target"
    exact: bool = False

    def entry_units(self, account: SizingAccount, sym: int, side: int,
                    fill_price: float) -> float:
        sigma = self.volatility(sym)
        if not sigma > 0.0:
            return 0.0  # still warming up, or a flat price: no risk measured, no entry
        weight = min(1.0, self.target / sigma)
        return units_for(weight * account.equity(), account, sym, side, fill_price)

    def volatility(self, sym: int) -> float:
        """Annualised volatility of the last `lookback` close-to-close log returns; NaN
        while fewer are known."""
        c = self.closes(sym, self.lookback + 1)
        if c.size < self.lookback + 1 or not (c > 0).all():
            return math.nan
        r = np.diff(np.log(c))
        return float(r.std(ddof=1) * math.sqrt(self.bars_per_year))


@dataclass(frozen=True)
class Fixed:
    quantity: float
    name: str = "fixed"
    exact: bool = True

    def entry_units(self, account: SizingAccount, sym: int, side: int,
                    fill_price: float) -> float:
        return self.quantity


def canonical(name: str) -> str:
    """A sizing model's name, old names mapped to new; a ValueError names the choices."""
    name = OLD_NAMES.get(name, name)
    if name not in SIZING_MODELS:
        raise ValueError(f"unknown sizing {name!r}: expected one of "
                         f"{', '.join(SIZING_MODELS)}")
    return name


def make_sizing(name: str, *, quantity: float = 100.0, fraction: float = 0.1,
                volatility_target: float = 0.15, volatility_lookback: int = 20,
                bars_per_year: float = 252.0,
                closes: Callable[[int, int], np.ndarray] | None = None) -> SizingModel:
    """The sizing model of `name` with its settings (see the module docstring)."""
    name = canonical(name)
    if name == "per-symbol":
        return PerSymbol()
    if name == "equal-weight":
        return EqualWeight()
    if name == "fixed-fraction":
        return FixedFraction(fraction)
    if name == "fixed":
        return Fixed(quantity)
    if closes is None:
        raise ValueError("volatility-target sizing needs the engine's bar history")
    return VolatilityTarget(volatility_target, volatility_lookback, bars_per_year, closes)


@dataclass(frozen=True)
class TargetWeight:
    """A weight strategy's entries: |weight| x equity (strategies.base.WeightStrategy);
    `weights()` gives the strategy's last weights (None before the first)."""

    weights: Callable[[], np.ndarray | None]
    name: str = "target-weight"
    exact: bool = False

    def entry_units(self, account: SizingAccount, sym: int, side: int,
                    fill_price: float) -> float:
        w = self.weights()
        if w is None or sym >= len(w):
            return 0.0
        return units_for(abs(float(w[sym])) * account.equity(), account, sym, side,
                         fill_price)
