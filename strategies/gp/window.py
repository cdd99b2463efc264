"""The data window of one evolution: training days, then test days, of the same stocks.

`load_window` reads `n_stocks` stocks that have a bar on every day of the window
[start, start + train_days + test_days) (feeds.daily.daily_matrix: stocks taken
alphabetically among those complete in the window; its module docstring gives the NaN
policy: rows with a bad close are dropped, which makes that stock incomplete and excluded;
missing open/high/low are repaired from the close). The indicator panel is computed once
over the whole window, from its first day (no data before it), so indicators warm up inside
the training period, and always on the CPU: compute_panel's CUDA backend may differ in the
last bits (fused multiply-adds) and a flipped boolean would change a run, whereas a CPU
panel makes a seed reproduce on every evaluator device.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from feeds.daily import DailyMatrix, DailyTable, daily_matrix, load_daily
from feeds.sources import resolve_data_file
from gpu.indicators.compute import compute_panel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Period:
    """One part of the window: trading days [day0, day1) of the window's arrays."""

    name: str
    day0: int
    day1: int

    @property
    def days(self) -> int:
        return self.day1 - self.day0


@dataclass
class GPWindow:
    """Closes (float64, dollars) and the indicator panel (float32, day x 31 x stock)."""

    symbols: list[str]
    dates: npt.NDArray[np.datetime64]
    close: npt.NDArray[np.float64]
    panel: npt.NDArray[np.float32]
    train: Period
    test: Period
    source: str = ""
    #: opening prices (float64, dollars), for the next-open fill model
    open: npt.NDArray[np.float64] | None = None
    #: per stock, the window's index of its last real bar (n_days - 1 if it trades to the
    #: end; less for a stock that stopped trading in the test window, whose prices after
    #: that day repeat its last close); None = every stock trades every day
    last_day: npt.NDArray[np.int64] | None = None

    def stopped(self, period: Period) -> dict[str, str]:
        """Stocks that stop trading inside `period`, with the date of their last bar."""
        if self.last_day is None:
            return {}
        return {s: str(self.dates[d]) for s, d in zip(self.symbols, self.last_day.tolist(),
                                                       strict=True)
                if period.day0 <= d < period.day1 - 1}

    @property
    def n_stocks(self) -> int:
        return int(self.close.shape[1])

    def describe(self, period: Period) -> dict[str, object]:
        """JSON-able description: enough to replay the same days of the same stocks."""
        return {
            "symbols": list(self.symbols),
            "first_date": str(self.dates[period.day0]),
            "last_date": str(self.dates[period.day1 - 1]),
            "days": period.days,
        }


def _table(path: Path) -> DailyTable:
    """The parsed file, kept for the next window of the same file (experiments and tests
    cut many windows from one file; parsing takes seconds)."""
    st = path.stat()
    return _cached_table(str(path.resolve()), st.st_mtime_ns, st.st_size)


#: bump when DailyTable or the parser's cleaning changes, so old cache files are ignored
PARSE_CACHE_VERSION = 1


def parse_cache_dir() -> Path:
    """Where parsed daily files are kept between runs: $TRADING_CACHE_DIR, else the user's
    cache folder. Parsing the S&P 500 file takes seconds; a run of `evolve` then takes less."""
    env = os.environ.get("TRADING_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpu-trading-engine"


@functools.cache
def _parser_fingerprint() -> str:
    """The parser's own source and the table's fields: an edit of either is a new cache key,
    so a stale pickle is never served because someone forgot PARSE_CACHE_VERSION."""
    import inspect

    from feeds import daily

    text = inspect.getsource(daily) + "|" + ",".join(DailyTable.__dataclass_fields__)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _read_cache(cache_file: Path, kind: type) -> object | None:
    """The object pickled in cache_file if it is a `kind`, else None (missing, unreadable)."""
    try:
        with cache_file.open("rb") as f:
            obj = pickle.load(f)
    except FileNotFoundError:
        return None  # no cache yet: compute it
    # a damaged pickle raises almost anything (ValueError, TypeError, UnicodeDecodeError,
    # OverflowError, MemoryError, ...): any of them only means "compute it again"
    except Exception as e:  # noqa: BLE001
        log.debug("cache file %s unreadable (%s: %s): computed again", cache_file,
                  type(e).__name__, e)
        return None
    if not isinstance(obj, kind):
        return None
    with contextlib.suppress(OSError):  # used now: the last file `_prune` removes
        os.utime(cache_file)
    return obj


#: cache files kept per kind (daily-, window-): each is up to tens of MB, and other
#: arguments, an edited data file or edited code each make a new one
CACHE_KEEP = 8


def _write_cache(cache_file: Path, obj: object) -> None:
    """Best effort: a read-only home or a full disk only costs the next run the work."""
    tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as f:
            pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
        tmp.replace(cache_file)
    except OSError as e:
        log.debug("cache file not written: %s", e)
        with contextlib.suppress(OSError):  # no half-written file left behind
            tmp.unlink(missing_ok=True)
        return
    _prune(cache_file)


def _prune(cache_file: Path) -> None:
    """Remove all but the CACHE_KEEP most recently used files of cache_file's kind."""
    kind = cache_file.name.split("-", 1)[0]
    try:
        files = sorted(cache_file.parent.glob(f"{kind}-*.pickle"),
                       key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in files[CACHE_KEEP:]:
            old.unlink(missing_ok=True)
    except OSError as e:  # another process removed one first: the next write prunes
        log.debug("cache not pruned: %s", e)


@functools.lru_cache(maxsize=2)
def _cached_table(path: str, mtime_ns: int, size: int) -> DailyTable:
    key = hashlib.sha256(f"{PARSE_CACHE_VERSION}|{_parser_fingerprint()}|{path}|{mtime_ns}|"
                         f"{size}".encode()).hexdigest()
    cache_file = parse_cache_dir() / f"daily-{key[:32]}.pickle"
    table = _read_cache(cache_file, DailyTable)
    if isinstance(table, DailyTable):
        for counter in (table.skipped, table.repaired):
            if counter.total:
                log.info("%s: %s %s when it was parsed (cached in %s)", path, counter.what,
                         counter.counts, cache_file.parent)
        return table
    table = load_daily(path)
    _write_cache(cache_file, table)
    return table


@functools.cache
def _window_fingerprint() -> str:
    """The code a window is computed by (parser, indicators, terminals, this module): an
    edit of any of it is a new window cache key."""
    from gpu.indicators import catalogue as terminals
    from gpu.indicators import core as indicators_core

    h = hashlib.sha256(_parser_fingerprint().encode())
    for mod in (indicators_core, terminals, sys.modules[compute_panel.__module__],
                sys.modules[__name__]):
        h.update(Path(str(mod.__file__)).read_bytes())
    return h.hexdigest()[:16]


def _window_cache_file(file: Path, n_stocks: int | None, train_days: int, test_days: int,
                       start: str | None, symbols: list[str] | None) -> Path:
    import numba

    st = file.stat()
    # numba and numpy compute the panel: another version may round its last bits otherwise,
    # and a cached window must equal the one this installation computes
    what = (f"{PARSE_CACHE_VERSION}|{_window_fingerprint()}|{numba.__version__}|"
            f"{np.__version__}|{file.resolve()}|{st.st_mtime_ns}|"
            f"{st.st_size}|{n_stocks}|{train_days}|{test_days}|{start}|{symbols}")
    return parse_cache_dir() / f"window-{hashlib.sha256(what.encode()).hexdigest()[:32]}.pickle"


def window_from_matrix(m: DailyMatrix, train_days: int, test_days: int,
                       source: str = "", last_day: npt.NDArray[np.int64] | None = None
                       ) -> GPWindow:
    """Split a DailyMatrix of at least train_days + test_days days into train and test."""
    if train_days < 2 or test_days < 0:
        raise ValueError(f"need train_days >= 2 and test_days >= 0, got {train_days}, "
                         f"{test_days}")
    total = train_days + test_days
    if m.n_days < total:
        raise ValueError(f"window has {m.n_days} days, {total} needed")
    if test_days == 1:
        raise ValueError("test_days must be 0 or at least 2")
    sl = slice(0, total)
    panel = compute_panel(m.open[sl], m.high[sl], m.low[sl], m.close[sl], m.volume[sl],
                          device="cpu")
    return GPWindow(
        symbols=list(m.symbols), dates=np.asarray(m.dates[sl]),
        close=np.ascontiguousarray(m.close[sl], np.float64), panel=panel,
        train=Period("train", 0, train_days), test=Period("test", train_days, total),
        source=source, open=np.ascontiguousarray(m.open[sl], np.float64),
        last_day=last_day,
    )


def load_window(path: str | Path | DailyTable, n_stocks: int | None, train_days: int,
                test_days: int, start: str | None = None, symbols: list[str] | None = None
                ) -> GPWindow:
    """Read the window from a daily OHLCV file (or a directory holding one), or cut it from
    an already loaded table (feeds.daily.load_daily) when several windows share a file.

    A window read from a file is kept in the parse cache folder (`parse_cache_dir`), keyed
    by the file, the arguments and the code that computes it: the next run with the same
    arguments (the same `evolve` command again) skips the table, the stock selection and
    the indicator panel."""
    if isinstance(path, DailyTable):
        return _cut_window(path, str(path.path or "daily table"), n_stocks, train_days,
                           test_days, start, symbols)
    file = resolve_data_file(path)
    cache_file = _window_cache_file(file, n_stocks, train_days, test_days, start, symbols)
    cached = _read_cache(cache_file, tuple)
    if isinstance(cached, tuple) and len(cached) == 2 and isinstance(cached[0], GPWindow):
        for note in cached[1]:  # the parser's repairs, as a run that parses reports them
            log.info("%s", note)
        return cached[0]
    table = _table(file)
    window = _cut_window(table, str(file), n_stocks, train_days, test_days, start, symbols)
    notes = [f"{file}: {c.what} {c.counts} when it was parsed (cached in {cache_file.parent})"
             for c in (table.skipped, table.repaired) if c.total]
    _write_cache(cache_file, (window, notes))
    return window


def _cut_window(table: DailyTable, source: str, n_stocks: int | None, train_days: int,
                test_days: int, start: str | None, symbols: list[str] | None) -> GPWindow:
    if test_days == 0:
        m = daily_matrix(table, n_stocks=n_stocks, symbols=symbols, start=start,
                         n_days=train_days)
        return window_from_matrix(m, train_days, 0, source=source)
    # survivorship: stocks are chosen by what was known at the end of training (complete
    # over the training days); a stock that stops trading in the test window stays in it
    train = daily_matrix(table, n_stocks=n_stocks, symbols=symbols, start=start,
                         n_days=train_days)
    m, last_day = _with_test_days(table, train, start, train_days + test_days)
    return window_from_matrix(m, train_days, test_days, source=source, last_day=last_day)


def _with_test_days(table: DailyTable, train: DailyMatrix, start: str | None, total: int
                    ) -> tuple[DailyMatrix, npt.NDArray[np.int64]]:
    """The training panel's stocks over `total` days, gaps after the training days filled
    with the stock's last close (a stock that stops trading holds its last price)."""
    sel = table.select(train.symbols, start, None)
    calendar = np.unique(table.select(None, start, None).dates)
    if len(calendar) < total:
        raise ValueError(f"{table.path or 'daily data'}: only {len(calendar)} trading days "
                         f"in the window, {total} asked")
    calendar = calendar[:total]
    n = len(train.symbols)
    arrays = {k: np.full((total, n), np.nan) for k in ("open", "high", "low", "close",
                                                          "volume")}
    col = {s: j for j, s in enumerate(train.symbols)}
    sym_names = [sel.symbols[i] for i in sel.sym.tolist()]
    row = np.searchsorted(calendar, sel.dates)
    ok = (row < total) & (calendar[np.minimum(row, total - 1)] == sel.dates)
    cols = np.array([col[s] for s in sym_names], np.int64)
    for k, a in arrays.items():
        a[row[ok], cols[ok]] = getattr(sel, k)[ok]
    have = np.isfinite(arrays["close"]) & (arrays["close"] > 0)
    last_day = np.array([np.flatnonzero(have[:, j]).max() for j in range(n)], np.int64)
    for j in range(n):  # forward fill: a missing day repeats the last close, volume 0
        for d in range(1, total):
            if not have[d, j]:
                c = arrays["close"][d - 1, j]
                for k in ("open", "high", "low", "close"):
                    arrays[k][d, j] = c
                arrays["volume"][d, j] = 0.0
    if not np.all(np.isfinite(arrays["close"][: train.close.shape[0]])):
        raise ValueError("training days of the chosen stocks are incomplete")
    return DailyMatrix(dates=calendar, symbols=list(train.symbols), **arrays), last_day


def trading_days(path: str | Path | DailyTable, start: str | None = None) -> int:
    """Trading days (dates with any bar) in the data from `start` (default: its first day)."""
    table = path if isinstance(path, DailyTable) else _table(resolve_data_file(path))
    sel = table.select(None, start, None) if start is not None else table
    return int(np.unique(sel.dates).size)


def history_matrix(path: str | Path | DailyTable, n_stocks: int | None,
                   start: str | None = None, symbols: list[str] | None = None) -> DailyMatrix:
    """Daily OHLCV of the whole history from `start` (default: the data's first day) for
    stocks that trade on every day of it (daily_matrix): what a walk-forward cuts its
    folds from."""
    table = path if isinstance(path, DailyTable) else _table(resolve_data_file(path))
    return daily_matrix(table, n_stocks=n_stocks, symbols=symbols, start=start,
                        n_days=trading_days(table, start))
