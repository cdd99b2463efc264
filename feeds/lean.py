"""QuantConnect LEAN tick zips (equity trades/quotes, futures trades) as a Source.

Layout: `<root>/equity/usa/tick/<sym>/YYYYMMDD_{trade,quote}.zip` and
`<root>/future/<exchange>/tick/<root-sym>/YYYYMMDD_{trade,quote}.zip`. Each zip holds CSV text
without a header (see the data's SOURCE.md):

- equity trade: `time_ms, price, size, exchange, condition, suspicious`
- equity quote: `time_ms, bid_price, bid_size, ask_price, ask_size, exchange, condition,
  suspicious`; every row is one side (the other side's fields 0); a bid row and an ask row
  with the same time_ms, in that order, form one top-of-book update.
- futures trade: one CSV per contract month `YYYYMMDD_<root>_tick_trade_YYYYMM.csv`,
  `time_ms, price, quantity, exchange, sale_condition, suspicious`.

Units: equity prices are deci-cents (divided by 10,000 here, to USD); futures prices are USD.
Equity `time_ms` is ms after midnight America/New_York on the file's date (converted to UTC ns,
DST aware); futures `time_ms` is ms after midnight UTC on the file's date. Futures contracts are
named root + month code + 2-digit year, e.g. GCZ13 for the Dec 2013 gold contract.

Policy (counted in `.skipped`, the first of each kind logged once):
- `malformed_row`: too few fields or an unparseable number;
- `bad_price`: trade price NaN/inf/<= 0; `bad_size`: trade size NaN/inf/<= 0 (the GC files
  carry zero-quantity prints, 296 of them in GCZ13 over 7-9 Oct 2013);
- `bad_quote`: a negative or non-finite quote field; `empty_quote`: neither side present;
- `ts_backwards`: a row older than one already emitted by the same file stream (the data
  promise non-decreasing time; such rows are dropped rather than reordered);
- `suspicious`: only with `drop_suspicious=True` (by default AlgoSeek's flag is ignored and
  the trade kept);
- `unreadable_file`: a corrupt zip or one without a CSV entry (the stream goes on).
Quote pairs become one KIND_QUOTE record with both sides; a lone side keeps the other side at 0.
Crossed or locked pairs are kept as they are (they are what the feed said).

Reading is lazy: one zip per (symbol, kind) stream is open at a time, and its text is parsed
in blocks of lines, never one Python object per row: integer text in compiled code
(feeds/csv_ints.py), anything else with `np.loadtxt` (usecols).
"""

from __future__ import annotations

import datetime as dt
import io
import re
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from feeds.csv_ints import int_columns
from feeds.merge import merge_chunk_iters
from feeds.records import (
    CHUNK_RECORDS,
    KIND_QUOTE,
    KIND_TRADE,
    NEW_YORK,
    NS_PER_DAY,
    NS_PER_MS,
    RECORD_DTYPE,
    SkipCounter,
    TimeLike,
    date_ns,
    local_ms_to_utc_ns,
    split_chunks,
    to_ns,
)

EQUITY_PRICE_SCALE = 10_000.0  # deci-cents per USD
BLOCK_LINES = 4 * CHUNK_RECORDS  # lines parsed per np.loadtxt call
MONTH_CODES = "FGHJKMNQUVXZ"  # Jan..Dec futures month letters
KINDS = ("trade", "quote")

_ZIP_RE = re.compile(r"^(\d{8})_(trade|quote)\.zip$")
_FUTURE_ENTRY_RE = re.compile(r"^(\d{8})_([a-z0-9]+)_tick_(trade|quote)_(\d{4})(\d{2})\.csv$")
# Columns read: trade (time, price, size, suspicious); quote (time, bid, bid size, ask,
# ask size, suspicious). The suspicious column index differs between layouts.
_TRADE_COLS = (0, 1, 2, 5)
_EQUITY_QUOTE_COLS = (0, 1, 2, 3, 4, 7)
_FUTURE_QUOTE_COLS = (0, 1, 2, 3, 4)


@dataclass(frozen=True)
class LeanFile:
    """One daily LEAN tick zip: which instrument root, asset class, kind and day."""

    path: Path
    day: dt.date
    kind: str  # "trade" | "quote"
    asset: str  # "equity" | "future"
    root: str  # upper-case symbol folder name, e.g. BAC, GC


def contract_symbol(root: str, year: int, month: int) -> str:
    """Futures contract name: root + month code + 2-digit year (GC, 2013, 12 -> GCZ13)."""
    return f"{root.upper()}{MONTH_CODES[month - 1]}{year % 100:02d}"


def _describe(path: Path) -> LeanFile | None:
    m = _ZIP_RE.match(path.name)
    if not m:
        return None
    parts = [p.lower() for p in path.parts]
    if len(parts) < 3 or parts[-3] != "tick":
        return None
    if "equity" in parts:
        asset = "equity"
    elif "future" in parts:
        asset = "future"
    else:
        return None
    try:
        day = dt.datetime.strptime(m.group(1), "%Y%m%d").date()
    except ValueError:
        return None
    return LeanFile(path, day, m.group(2), asset, path.parent.name.upper())


def discover(path: str | Path) -> list[LeanFile]:
    """Every LEAN tick zip at `path` (a zip, a symbol folder or any folder above)."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"LEAN data not found: {p}")
    if p.is_file():
        found = _describe(p.resolve())
        if found is None:
            raise ValueError(
                f"{p}: not a LEAN tick zip (expected .../equity|future/.../tick/SYM/"
                f"YYYYMMDD_trade|quote.zip)"
            )
        return [found]
    files = [f for f in (_describe(z.resolve()) for z in sorted(p.rglob("*.zip"))) if f]
    if not files:
        raise ValueError(f"{p}: no LEAN tick zips (…/tick/SYM/YYYYMMDD_trade|quote.zip) found")
    return files


# ---------------------------------------------------------------- parsing


def _line_blocks(data: bytes, lines: int) -> Iterator[bytes]:
    """`data` cut at newlines into blocks of about `lines` lines (no Python object per line)."""
    if len(data) == 0:
        return
    newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    cuts = newlines[lines - 1 :: lines] + 1
    lo = 0
    for hi in cuts.tolist():
        yield data[lo:hi]
        lo = hi
    if lo < len(data):
        yield data[lo:]


def _parse_block(
    block: bytes, usecols: Sequence[int], skipped: SkipCounter, where: str
) -> np.ndarray:
    """Numeric columns `usecols` of a header-less CSV block as float64 (rows, len(usecols)).

    Fast path: the compiled integer parser (feeds/csv_ints.py; equity files are all
    integers), then np.loadtxt as float64 (futures prices have decimals); a block with a
    malformed line is parsed line by line and its bad lines counted and skipped.
    """
    ints, whole = int_columns(block, usecols)
    if whole:
        return ints.astype(np.float64)
    for dtype in (np.int64, np.float64):
        try:
            arr = np.loadtxt(
                io.BytesIO(block),
                delimiter=",",
                usecols=usecols,
                dtype=dtype,
                ndmin=2,
                comments=None,
                encoding="latin-1",
            )
            return arr.astype(np.float64, copy=False)
        except ValueError:
            continue
    rows: list[list[float]] = []
    need = max(usecols) + 1
    for raw in block.split(b"\n"):
        line = raw.strip()
        if not line:
            continue
        fields = line.split(b",")
        try:
            if len(fields) < need:
                raise ValueError("too few fields")
            rows.append([float(fields[c]) for c in usecols])
        except ValueError:
            skipped.add("malformed_row", 1, f"{where}: {line[:80]!r}")
    return np.array(rows, dtype=np.float64).reshape(-1, len(usecols))


def _trade_records(
    cols: np.ndarray,
    ts: np.ndarray,
    sym: int,
    price_scale: float,
    drop_suspicious: bool,
    skipped: SkipCounter,
    where: str,
) -> np.ndarray:
    price = cols[:, 1] / price_scale
    size = cols[:, 2]
    bad_price = ~(np.isfinite(price) & (price > 0))
    bad_size = ~bad_price & ~(np.isfinite(size) & (size > 0))
    skipped.add("bad_price", int(bad_price.sum()), _row_sample(where, cols, bad_price))
    skipped.add("bad_size", int(bad_size.sum()), _row_sample(where, cols, bad_size))
    keep = ~(bad_price | bad_size)
    if drop_suspicious and cols.shape[1] > 3:
        suspicious = keep & (cols[:, 3] != 0)
        skipped.add("suspicious", int(suspicious.sum()), _row_sample(where, cols, suspicious))
        keep &= ~suspicious
    out = np.zeros(int(keep.sum()), dtype=RECORD_DTYPE)
    out["ts"] = ts[keep]
    out["sym"] = sym
    out["kind"] = KIND_TRADE
    out["f0"] = price[keep]
    out["f1"] = size[keep]
    return out


def _quote_records(
    cols: np.ndarray,
    ts: np.ndarray,
    sym: int,
    price_scale: float,
    drop_suspicious: bool,
    skipped: SkipCounter,
    where: str,
) -> np.ndarray:
    """Pair bid-only rows with the ask-only row that follows at the same time."""
    bid, bid_size = cols[:, 1] / price_scale, cols[:, 2].copy()
    ask, ask_size = cols[:, 3] / price_scale, cols[:, 4].copy()
    fields = cols[:, 1:5]
    bad = ~np.all(np.isfinite(fields) & (fields >= 0), axis=1)
    skipped.add("bad_quote", int(bad.sum()), _row_sample(where, cols, bad))
    has_bid = ~bad & (bid > 0)
    has_ask = ~bad & (ask > 0)
    empty = ~bad & ~has_bid & ~has_ask
    skipped.add("empty_quote", int(empty.sum()), _row_sample(where, cols, empty))
    keep = has_bid | has_ask
    if drop_suspicious and cols.shape[1] > 5:
        suspicious = keep & (cols[:, 5] != 0)
        skipped.add("suspicious", int(suspicious.sum()), _row_sample(where, cols, suspicious))
        keep &= ~suspicious
        has_bid &= keep
        has_ask &= keep
    # A side without a price is absent: its size is 0 too.
    bid_size[~has_bid] = 0.0
    ask_size[~has_ask] = 0.0
    bid_only = has_bid & ~has_ask
    ask_only = has_ask & ~has_bid
    idx = np.flatnonzero(keep)  # rows still in play, in file order
    pair = np.zeros(len(idx), dtype=bool)  # pair[k]: rows idx[k], idx[k+1] form one update
    if len(idx) > 1:
        a, b = idx[:-1], idx[1:]
        pair[:-1] = bid_only[a] & ask_only[b] & (ts[a] == ts[b])
    second = np.zeros(len(idx), dtype=bool)
    second[1:] = pair[:-1]
    first_rows = idx[~second]  # each output record starts at one of these rows
    partner = np.full(len(idx), -1, dtype=np.int64)
    partner[pair] = idx[np.flatnonzero(pair) + 1]
    partner = partner[~second]
    out = np.zeros(len(first_rows), dtype=RECORD_DTYPE)
    out["ts"] = ts[first_rows]
    out["sym"] = sym
    out["kind"] = KIND_QUOTE
    paired = partner >= 0
    out["f0"] = np.where(has_bid[first_rows], bid[first_rows], 0.0)
    out["f1"] = np.where(has_bid[first_rows], bid_size[first_rows], 0.0)
    out["f2"] = np.where(has_ask[first_rows], ask[first_rows], 0.0)
    out["f3"] = np.where(has_ask[first_rows], ask_size[first_rows], 0.0)
    p = partner[paired]
    out["f2"][paired] = ask[p]
    out["f3"][paired] = ask_size[p]
    return out


def _row_sample(where: str, cols: np.ndarray, mask: np.ndarray) -> str | None:
    hit = np.flatnonzero(mask)
    if len(hit) == 0:
        return None
    return f"{where}: {cols[int(hit[0])].tolist()}"


# ---------------------------------------------------------------- source


class LeanSource:
    """LEAN tick data under `path` (zip, symbol folder or dataset root) as one Source.

    `kinds`: ("trade",) or ("trade", "quote"). `symbols`: equity tickers, futures roots (GC =
    every contract) or contracts (GCZ13), case-insensitive. `start`/`end`: keep
    start <= ts < end (see `feeds.records.to_ns`). `regular_hours_only`: keep US-equity ticks
    09:30 <= time < 16:00 New York on the file's date (the exchange's regular session; LEAN's
    own default leaves extended hours out too); futures trade around the clock and keep all.
    `drop_suspicious`: drop rows AlgoSeek flags.
    No data for a requested symbol, or none in range, is a ValueError unless `missing_ok`.
    Symbols are sorted by name; ties in time keep (symbol, kind) order, trades before quotes.
    """

    def __init__(
        self,
        path: str | Path,
        kinds: Sequence[str] = ("trade",),
        symbols: Sequence[str] | None = None,
        start: TimeLike = None,
        end: TimeLike = None,
        regular_hours_only: bool = False,
        drop_suspicious: bool = False,
        skipped: SkipCounter | None = None,
        missing_ok: bool = False,
    ) -> None:
        if isinstance(kinds, str):
            kinds = (kinds,)
        unknown = [k for k in kinds if k not in KINDS]
        if unknown or not kinds:
            raise ValueError(f"unknown LEAN kind(s) {unknown or kinds}: expected trade, quote")
        self.path = Path(path)
        self.kinds = tuple(k for k in KINDS if k in kinds)
        self.start, self.end = to_ns(start), to_ns(end)
        self.regular_hours_only = regular_hours_only
        self.drop_suspicious = drop_suspicious
        # each kind logged once with its whole count when read (not the first day's)
        self.skipped = skipped if skipped is not None else SkipCounter(
            f"LEAN {self.path.name}", log_at_end=True)
        wanted = None if symbols is None else {s.strip().upper() for s in symbols}

        every = discover(self.path)
        files = [f for f in every if f.kind in self.kinds and self._day_in_range(f)]
        unique: dict[tuple[str, str, str, dt.date], LeanFile] = {}
        for f in files:
            key = (f.asset, f.root, f.kind, f.day)
            if key in unique:
                self.skipped.add("duplicate_file", 1, f"{f.path} (also {unique[key].path})")
            else:
                unique[key] = f
        files = list(unique.values())
        # (file, contract entries) per file; equity files have one implicit entry
        self._plan: dict[tuple[str, str], list[tuple[LeanFile, list[tuple[str, str]]]]] = {}
        names: set[str] = set()
        for f in sorted(files, key=lambda f: (f.root, f.kind, f.day)):
            if f.asset == "equity":
                if wanted is not None and f.root not in wanted:
                    continue
                entries = [("", f.root)]
            else:
                entries = [
                    (entry, contract)
                    for entry, contract in self._future_entries(f)
                    if wanted is None or f.root in wanted or contract in wanted
                ]
                if not entries:
                    continue
            self._plan.setdefault((f.root, f.kind), []).append((f, entries))
            names.update(sym for _, sym in entries)
        if wanted is not None and not missing_ok:
            roots = {f.root for f in every}
            absent = [w for w in sorted(wanted) if w not in roots and w not in names]
            if absent:
                raise ValueError(
                    f"{self.path}: no LEAN {'/'.join(self.kinds)} data for symbol(s) "
                    f"{', '.join(absent)}{' in range' if self.start or self.end else ''}"
                )
        if not names and not missing_ok:
            what = f" for {', '.join(sorted(wanted))}" if wanted else ""
            raise ValueError(f"{self.path}: no LEAN {'/'.join(self.kinds)} data{what} in range")
        self.symbols: list[str] = sorted(names)
        self._index = {s: i for i, s in enumerate(self.symbols)}
        days = sorted({f.day for group in self._plan.values() for f, _ in group})
        span = f" {days[0]}..{days[-1]}" if days else " (empty)"
        self.name = (
            f"LEAN {'+'.join(self.kinds)} ticks {', '.join(self.symbols[:8])}"
            f"{' …' if len(self.symbols) > 8 else ''}{span}"
        )

    def _day_in_range(self, f: LeanFile) -> bool:
        """Whether the file's day, [its midnight, +24 h), can hold a record in [start, end)."""
        lo = date_ns(f.day) if f.asset == "equity" else _utc_midnight_ns(f.day)
        if self.start is not None and lo + NS_PER_DAY <= self.start:
            return False
        return not (self.end is not None and lo >= self.end)

    def _future_entries(self, f: LeanFile) -> list[tuple[str, str]]:
        try:
            with zipfile.ZipFile(f.path) as zf:
                listed = zf.namelist()
        except (zipfile.BadZipFile, OSError) as exc:
            self.skipped.add("unreadable_file", 1, f"{f.path}: {exc}")
            return []
        out = []
        for entry in sorted(listed):
            m = _FUTURE_ENTRY_RE.match(Path(entry).name.lower())
            if m and m.group(3) == f.kind:
                out.append((entry, contract_symbol(f.root, int(m.group(4)), int(m.group(5)))))
        return out

    def chunks(self) -> Iterator[np.ndarray]:
        order = sorted(self._plan, key=lambda key: (key[0], KINDS.index(key[1])))
        streams = [self._stream(self._plan[key]) for key in order]
        yield from merge_chunk_iters(streams)
        self.skipped.log_totals()

    # -- one (root, kind) stream: its day files in order
    def _stream(self, plan: list[tuple[LeanFile, list[tuple[str, str]]]]) -> Iterator[np.ndarray]:
        last_ts = np.iinfo(np.int64).min
        for f, entries in plan:
            day_parts = (
                self._read_future(f, entries) if f.asset == "future" else self._read_equity(f)
            )
            for records in day_parts:
                records = self._filter(f, records)
                if len(records) == 0:
                    continue
                ts = records["ts"]
                running = np.maximum.accumulate(np.concatenate(([last_ts], ts)))[:-1]
                back = ts < running
                if back.any():
                    self.skipped.add(
                        "ts_backwards", int(back.sum()), f"{f.path.name} ts {ts[back][0]}"
                    )
                    records = records[~back]
                if len(records):
                    last_ts = int(records["ts"][-1])
                    yield from split_chunks(records)

    def _filter(self, f: LeanFile, records: np.ndarray) -> np.ndarray:
        keep = np.ones(len(records), dtype=bool)
        ts = records["ts"]
        if self.start is not None:
            keep &= ts >= self.start
        if self.end is not None:
            keep &= ts < self.end
        if self.regular_hours_only and f.asset == "equity":
            keep &= (ts >= date_ns(f.day, 9, 30)) & (ts < date_ns(f.day, 16, 0))
        return records if keep.all() else records[keep]

    def _open_csv(self, f: LeanFile, entry: str = "") -> bytes | None:
        try:
            with zipfile.ZipFile(f.path) as zf:
                if not entry:
                    csvs = [n for n in zf.namelist() if n.lower().endswith(".csv")]
                    if not csvs:
                        raise zipfile.BadZipFile("no .csv entry")
                    entry = csvs[0]
                return zf.read(entry)
        except (zipfile.BadZipFile, OSError, KeyError) as exc:
            self.skipped.add("unreadable_file", 1, f"{f.path}: {exc}")
            return None

    def _read_equity(self, f: LeanFile) -> Iterator[np.ndarray]:
        data = self._open_csv(f)
        if data is None:
            return
        sym = self._index[f.root]
        where = f"{f.path.parent.name}/{f.path.name}"
        if f.kind == "trade":
            for block in _line_blocks(data, BLOCK_LINES):
                cols = _parse_block(block, _TRADE_COLS, self.skipped, where)
                ts = local_ms_to_utc_ns(f.day, cols[:, 0], NEW_YORK)
                yield _trade_records(
                    cols, ts, sym, EQUITY_PRICE_SCALE, self.drop_suspicious, self.skipped, where
                )
            return
        carry = np.zeros((0, len(_EQUITY_QUOTE_COLS)))
        blocks = list(_line_blocks(data, BLOCK_LINES))
        for k, block in enumerate(blocks):
            cols = _parse_block(block, _EQUITY_QUOTE_COLS, self.skipped, where)
            if len(carry):
                cols = np.concatenate((carry, cols))
                carry = carry[:0]
            if k + 1 < len(blocks) and len(cols) and cols[-1, 1] > 0 and cols[-1, 3] == 0:
                # a bid row at a block's end may pair with the next block's first row
                carry, cols = cols[-1:], cols[:-1]
            ts = local_ms_to_utc_ns(f.day, cols[:, 0], NEW_YORK)
            yield _quote_records(
                cols, ts, sym, EQUITY_PRICE_SCALE, self.drop_suspicious, self.skipped, where
            )

    def _read_future(self, f: LeanFile, entries: list[tuple[str, str]]) -> Iterator[np.ndarray]:
        """All selected contracts of one day, merged by time (stable: contract order on ties)."""
        parts = []
        midnight = _utc_midnight_ns(f.day)
        for entry, contract in entries:
            data = self._open_csv(f, entry)
            if data is None:
                continue
            sym = self._index[contract]
            where = f"{f.path.name}/{entry}"
            usecols = _TRADE_COLS if f.kind == "trade" else _FUTURE_QUOTE_COLS
            # One contract's file is small next to a day of equity quotes: parse it whole so
            # quote pairs never straddle a block boundary.
            cols = np.concatenate(
                [
                    _parse_block(block, usecols, self.skipped, where)
                    for block in _line_blocks(data, BLOCK_LINES)
                ]
                or [np.zeros((0, len(usecols)))]
            )
            ts = midnight + np.rint(cols[:, 0] * NS_PER_MS).astype(np.int64)
            make = _trade_records if f.kind == "trade" else _quote_records
            parts.append(make(cols, ts, sym, 1.0, self.drop_suspicious, self.skipped, where))
        if parts:
            day = np.concatenate(parts)
            yield day[np.argsort(day["ts"], kind="stable")]


def _utc_midnight_ns(day: dt.date) -> int:
    return (day - dt.date(1970, 1, 1)).days * NS_PER_DAY
