"""Daily OHLCV loader, panel and bar source, checked against pandas on the real S&P 500 file."""

from __future__ import annotations

import gzip
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
import pytest

from feeds.daily import DailySource, DailyTable, bar_close_ns, daily_matrix, load_daily
from feeds.datadir import data_dir
from feeds.records import CHUNK_RECORDS, KIND_BAR, RECORD_DTYPE

SP500 = data_dir() / "sp500_5yr_daily" / "all_stocks_5yr.csv.gz"
needs_sp500 = pytest.mark.skipif(not SP500.is_file(), reason=f"real data absent: {SP500}")


@pytest.fixture(scope="module")
def table() -> DailyTable:
    if not SP500.is_file():
        pytest.skip(f"real data absent: {SP500}")
    return load_daily(SP500)


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    if not SP500.is_file():
        pytest.skip(f"real data absent: {SP500}")
    return pd.read_csv(SP500)


# ---------------------------------------------------------------- real file


@needs_sp500
def test_row_counts_match_pandas(table: DailyTable, frame: pd.DataFrame) -> None:
    assert len(table) == len(frame)  # close is never missing: no row dropped
    assert table.symbols == sorted(frame["Name"].unique().tolist())
    assert len(np.unique(table.dates)) == frame["date"].nunique()
    per_stock = frame.groupby("Name").size()
    np.testing.assert_array_equal(
        np.bincount(table.sym, minlength=len(table.symbols)), per_stock.loc[table.symbols].values
    )
    assert table.skipped.counts == {}


@needs_sp500
def test_repair_counts_and_values_match_pandas(table: DailyTable, frame: pd.DataFrame) -> None:
    missing = frame[["open", "high", "low"]].isna().any(axis=1)
    intact = frame[~missing]
    body_hi = intact[["open", "close"]].max(axis=1)
    body_lo = intact[["open", "close"]].min(axis=1)
    inconsistent = (intact["high"] < body_hi) | (intact["low"] > body_lo)
    assert table.repaired.counts == {
        "missing_ohlc": int(missing.sum()),
        "inconsistent_ohlc": int(inconsistent.sum()),
    }

    ref = frame.sort_values(["Name", "date"], kind="stable").reset_index(drop=True)
    np.testing.assert_array_equal(table.close, ref["close"].to_numpy())
    np.testing.assert_array_equal(table.volume, ref["volume"].to_numpy(dtype=float))
    np.testing.assert_array_equal(table.dates, pd.to_datetime(ref["date"]).to_numpy("M8[D]"))
    untouched = ~(ref[["open", "high", "low"]].isna().any(axis=1)).to_numpy()
    untouched &= ~(
        (ref["high"] < ref[["open", "close"]].max(axis=1))
        | (ref["low"] > ref[["open", "close"]].min(axis=1))
    ).to_numpy()
    for col in ("open", "high", "low"):
        np.testing.assert_array_equal(
            getattr(table, col)[untouched], ref[col].to_numpy()[untouched]
        )

    # after repair: no NaN, every bar encloses its open and close
    for col in ("open", "high", "low", "close"):
        assert np.isfinite(getattr(table, col)).all()
    assert (table.high >= np.maximum(table.open, table.close)).all()
    assert (table.low <= np.minimum(table.open, table.close)).all()
    # BHF 2017-07-26 has only a close: the bar collapses to it
    row = (table.sym == table.symbols.index("BHF")) & (table.dates == np.datetime64("2017-07-26"))
    assert row.sum() == 1
    for col in ("open", "high", "low"):
        assert getattr(table, col)[row][0] == table.close[row][0] == 69.0842
    # DHR 2015-07-17: open missing, high/low present -> open := close, range kept
    row = (table.sym == table.symbols.index("DHR")) & (table.dates == np.datetime64("2015-07-17"))
    assert (table.open[row], table.high[row], table.low[row]) == (88.72, 88.76, 88.24)


@needs_sp500
def test_full_panel_has_the_470_complete_tickers(table: DailyTable, frame: pd.DataFrame) -> None:
    matrix = daily_matrix(table)
    counts = frame.groupby("Name").size()
    complete = sorted(counts[counts == frame["date"].nunique()].index.tolist())
    assert len(complete) == 470
    assert matrix.symbols == complete
    assert matrix.close.shape == (1259, 470) == matrix.volume.shape
    pivot = frame.pivot(index="date", columns="Name", values="close")[complete]
    np.testing.assert_array_equal(matrix.close, pivot.to_numpy())
    np.testing.assert_array_equal(matrix.dates, pd.to_datetime(pivot.index).to_numpy("M8[D]"))


@needs_sp500
def test_panel_window_first_n_days_and_stocks(table: DailyTable, frame: pd.DataFrame) -> None:
    matrix = daily_matrix(table, n_stocks=32, start="2014-01-01", n_days=768)
    dates = np.sort(frame["date"].unique())
    window = dates[dates >= "2014-01-01"][:768]
    sub = frame[frame["date"].isin(window)]
    counts = sub.groupby("Name").size()
    expected = sorted(counts[counts == len(window)].index.tolist())[:32]
    assert matrix.symbols == expected
    assert (matrix.n_days, matrix.n_stocks) == (768, 32)
    assert str(matrix.dates[0]) == window[0] == "2014-01-02"
    assert str(matrix.dates[-1]) == window[-1]
    ref = sub.pivot(index="date", columns="Name", values="volume")[expected]
    np.testing.assert_array_equal(matrix.volume, ref.to_numpy(dtype=float))


@needs_sp500
def test_panel_explicit_symbols_and_errors(table: DailyTable) -> None:
    matrix = daily_matrix(table, symbols=["msft", "AAPL"], start="2016-01-01", end="2016-02-01")
    assert matrix.symbols == ["AAPL", "MSFT"]
    assert str(matrix.dates[0]) == "2016-01-04" and str(matrix.dates[-1]) == "2016-01-29"
    with pytest.raises(ValueError, match="only 470 stocks"):
        daily_matrix(table, n_stocks=471)
    with pytest.raises(ValueError, match="GOOG"):
        daily_matrix(table, symbols=["GOOG"])  # listed in 2014: 975 of 1259 days
    with pytest.raises(ValueError, match="not in the data"):
        daily_matrix(table, symbols=["NOPE"])
    with pytest.raises(ValueError, match="trading days"):
        daily_matrix(table, start="2018-01-01", n_days=100)


@needs_sp500
def test_select_end_is_exclusive(table: DailyTable) -> None:
    jan = table.select(["AAPL"], start="2014-01-02", end="2014-02-01")
    assert jan.symbols == ["AAPL"]
    assert str(jan.dates.min()) == "2014-01-02" and str(jan.dates.max()) == "2014-01-31"
    assert len(jan) == 21  # NYSE sessions in January 2014


@needs_sp500
def test_daily_source_bars_dst_aware_in_date_symbol_order() -> None:
    src = DailySource(SP500, symbols=["AAPL", "MSFT", "XOM"], start="2013-06-28", end="2014-01-01")
    chunks = list(src.chunks())
    assert all(c.dtype == RECORD_DTYPE and len(c) <= CHUNK_RECORDS for c in chunks)
    bars = np.concatenate(chunks)
    assert src.symbols == ["AAPL", "MSFT", "XOM"]
    assert (bars["kind"] == KIND_BAR).all()
    assert (np.diff(bars["ts"]) >= 0).all()
    # within a day, symbols in index order
    same_day = np.diff(bars["ts"]) == 0
    assert (np.diff(bars["sym"])[same_day] > 0).all()
    expected_ts = [
        pd.Timestamp(f"{d} 16:00", tz="America/New_York").value
        for d in ("2013-07-01", "2013-12-02")
    ]
    summer = bars[bars["ts"] == expected_ts[0]]
    winter = bars[bars["ts"] == expected_ts[1]]
    assert len(summer) == len(winter) == 3
    assert pd.Timestamp(expected_ts[0], tz="UTC").hour == 20  # EDT
    assert pd.Timestamp(expected_ts[1], tz="UTC").hour == 21  # EST
    aapl = src.table.select(["AAPL"])
    first = bars[bars["sym"] == 0][0]
    assert (first["f0"], first["f1"], first["f2"], first["f3"], first["f4"]) == (
        aapl.open[0],
        aapl.high[0],
        aapl.low[0],
        aapl.close[0],
        aapl.volume[0],
    )
    assert str(aapl.dates[0]) == "2013-06-28"


def test_bar_close_ns_matches_pandas() -> None:
    days = np.array(["2013-03-08", "2013-03-11", "2013-11-01", "2013-11-04"], dtype="M8[D]")
    expected = [pd.Timestamp(f"{d} 16:00", tz="America/New_York").value for d in days.astype(str)]
    np.testing.assert_array_equal(bar_close_ns(days), expected)


# ---------------------------------------------------------------- policy on a crafted file

CRAFTED = """date,open,high,low,close,volume,Name
2020-01-02,10,11,9,10.5,100,AAA
2020-01-03,,,,10.2,0,AAA
2020-01-06,10.4,10.3,10.1,10.6,200,AAA
2020-01-07,10.6,10.9,10.7,10.5,300,AAA
2020-01-08,10.5,11,10,nan,300,AAA
2020-01-09,10.5,11,10,-1,300,AAA
2020-01-10,10.5,11,10,10.8,-5,AAA
2020-01-10,10.5,11,10,10.9,5,AAA
2020-01-02,20,,19,20.5,100,BBB
2020-13-45,20,21,19,20.5,100,BBB
2020-01-03,20,21,19
2020-01-03,20,21,oops,20.5,100,BBB
2020-01-06,20,21,19,20.5,100,
2020-01-07,20,21,19,20.5,100,BBB
"""


def _write(tmp_path: Path, text: str, name: str = "d.csv", gz: bool = False) -> Path:
    path = tmp_path / (name + (".gz" if gz else ""))
    data = text.replace("\n", "\r\n").encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize("gz", [False, True])
def test_nan_policy_on_crafted_rows(tmp_path: Path, gz: bool) -> None:
    t = load_daily(_write(tmp_path, CRAFTED, gz=gz))
    assert t.skipped.counts == {
        "malformed_row": 3,  # bad date, too few fields, 'oops'
        "missing_symbol": 1,
        "bad_close": 2,  # nan, -1
        "duplicate_date": 1,  # AAA 2020-01-10 second row
    }
    assert t.repaired.counts == {
        "missing_ohlc": 2,  # AAA 01-03 (only close), BBB 01-02 (no high)
        "inconsistent_ohlc": 2,  # AAA 01-06 high < close, 01-07 low > close
        "bad_volume": 1,  # AAA 01-10 volume -5
    }
    assert t.symbols == ["AAA", "BBB"]
    frame = pd.DataFrame(
        {
            "sym": t.sym,
            "date": t.dates.astype(str),
            "o": t.open,
            "h": t.high,
            "l": t.low,
            "c": t.close,
            "v": t.volume,
        }
    ).set_index(["sym", "date"])
    assert frame.loc[(0, "2020-01-03")].tolist() == [10.2, 10.2, 10.2, 10.2, 0.0]
    assert frame.loc[(0, "2020-01-06")].tolist() == [10.4, 10.6, 10.1, 10.6, 200.0]
    assert frame.loc[(0, "2020-01-07")].tolist() == [10.6, 10.9, 10.5, 10.5, 300.0]
    assert frame.loc[(0, "2020-01-10")].tolist() == [10.5, 11.0, 10.0, 10.8, 0.0]
    assert frame.loc[(1, "2020-01-02")].tolist() == [20.0, 20.5, 19.0, 20.5, 100.0]
    assert len(t) == 7


def test_plain_and_gzip_give_the_same_table(tmp_path: Path) -> None:
    a = load_daily(_write(tmp_path, CRAFTED, "a.csv"))
    b = load_daily(_write(tmp_path, CRAFTED, "b.csv", gz=True))
    for col in ("dates", "sym", "open", "high", "low", "close", "volume"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col))


def test_clean_file_takes_fast_path_and_column_order_is_free(tmp_path: Path) -> None:
    text = (
        "Name,date,close,open,low,high,volume\n"
        "ZZ,2021-05-03,5,4,3.5,6,10\n"
        "YY,2021-05-03,7,7,7,7,0\n"
    )
    t = load_daily(_write(tmp_path, text))
    assert t.symbols == ["YY", "ZZ"]
    assert t.skipped.counts == {} and t.repaired.counts == {}
    assert (t.open[1], t.high[1], t.low[1], t.close[1]) == (4, 6, 3.5, 5)


def test_missing_file_and_wrong_header_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not found") as err:
        load_daily(tmp_path / "nope.csv")
    assert "\n" not in str(err.value)
    bad = _write(tmp_path, "ts,symbol,price,size\n1,A,1,1\n", "ticks.csv")
    with pytest.raises(ValueError, match="lacks column 'date'") as err:
        load_daily(bad)
    assert "\n" not in str(err.value)


_TWO_SYMBOLS = (
    "Name,date,open,high,low,close,volume\n"
    "AAA,2021-05-03,4,6,3.5,5,10\n"
    "BBB,2021-05-03,7,7,7,7,0\n"
    "AAA,2021-05-04,5,6,4.5,5.5,12\n"
    "BBB,2021-05-04,7,8,6,-1,3\n"
)


def _kept_rows(daily: ModuleType) -> tuple[np.ndarray, ...] | None:
    kept = daily._last_fast_parse
    return None if kept is None else kept[1]


def _columns(t: DailyTable) -> list[np.ndarray]:
    return [t.dates, t.sym, t.open, t.high, t.low, t.close, t.volume]


def test_a_second_read_of_a_file_reuses_its_parse_and_equals_a_fresh_one(
        tmp_path: Path) -> None:
    """A replay with --start reads its file twice (the warm-up's look back, the replay):
    the second read skips the parse, and gives what a fresh parse gives, counts included."""
    import feeds.daily as daily

    path = _write(tmp_path, _TWO_SYMBOLS, gz=True)
    load_daily(path, ["AAA"])
    assert daily._last_fast_parse is not None
    kept = daily._last_fast_parse[1]
    again = load_daily(path, ["AAA", "BBB"], start="2021-05-03")
    assert daily._last_fast_parse[1] is kept  # not parsed again
    daily._last_fast_parse = None
    fresh = load_daily(path, ["AAA", "BBB"], start="2021-05-03")
    assert _kept_rows(daily) is not kept  # parsed: nothing was kept
    for a, b in zip(_columns(again), _columns(fresh), strict=True):
        np.testing.assert_array_equal(a, b)
    assert again.skipped.counts == fresh.skipped.counts == {"bad_close": 1}
    assert again.symbols == fresh.symbols == ["AAA", "BBB"]
    with pytest.raises(ValueError, match="read-only"):
        kept[5][0] = 99.0  # the kept rows: no reader can change the next one's
    again.close[0] = 99.0  # a table's own columns are copies
    assert load_daily(path, ["AAA", "BBB"]).close[0] == 5.0


def test_a_file_rewritten_with_the_same_size_and_times_is_read_anew(tmp_path: Path) -> None:
    """Within the clock's granularity a rewrite keeps the size and the time stamps: only
    the contents can tell the kept parse is stale."""
    import os

    path = _write(tmp_path, _TWO_SYMBOLS)
    st = os.stat(path)
    assert load_daily(path).close.tolist() == [5.0, 5.5, 7.0]
    path.write_bytes(path.read_bytes().replace(b",5.5,", b",6.5,"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns
    assert load_daily(path).close.tolist() == [5.0, 6.5, 7.0]


def test_malformed_rows_are_counted_at_every_read(tmp_path: Path) -> None:
    path = _write(tmp_path, CRAFTED)
    first, second = load_daily(path), load_daily(path)
    assert first.skipped.counts == second.skipped.counts
    assert second.skipped.counts["malformed_row"] == 3
    for a, b in zip(_columns(first), _columns(second), strict=True):
        np.testing.assert_array_equal(a, b)
