"""Open market data by path: pick the reader from what the path is, merge several paths.

- a LEAN tick zip, a LEAN symbol folder or any folder holding LEAN tick zips -> `LeanSource`
- a CSV (plain or gzip) whose header has date,open,high,low,close -> `DailySource`
- a CSV (plain or gzip) whose header has ts,symbol,price,size -> `TickCsvSource`
- a gzip recording of "<receive ns> <json frame>" lines (`feed --record`, Binance
  collectors) -> `RecordingSource` (trades and quotes)
- a Yahoo-style daily CSV (Date,Open,High,Low,Close,Adj Close,Volume; no name column: the
  file's name or the one --symbols gives) -> `DailySource`
- a `*.parquet` / `*.pq` file of ticks or daily bars -> `feeds.parquet` (pyarrow)

Reading options (`replay --ts-unit/--tz/--strict`): `ts_unit` the epoch unit of tick times
(else detected by magnitude), `tz` the zone of offset-less ISO times, `strict` a skipped
row is an error (feeds/timestamps.py, feeds/tick_csv.py).

Anything else (missing path, unknown header, empty folder) is a one-line ValueError.
`start`/`end` follow `feeds.records.to_ns` (start <= ts < end; YYYY-MM-DD is midnight New York).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from feeds.daily import DailySource
from feeds.lean import LeanSource, discover
from feeds.merge import merge_sources
from feeds.parquet import is_parquet, open_parquet, parquet_kind
from feeds.recording import RecordingSource, is_recording
from feeds.records import Source, TimeLike, parse_date, to_ns
from feeds.tick_csv import HEADER as TICK_HEADER
from feeds.tick_csv import TickCsvSource, read_header

__all__ = ["open_source", "open_sources", "parse_date", "detect_format"]

_DAILY_COLUMNS = ("date", "open", "high", "low", "close")
_CONTRACT_RE = re.compile(r"^[A-Z0-9]+[FGHJKMNQUVXZ]\d{2}$")


def resolve_data_file(path: str | Path) -> Path:
    """A data file, or the one *.csv / *.csv.gz inside a folder (like sp500_5yr_daily/)."""
    p = Path(path)
    if p.is_dir():
        found = sorted(list(p.glob("*.csv")) + list(p.glob("*.csv.gz")))
        if len(found) != 1:
            raise ValueError(f"{p}: expected exactly one *.csv or *.csv.gz file, found "
                             f"{len(found)}")
        return found[0]
    if not p.exists():
        raise ValueError(f"{p}: no such file or directory")
    return p


def _csv_folder(p: Path) -> bool:
    return p.is_dir() and not any(p.rglob("*.zip")) and (
        any(p.glob("*.csv")) or any(p.glob("*.csv.gz")))


def detect_format(path: str | Path) -> str:
    """'lean', 'daily', 'ticks' or 'recording' for a readable market-data path; ValueError
    otherwise.

    A folder holding CSV files and no zip stands for its one CSV file."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"data path not found: {p}")
    if _csv_folder(p):
        p = resolve_data_file(p)
    if p.is_dir() or p.suffix.lower() == ".zip":
        discover(p)  # raises a one-line ValueError when there is no LEAN tick zip
        return "lean"
    if is_parquet(p):
        return parquet_kind(p)
    if is_recording(p):
        return "recording"
    header = read_header(p)
    if all(c in header for c in _DAILY_COLUMNS):
        return "daily"
    if all(c in header for c in TICK_HEADER):
        return "ticks"
    shown = ",".join(header)[:80] if header else "no readable header"
    raise ValueError(
        f"{p}: unrecognised market data ({shown}); expected a LEAN tick zip/folder, a daily "
        f"CSV date,open,high,low,close,volume[,Name], a tick CSV ts,symbol,price,size, a "
        f"Parquet file of either or a feed recording (gzip lines '<ns> <json>')"
    )


def open_source(
    path: str | Path,
    symbols: Sequence[str] | None = None,
    start: TimeLike = None,
    end: TimeLike = None,
    kinds: Sequence[str] = ("trade",),
    missing_ok: bool = False,
    regular_hours: bool = False,
    ts_unit: str | None = None,
    tz: str | None = None,
    strict: bool = False,
    symbol: str | None = None,
) -> Source:
    """One Source for `path`, whatever its format (see the module docstring).

    `kinds` applies to LEAN data ("trade", "quote"); daily files give bars, tick CSVs trades.
    `regular_hours`: LEAN US-equity ticks only 09:30-16:00 New York (`LeanSource`).
    `symbol`: the name of a one-symbol daily file without a name column.
    """
    start_ns, end_ns = to_ns(start), to_ns(end)
    if is_parquet(path):
        return open_parquet(path, symbols, start_ns, end_ns, missing_ok, ts_unit, tz, strict,
                            symbol)
    fmt = detect_format(path)
    if _csv_folder(Path(path)):
        path = resolve_data_file(path)
    if fmt == "lean":
        return LeanSource(
            path, kinds=kinds, symbols=symbols, start=start_ns, end=end_ns, missing_ok=missing_ok,
            regular_hours_only=regular_hours,
        )
    if fmt == "daily":
        return DailySource(path, symbols, start_ns, end_ns, missing_ok=missing_ok,
                           symbol=symbol, strict=strict)
    if fmt == "recording":
        return RecordingSource(path, symbols, start_ns, end_ns, missing_ok=missing_ok)
    return TickCsvSource(path, symbols, start_ns, end_ns, missing_ok=missing_ok,
                         ts_unit=ts_unit, tz=tz, strict=strict)


def open_sources(
    paths: Sequence[str | Path],
    symbols: Sequence[str] | None = None,
    start: TimeLike = None,
    end: TimeLike = None,
    kinds: Sequence[str] = ("trade",),
    regular_hours: bool = False,
    ts_unit: str | None = None,
    tz: str | None = None,
    strict: bool = False,
) -> Source:
    """Several paths merged into one time-ordered Source with one symbol table.

    With `symbols`, each path contributes those it has; a symbol found in none is an error.
    One path and one symbol: the symbol also names a daily file without a name column.
    """
    if isinstance(paths, str | Path):
        paths = [paths]
    if not paths:
        raise ValueError("no data paths given")
    reading = {"ts_unit": ts_unit, "tz": tz, "strict": strict}
    if len(paths) == 1:
        one = symbols[0].strip().upper() if symbols is not None and len(symbols) == 1 else None
        return open_source(paths[0], symbols, start, end, kinds, regular_hours=regular_hours,
                           symbol=one, **reading)  # type: ignore[arg-type]
    sources = [open_source(p, symbols, start, end, kinds, missing_ok=True,
                           regular_hours=regular_hours, **reading)  # type: ignore[arg-type]
               for p in paths]
    if symbols is not None:
        found = {s.upper() for src in sources for s in src.symbols}
        # a futures root (GC) stands for its contracts (GCZ13)
        found |= {s[:-3] for s in found if _CONTRACT_RE.match(s)}
        absent = [w for w in symbols if w.strip().upper() not in found]
        if absent:
            raise ValueError(f"symbol(s) {', '.join(absent)} in none of {len(paths)} data paths")
    return merge_sources(sources)
