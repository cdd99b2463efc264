"""The GP window's caches: the parsed daily file and the window itself, reused between runs,
never stale."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def _two_stocks(csv: Path) -> tuple[Path, list[str]]:
    """A daily file of two stocks (AAA, BBB) x 60 days; the file and its rows."""
    rows = ["date,open,high,low,close,volume,Name"]
    for sym, base in (("AAA", 10.0), ("BBB", 50.0)):
        rows += [f"2015-{1 + d // 28:02d}-{1 + d % 28:02d},{base},{base + 1},{base - 1},"
                 f"{base + (d % 7) / 10},{1000 + d},{sym}" for d in range(60)]
    csv.write_text("\n".join(rows) + "\n")
    return csv, rows


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


def test_window_is_cached_between_runs_and_never_stale(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from strategies.gp import window as win

    monkeypatch.setenv("TRADING_CACHE_DIR", str(tmp_path / "cache"))
    csv, rows = _two_stocks(tmp_path / "w.csv")
    first = win.load_window(csv, 2, 40, 20)
    assert len(list((tmp_path / "cache").glob("window-*.pickle"))) == 1
    win._cached_table.cache_clear()  # a new process: only the disk cache is left
    again = win.load_window(csv, 2, 40, 20)
    assert again is not first
    for name in ("panel", "close", "open", "dates"):
        assert np.array_equal(getattr(again, name), getattr(first, name), equal_nan=True)
    assert (again.symbols, again.train, again.test) == (first.symbols, first.train, first.test)
    # other arguments, another window
    assert win.load_window(csv, 1, 40, 20).symbols == ["AAA"]
    # an edited file is read again
    csv.write_text("\n".join(rows).replace("AAA", "CCC") + "\n")
    assert win.load_window(csv, 2, 40, 20).symbols == ["BBB", "CCC"]
    # and edited window code never reads an old window
    monkeypatch.setattr(win, "_window_fingerprint", lambda: "other indicators")
    win.load_window(csv, 2, 40, 20)
    assert len(list((tmp_path / "cache").glob("window-*.pickle"))) == 4


#: an empty file, text, an unknown protocol (ValueError), a bad UTF-8 string
#: (UnicodeDecodeError), a REDUCE with a non-tuple argument (TypeError)
@pytest.mark.parametrize("damage", [b"", b"garbage", b"\x80\x09",
                                    b"\x80\x05X\x01\x00\x00\x00\x90.", b"\x80\x05)K\x01R."])
def test_a_damaged_cache_file_is_computed_again_never_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: bytes
) -> None:
    from strategies.gp import window as win

    monkeypatch.setenv("TRADING_CACHE_DIR", str(tmp_path / "cache"))
    csv, rows = _two_stocks(tmp_path / "w.csv")
    win._cached_table.cache_clear()
    first = win.load_window(csv, 2, 40, 20)
    for f in (tmp_path / "cache").glob("*.pickle"):  # the window and the parsed file
        f.write_bytes(damage)
    win._cached_table.cache_clear()  # a new process: only the (damaged) disk cache is left
    again = win.load_window(csv, 2, 40, 20)
    assert np.array_equal(again.panel, first.panel, equal_nan=True)
    assert again.symbols == first.symbols
    # and the damaged files were replaced by good ones
    win._cached_table.cache_clear()
    assert win.load_window(csv, 2, 40, 20).symbols == first.symbols


def test_another_numba_or_numpy_never_reads_an_old_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numba

    from strategies.gp import window as win

    monkeypatch.setenv("TRADING_CACHE_DIR", str(tmp_path / "cache"))
    csv = tmp_path / "v.csv"
    csv.write_text("date,open,high,low,close,volume,Name\n")
    key = win._window_cache_file(csv, 2, 40, 20, None, None)
    monkeypatch.setattr(numba, "__version__", "0.0.0-other")
    assert win._window_cache_file(csv, 2, 40, 20, None, None) != key
    monkeypatch.undo()
    monkeypatch.setenv("TRADING_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(np, "__version__", "0.0.0-other")
    assert win._window_cache_file(csv, 2, 40, 20, None, None) != key


def test_the_cache_keeps_only_the_most_recently_used_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from strategies.gp import window as win

    monkeypatch.setenv("TRADING_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(win, "CACHE_KEEP", 2)
    csv, _ = _two_stocks(tmp_path / "k.csv")
    win.load_window(csv, 2, 40, 20)
    first = set((tmp_path / "cache").glob("window-*.pickle"))
    for train in (30, 35, 38):
        win.load_window(csv, 2, train, 20)
        win.load_window(csv, 2, 40, 20)  # read again: kept as recently used
    kept = set((tmp_path / "cache").glob("window-*.pickle"))
    assert len(kept) == 2 and first <= kept
    assert not list((tmp_path / "cache").glob("*.tmp"))
