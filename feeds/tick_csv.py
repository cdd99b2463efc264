"""Generic trade-tick CSV (`ts,symbol,price,size`) as a Source, read lazily in blocks.

Format: a header naming the columns `ts,symbol,price,size` (any order, case-insensitive,
extra columns ignored), then one trade per line; plain text or gzip. `ts` is an epoch number
in seconds, milliseconds, microseconds or nanoseconds (detected by its magnitude, or
`ts_unit`; fractions allowed) or ISO-8601 with an offset or `Z`
(`2024-01-02T14:30:00.123456789Z`, `2024-01-02 09:30:00-05:00`) or without one, read in
`tz` (an offset-less time without `tz` is a one-line error saying to give --tz);
feeds/timestamps.py has the rules. Price in the instrument's currency, size in units.

Policy: malformed lines are counted in `.skipped` and skipped, the file keeps going; each
kind is logged once with its whole count when the file has been read (`strict`: the first
such line is a one-line ValueError instead):
  `bad_ts` unparseable time; `mixed_ts_unit` an epoch number of another magnitude than the
  file's first (seconds among milliseconds); `bad_number` unparseable price or size;
  `missing_symbol` empty symbol; `wrong_field_count` too few fields;
  `bad_price` price NaN, infinite or <= 0; `bad_size` size NaN, infinite or <= 0.
Blank lines are ignored. The engine needs time order, so the good rows must be sorted by ts
(equal times allowed): a row older than the previous good row stops the iteration with a
one-line ValueError naming the file and line.

`symbols` (the Source's symbol table) comes from a first pass over the symbol column, so it is
known before iterating; the second pass parses blocks of about `BLOCK_BYTES` with np.loadtxt.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from feeds.records import (
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

__all__ = ["TickCsvSource", "parse_iso_ns", "read_header", "HEADER"]

BLOCK_BYTES = 4 << 20  # about 100k lines of text per parse
HEADER = ("ts", "symbol", "price", "size")
_SYMBOL_WIDTH = 32

def _open(path: Path) -> BinaryIO:
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def read_header(path: str | Path) -> list[str]:
    """The lower-cased column names of a CSV's first line ([] if unreadable)."""
    try:
        with _open(Path(path)) as fh:
            line = fh.readline(4096)
    except (OSError, EOFError):
        return []
    text = line.decode("utf-8", errors="replace").lstrip("\ufeff").strip()
    return [c.strip().lower() for c in text.split(",")] if text else []


def _blocks(fh: BinaryIO, size: int) -> Iterator[bytes]:
    """Blocks of whole lines of about `size` bytes."""
    while True:
        block = fh.read(size)
        if not block:
            return
        if not block.endswith(b"\n"):
            block += fh.readline()
        yield block


class TickCsvSource:
    """Trades from a `ts,symbol,price,size` CSV; start <= ts < end, optional symbol filter.

    A requested symbol absent from the file is an error unless `missing_ok`.
    """

    def __init__(
        self,
        path: str | Path,
        symbols: Sequence[str] | None = None,
        start: TimeLike = None,
        end: TimeLike = None,
        skipped: SkipCounter | None = None,
        missing_ok: bool = False,
        ts_unit: str | None = None,
        tz: str | dt.tzinfo | None = None,
        strict: bool = False,
    ) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise ValueError(f"tick CSV not found: {self.path}")
        header = read_header(self.path)
        missing = [c for c in HEADER if c not in header]
        if missing:
            raise ValueError(
                f"{self.path}: header {','.join(header)!r} lacks {', '.join(missing)} "
                f"(expected ts,symbol,price,size)"
            )
        self._cols = [header.index(c) for c in HEADER]
        self._n_fields = len(header)
        self.start, self.end = to_ns(start), to_ns(end)
        self.skipped = skipped if skipped is not None else SkipCounter(
            self.path.name, log_at_end=True, strict=strict)
        self.tz = zone(tz) if isinstance(tz, str) else tz
        self._ts_unit = ts_unit
        self._epoch = EpochUnit(ts_unit)
        self._check_first_time()
        names = self._scan_symbols()
        if symbols is not None:
            have = {n.upper(): n for n in names}
            wanted = [s.strip().upper() for s in symbols]
            absent = [s for s in wanted if s not in have]
            if absent and not missing_ok:
                raise ValueError(f"{self.path}: symbols not in the file: {', '.join(absent)}")
            names = sorted({have[s] for s in wanted if s in have})
            self._only: set[str] | None = set(names)
        else:
            self._only = None
        self.symbols: list[str] = names
        self._index = {s: i for i, s in enumerate(names)}
        self.name = f"tick CSV {self.path.name}: {len(names)} symbols"

    def _check_first_time(self) -> None:
        """An offset-less first time without `tz` fails now, before any work, with the
        one line that says to give --tz (not a file of silently skipped rows)."""
        with _open(self.path) as fh:
            fh.readline()
            for raw in fh:
                fields = raw.decode("utf-8", errors="replace").split(",")
                if len(fields) > self._cols[0] and fields[self._cols[0]].strip():
                    text = fields[self._cols[0]].strip()
                    if not is_number(text):
                        try:
                            parse_iso_ns(text, self.tz)
                        except NaiveTimeError as exc:
                            raise ValueError(f"{self.path}: {exc}") from None
                        except ValueError:
                            pass  # a bad first time is counted like any other
                    return

    # -- pass 1: the symbol table
    def _scan_symbols(self) -> list[str]:
        col = self._cols[1]
        found: set[str] = set()
        with _open(self.path) as fh:
            fh.readline()
            for block in _blocks(fh, BLOCK_BYTES):
                if not block.strip():  # loadtxt warns on a block of blank lines
                    continue
                try:
                    names = np.loadtxt(
                        io.BytesIO(block),
                        delimiter=",",
                        usecols=(col,),
                        dtype=f"U{_SYMBOL_WIDTH}",
                        ndmin=1,
                        comments=None,
                        encoding="utf-8",
                    )
                    found.update(np.unique(np.char.strip(names)).tolist())
                except ValueError:
                    for line in block.decode("utf-8", errors="replace").splitlines():
                        fields = line.split(",")
                        if len(fields) > col:
                            found.add(fields[col].strip())
        found.discard("")
        return sorted(found)

    # -- pass 2: records
    def chunks(self) -> Iterator[np.ndarray]:
        line_no = 2  # 1-based number of the first line of the current block
        prev_ts = np.iinfo(np.int64).min
        prev_line = 0
        self._epoch = EpochUnit(self._ts_unit)  # each pass detects the unit afresh
        with _open(self.path) as fh:
            fh.readline()
            for block in _blocks(fh, BLOCK_BYTES):
                ts, sym_names, price, size, lines = self._parse(block, line_no)
                line_no += block.count(b"\n") + (0 if block.endswith(b"\n") else 1)
                if len(ts) == 0:
                    continue
                ordered = np.empty(len(ts), dtype=bool)
                ordered[0] = ts[0] >= prev_ts
                ordered[1:] = ts[1:] >= ts[:-1]
                if not ordered.all():
                    k = int(np.argmin(ordered))
                    before = (prev_ts, prev_line) if k == 0 else (int(ts[k - 1]), int(lines[k - 1]))
                    raise ValueError(
                        f"{self.path}:{int(lines[k])}: time {int(ts[k])} ns is earlier than "
                        f"{before[0]} ns on line {before[1]}; the file must be sorted by time"
                    )
                prev_ts, prev_line = int(ts[-1]), int(lines[-1])
                records = self._records(ts, sym_names, price, size)
                yield from split_chunks(records)
        self.skipped.log_totals()

    def _records(
        self, ts: np.ndarray, names: np.ndarray, price: np.ndarray, size: np.ndarray
    ) -> np.ndarray:
        uniq, inverse = np.unique(names, return_inverse=True)
        table = np.array([self._index.get(str(u), -1) for u in uniq], dtype=np.int32)
        sym = table[inverse.reshape(-1)]
        keep = sym >= 0
        if self.start is not None:
            keep &= ts >= self.start
        if self.end is not None:
            keep &= ts < self.end
        out = np.zeros(int(keep.sum()), dtype=RECORD_DTYPE)
        out["ts"] = ts[keep]
        out["sym"] = sym[keep]
        out["kind"] = KIND_TRADE
        out["f0"] = price[keep]
        out["f1"] = size[keep]
        return out

    def _parse(
        self, block: bytes, first_line: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(ts, symbol, price, size, line number) of the block's good rows."""
        parsed = self._parse_fast(block, first_line)
        if parsed is None:
            parsed = self._parse_slow(block, first_line)
        ts, names, price, size, lines = parsed
        bad_price = ~(np.isfinite(price) & (price > 0))
        bad_size = ~bad_price & ~(np.isfinite(size) & (size > 0))
        for kind, mask in (("bad_price", bad_price), ("bad_size", bad_size)):
            if mask.any():
                i = int(np.argmax(mask))
                self.skipped.add(
                    kind,
                    int(mask.sum()),
                    f"line {lines[i]}: {names[i]} price {price[i]} size {size[i]}",
                )
        keep = ~(bad_price | bad_size)
        return ts[keep], names[keep], price[keep], size[keep], lines[keep]

    def _parse_fast(
        self, block: bytes, first_line: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """np.loadtxt of an all-well-formed block with integer ts; None if anything is odd."""
        if not block.strip():
            return None  # blank lines: the slow path skips them (loadtxt would warn)
        order = np.argsort(self._cols)
        kinds = [("ts", "i8"), ("symbol", f"U{_SYMBOL_WIDTH}"), ("price", "f8"), ("size", "f8")]
        dtype = np.dtype([kinds[i] for i in order])
        try:
            rows = np.loadtxt(
                io.BytesIO(block),
                delimiter=",",
                usecols=sorted(self._cols),
                dtype=dtype,
                ndmin=1,
                comments=None,
                encoding="utf-8",
            )
        except ValueError:
            return None
        data = np.frombuffer(block, dtype=np.uint8)
        ends = np.flatnonzero(data == 10)
        if len(ends) == 0 or ends[-1] != len(data) - 1:
            ends = np.append(ends, len(data))
        starts = np.concatenate(([0], ends[:-1] + 1))
        lengths = ends - starts
        has_cr = np.zeros(len(ends), dtype=bool)
        nonempty = lengths > 0
        has_cr[nonempty] = data[ends[nonempty] - 1] == 13
        filled = lengths - has_cr > 0
        if int(filled.sum()) != len(rows):
            return None  # blank or whitespace lines: let the slow path number lines exactly
        names = np.char.strip(rows["symbol"])
        if (np.char.str_len(names) == 0).any():
            return None
        lines = first_line + np.flatnonzero(filled)
        raw = rows["ts"]
        ts, ok = self._epoch.to_ns(raw)
        if not ok.all():  # another magnitude than the file's unit, or an int64 overflow
            assert self._epoch.unit is not None
            mixed = ~ok & (units_of(raw) != UNITS.index(self._epoch.unit))
            for kind, mask in (("mixed_ts_unit", mixed), ("bad_ts", ~ok & ~mixed)):
                if mask.any():
                    k = int(np.argmax(mask))
                    self.skipped.add(kind, int(mask.sum()),
                                     f"line {lines[k]}: {raw[k]} ({self._epoch.unit} file)")
        return ts[ok], names[ok], rows["price"][ok], rows["size"][ok], lines[ok]

    def _stamp(self, text: str, line: int) -> int:
        """One row's time in ns: an epoch number (the file's unit) or ISO-8601 (naive in
        `tz`); a naive time without `tz` stops the read with one line (not a skip)."""
        if is_number(text):
            return self._epoch.text_to_ns(text)
        try:
            return parse_iso_ns(text, self.tz)
        except NaiveTimeError as exc:
            raise NaiveTimeError(f"{self.path}:{line}: {exc}") from None

    def _parse_slow(
        self, block: bytes, first_line: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Line by line: every malformed line is counted by kind and skipped."""
        c_ts, c_sym, c_price, c_size = self._cols
        need = max(self._cols) + 1
        ts: list[int] = []
        names: list[str] = []
        prices: list[float] = []
        sizes: list[float] = []
        lines: list[int] = []
        text = block.decode("utf-8", errors="replace")
        for k, line in enumerate(text.split("\n")):
            line = line.strip()
            if not line:
                continue
            number = first_line + k
            fields = line.split(",")
            if len(fields) < need:
                self.skipped.add("wrong_field_count", 1, f"line {number}: {line[:80]}")
                continue
            try:
                stamp = self._stamp(fields[c_ts].strip(), number)
            except NaiveTimeError:
                raise  # the user must say the zone: an error, not a skipped row
            except MixedUnitError:
                self.skipped.add("mixed_ts_unit", 1, f"line {number}: {line[:80]}")
                continue
            except (ValueError, OverflowError):
                self.skipped.add("bad_ts", 1, f"line {number}: {line[:80]}")
                continue
            name = fields[c_sym].strip()
            if not name:
                self.skipped.add("missing_symbol", 1, f"line {number}: {line[:80]}")
                continue
            try:
                price, size = float(fields[c_price]), float(fields[c_size])
            except ValueError:
                self.skipped.add("bad_number", 1, f"line {number}: {line[:80]}")
                continue
            ts.append(stamp)
            names.append(name)
            prices.append(price)
            sizes.append(size)
            lines.append(number)
        return (
            np.array(ts, dtype=np.int64),
            np.array(names, dtype=f"U{_SYMBOL_WIDTH}"),
            np.array(prices, dtype=np.float64),
            np.array(sizes, dtype=np.float64),
            np.array(lines, dtype=np.int64),
        )
