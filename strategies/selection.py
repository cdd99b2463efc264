"""Least-correlated selection of strategies from their daily returns (the `select` command's model).

Returns file (CSV, written by `evolve --returns-out` or by hand): a header naming one column
per strategy, optionally a first column `date` (or `day`, `time`), then one row per day of
simple returns. Rows with a missing or non-finite return are dropped (and counted): every
correlation is then taken over the same days. A strategy whose returns never vary (an
evolved rule that never trades) has no correlation: it is set aside and named in
`constant`. Fewer than 2 varying strategies, fewer than 3 usable days and duplicate names
are errors. Columns with identical returns on every usable day are one behaviour
(`distinct_behaviours`): an evolved hall of fame can hold many clones of one rule.

Selection file (the `select` command's `--json` output, read back by
`best.json#ensemble:select=FILE`): `subset` lists the chosen column names.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gpu.subset.search import SubsetResult, least_correlated

DATE_COLUMNS = ("date", "day", "time", "timestamp")


@dataclass(frozen=True)
class ReturnsTable:
    """Daily returns (days × strategies) with the strategies' names."""

    names: list[str]
    returns: npt.NDArray[np.float64]
    dropped_rows: int
    constant: tuple[str, ...] = ()
    #: columns of the input (constant ones included) with distinct returns: identical
    #: columns count once
    distinct_behaviours: int = 0

    def correlation(self) -> npt.NDArray[np.float64]:
        return np.asarray(np.corrcoef(self.returns, rowvar=False), np.float64)


def _text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ValueError(f"{path}: cannot read returns file ({e.strerror or e})") from None
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text CSV file") from None


def read_returns(path: str | Path) -> ReturnsTable:
    """Read a returns CSV (see the module docstring); ValueError (one line) when unusable."""
    p = Path(path)
    rows = list(csv.reader(io.StringIO(_text(p))))
    rows = [r for r in rows if any(cell.strip() for cell in r)]
    if not rows:
        raise ValueError(f"{p}: empty returns file")
    header = [h.strip() for h in rows[0]]
    skip_first = bool(header) and header[0].lower() in DATE_COLUMNS
    names = header[1:] if skip_first else header
    if len(names) < 2 or any(not n for n in names):
        raise ValueError(f"{p}: the header must name at least 2 strategy columns")
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"{p}: strategy {dup!r} appears twice in the header")
    values = np.full((len(rows) - 1, len(names)), np.nan)
    for i, row in enumerate(rows[1:]):
        cells = row[1:] if skip_first else row
        if len(cells) != len(names):
            raise ValueError(f"{p}: line {i + 2} has {len(cells)} values, the header names "
                             f"{len(names)} strategies")
        for j, cell in enumerate(cells):
            with contextlib.suppress(ValueError):  # left NaN: the row is dropped and counted
                values[i, j] = float(cell)
    good = np.all(np.isfinite(values), axis=1)
    returns = values[good]
    if returns.shape[0] < 3:
        raise ValueError(f"{p}: {returns.shape[0]} complete rows of returns; at least 3 needed")
    varies = np.ptp(returns, axis=0) > 0
    if np.count_nonzero(varies) < 2:
        raise ValueError(f"{p}: {np.count_nonzero(varies)} strategies with varying returns; at "
                         f"least 2 needed (constant returns have no correlation)")
    return ReturnsTable(names=[n for n, v in zip(names, varies, strict=True) if v],
                        returns=np.ascontiguousarray(returns[:, varies]),
                        dropped_rows=int(np.count_nonzero(~good)),
                        constant=tuple(n for n, v in zip(names, varies, strict=True) if not v),
                        distinct_behaviours=distinct_columns(returns))


def distinct_columns(returns: npt.NDArray[np.float64]) -> int:
    """How many columns differ from every other on at least one day (exact equality: a
    clone's returns are the same floats, day by day)."""
    # + 0.0: -0.0 is 0.0; the returns are finite, so equal bytes are equal floats (and
    # np.unique(axis=0), which counts the same, imports numpy.ma: 0.05 s of a cold start)
    columns = np.ascontiguousarray(returns.T + 0.0)
    return len({column.tobytes() for column in columns})


#: a chosen set whose largest |correlation| exceeds this holds near-clones: its members
#: are not independent strategies, whatever the search returned
CLONE_CORRELATION = 0.9


def largest_abs_correlation(corr: npt.NDArray[np.float64]) -> float:
    """The largest |correlation| between two different members of a correlation matrix."""
    k = corr.shape[0]
    if k < 2:
        return 0.0
    off = np.abs(corr[~np.eye(k, dtype=bool)])
    return float(off.max())


def clone_warning(largest: float, k: int, distinct: int) -> str | None:
    """One line when the chosen set is not a set of different strategies, else None."""
    if not largest > CLONE_CORRELATION:
        return None
    text = (f"the chosen {k} strategies are near-clones: largest |correlation| "
            f"{largest:.4f} > {CLONE_CORRELATION}")
    if distinct < k:
        text += f"; the input holds only {distinct} distinct behaviour(s)"
    return text


def write_returns(path: str | Path, names: Sequence[str], returns: npt.ArrayLike,
                  dates: Sequence[str] | None = None) -> None:
    """Write a returns CSV (days × strategies), optionally with a first `date` column."""
    r = np.asarray(returns, np.float64)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow((["date"] if dates is not None else []) + list(names))
    for i in range(r.shape[0]):
        w.writerow(([dates[i]] if dates is not None else []) + [repr(float(x)) for x in r[i]])
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(out.getvalue())


def select_least_correlated(table: ReturnsTable, k: int, device: str = "auto",
                            max_seconds: float | None = None,
                            progress: Callable[[int, int, float], None] | None = None
                            ) -> SubsetResult:
    """The k strategies of `table` whose correlation sub-matrix is closest to the identity."""
    if k > len(table.names):
        n_aside = len(table.constant)
        aside = f" ({n_aside} with constant returns set aside)" if n_aside else ""
        raise ValueError(f"--k {k} is more than the {len(table.names)} varying strategies in "
                         f"the file{aside}")
    return least_correlated(table.correlation(), k, device, max_seconds, progress)


def read_selection(path: str | Path) -> list[str]:
    """The chosen strategy names of a `select --json` file (its `subset` list)."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except OSError as e:
        raise ValueError(f"{p}: cannot read selection file ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not JSON ({e.msg} at line {e.lineno})") from None
    subset = doc.get("subset") if isinstance(doc, dict) else None
    if not isinstance(subset, list) or not subset or not all(isinstance(s, str) for s in subset):
        raise ValueError(f"{p}: expected a `select` output with a non-empty `subset` list of "
                         f"strategy names")
    return list(subset)
