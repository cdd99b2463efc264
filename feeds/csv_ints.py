"""Integer columns of header-less CSV text in compiled code: the fast path of the LEAN
reader (feeds/lean.py), whose equity files hold integers only.

`int_columns(text, usecols)` parses the fields `usecols` of every non-empty line as
int64 and returns (rows, True), or (an empty array, False) at the first thing outside the
narrow form it knows: a used field that is not an optional minus sign and 1 to 18 decimal
digits (a decimal point, an exponent, a space, an empty field), or a line with too few
fields. The caller then parses the text its general way (`np.loadtxt`, then line by line,
counting bad lines), so the compiled path decides nothing about bad input; it only
replaces `np.loadtxt` where both give the same numbers (tests/feeds/test_lean_fast.py
compares them on random well-formed and malformed text). Lines end with "\\n", optionally
"\\r\\n"; empty lines are skipped, as `np.loadtxt` skips them; fields after the last used
one are not read.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from numba import njit

I64 = npt.NDArray[np.int64]
_COMMA, _NEWLINE, _RETURN, _MINUS, _ZERO, _NINE = 44, 10, 13, 45, 48, 57
_MAX_DIGITS = 18  # 10^18 - 1 fits in an int64


@njit(cache=True)
def _int_columns(text: npt.NDArray[np.uint8], slot_of: I64, n_out: int) -> tuple[I64, bool]:
    n = text.shape[0]
    lines = 1
    for i in range(n):
        if text[i] == _NEWLINE:
            lines += 1
    out = np.empty((lines, n_out), np.int64)
    n_cols = slot_of.shape[0]
    row = 0
    i = 0
    while i < n:
        j = i
        while j < n and text[j] != _NEWLINE:
            j += 1
        end = j
        if end > i and text[end - 1] == _RETURN:
            end -= 1
        if end > i:
            p = i
            col = 0
            found = 0
            while p <= end and col < n_cols:
                slot = slot_of[col]
                if slot >= 0:
                    negative = p < end and text[p] == _MINUS
                    if negative:
                        p += 1
                    value = 0
                    digits = 0
                    while p < end and text[p] != _COMMA:
                        c = text[p]
                        if c < _ZERO or c > _NINE or digits == _MAX_DIGITS:
                            return out[:0], False
                        value = value * 10 + (c - _ZERO)
                        digits += 1
                        p += 1
                    if digits == 0:
                        return out[:0], False
                    out[row, slot] = -value if negative else value
                    found += 1
                else:
                    while p < end and text[p] != _COMMA:
                        p += 1
                col += 1
                p += 1  # past the comma (or past the line's end: the last field)
            if found < n_out:
                return out[:0], False
            row += 1
        i = j + 1
    return out[:row], True


def int_columns(text: bytes, usecols: Sequence[int]) -> tuple[I64, bool]:
    """Fields `usecols` (ascending or not; the output keeps their order) of every
    non-empty line of `text` as int64 rows, and whether the whole text had the narrow
    form (when False the rows are empty: parse it another way)."""
    slot_of = np.full(max(usecols) + 1, -1, np.int64)
    for k, c in enumerate(usecols):
        slot_of[c] = k
    return _int_columns(np.frombuffer(text, np.uint8), slot_of, len(usecols))
