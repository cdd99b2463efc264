"""The option groups' settings, without the pricing code: `OptionGroupConfig` (one group,
an `[[options]]` table of the engine's config) and the check of the clock interval.

Every command reads the engine's config (engine/settings/config.py), and most price no
option. The pricing of a group (engine/options/group.py) imports the pricing engines and
their kernels, numba and numba.cuda, which cost a cold `select` 1.4 s of its 2.3 s
through this config alone (issue 27; benchmarks/results/
devbox-2026-11-28f-cold-start-select/README.md); a group's settings are checked here with
the grid names of `gpu.options.grids`, which imports no numba.
"""

from __future__ import annotations

import datetime as dt

import msgspec
import numpy as np

from gpu.options.grids import GRIDS
from gpu.options.instruments import check_dividend_yield


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


#: the longest clock interval, one day of data time (a longer one is a typo)
MAX_EVERY_MS = 86_400_000.0


def check_every_ms(every_ms: float, what: str = "options_every_ms") -> float:
    """`every_ms` if it is a clock interval (0 < it ≤ a day, in milliseconds), else a
    one-line ValueError (the clocked book's, engine/options/clocked.py)."""
    if not (isinstance(every_ms, int | float) and not isinstance(every_ms, bool)
            and 0.0 < every_ms <= MAX_EVERY_MS):
        raise ValueError(f"{what} must be a number of milliseconds above 0 and at most "
                         f"{MAX_EVERY_MS:,.0f} (a day), got {every_ms!r}")
    return float(every_ms)
