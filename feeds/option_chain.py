"""Option chains from CSV files, one row per contract.

As in `shared/data/lean_goog_option_chain_2015-12-24/goog_option_chain_2015-12-24T1300ET.csv`.

Columns (header names, any order; extra columns are ignored):
- required: `expiry` (YYYY-MM-DD), `strike` (> 0), `right` (C/P or call/put);
- optional: `underlying`, `style` (european/american; default european), `bid`, `ask`
  (empty = that side not quoted), `iv` (volatility per year to price at),
  `dividend_yield` (the underlying's continuous dividend yield per year, in [-1, 1];
  empty = not given),
  `snapshot_time` (ISO 8601, the default as-of time), and the underlying's price as
  `spot`, or `underlying_bid`/`underlying_ask` (their mid is used), or `underlying_last`.

Rows that cannot be read (a bad strike, expiry, right, style or dividend yield) are
counted by reason and skipped; a file without the required columns or without any good
row is an error.
Time to expiry is calendar days from the as-of date to the expiry date, divided by 365.
"""

from __future__ import annotations

import csv
import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

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
    #: continuous dividend yield per contract (NaN: not given); empty: no such column
    dividend_yield: npt.NDArray[np.float64] = field(default_factory=lambda: np.empty(0))

    def dividend_yields(self, default: float) -> npt.NDArray[np.float64]:
        """The yield per contract: the chain's where given, else `default`."""
        q = self.dividend_yield if self.dividend_yield.size else np.full(len(self), np.nan)
        return np.where(np.isfinite(q), q, default)

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
    rows: list[_Contract] = []
    skipped: dict[str, int] = {}
    snapshot: dt.datetime | None = None
    with p.open(newline="") as fh:
        reader: csv.DictReader[str] | None = None
        try:
            reader = _rows(fh, p)
            for row in reader:
                got = _contract(row)
                if isinstance(got, str):
                    skipped[got] = skipped.get(got, 0) + 1
                    continue
                rows.append(got)
                if snapshot is None and (row.get("snapshot_time") or "").strip():
                    try:
                        snapshot = dt.datetime.fromisoformat(row["snapshot_time"].strip())
                    except ValueError:
                        skipped["bad_snapshot_time"] = skipped.get("bad_snapshot_time", 0) + 1
        except csv.Error as exc:  # not a ValueError: it would reach the user as a crash
            line = 1 if reader is None else reader.line_num
            raise ValueError(f"{p}: line {line}: not a readable CSV ({exc})") from None
    if not rows:
        detail = f" (skipped: {skipped})" if skipped else ""
        raise ValueError(f"{p}: no usable option rows{detail}")
    underlying, symbols, expiry, strike, is_call, is_american, bid, ask, iv, spot, q = zip(
        *rows, strict=True)
    return OptionChain(
        underlying=list(underlying),
        symbol=list(symbols),
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
        dividend_yield=np.array(q),
    )


#: one contract's row: underlying, symbol, expiry, strike, is_call, is_american, bid, ask,
#: iv, spot, dividend yield
_Contract = tuple[str, str, dt.date, float, bool, bool, float, float, float, float, float]


def _rows(fh: TextIO, p: Path) -> csv.DictReader[str]:
    """The file's rows by stripped header name; the required columns must be there."""
    reader = csv.DictReader(fh)
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise ValueError(f"{p}: missing column(s) {', '.join(missing)} (header: {header})")
    reader.fieldnames = header
    return reader


def _contract(row: dict[str, str]) -> _Contract | str:
    """One row's contract, or why the row is skipped (bad expiry, strike, right, style or
    dividend yield)."""
    try:
        exp = dt.date.fromisoformat((row.get("expiry") or "").strip())
    except ValueError:
        return "bad_expiry"
    k = _float(row.get("strike"))
    if not (k > 0 and np.isfinite(k)):
        return "bad_strike"
    right = (row.get("right") or "").strip().upper()
    if right in ("C", "CALL"):
        call = True
    elif right in ("P", "PUT"):
        call = False
    else:
        return "bad_right"
    style = (row.get("style") or "european").strip().lower()
    if style not in ("european", "american"):
        return "bad_style"
    # an infinite spot is no spot (it would reach the pricer as a parameter error): the
    # row falls back to the underlying's quote or last price, as an empty field does
    s = _float(row.get("spot"))
    if not 0 < s < np.inf:
        ub, ua = _float(row.get("underlying_bid")), _float(row.get("underlying_ask"))
        s = 0.5 * (ub + ua) if ub > 0 and ua >= ub else _float(row.get("underlying_last"))
    q_text = (row.get("dividend_yield") or "").strip()
    q = _float(q_text)
    if q_text and not abs(q) <= 1.0:  # unreadable, infinite or beyond ±100% a year
        return "bad_dividend_yield"
    name = (row.get("underlying") or "").strip()
    vol = _float(row.get("iv"))
    return (name, option_symbol(name, exp, "C" if call else "P", k), exp, k, call,
            style == "american", _float(row.get("bid")), _float(row.get("ask")),
            vol if vol > 0 else np.nan, s if 0 < s < np.inf else np.nan, q)
