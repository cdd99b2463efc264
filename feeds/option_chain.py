"""Option chains from CSV: one row per contract, as in
`shared/data/lean_goog_option_chain_2015-12-24/goog_option_chain_2015-12-24T1300ET.csv`.

Columns (header names, any order; extra columns are ignored):
- required: `expiry` (YYYY-MM-DD), `strike` (> 0), `right` (C/P or call/put);
- optional: `underlying`, `style` (european/american; default european), `bid`, `ask`
  (empty = that side not quoted), `iv` (volatility per year to price at),
  `snapshot_time` (ISO 8601, the default as-of time), and the underlying's price as
  `spot`, or `underlying_bid`/`underlying_ask` (their mid is used), or `underlying_last`.

Rows that cannot be read (a bad strike, expiry, right or style) are counted by reason and
skipped; a file without the required columns or without any good row is an error.
Time to expiry is calendar days from the as-of date to the expiry date, divided by 365.
"""

from __future__ import annotations

import csv
import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

REQUIRED = ("expiry", "strike", "right")
DAYS_PER_YEAR = 365.0


def option_symbol(underlying: str, expiry: dt.date, right: str, strike: float) -> str:
    """OCC-style contract name without padding, e.g. GOOG160115C00750000."""
    return f"{underlying}{expiry:%y%m%d}{right}{int(round(strike * 1000)):08d}"


@dataclass(frozen=True)
class OptionChain:
    """Contracts of a chain as parallel arrays (NaN where a value is absent)."""

    underlying: list[str]
    symbol: list[str]
    expiry: npt.NDArray[np.datetime64]  # datetime64[D]
    strike: npt.NDArray[np.float64]
    is_call: npt.NDArray[np.bool_]
    is_american: npt.NDArray[np.bool_]
    bid: npt.NDArray[np.float64]
    ask: npt.NDArray[np.float64]
    iv: npt.NDArray[np.float64]
    spot: npt.NDArray[np.float64]
    snapshot_time: dt.datetime | None
    skipped: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.strike.shape[0])

    @property
    def right(self) -> list[str]:
        return ["C" if c else "P" for c in self.is_call]

    @property
    def expiries(self) -> list[dt.date]:
        """The distinct expiry dates, ascending."""
        return [d.astype(dt.date) for d in np.unique(self.expiry)]

    def asof_date(self) -> dt.date | None:
        """The snapshot's calendar date in its own time zone (None without a snapshot)."""
        return None if self.snapshot_time is None else self.snapshot_time.date()

    def years_to_expiry(self, asof: dt.date) -> npt.NDArray[np.float64]:
        """Calendar days from `asof` to each expiry / 365 (≤ 0: expired or expiring)."""
        days = (self.expiry - np.datetime64(asof, "D")).astype(np.int64)
        return days.astype(np.float64) / DAYS_PER_YEAR


def _float(text: str | None) -> float:
    """A number, or NaN for an empty/absent/unreadable field."""
    if text is None:
        return np.nan
    text = text.strip()
    if not text:
        return np.nan
    try:
        return float(text)
    except ValueError:
        return np.nan


def read_chain(path: str | Path) -> OptionChain:
    """Read an option-chain CSV (see the module docstring). Raises ValueError if unusable."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"option chain {p} does not exist")
    with p.open(newline="") as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise ValueError(f"{p}: missing column(s) {', '.join(missing)} (header: {header})")
        reader.fieldnames = header
        underlying: list[str] = []
        symbols: list[str] = []
        expiry: list[dt.date] = []
        strike: list[float] = []
        is_call: list[bool] = []
        is_american: list[bool] = []
        bid: list[float] = []
        ask: list[float] = []
        iv: list[float] = []
        spot: list[float] = []
        skipped: dict[str, int] = {}
        snapshot: dt.datetime | None = None

        def skip(reason: str) -> None:
            skipped[reason] = skipped.get(reason, 0) + 1

        for row in reader:
            try:
                exp = dt.date.fromisoformat((row.get("expiry") or "").strip())
            except ValueError:
                skip("bad_expiry")
                continue
            k = _float(row.get("strike"))
            if not (k > 0 and np.isfinite(k)):
                skip("bad_strike")
                continue
            right = (row.get("right") or "").strip().upper()
            if right in ("C", "CALL"):
                call = True
            elif right in ("P", "PUT"):
                call = False
            else:
                skip("bad_right")
                continue
            style = (row.get("style") or "european").strip().lower()
            if style not in ("european", "american"):
                skip("bad_style")
                continue
            if snapshot is None and (row.get("snapshot_time") or "").strip():
                try:
                    snapshot = dt.datetime.fromisoformat(row["snapshot_time"].strip())
                except ValueError:
                    skip("bad_snapshot_time")
            s = _float(row.get("spot"))
            if not s > 0:
                ub, ua = _float(row.get("underlying_bid")), _float(row.get("underlying_ask"))
                s = 0.5 * (ub + ua) if ub > 0 and ua >= ub else _float(row.get("underlying_last"))
            name = (row.get("underlying") or "").strip()
            r = "C" if call else "P"
            underlying.append(name)
            symbols.append(option_symbol(name, exp, r, k))
            expiry.append(exp)
            strike.append(k)
            is_call.append(call)
            is_american.append(style == "american")
            bid.append(_float(row.get("bid")))
            ask.append(_float(row.get("ask")))
            vol = _float(row.get("iv"))
            iv.append(vol if vol > 0 else np.nan)
            spot.append(s if s > 0 else np.nan)
    if not strike:
        detail = f" (skipped: {skipped})" if skipped else ""
        raise ValueError(f"{p}: no usable option rows{detail}")
    return OptionChain(
        underlying=underlying,
        symbol=symbols,
        expiry=np.array(expiry, dtype="datetime64[D]"),
        strike=np.array(strike),
        is_call=np.array(is_call, dtype=bool),
        is_american=np.array(is_american, dtype=bool),
        bid=np.array(bid),
        ask=np.array(ask),
        iv=np.array(iv),
        spot=np.array(spot),
        snapshot_time=snapshot,
        skipped=skipped,
    )
