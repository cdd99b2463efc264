"""Daily OHLCV bars from a CSV file: a columnar table, a (days x stocks) matrix, a bar Source.

File format (e.g. `sp500_5yr_daily/all_stocks_5yr.csv.gz`): a header naming the columns
`date,open,high,low,close,volume,Name` (any order, names case-insensitive; `symbol` or
`ticker` may stand for `Name`), then one row per (stock, trading day); plain text or gzip
(`.gz` or gzip magic bytes), LF or CRLF. Dates are `YYYY-MM-DD` trading days in New York.
Prices in USD, volume in shares. Parsed with numpy (`np.loadtxt`), never one Python object per
field on the fast path; a file with malformed lines falls back to the csv module line by line.

Data policy (every case is counted in `DailyTable.skipped` or `DailyTable.repaired`, and the
first of each kind is logged once with a sample):

skipped (row dropped)
  - `malformed_row`: wrong number of fields, unparseable date or number (fallback path only);
  - `missing_symbol`: empty ticker;
  - `bad_close`: close NaN, infinite or <= 0 (the close is the one price every use needs);
  - `duplicate_date`: a second row for the same (ticker, date); the first row is kept.
repaired (row kept, fields fixed)
  - `missing_ohlc`: open, high or low NaN/infinite/<= 0 while close is valid: open := close
    where missing, high := max of the available open/high/low/close, low := min of them
    (so high = max(open, close, high) and low = min(open, close, low) whenever the row is
    otherwise consistent). (The real file has 11 such rows, e.g. BHF 2017-07-26 with only a close.)
  - `inconsistent_ohlc`: high < max(open, close) or low > min(open, close) (which includes
    high < low): high and low are widened to max/min(open, high, low, close); open and close
    are never changed. (Counted only for rows not already repaired as `missing_ohlc`.)
  - `bad_volume`: volume NaN, infinite or negative: set to 0. Volume 0 itself is kept.

Time bounds: a trading day `d` stands for the instant of its close, 16:00 America/New_York,
and is kept when `start <= close(d) < end` (end exclusive; `start`/`end` as in
`feeds.records.to_ns`, so `start="2014-01-02", end="2014-02-01"` keeps 2 Jan .. 31 Jan).

Yahoo-style files (`Date,Open,High,Low,Close,Adj Close,Volume`, one symbol per file, no
name column) are read too: the symbol is the one `--symbols` names when it names one, else
the file's name (`SPY.csv` -> SPY). `Adj Close` is not used (prices and buy-and-hold are the
traded, unadjusted ones); Yahoo's `null` fields read as missing.

Symbols are indexed in alphabetical order. The table is sorted by (symbol, date).
"""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import hashlib
import io
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from feeds.records import (
    CHUNK_RECORDS,
    KIND_BAR,
    NEW_YORK,
    RECORD_DTYPE,
    SkipCounter,
    TimeLike,
    date_ns,
    split_chunks,
    to_ns,
)

CLOSE_HOUR_NY = 16
_COLUMNS = ("date", "open", "high", "low", "close", "volume", "name")
_SYMBOL_ALIASES = ("name", "symbol", "ticker")
_NAME_WIDTH = 16  # tickers are short; U16 bounds the memory of the name column


@dataclass
class DailyTable:
    """Columnar daily bars, sorted by (symbol, date).

    `dates` datetime64[D]; `sym` int32 index into `symbols` (alphabetical); prices float64 USD;
    `volume` float64 shares.
    """

    dates: np.ndarray
    sym: np.ndarray
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray
    symbols: list[str]
    path: str = ""
    skipped: SkipCounter = field(default_factory=SkipCounter)
    repaired: SkipCounter = field(default_factory=lambda: SkipCounter(what="repaired"))

    def __len__(self) -> int:
        return len(self.dates)

    def select(
        self,
        symbols: Sequence[str] | None = None,
        start: TimeLike = None,
        end: TimeLike = None,
    ) -> DailyTable:
        """Rows of the given symbols (re-indexed alphabetically) within [start, end)."""
        keep = _window_mask(self.dates, start, end)
        names = self.symbols
        if symbols is not None:
            wanted = _check_symbols(symbols, self.symbols, self.path)
            old = np.array([self.symbols.index(s) for s in wanted], dtype=np.int32)
            keep &= np.isin(self.sym, old)
            names = wanted
        remap = np.full(len(self.symbols), -1, dtype=np.int32)
        for new, name in enumerate(names):
            remap[self.symbols.index(name)] = new
        sym = remap[self.sym[keep]]
        return DailyTable(
            dates=self.dates[keep],
            sym=sym,
            open=self.open[keep],
            high=self.high[keep],
            low=self.low[keep],
            close=self.close[keep],
            volume=self.volume[keep],
            symbols=list(names),
            path=self.path,
            skipped=self.skipped,
            repaired=self.repaired,
        )


@dataclass
class DailyMatrix:
    """A rectangular panel: every stock has a bar on every date.

    Arrays are float64 shaped (n_days, n_stocks); `dates` datetime64[D] (n_days,);
    `symbols` the n_stocks tickers, alphabetical unless chosen explicitly.
    """

    dates: np.ndarray
    symbols: list[str]
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray

    @property
    def n_days(self) -> int:
        return int(self.close.shape[0])

    @property
    def n_stocks(self) -> int:
        return int(self.close.shape[1])


# ---------------------------------------------------------------- reading


def _read_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise ValueError(f"daily OHLCV file not found: {path}")
    return path.read_bytes()


def _decode_text(path: Path, raw: bytes) -> str:
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise ValueError(f"{path}: corrupt gzip data ({exc})") from None
    return raw.decode("utf-8", errors="replace").lstrip("\ufeff")


def _column_positions(header: str, path: Path) -> list[int]:
    """Each column's position in the header; the name column's is -1 when the file has
    none (a Yahoo-style file of one symbol)."""
    names = [h.strip().lower() for h in header.split(",")]
    positions: list[int] = []
    for col in _COLUMNS:
        aliases = _SYMBOL_ALIASES if col == "name" else (col,)
        found = [i for i, n in enumerate(names) if n in aliases]
        if not found and col == "name":
            positions.append(-1)
            continue
        if not found:
            raise ValueError(
                f"{path}: header {header.strip()!r} lacks column {col!r} "
                f"(expected date,open,high,low,close,volume,Name)"
            )
        positions.append(found[0])
    return positions


def _parse_fast(body: str, positions: list[int], symbol: str = "") -> tuple[np.ndarray, ...]:
    """Whole-file numpy parse; raises ValueError on any malformed line. Without a name
    column (position -1) every row is `symbol`'s."""
    # loadtxt cannot read an empty field as a number: spell it 'nan' (twice, for runs of
    # ",,"); Yahoo writes missing values as null
    body = body.replace(",,", ",nan,").replace(",,", ",nan,").replace(",null", ",nan")
    dtype = np.dtype(
        [
            ("date", "M8[D]"),
            ("open", "f8"),
            ("high", "f8"),
            ("low", "f8"),
            ("close", "f8"),
            ("volume", "f8"),
            ("name", f"U{_NAME_WIDTH}"),
        ]
    )
    # loadtxt maps structured fields to usecols in order; sort positions to keep pairs aligned
    present = [i for i, p in enumerate(positions) if p >= 0]
    order = sorted(present, key=lambda i: positions[i])
    fields = [dtype.names[i] for i in order]  # type: ignore[index]
    sorted_dtype = np.dtype([(f, dtype[f]) for f in fields])
    table = np.loadtxt(
        io.StringIO(body),
        delimiter=",",
        dtype=sorted_dtype,
        usecols=[positions[i] for i in order],
        ndmin=1,
        comments=None,
    )
    return tuple(table[c] if c in fields else np.full(len(table), symbol, f"U{_NAME_WIDTH}")
                 for c in dtype.names)  # type: ignore[union-attr]


def _parse_number(text: str) -> float:
    text = text.strip()
    return math.nan if text in ("", "null") else float(text)


def _parse_slow(body: str, positions: list[int], skipped: SkipCounter,
                symbol: str = "") -> tuple[np.ndarray, ...]:
    """Line-by-line parse for files with malformed lines; bad lines are counted and skipped."""
    dates: list[np.datetime64] = []
    numbers: list[tuple[float, float, float, float, float]] = []
    names: list[str] = []
    need = max(positions) + 1
    p_date, p_o, p_h, p_l, p_c, p_v, p_name = positions
    for line_no, row in enumerate(csv.reader(io.StringIO(body)), start=2):
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        try:
            if len(row) < need:
                raise ValueError("too few fields")
            day = np.datetime64(dt.date.fromisoformat(row[p_date].strip()), "D")
            nums = tuple(_parse_number(row[p]) for p in (p_o, p_h, p_l, p_c, p_v))
        except ValueError:
            skipped.add("malformed_row", 1, f"line {line_no}: {','.join(row)[:80]}")
            continue
        dates.append(day)
        numbers.append(nums)  # type: ignore[arg-type]
        names.append(row[p_name].strip()[:_NAME_WIDTH] if p_name >= 0 else symbol)
    arr = np.array(numbers, dtype=np.float64).reshape(-1, 5)
    return (
        np.array(dates, dtype="M8[D]"),
        arr[:, 0].copy(),
        arr[:, 1].copy(),
        arr[:, 2].copy(),
        arr[:, 3].copy(),
        arr[:, 4].copy(),
        np.array(names, dtype=f"U{_NAME_WIDTH}"),
    )


def _close_ns(dates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(unique dates, 16:00 New York of each in UTC ns) and the inverse index per row."""
    uniq, inverse = np.unique(dates, return_inverse=True)
    close = np.array(
        [date_ns(d, CLOSE_HOUR_NY, 0, NEW_YORK) for d in uniq.astype(object)], dtype=np.int64
    )
    return close, inverse


def bar_close_ns(dates: np.ndarray) -> np.ndarray:
    """UTC ns of 16:00 America/New_York (DST aware) on each datetime64[D] date."""
    dates = np.asarray(dates, dtype="M8[D]")
    if len(dates) == 0:
        return np.zeros(0, dtype=np.int64)
    close, inverse = _close_ns(dates)
    return close[inverse]


def _window_mask(dates: np.ndarray, start: TimeLike, end: TimeLike) -> np.ndarray:
    lo, hi = to_ns(start), to_ns(end)
    keep = np.ones(len(dates), dtype=bool)
    if (lo is None and hi is None) or len(dates) == 0:
        return keep
    ts = bar_close_ns(dates)
    if lo is not None:
        keep &= ts >= lo
    if hi is not None:
        keep &= ts < hi
    return keep


def _check_symbols(
    symbols: Sequence[str], available: Sequence[str], path: str, missing_ok: bool = False
) -> list[str]:
    """The requested tickers as spelled in the data (alphabetical); unknown ones an error."""
    if isinstance(symbols, str):
        symbols = [symbols]
    wanted = list(dict.fromkeys(s.strip().upper() for s in symbols))
    have = {s.upper(): s for s in available}
    missing = [s for s in wanted if s not in have]
    if missing_ok:
        wanted = [s for s in wanted if s in have]
    elif missing:
        raise ValueError(f"{path}: symbols not in the data: {', '.join(missing[:10])}")
    return sorted(have[s] for s in wanted)


def load_daily(
    path: str | Path,
    symbols: Sequence[str] | None = None,
    start: TimeLike = None,
    end: TimeLike = None,
    skipped: SkipCounter | None = None,
    missing_ok: bool = False,
    symbol: str | None = None,
    strict: bool = False,
) -> DailyTable:
    """Read a daily OHLCV CSV (plain or gzip) into a cleaned, columnar `DailyTable`.

    `symbols` restricts to those tickers (case-insensitive; an unknown one is an error unless
    `missing_ok`, which keeps just those present);
    `start`/`end` bound the days (see the module docstring). Malformed rows are skipped and
    damaged ones repaired as the module docstring says; both are counted on the table.
    `symbol`: the name of a file without a name column (default: the file's name);
    `strict`: a skipped row is a one-line ValueError.
    """
    path = Path(path)
    skipped = skipped if skipped is not None else SkipCounter(str(path), log_at_end=True,
                                                              strict=strict)
    rows = _parse_file(path, skipped, symbol or symbol_of_file(path))
    return clean_daily(rows, symbols, start, end, skipped, missing_ok, str(path))


def symbol_of_file(path: str | Path) -> str:
    """A one-symbol file's symbol from its name: `spy.csv.gz` -> SPY."""
    name = Path(path).name
    for suffix in (".gz", ".csv", ".parquet", ".pq"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return name.strip().upper()[:_NAME_WIDTH]


def clean_daily(rows: tuple[np.ndarray, ...], symbols: Sequence[str] | None, start: TimeLike,
                end: TimeLike, skipped: SkipCounter, missing_ok: bool, where: str
                ) -> DailyTable:
    """Parsed rows (dates, open, high, low, close, volume, names) as a cleaned table: the
    data policy of the module docstring (any reader of daily bars, CSV or Parquet)."""
    repaired = SkipCounter(where, what="repaired", log_at_end=True)
    dates, o, h, l, c, v, names = rows
    keep = _rows_wanted(dates, c, names, symbols, start, end, skipped, where, missing_ok)
    dates, o, h, l, c, v, names = (a[keep] for a in (dates, o, h, l, c, v, names))
    o, h, l, v = _repair_ohlcv(dates, names, o.copy(), h.copy(), l.copy(), c, v.copy(),
                               repaired)
    symbols_out, inverse = np.unique(names, return_inverse=True)
    sym = inverse.astype(np.int32).reshape(-1)
    order = np.lexsort((dates, sym))
    dates, sym, o, h, l, c, v = (a[order] for a in (dates, sym, o, h, l, c, v))
    dup = np.zeros(len(dates), dtype=bool)
    if len(dates) > 1:
        dup[1:] = (sym[1:] == sym[:-1]) & (dates[1:] == dates[:-1])
    if dup.any():
        skipped.add("duplicate_date", int(dup.sum()), _sample(dates, symbols_out[sym], dup))
        dates, sym, o, h, l, c, v = (a[~dup] for a in (dates, sym, o, h, l, c, v))
    skipped.log_totals()
    repaired.log_totals()
    return DailyTable(
        dates=dates, sym=sym, open=o, high=h, low=l, close=c, volume=v,
        symbols=[str(s) for s in symbols_out.tolist()],
        path=where, skipped=skipped, repaired=repaired,
    )


#: The last file the fast parser read whole in this process, and its rows: a replay with
#: --start reads its file twice (the warm-up's look back, then the replay itself), and the
#: 5-year S&P 500 file costs 1.1-1.4 s a parse on the 2-core machine. Keyed by a digest of
#: the file's bytes (a file rewritten within the clock's granularity keeps its size and
#: time stamps: only the contents tell); the arrays are read-only (every reader copies the
#: rows it keeps). A file the row-by-row parser read is never kept: its malformed rows are
#: counted into each read's own counter.
_last_fast_parse: tuple[tuple[bytes, str], tuple[np.ndarray, ...]] | None = None


def _parse_file(path: Path, skipped: SkipCounter, symbol: str) -> tuple[np.ndarray, ...]:
    """Every row's date, OHLCV and name (the fast parser, or the row-by-row one that counts
    malformed rows when the fast one cannot read the file)."""
    global _last_fast_parse
    raw = _read_bytes(path)
    key = (hashlib.blake2b(raw, digest_size=16).digest(), symbol)
    if _last_fast_parse is not None and _last_fast_parse[0] == key:
        return _last_fast_parse[1]
    text = _decode_text(path, raw)
    header, _, body = text.partition("\n")
    if not header.strip():
        raise ValueError(f"{path}: empty file, expected a header date,open,high,low,close,...")
    positions = _column_positions(header, path)
    if not body.strip():
        return _parse_slow(body, positions, skipped, symbol)
    try:
        rows = _parse_fast(body, positions, symbol)
    except ValueError:
        return _parse_slow(body, positions, skipped, symbol)
    for a in rows:
        a.flags.writeable = False
    _last_fast_parse = (key, rows)
    return rows


def _rows_wanted(dates: np.ndarray, c: np.ndarray, names: np.ndarray,
                 symbols: Sequence[str] | None, start: TimeLike, end: TimeLike,
                 skipped: SkipCounter, where: str, missing_ok: bool) -> np.ndarray:
    """Rows with a name, of the wanted symbols, inside the window and with a valid close
    (the rest counted by why)."""
    keep = np.char.str_len(names) > 0
    skipped.add("missing_symbol", int((~keep).sum()), _sample(dates, names, ~keep))
    all_symbols = np.unique(names[keep]).tolist()
    if symbols is not None:
        wanted = _check_symbols(symbols, all_symbols, where, missing_ok)
        keep &= np.isin(names, wanted)
    keep &= _window_mask(dates, start, end)
    bad_close = keep & ~(np.isfinite(c) & (c > 0))
    skipped.add("bad_close", int(bad_close.sum()), _sample(dates, names, bad_close))
    return keep & ~bad_close


def _repair_ohlcv(dates: np.ndarray, names: np.ndarray, o: np.ndarray, h: np.ndarray,
                  l: np.ndarray, c: np.ndarray, v: np.ndarray,
                  repaired: SkipCounter) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                  np.ndarray]:
    """Open, high, low and volume repaired (counted): missing open/high/low from what the
    row still has (the close is valid here), an inconsistent high/low widened to the row's
    extremes, a bad volume set to 0."""
    for a in (o, h, l):
        a[~(np.isfinite(a) & (a > 0))] = np.nan
    missing = np.isnan(o) | np.isnan(h) | np.isnan(l)
    repaired.add("missing_ohlc", int(missing.sum()), _sample(dates, names, missing))
    o = np.where(np.isnan(o), c, o)
    inconsistent = ~missing & ((h < np.maximum(o, c)) | (l > np.minimum(o, c)))
    repaired.add("inconsistent_ohlc", int(inconsistent.sum()), _sample(dates, names, inconsistent))
    # Widen to the extremes of whatever prices the row has (NaN ignored); open/close stay.
    fix = missing | inconsistent
    widest_high = np.fmax(np.fmax(h, l), np.maximum(o, c))
    widest_low = np.fmin(np.fmin(l, h), np.minimum(o, c))
    h = np.where(fix, widest_high, h)
    l = np.where(fix, widest_low, l)
    bad_volume = ~(np.isfinite(v) & (v >= 0))
    repaired.add("bad_volume", int(bad_volume.sum()), _sample(dates, names, bad_volume))
    v[bad_volume] = 0.0
    return o, h, l, v


def _sample(dates: np.ndarray, names: np.ndarray, mask: np.ndarray) -> str | None:
    idx = np.flatnonzero(mask)
    if len(idx) == 0:
        return None
    i = int(idx[0])
    return f"{names[i]} {dates[i]}"


# ---------------------------------------------------------------- panel


def daily_matrix(
    path_or_table: str | Path | DailyTable,
    n_stocks: int | None = None,
    symbols: Sequence[str] | None = None,
    start: TimeLike = None,
    end: TimeLike = None,
    n_days: int | None = None,
) -> DailyMatrix:
    """A (n_days x n_stocks) panel of stocks that trade on every day of the window.

    The window is every date present in the data within [start, end) (the union over all
    stocks), cut to its first `n_days` dates when given. Only stocks with a bar on EVERY date
    of the window qualify. `n_stocks` takes the first N qualifying tickers alphabetically;
    explicit `symbols` must all qualify (and keep alphabetical order). Too few qualifying
    stocks or days is a one-line ValueError.
    """
    if isinstance(path_or_table, DailyTable):
        table = path_or_table
        if start is not None or end is not None:
            table = table.select(None, start, end)
    else:
        table = load_daily(path_or_table, None, start, end)
    where = table.path or "daily data"
    calendar = np.unique(table.dates)
    if n_days is not None:
        if n_days <= 0:
            raise ValueError(f"n_days must be positive, got {n_days}")
        if len(calendar) < n_days:
            raise ValueError(
                f"{where}: only {len(calendar)} trading days in the window, {n_days} asked"
            )
        calendar = calendar[:n_days]
    if len(calendar) == 0:
        raise ValueError(f"{where}: no trading days in the window")

    in_window = np.isin(table.dates, calendar)
    days_per_stock = np.bincount(table.sym[in_window], minlength=len(table.symbols))
    complete = np.flatnonzero(days_per_stock == len(calendar))

    if symbols is not None:
        wanted = _check_symbols(symbols, table.symbols, where)
        index = [table.symbols.index(s) for s in wanted]
        gaps = [table.symbols[i] for i in index if days_per_stock[i] != len(calendar)]
        if gaps:
            raise ValueError(
                f"{where}: {len(gaps)} symbol(s) lack bars on some of the {len(calendar)} "
                f"days: {', '.join(gaps[:10])}"
            )
        chosen = np.array(index, dtype=np.int64)
    else:
        chosen = complete  # symbols are indexed alphabetically already
    if n_stocks is not None:
        if n_stocks <= 0:
            raise ValueError(f"n_stocks must be positive, got {n_stocks}")
        if len(chosen) < n_stocks:
            raise ValueError(
                f"{where}: only {len(chosen)} stocks have all {len(calendar)} days, "
                f"{n_stocks} asked"
            )
        chosen = chosen[:n_stocks]
    if len(chosen) == 0:
        raise ValueError(f"{where}: no stock has all {len(calendar)} days of the window")

    column = np.full(len(table.symbols), -1, dtype=np.int64)
    column[chosen] = np.arange(len(chosen))
    rows = in_window & (column[table.sym] >= 0)
    day_idx = np.searchsorted(calendar, table.dates[rows])
    stock_idx = column[table.sym[rows]]
    shape = (len(calendar), len(chosen))
    panel = {}
    for name in ("open", "high", "low", "close", "volume"):
        out = np.empty(shape, dtype=np.float64)
        out[day_idx, stock_idx] = getattr(table, name)[rows]
        panel[name] = out
    return DailyMatrix(
        dates=calendar.copy(),
        symbols=[table.symbols[i] for i in chosen.tolist()],
        **panel,
    )


# ---------------------------------------------------------------- source


class DailySource:
    """Daily bars as a Source: KIND_BAR records in (date, symbol) order.

    Bar `ts` is the close, 16:00 America/New_York of the date, in UTC ns (DST aware: 20:00 UTC
    in summer, 21:00 UTC in winter). f0..f4 = open, high, low, close, volume.
    """

    def __init__(
        self,
        path: str | Path,
        symbols: Sequence[str] | None = None,
        start: TimeLike = None,
        end: TimeLike = None,
        skipped: SkipCounter | None = None,
        missing_ok: bool = False,
        symbol: str | None = None,
        strict: bool = False,
    ) -> None:
        self.table = load_daily(path, symbols, start, end, skipped, missing_ok, symbol, strict)
        self.skipped = self.table.skipped
        self.repaired = self.table.repaired
        self.symbols: list[str] = list(self.table.symbols)
        first = str(self.table.dates.min()) if len(self.table) else "-"
        last = str(self.table.dates.max()) if len(self.table) else "-"
        self.name = f"daily bars {Path(path).name}: {len(self.symbols)} symbols, {first}..{last}"

    def chunks(self) -> Iterator[np.ndarray]:
        t = self.table
        order = np.lexsort((t.sym, t.dates))
        ts = bar_close_ns(t.dates)
        for lo in range(0, len(order), CHUNK_RECORDS):
            idx = order[lo : lo + CHUNK_RECORDS]
            out = np.zeros(len(idx), dtype=RECORD_DTYPE)
            out["ts"] = ts[idx]
            out["sym"] = t.sym[idx]
            out["kind"] = KIND_BAR
            out["f0"] = t.open[idx]
            out["f1"] = t.high[idx]
            out["f2"] = t.low[idx]
            out["f3"] = t.close[idx]
            out["f4"] = t.volume[idx]
            yield from split_chunks(out)
