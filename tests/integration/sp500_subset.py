"""A few stocks of the real S&P 500 daily file, written to a test's folder (small files make
replays and evolutions fast; the data itself is never copied into the repository)."""

from __future__ import annotations

import gzip
from pathlib import Path


def sp500_subset(shared_data: Path, out: Path, symbols: tuple[str, ...]) -> Path:
    """The rows of `symbols` of sp500_5yr_daily/all_stocks_5yr.csv.gz as a plain CSV."""
    src = shared_data / "sp500_5yr_daily" / "all_stocks_5yr.csv.gz"
    wanted = set(symbols)
    with gzip.open(src, "rt", newline="") as fh:
        lines = fh.read().splitlines()
    keep = [lines[0]] + [ln for ln in lines[1:] if ln.rsplit(",", 1)[-1] in wanted]
    out.write_text("\n".join(keep) + "\n")
    return out
