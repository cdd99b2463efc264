"""Parquet files of ticks or daily bars as a Source (pyarrow, the `[parquet]` extra).

Ticks: columns `ts, symbol, price, size` (names case-insensitive, extra columns ignored),
sorted by time, read lazily in record batches. `ts` may be an Arrow timestamp (with a time
zone: that instant; without one: local time in `tz`, else the one-line error asking for
--tz), an integer epoch (unit by magnitude or `ts_unit`, feeds/timestamps.py) or ISO-8601
text (as the tick CSV reads it). Bad rows are counted and skipped like the CSV's:
`bad_ts`, `mixed_ts_unit`, `missing_symbol`, `bad_price`, `bad_size`; `strict` makes the
first one an error.

Daily bars: columns `date, open, high, low, close, volume` and optionally `symbol` / `name`
/ `ticker` (else the file's name or the one --symbols gives, as for a Yahoo CSV); the same
cleaning as a daily CSV (`feeds.daily.clean_daily`), bars stamped at 16:00 New York.

pyarrow is imported here only: without it a Parquet path is a one-line error naming the
extra (`pip install 'gpu-trading-engine[parquet]'`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from feeds.daily import DailySource, clean_daily, symbol_of_file
from feeds.records import (
    CHUNK_RECORDS,
    KIND_TRADE,
    RECORD_DTYPE,
    SkipCounter,
    TimeLike,
    split_chunks,
    to_ns,
)
from feeds.timestamps import (
    UNITS,
    EpochUnit,
    MixedUnitError,
    NaiveTimeError,
    is_number,
    parse_iso_ns,
    units_of,
    zone,
)

SUFFIXES = (".parquet", ".pq")
_TICK_COLUMNS = ("ts", "symbol", "price", "size")
_BAR_COLUMNS = ("date", "open", "high", "low", "close")


def _pyarrow() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError("reading Parquet needs pyarrow: pip install "
                         "'gpu-trading-engine[parquet]'") from None
    return pq


def is_parquet(path: str | Path) -> bool:
    return Path(path).suffix.lower() in SUFFIXES


def _columns(path: Path) -> dict[str, str]:
    """Lower-cased column name -> the file's spelling."""
    pq = _pyarrow()
    try:
        names = pq.read_schema(path).names
    except Exception as exc:  # pyarrow raises its own kinds for a damaged file
        raise ValueError(f"{path}: not a readable Parquet file ({exc})") from None
    return {n.strip().lower(): n for n in names}


def parquet_kind(path: str | Path) -> str:
    """'ticks' or 'daily' by the columns; a one-line ValueError for anything else."""
    cols = _columns(Path(path))
    if all(c in cols for c in _TICK_COLUMNS):
        return "ticks"
    if all(c in cols for c in _BAR_COLUMNS):
        return "daily"
    raise ValueError(f"{path}: Parquet columns {', '.join(list(cols)[:10])} are neither ticks "
                     f"(ts,symbol,price,size) nor daily bars (date,open,high,low,close,volume)")


def open_parquet(path: str | Path, symbols: Sequence[str] | None = None,
                 start: TimeLike = None, end: TimeLike = None, missing_ok: bool = False,
                 ts_unit: str | None = None, tz: str | None = None, strict: bool = False,
                 symbol: str | None = None) -> Any:
    """The Source of a Parquet file of ticks or of daily bars."""
    if parquet_kind(path) == "ticks":
        return ParquetTickSource(path, symbols, start, end, missing_ok, ts_unit, tz, strict)
    return ParquetDailySource(path, symbols, start, end, missing_ok, symbol, strict)


class ParquetDailySource(DailySource):
    """Daily bars from Parquet, cleaned and streamed exactly as a daily CSV's."""

    def __init__(self, path: str | Path, symbols: Sequence[str] | None = None,
                 start: TimeLike = None, end: TimeLike = None, missing_ok: bool = False,
                 symbol: str | None = None, strict: bool = False) -> None:
        path = Path(path)
        pq = _pyarrow()
        cols = _columns(path)
        table = pq.read_table(path)
        n = table.num_rows

        def column(name: str) -> np.ndarray:
            if name not in cols:
                return np.full(n, np.nan)
            arr = table.column(cols[name]).to_numpy(zero_copy_only=False)
            return np.asarray(arr, dtype=np.float64)

        dates = np.asarray(table.column(cols["date"]).to_numpy(zero_copy_only=False))
        try:
            dates = dates.astype("M8[D]")
        except (ValueError, TypeError):
            raise ValueError(f"{path}: column date is not dates (YYYY-MM-DD)") from None
        name_col = next((cols[c] for c in ("symbol", "name", "ticker") if c in cols), None)
        names = (np.asarray(table.column(name_col).to_pylist(), dtype="U16")
                 if name_col is not None
                 else np.full(n, symbol or symbol_of_file(path), dtype="U16"))
        skipped = SkipCounter(str(path), log_at_end=True, strict=strict)
        rows = (dates, column("open"), column("high"), column("low"), column("close"),
                column("volume"), names)
        self.table = clean_daily(rows, symbols, start, end, skipped, missing_ok, str(path))
        self.skipped = self.table.skipped
        self.repaired = self.table.repaired
        self.symbols = list(self.table.symbols)
        first = str(self.table.dates.min()) if len(self.table) else "-"
        last = str(self.table.dates.max()) if len(self.table) else "-"
        self.name = f"daily bars {path.name}: {len(self.symbols)} symbols, {first}..{last}"


class ParquetTickSource:
    """Trades from a Parquet file; start <= ts < end, optional symbol filter."""

    def __init__(self, path: str | Path, symbols: Sequence[str] | None = None,
                 start: TimeLike = None, end: TimeLike = None, missing_ok: bool = False,
                 ts_unit: str | None = None, tz: str | None = None,
                 strict: bool = False) -> None:
        self.path = Path(path)
        self._pq = _pyarrow()
        self._cols = _columns(self.path)
        self.start, self.end = to_ns(start), to_ns(end)
        self.tz = zone(tz)
        self._ts_unit = ts_unit
        self.skipped = SkipCounter(self.path.name, log_at_end=True, strict=strict)
        column = self._pq.read_table(self.path, columns=[self._cols["symbol"]]).column(0)
        found = sorted({str(s).strip() for s in column.to_pylist() if s is not None} - {""})
        if symbols is not None:
            have = {n.upper(): n for n in found}
            wanted = [s.strip().upper() for s in symbols]
            absent = [s for s in wanted if s not in have]
            if absent and not missing_ok:
                raise ValueError(f"{self.path}: symbols not in the file: {', '.join(absent)}")
            found = sorted({have[s] for s in wanted if s in have})
        self.symbols: list[str] = found
        self._index = {s: i for i, s in enumerate(found)}
        self.name = f"Parquet ticks {self.path.name}: {len(found)} symbols"
        self._check_naive_timestamps()

    def _check_naive_timestamps(self) -> None:
        import pyarrow as pa

        field = self._pq.read_schema(self.path).field(self._cols["ts"])
        if pa.types.is_timestamp(field.type) and field.type.tz is None and self.tz is None:
            raise ValueError(f"{self.path}: column ts holds times without a UTC offset: give "
                             f"--tz (e.g. --tz America/New_York) to say where they were taken")

    def chunks(self) -> Iterator[np.ndarray]:
        epoch = EpochUnit(self._ts_unit)
        prev = np.iinfo(np.int64).min
        names = [self._cols[c] for c in _TICK_COLUMNS]
        row0 = 0
        with self._pq.ParquetFile(self.path) as pf:
            for batch in pf.iter_batches(batch_size=CHUNK_RECORDS, columns=names):
                ts, ok = self._times(batch.column(0), epoch, row0)
                records = self._records(batch, ts, ok, row0)
                row0 += batch.num_rows
                if len(records) == 0:
                    continue
                order_ok = np.empty(len(records), bool)
                order_ok[0] = records["ts"][0] >= prev
                order_ok[1:] = records["ts"][1:] >= records["ts"][:-1]
                if not order_ok.all():
                    k = int(np.argmin(order_ok))
                    raise ValueError(f"{self.path}: time {int(records['ts'][k])} ns is earlier "
                                     f"than the row before it; the file must be sorted by time")
                prev = int(records["ts"][-1])
                yield from split_chunks(records)
        self.skipped.log_totals()

    def _times(self, col: Any, epoch: EpochUnit, row0: int) -> tuple[np.ndarray, np.ndarray]:
        """(ns, ok) of one batch's ts column, whatever its Arrow type."""
        import pyarrow as pa
        import pyarrow.compute as pc

        n = len(col)
        valid = ~np.asarray(col.is_null().to_numpy(zero_copy_only=False), bool)
        if pa.types.is_timestamp(col.type):
            if col.type.tz is None:  # local wall times in --tz (checked at open)
                assert self.tz is not None
                col = pc.assume_timezone(col, timezone=str(self.tz), ambiguous="earliest",
                                         nonexistent="earliest")
            ns = col.cast(pa.timestamp("ns", tz="UTC")).cast(pa.int64())
            return np.asarray(ns.fill_null(0).to_numpy(), np.int64), valid
        if pa.types.is_integer(col.type):
            raw = np.asarray(col.fill_null(0).to_numpy(), np.int64)
            ts, ok = epoch.to_ns(raw)
            ok &= valid
            assert epoch.unit is not None
            mixed = valid & ~ok & (units_of(raw) != UNITS.index(epoch.unit))
            self._count("mixed_ts_unit", mixed, row0, raw)
            self._count("bad_ts", valid & ~ok & ~mixed, row0, raw)
            self._count("bad_ts", ~valid, row0, raw)
            return ts, ok
        return self._text_times(col.cast(pa.string()).to_pylist(), epoch, row0, n)

    def _text_times(self, texts: list[Any], epoch: EpochUnit, row0: int, n: int
                    ) -> tuple[np.ndarray, np.ndarray]:
        ts = np.zeros(n, np.int64)
        ok = np.zeros(n, bool)
        for i, text in enumerate(texts):
            try:
                if text is None:
                    raise ValueError("empty")
                text = text.strip()
                ts[i] = (epoch.text_to_ns(text) if is_number(text)
                         else parse_iso_ns(text, self.tz))
                ok[i] = True
            except NaiveTimeError as exc:
                raise ValueError(f"{self.path}: row {row0 + i + 1}: {exc}") from None
            except MixedUnitError:
                self.skipped.add("mixed_ts_unit", 1, f"row {row0 + i + 1}: {text}")
            except (ValueError, OverflowError):
                self.skipped.add("bad_ts", 1, f"row {row0 + i + 1}: {text!r}")
        return ts, ok

    def _count(self, kind: str, mask: np.ndarray, row0: int, values: Any) -> None:
        if mask.any():
            k = int(np.argmax(mask))
            self.skipped.add(kind, int(mask.sum()), f"row {row0 + k + 1}: {values[k]!r}")

    def _records(self, batch: Any, ts: np.ndarray, ok: np.ndarray, row0: int) -> np.ndarray:
        names = np.asarray([("" if s is None else str(s).strip())
                            for s in batch.column(1).to_pylist()], dtype=object)
        price = np.asarray(batch.column(2).to_numpy(zero_copy_only=False), np.float64)
        size = np.asarray(batch.column(3).to_numpy(zero_copy_only=False), np.float64)
        no_symbol = ok & (names == "")
        self._count("missing_symbol", no_symbol, row0, names)
        bad_price = ok & ~no_symbol & ~(np.isfinite(price) & (price > 0))
        self._count("bad_price", bad_price, row0, price)
        bad_size = ok & ~no_symbol & ~bad_price & ~(np.isfinite(size) & (size > 0))
        self._count("bad_size", bad_size, row0, size)
        sym = np.array([self._index.get(s, -1) for s in names], np.int32)
        keep = ok & ~no_symbol & ~bad_price & ~bad_size & (sym >= 0)
        if self.start is not None:
            keep &= ts >= self.start
        if self.end is not None:
            keep &= ts < self.end
        out = np.zeros(int(keep.sum()), dtype=RECORD_DTYPE)
        out["ts"], out["sym"], out["kind"] = ts[keep], sym[keep], KIND_TRADE
        out["f0"], out["f1"] = price[keep], size[keep]
        return out
