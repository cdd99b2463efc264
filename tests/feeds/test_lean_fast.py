"""The LEAN reader's fast paths against independent references: the compiled integer CSV
parser (feeds/csv_ints.py) against numpy's `loadtxt` and a strict Python reading of the
same text, and the linear-time merge of time-ordered records (feeds/merge.py) against
numpy's stable sort of their concatenation."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest

from feeds.csv_ints import int_columns
from feeds.lean import _TRADE_COLS, _parse_block
from feeds.merge import _stable_merge
from feeds.records import RECORD_DTYPE, SkipCounter

NARROW = re.compile(rb"-?[0-9]{1,18}")
BAD_TOKENS = [b"1.5", b"2e3", b" 7", b"7 ", b"", b"x", b"+3", b"1234567890123456789",
              b"--1", b"0x10", b"\xff", b"1,"]


def _strict_reading(text: bytes, usecols: tuple[int, ...]) -> np.ndarray | None:
    """What the narrow form means, in plain Python: every non-empty line (a trailing
    "\\r" dropped) has the used fields as an optional minus and 1-18 digits; else None."""
    rows = []
    for raw in text.split(b"\n"):
        line = raw[:-1] if raw.endswith(b"\r") else raw
        if not line:
            continue
        fields = line.split(b",")
        if len(fields) <= max(usecols):
            return None
        if not all(NARROW.fullmatch(fields[c]) for c in usecols):
            return None
        rows.append([int(fields[c]) for c in usecols])
    return np.array(rows, np.int64).reshape(-1, len(usecols))


def _random_text(rng: np.random.Generator, n_lines: int, n_fields: int,
                 bad: float) -> bytes:
    lines = []
    for _ in range(n_lines):
        if rng.random() < 0.03:
            lines.append(b"")  # a blank line
            continue
        fields = []
        for _ in range(n_fields - (rng.random() < bad)):  # now and then a field short
            digits = int(rng.integers(1, 19))
            value = int(rng.integers(0, 10 ** min(digits, 18)))
            fields.append(str(-value if rng.random() < 0.1 else value).encode())
        if rng.random() < bad and fields:
            fields[int(rng.integers(len(fields)))] = BAD_TOKENS[int(rng.integers(len(BAD_TOKENS)))]
        if rng.random() < 0.2 and len(fields) > 3:
            fields[3] = b"P"  # LEAN's exchange letter, in a field the reader skips
        end = b"\r" if rng.random() < 0.1 else b""
        lines.append(b",".join(fields) + end)
    return b"\n".join(lines) + (b"\n" if rng.random() < 0.5 else b"")


@pytest.mark.parametrize("seed", range(40))
def test_integer_text_parses_as_loadtxt_and_anything_else_is_handed_back(seed: int) -> None:
    rng = np.random.default_rng(seed)
    bad = 0.0 if seed % 2 == 0 else 0.02
    text = _random_text(rng, int(rng.integers(0, 400)), 6, bad)
    usecols = _TRADE_COLS if seed % 3 else (2, 0)
    got, whole = int_columns(text, usecols)
    want = _strict_reading(text, usecols)
    assert whole == (want is not None)
    if want is None:
        assert got.shape[0] == 0
        return
    np.testing.assert_array_equal(got, want)
    if want.shape[0] and b"\r" not in text:  # numpy's parser, where it reads this text
        ref = np.loadtxt(io.BytesIO(text), delimiter=",", usecols=usecols, dtype=np.int64,
                         ndmin=2, comments=None, encoding="latin-1")
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("seed", range(10))
def test_a_block_with_bad_lines_reads_as_before(seed: int) -> None:
    """Text the compiled path hands back still gives the good lines' numbers and a count of
    the bad ones (the general path), and well-formed text the same numbers either way."""
    rng = np.random.default_rng(100 + seed)
    text = _random_text(rng, 200, 6, 0.05)
    skipped = SkipCounter("test")
    cols = _parse_block(text, _TRADE_COLS, skipped, "fuzz")
    good = []
    n_bad = 0
    for raw in text.split(b"\n"):
        line = raw.strip()
        if not line:
            continue
        fields = line.split(b",")
        try:
            if len(fields) <= max(_TRADE_COLS):
                raise ValueError
            good.append([float(fields[c]) for c in _TRADE_COLS])
        except ValueError:
            n_bad += 1
    if n_bad:  # a block with a bad line is read line by line (np.loadtxt refuses it)
        np.testing.assert_array_equal(cols, np.array(good).reshape(-1, 4))
        assert skipped.counts.get("malformed_row", 0) == n_bad
    else:
        np.testing.assert_array_equal(cols, np.array(good, np.float64).reshape(-1, 4))


def _records(rng: np.random.Generator, n: int, sym: int) -> np.ndarray:
    out = np.zeros(n, RECORD_DTYPE)
    out["ts"] = np.sort(rng.integers(0, max(n // 2, 1), n))  # many equal times
    out["sym"] = sym
    out["f0"] = np.arange(n)  # the order within the part, to see it kept
    return out


@pytest.mark.parametrize("seed", range(30))
def test_merge_equals_a_stable_sort_of_the_parts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    parts = [_records(rng, int(rng.integers(0, 300)), s) for s in range(int(rng.integers(1, 5)))]
    joined = np.concatenate(parts)
    want = joined[np.argsort(joined["ts"], kind="stable")]
    got = _stable_merge(parts)
    np.testing.assert_array_equal(got, want)  # ties: earlier parts first, order kept
