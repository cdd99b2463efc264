"""The GP window's daily-file parse cache: reused between runs, never stale."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def test_parsed_daily_file_is_cached_between_runs_and_invalidated_by_edits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from strategies.gp import window as win

    monkeypatch.setenv("TRADING_CACHE_DIR", str(tmp_path / "cache"))
    csv = tmp_path / "d.csv"
    rows = ["date,open,high,low,close,volume,Name"]
    rows += [f"2015-01-{d:02d},10,11,9,{10 + d / 10},1000,AAA" for d in range(1, 29)]
    csv.write_text("\n".join(rows) + "\n")
    first = win._table(csv)
    assert len(list((tmp_path / "cache").glob("daily-*.pickle"))) == 1
    win._cached_table.cache_clear()  # a new process: only the disk cache is left
    again = win._table(csv)
    assert again is not first and np.array_equal(again.close, first.close)
    assert again.symbols == first.symbols
    # an edited file is parsed again, never served from the old cache
    csv.write_text("\n".join(rows[:-1]) + "\n2015-01-29,10,11,9,99.5,1000,AAA\n")
    edited = win._table(csv)
    assert edited.close[-1] == 99.5


def test_an_edited_parser_never_reads_an_old_cache(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from strategies.gp import window as win

    monkeypatch.setenv("TRADING_CACHE_DIR", str(tmp_path / "cache"))
    csv = tmp_path / "d.csv"
    rows = ["date,open,high,low,close,volume,Name"]
    rows += [f"2015-02-{d:02d},10,11,9,{10 + d / 10},1000,BBB" for d in range(1, 25)]
    csv.write_text("\n".join(rows) + "\n")
    win._cached_table.cache_clear()
    win._table(csv)
    monkeypatch.setattr(win, "_parser_fingerprint", lambda: "another parser")
    win._cached_table.cache_clear()
    win._table(csv)
    assert len(list((tmp_path / "cache").glob("daily-*.pickle"))) == 2
