"""Trade batches: many trade prints in one frame, as columns (`feeds.messages.TradeBatch`).

A replay's feed sends thousands of trades per frame instead of one message each, so the
per-message costs of sending, receiving and decoding are paid once per frame; the
validator and the engine then work on the columns in compiled loops and leave them only
for the rare row that needs Python (a rejected trade, a bar boundary, a pending order).

Each row keeps the sequence number it has on its symbol's trade stream (`T.SYMBOL`, the
topic of the same trade sent alone), so a batch and the one-tick messages of the same data
look the same to validation: the same gaps, duplicates and rejections, counted the same.

This module holds the wire side (numbering and encoding a run of trade records), the
structural check of a received frame (`batch_columns`), and the validator's compiled fast
branch (`accept_rows`), the one-tick fast branch's test row by row.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt
from numba import njit

from feeds.messages import MAX_BATCH_ROWS, TradeBatch, encode

#: the topic of every batch frame (it carries many symbols)
BATCH_TOPIC = b"C."

_I64_MAX = (1 << 63) - 1


class Columns(NamedTuple):
    """A batch's rows as numpy arrays (read-only views of the frame's bytes)."""

    sym: npt.NDArray[np.int32]
    seqs: npt.NDArray[np.int64]
    times: npt.NDArray[np.int64]
    prices: npt.NDArray[np.float64]
    sizes: npt.NDArray[np.float64]


def rows(batch: TradeBatch) -> int:
    """The number of rows a batch claims (its time column's length)."""
    return len(batch.times) // 8


def batch_columns(batch: TradeBatch) -> Columns | str:
    """The columns of a well-formed batch, or the kind it is counted under when it is
    not: `oversize_batch` (more than MAX_BATCH_ROWS rows), `bad_batch` (no rows, columns
    of different lengths or not whole values, no or repeated symbol names, a symbol id
    outside its table). A frame refused here is skipped whole: which of its rows would
    be good cannot be told."""
    n, rest = divmod(len(batch.times), 8)
    if n > MAX_BATCH_ROWS:
        return "oversize_batch"
    if (rest or n == 0 or len(batch.seqs) != 8 * n or len(batch.prices) != 8 * n
            or len(batch.sizes) != 8 * n or len(batch.sym_ids) != 4 * n):
        return "bad_batch"
    k = len(batch.symbols)
    if k == 0 or len(set(batch.symbols)) != k:
        return "bad_batch"
    sym = np.frombuffer(batch.sym_ids, "<i4")
    if int(sym.min()) < 0 or int(sym.max()) >= k:
        return "bad_batch"
    return Columns(sym, np.frombuffer(batch.seqs, "<i8"), np.frombuffer(batch.times, "<i8"),
                   np.frombuffer(batch.prices, "<f8"), np.frombuffer(batch.sizes, "<f8"))


def batch_slice(batch: TradeBatch, cols: Columns, lo: int, hi: int) -> TradeBatch:
    """Rows [lo, hi) of a batch as a batch of their own (the batch itself when whole)."""
    if lo == 0 and hi == cols.times.shape[0]:
        return batch
    return TradeBatch(0, int(cols.times[hi - 1]), "", batch.symbols,
                      cols.sym[lo:hi].tobytes(), cols.seqs[lo:hi].tobytes(),
                      cols.times[lo:hi].tobytes(), cols.prices[lo:hi].tobytes(),
                      cols.sizes[lo:hi].tobytes())


# ------------------------------------------------------------------ sending
@njit(cache=True)
def _number(sym: npt.NDArray[np.int32], counters: npt.NDArray[np.int64],
            seqs: npt.NDArray[np.int64]) -> None:
    """Each row's sequence number on its symbol's trade stream (counters move on)."""
    for i in range(sym.shape[0]):
        s = sym[i]
        counters[s] += 1
        seqs[i] = counters[s]


def encode_batches(symbols: list[str], sym: npt.NDArray[np.int32],
                   times: npt.NDArray[np.int64], prices: npt.NDArray[np.float64],
                   sizes: npt.NDArray[np.float64], counters: npt.NDArray[np.int64],
                   frame_ticks: int) -> list[tuple[bytes, int, int]]:
    """A run of trade records (source symbol ids into `symbols`) as batch payloads of at
    most `frame_ticks` rows each: (payload, rows, last time). `counters` are the trade
    streams' sequence numbers so far, per source symbol (moved on). Each frame names only
    the symbols it holds."""
    n = sym.shape[0]
    seqs = np.empty(n, np.int64)
    _number(np.ascontiguousarray(sym, np.int32), counters, seqs)
    out = []
    for lo in range(0, n, frame_ticks):
        hi = min(lo + frame_ticks, n)
        present, local = np.unique(sym[lo:hi], return_inverse=True)
        frame = TradeBatch(
            0, int(times[hi - 1]), "", tuple(symbols[int(s)] for s in present),
            local.astype("<i4").tobytes(), seqs[lo:hi].astype("<i8").tobytes(),
            np.ascontiguousarray(times[lo:hi], "<i8").tobytes(),
            np.ascontiguousarray(prices[lo:hi], "<f8").tobytes(),
            np.ascontiguousarray(sizes[lo:hi], "<f8").tobytes())
        out.append((encode(frame), hi - lo, int(times[hi - 1])))
    return out


# ------------------------------------------------------------------ validation
class StreamState(NamedTuple):
    """The validator's state of a batch's symbols, one entry per symbol of its table,
    for the compiled fast branch (`Validator._batch` loads and stores it)."""

    fast: npt.NDArray[np.int8]  # 1: the symbol's rows may take the fast branch
    last_seq: npt.NDArray[np.int64]
    band: npt.NDArray[np.float64]
    last_price: npt.NDArray[np.float64]
    high: npt.NDArray[np.float64]
    last_ts: npt.NDArray[np.int64]

    @staticmethod
    def empty(k: int) -> StreamState:
        return StreamState(np.zeros(k, np.int8), np.zeros(k, np.int64), np.zeros(k),
                           np.zeros(k), np.zeros(k), np.zeros(k, np.int64))


def fits_int64(x: int) -> bool:
    """Whether a sequence number or time can go into the compiled branch (and + 1 too)."""
    return -_I64_MAX <= x < _I64_MAX


@njit(cache=True)
def accept_rows(sym: npt.NDArray[np.int32], seqs: npt.NDArray[np.int64],
                times: npt.NDArray[np.int64], prices: npt.NDArray[np.float64],
                sizes: npt.NDArray[np.float64], start: int, fast: npt.NDArray[np.int8],
                last_seq: npt.NDArray[np.int64], band: npt.NDArray[np.float64],
                last_price: npt.NDArray[np.float64], high: npt.NDArray[np.float64],
                last_ts: npt.NDArray[np.int64], max_price: float, latest: int, lead: int,
                clock: int, horizon: int) -> tuple[int, int, int]:
    """Accept rows from `start` while each passes the one-tick fast branch's test
    (`Validator.validate_many`: in sequence, price, size, band, time), updating the
    state as it does. Returns (the first row that needs the Python path, or the row
    count; the clock; the horizon)."""
    inf = np.inf
    for i in range(start, sym.shape[0]):
        s = sym[i]
        if fast[s] == 0 or seqs[i] != last_seq[s] + 1:
            return i, clock, horizon
        p = prices[i]
        ts = times[i]
        b = band[s]
        if (0.0 < p <= max_price and 0.0 < sizes[i] < inf  # NaN fails too
                and last_price[s] <= p * b and p <= high[s]
                and last_ts[s] <= ts < latest and ts <= horizon):
            last_seq[s] = seqs[i]
            last_price[s] = p
            high[s] = p * b
            last_ts[s] = ts
            if ts > clock:
                clock = ts
                horizon = ts + lead
        else:
            return i, clock, horizon
    return sym.shape[0], clock, horizon


def warm_up() -> None:
    """Load (or compile) the compiled functions of this module now, so a timed replay
    does not pay it in its first frame."""
    one_i32, one_i64 = np.zeros(1, np.int32), np.ones(1, np.int64)
    one_f64 = np.ones(1)
    encode_batches(["A"], one_i32, one_i64, one_f64, one_f64, np.zeros(1, np.int64), 1)
    state = StreamState.empty(1)
    accept_rows(one_i32, one_i64, one_i64, one_f64, one_f64, 0, *state, 1.0, 2, 1, 0, 2)
    ro = np.frombuffer(one_i64.tobytes(), "<i8")  # received columns are read-only views
    accept_rows(np.frombuffer(one_i32.tobytes(), "<i4"), ro, ro,
                np.frombuffer(one_f64.tobytes(), "<f8"), np.frombuffer(one_f64.tobytes(), "<f8"),
                0, *state, 1.0, 2, 1, 0, 2)
