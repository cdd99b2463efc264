"""File sources (LEAN ticks, tick CSV), the k-way merge and path dispatch.

LEAN numbers are checked against pandas reading the same zips, and against the counts in the
data's SOURCE.md.
"""

from __future__ import annotations

import gc
import gzip
import io
import tracemalloc
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import feeds.lean as lean
import feeds.tick_csv as tick_csv
from feeds.daily import DailySource
from feeds.datadir import data_dir
from feeds.lean import LeanSource, contract_symbol
from feeds.merge import merge_chunk_iters, merge_sources
from feeds.records import (
    CHUNK_RECORDS,
    KIND_QUOTE,
    KIND_TRADE,
    RECORD_DTYPE,
    Source,
    local_ms_to_utc_ns,
    ns_to_local_ms,
)
from feeds.sources import detect_format, open_source, open_sources, parse_date
from feeds.tick_csv import TickCsvSource, parse_iso_ns

LEAN_ROOT = data_dir() / "lean_ticks_2013-10"
BAC = LEAN_ROOT / "equity" / "usa" / "tick" / "bac"
SPY = LEAN_ROOT / "equity" / "usa" / "tick" / "spy"
GC = LEAN_ROOT / "future" / "comex" / "tick" / "gc"
needs_lean = pytest.mark.skipif(not BAC.is_dir(), reason=f"real data absent: {LEAN_ROOT}")


def _all(src: Source) -> np.ndarray:
    chunks = list(src.chunks())
    for c in chunks:
        assert c.dtype == RECORD_DTYPE and len(c) <= CHUNK_RECORDS
    return np.concatenate(chunks) if chunks else np.zeros(0, RECORD_DTYPE)


def _pandas_day(zip_path: Path, entry: str | None = None) -> pd.DataFrame:
    """A LEAN CSV entry as pandas reads it; venue and condition columns kept as text."""
    with zipfile.ZipFile(zip_path) as zf:
        name = entry or zf.namelist()[0]
        data = zf.read(name)
    text_cols = {3: str, 4: str} if zip_path.name.endswith("_trade.zip") else {5: str, 6: str}
    return pd.read_csv(io.BytesIO(data), header=None, dtype=text_cols)


def _ny_ms_to_ns(day: str, ms: pd.Series) -> np.ndarray:
    local = pd.Timestamp(day) + pd.to_timedelta(ms, unit="ms")
    utc = local.dt.tz_localize("America/New_York").dt.tz_convert("UTC")
    return utc.dt.as_unit("ns").astype("int64").to_numpy()


# ---------------------------------------------------------------- LEAN equities


@needs_lean
def test_bac_trades_one_day_match_pandas() -> None:
    src = LeanSource(BAC / "20131008_trade.zip")
    got = _all(src)
    ref = _pandas_day(BAC / "20131008_trade.zip")
    assert len(got) == len(ref) == 125_872  # SOURCE.md
    assert src.symbols == ["BAC"] and (got["sym"] == 0).all() and (got["kind"] == KIND_TRADE).all()
    np.testing.assert_array_equal(got["ts"], _ny_ms_to_ns("2013-10-08", ref[0]))
    np.testing.assert_array_equal(got["f0"], ref[1].to_numpy() / 10_000)
    np.testing.assert_array_equal(got["f1"], ref[2].to_numpy(dtype=float))
    # first row of the file: 21548450,138000,1000 -> 05:59:08.450 EDT, $13.80
    assert pd.Timestamp(int(got["ts"][0]), tz="UTC") == pd.Timestamp("2013-10-08 09:59:08.450Z")
    assert (got["f0"][0], got["f1"][0]) == (13.80, 1000.0)
    assert src.skipped.counts == {}


def test_new_york_ms_conversion_is_dst_aware() -> None:
    day = pd.Timestamp("2013-10-08").date()
    assert (
        local_ms_to_utc_ns(day, np.array([34_200_000]))[0]
        == pd.Timestamp("2013-10-08 13:30Z").value
    )  # 09:30 EDT
    winter = pd.Timestamp("2013-12-02").date()
    assert (
        local_ms_to_utc_ns(winter, np.array([34_200_000.0]))[0]
        == pd.Timestamp("2013-12-02 14:30Z").value
    )  # 09:30 EST
    # the day clocks go back (3 Nov 2013): 00:30 EDT, 03:00 EST, 12:00 EST
    fall = pd.Timestamp("2013-11-03").date()
    ms = np.array([1_800_000, 10_800_000, 43_200_000])
    expected = (
        (pd.Timestamp("2013-11-03") + pd.to_timedelta(ms, unit="ms"))
        .tz_localize("America/New_York", ambiguous=np.array([True, False, False]))
        .tz_convert("UTC")
        .as_unit("ns")
        .asi8
    )
    np.testing.assert_array_equal(local_ms_to_utc_ns(fall, ms), expected)
    days, back = ns_to_local_ms(local_ms_to_utc_ns(fall, ms))
    np.testing.assert_array_equal(back, ms)
    assert {str(d) for d in days} == {"2013-11-03"}


@needs_lean
def test_bac_quotes_pair_bid_and_ask_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    zip_path = BAC / "20131008_quote.zip"
    ref = _pandas_day(zip_path)
    assert len(ref) == 576_096
    got = _all(LeanSource(zip_path, kinds=("quote",)))
    assert len(got) == len(ref) // 2 == 288_048
    assert (got["kind"] == KIND_QUOTE).all()
    bids, asks = ref.iloc[0::2], ref.iloc[1::2]
    assert (bids[3] == 0).all() and (asks[1] == 0).all()  # the file alternates bid, ask
    np.testing.assert_array_equal(got["ts"], _ny_ms_to_ns("2013-10-08", bids[0]))
    np.testing.assert_array_equal(got["f0"], bids[1].to_numpy() / 10_000)
    np.testing.assert_array_equal(got["f1"], bids[2].to_numpy(dtype=float))
    np.testing.assert_array_equal(got["f2"], asks[3].to_numpy() / 10_000)
    np.testing.assert_array_equal(got["f3"], asks[4].to_numpy(dtype=float))
    assert (got["f0"] <= got["f2"]).all()  # SOURCE.md: no crossed pair that day
    # a pair split across parse blocks still pairs up
    monkeypatch.setattr(lean, "BLOCK_LINES", 99_999)
    again = _all(LeanSource(zip_path, kinds=("quote",)))
    assert again.tobytes() == got.tobytes()


@needs_lean
def test_regular_hours_start_end_and_suspicious() -> None:
    ref = _pandas_day(BAC / "20131008_trade.zip")
    regular = ((ref[0] >= 34_200_000) & (ref[0] < 57_600_000)).sum()
    got = _all(LeanSource(BAC, regular_hours_only=True, start="2013-10-08", end="2013-10-09"))
    assert len(got) == regular
    local = pd.to_datetime(got["ts"], utc=True).tz_convert("America/New_York")
    assert local.min() >= pd.Timestamp("2013-10-08 09:30", tz="America/New_York")
    assert len(_all(LeanSource(BAC, start="2013-10-09", end="2013-10-10"))) == 122_832

    spy_day = SPY / "20131010_trade.zip"
    flagged = int((_pandas_day(spy_day)[5] == 1).sum())
    assert flagged == 10  # SOURCE.md
    src = LeanSource(spy_day, drop_suspicious=True)
    assert len(_all(src)) == 460_032 - flagged
    assert src.skipped.counts == {"suspicious": flagged}


@needs_lean
def test_spy_streams_in_bounded_chunks_without_per_tick_objects() -> None:
    src = LeanSource(SPY, start="2013-10-10", end="2013-10-11")  # the biggest day
    gc.collect()
    tracked_before = len(gc.get_objects())
    tracemalloc.start()
    n, last, largest, most_objects = 0, np.iinfo(np.int64).min, 0, 0
    for chunk in src.chunks():
        assert isinstance(chunk, np.ndarray) and chunk.dtype == RECORD_DTYPE
        assert chunk["ts"][0] >= last and (np.diff(chunk["ts"]) >= 0).all()
        last = int(chunk["ts"][-1])
        largest = max(largest, len(chunk))
        n += len(chunk)
        most_objects = max(most_objects, len(gc.get_objects()) - tracked_before)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert n == 460_032  # SOURCE.md
    assert largest <= CHUNK_RECORDS
    assert most_objects < 10_000  # a list of per-tick tuples would add ~460k per day
    assert peak < 150 * 2**20  # one day's text (14 MB) plus a block's arrays


# ---------------------------------------------------------------- LEAN futures


@needs_lean
def test_gold_futures_contracts_utc_times_and_zero_size_prints() -> None:
    parts = []
    for day in ("20131007", "20131008", "20131009"):
        frame = _pandas_day(GC / f"{day}_trade.zip", f"{day}_gc_tick_trade_201312.csv")
        moment = pd.Timestamp(day, tz="UTC") + pd.to_timedelta(frame[0], unit="ms")
        frame["ts"] = moment.dt.as_unit("ns").astype("int64")
        parts.append(frame)
    ref = pd.concat(parts, ignore_index=True)
    assert len(ref) == 156_452  # SOURCE.md
    src = LeanSource(GC, symbols=["gcz13"])
    got = _all(src)
    assert src.symbols == ["GCZ13"] == [contract_symbol("GC", 2013, 12)]
    kept = ref[ref[2] > 0]
    assert src.skipped.counts == {"bad_size": len(ref) - len(kept)}  # zero-quantity prints
    assert len(got) + src.skipped.counts["bad_size"] == 156_452
    np.testing.assert_array_equal(got["ts"], kept["ts"].to_numpy())
    np.testing.assert_array_equal(got["f0"], kept[1].to_numpy())  # USD, not deci-cents
    assert pd.Timestamp(int(got["ts"][0]), tz="UTC") == pd.Timestamp("2013-10-07 00:00:00.276Z")

    every = LeanSource(GC)
    assert "GCZ13" in every.symbols and "GCG14" in every.symbols and len(every.symbols) > 5
    all_gc = _all(every)
    assert (np.diff(all_gc["ts"]) >= 0).all()
    assert (all_gc["sym"] == every.symbols.index("GCZ13")).sum() == len(got)


# ---------------------------------------------------------------- merge


@needs_lean
def test_merge_bac_and_spy_trades_is_time_ordered_and_complete() -> None:
    bac, spy = LeanSource(BAC), LeanSource(SPY)
    merged = open_sources([SPY, BAC])
    assert merged.symbols == ["SPY", "BAC"]
    got = _all(merged)
    assert len(got) == 573_620 + 1_887_460  # SOURCE.md
    assert (np.diff(got["ts"]) >= 0).all()
    # each symbol's own sequence survives the merge unchanged
    np.testing.assert_array_equal(got["f0"][got["sym"] == 1], _all(bac)["f0"])
    np.testing.assert_array_equal(got["ts"][got["sym"] == 0], _all(spy)["ts"])


def _random_source(rng: np.random.Generator, names: list[str], n: int, tag: int) -> Source:
    ts = np.sort(rng.integers(0, n // 3 + 1, n))  # many equal times across sources
    recs = np.zeros(n, dtype=RECORD_DTYPE)
    recs["ts"] = ts
    recs["sym"] = rng.integers(0, len(names), n)
    recs["f4"] = tag  # which source
    recs["f3"] = np.arange(n)  # position within the source

    class Chunked:
        symbols = names
        name = f"random {tag}"

        def chunks(self) -> Iterator[np.ndarray]:
            lo = 0
            while lo < n:
                size = int(rng.integers(0, 400))  # empty chunks too
                yield recs[lo : lo + size]
                lo += size

    return Chunked()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_merge_matches_python_stable_sort(seed: int) -> None:
    rng = np.random.default_rng(seed)
    tables = [["A", "B"], ["B", "C", "D"], ["A"], ["E", "A"]]
    sources = [
        _random_source(rng, names, int(rng.integers(0, 3000)), i) for i, names in enumerate(tables)
    ]
    merged = merge_sources(sources)
    assert merged.symbols == ["A", "B", "C", "D", "E"]
    got = np.concatenate(list(merged.chunks()))
    # reference: Python's sorted() is stable, so ties keep (source, position) order
    rows = []
    for i, src in enumerate(sources):
        for chunk in src.chunks():
            for r in chunk:
                rows.append((int(r["ts"]), i, src.symbols[int(r["sym"])], int(r["f3"])))
    expected = sorted(rows, key=lambda row: row[0])
    assert len(got) == len(expected)
    assert [int(t) for t in got["ts"]] == [e[0] for e in expected]
    assert [int(s) for s in got["f4"]] == [e[1] for e in expected]
    assert [int(p) for p in got["f3"]] == [e[3] for e in expected]
    assert [merged.symbols[int(s)] for s in got["sym"]] == [e[2] for e in expected]


def test_merge_chunks_respect_the_limit() -> None:
    rng = np.random.default_rng(5)
    a, b = (_random_source(rng, ["X"], 5000, i) for i in range(2))
    out = list(merge_chunk_iters([a.chunks(), b.chunks()], limit=100))
    assert all(len(c) <= 100 for c in out) and sum(len(c) for c in out) == 10_000


# ---------------------------------------------------------------- LEAN crafted files


def _lean_zip(root: Path, rel: str, entries: dict[str, str]) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in entries.items():
            zf.writestr(name, text)
    return path


def test_lean_malformed_rows_are_counted_and_skipped(tmp_path: Path) -> None:
    text = "\n".join(
        [
            "34200000,100000,100,P,2000,0",
            "34200001,abc,100,P,2000,0",  # bad number
            "34200002,100100",  # too few fields
            "34200003,0,100,P,2000,0",  # zero price
            "34200004,100200,-5,P,2000,0",  # negative size
            "34100000,100300,100,P,2000,0",  # goes back in time
            "34200005,100400,200,P,2000,1",
        ]
    )
    _lean_zip(tmp_path, "equity/usa/tick/xyz/20240103_trade.zip", {"x.csv": text})
    src = LeanSource(tmp_path)
    got = _all(src)
    assert src.symbols == ["XYZ"]
    assert got["f0"].tolist() == [10.0, 10.04]
    assert got["f1"].tolist() == [100.0, 200.0]
    assert src.skipped.counts == {
        "malformed_row": 2,
        "bad_price": 1,
        "bad_size": 1,
        "ts_backwards": 1,
    }
    # 3 Jan 2024 is winter: 09:30 EST = 14:30 UTC
    assert got["ts"][0] == pd.Timestamp("2024-01-03 14:30Z").value


def test_lean_futures_layout_lone_quote_sides_and_errors(tmp_path: Path) -> None:
    _lean_zip(
        tmp_path,
        "future/cme/tick/es/20240103_trade.zip",
        {
            "20240103_es_tick_trade_202403.csv": "1000,4700.25,2,usa,,0\n3000,4701,1,usa,,0\n",
            "20240103_es_tick_trade_202406.csv": "2000,4750.5,1,usa,,0\n",
        },
    )
    quotes = "\n".join(
        [
            "60000000,100000,300,0,0,P,1,0",
            "60000000,0,0,100100,200,Q,1,0",
            "60000500,100000,400,0,0,P,1,0",  # lone bid (next row has another time)
            "60000600,0,0,100200,100,Q,1,0",  # lone ask
            "60000700,0,0,0,0,Q,1,0",  # empty
        ]
    )
    _lean_zip(tmp_path, "equity/usa/tick/xyz/20240103_quote.zip", {"q.csv": quotes})
    fut = LeanSource(tmp_path / "future")
    assert fut.symbols == ["ESH24", "ESM24"]
    got = _all(fut)
    assert got["sym"].tolist() == [0, 1, 0] and got["f0"].tolist() == [4700.25, 4750.5, 4701.0]
    assert got["ts"][0] == pd.Timestamp("2024-01-03 00:00:01Z").value
    q = LeanSource(tmp_path / "equity", kinds=("quote",))
    rec = _all(q)
    sides = np.stack([rec["f0"], rec["f1"], rec["f2"], rec["f3"]], axis=1).tolist()
    assert sides == [
        [10.0, 300.0, 10.01, 200.0],
        [10.0, 400.0, 0.0, 0.0],
        [0.0, 0.0, 10.02, 100.0],
    ]
    assert q.skipped.counts == {"empty_quote": 1}
    with pytest.raises(ValueError, match="no LEAN"):
        LeanSource(tmp_path / "equity", symbols=["NOPE"])
    with pytest.raises(ValueError, match="unknown LEAN kind"):
        LeanSource(tmp_path, kinds=("bars",))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no LEAN tick zips"):
        LeanSource(empty)


# ---------------------------------------------------------------- tick CSV


def _csv(tmp_path: Path, text: str, name: str = "ticks.csv", gz: bool = False) -> Path:
    path = tmp_path / name
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return path


GOOD_AND_BAD = """ts,symbol,price,size
1704205800000000000,AAA,10.5,100
2024-01-02T14:30:00.5Z,BBB,20.25,50
2024-01-02T09:30:01-05:00,AAA,10.6,200
1704205801000000000,AAA,abc,100
1704205801000000000,AAA,nan,100
1704205801000000000,AAA,-1,100
1704205801000000000,BBB,20,0
yesterday,AAA,10,100
1704205802,AAA

1704205803000000000,,10,100
1704205803000000000,BBB,20.5,inf
1704205804000000000,BBB,20.5,10
"""


@pytest.mark.parametrize("block_bytes", [tick_csv.BLOCK_BYTES, 64])
def test_tick_csv_counts_malformed_rows_by_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block_bytes: int
) -> None:
    monkeypatch.setattr(tick_csv, "BLOCK_BYTES", block_bytes)
    src = TickCsvSource(_csv(tmp_path, GOOD_AND_BAD))
    got = _all(src)
    assert src.symbols == ["AAA", "BBB"]
    assert src.skipped.counts == {
        "bad_number": 1,
        "bad_price": 2,  # nan, -1
        "bad_size": 2,  # 0, inf
        "bad_ts": 1,  # 'yesterday' (an ISO time without offset is an error: test_data_in)
        "wrong_field_count": 1,
        "missing_symbol": 1,
    }
    expected_ts = [
        1704205800000000000,
        pd.Timestamp("2024-01-02T14:30:00.5Z").value,
        pd.Timestamp("2024-01-02T09:30:01-05:00").value,
        1704205804000000000,
    ]
    assert got["ts"].tolist() == expected_ts
    assert got["sym"].tolist() == [0, 1, 0, 1]
    assert got["f0"].tolist() == [10.5, 20.25, 10.6, 20.5]
    assert got["f1"].tolist() == [100, 50, 200, 10]


def test_tick_csv_unsorted_file_is_a_one_line_error(tmp_path: Path) -> None:
    text = "ts,symbol,price,size\n" + "".join(f"{t},A,1,1\n" for t in (5, 6, 6, 4, 7))
    src = TickCsvSource(_csv(tmp_path, text))
    with pytest.raises(ValueError, match=r"ticks\.csv:5: .*sorted") as err:
        _all(src)
    assert "\n" not in str(err.value)


def test_tick_csv_filters_gzip_and_header_errors(tmp_path: Path) -> None:
    # columns in another order, plus one the reader ignores
    rows = "".join(f"{'AB'[t % 2]},{t + 1},{t},{1 + t / 100},x\n" for t in range(3000))
    path = _csv(tmp_path, "symbol,size,ts,price,extra\n" + rows, gz=True, name="t.csv.gz")
    src = TickCsvSource(path, symbols=["b"], start=1000, end=2000)
    got = _all(src)
    assert src.symbols == ["B"] and len(got) == 500 and (got["ts"] % 2 == 1).all()
    np.testing.assert_allclose(got["f0"], 1 + got["ts"] / 100)
    with pytest.raises(ValueError, match="not in the file"):
        TickCsvSource(path, symbols=["C"])
    with pytest.raises(ValueError, match="lacks"):
        TickCsvSource(_csv(tmp_path, "time,sym,px\n1,A,2\n", name="bad.csv"))
    with pytest.raises(ValueError, match="not found"):
        TickCsvSource(tmp_path / "missing.csv")


def test_iso_parsing_matches_pandas() -> None:
    for text in (
        "2024-03-10T06:59:59.123456789Z",
        "2024-03-10 02:30:00+01:00",
        "2013-10-08T09:30:00-04:00",
        "2013-10-08T09:30:00.1-0400",
    ):
        assert parse_iso_ns(text) == pd.Timestamp(text).value
    with pytest.raises(ValueError, match="offset"):
        parse_iso_ns("2024-01-02T10:00:00")


# ---------------------------------------------------------------- dispatch


def test_parse_date_means_new_york_midnight() -> None:
    assert parse_date("2013-10-08") == pd.Timestamp("2013-10-08", tz="America/New_York").value
    assert parse_date("2014-01-02") == pd.Timestamp("2014-01-02 05:00Z").value
    # an inclusive --end date: the midnight that ends it (3 Nov 2013 is 25 hours long)
    assert parse_date("2013-11-03", end_of_day=True) == pd.Timestamp("2013-11-04 05:00Z").value
    assert (
        parse_date("2013-10-08T10:00Z", end_of_day=True) == pd.Timestamp("2013-10-08 10:00Z").value
    )
    assert parse_date("2013-10-08T13:30:00Z") == pd.Timestamp("2013-10-08 13:30Z").value
    assert parse_date("2013-10-08T09:30") == pd.Timestamp("2013-10-08 13:30Z").value
    assert parse_date("1381239000000000000") == 1381239000000000000
    with pytest.raises(ValueError, match="cannot parse time"):
        parse_date("8 Oct 2013")


def test_open_source_dispatch_and_errors(tmp_path: Path) -> None:
    ticks = _csv(tmp_path, "ts,symbol,price,size\n1,A,1,1\n")
    daily = _csv(
        tmp_path, "date,open,high,low,close,volume,Name\n2020-01-02,1,1,1,1,1,A\n", "d.csv"
    )
    assert isinstance(open_source(ticks), TickCsvSource)
    assert isinstance(open_source(daily), DailySource)
    assert detect_format(daily) == "daily" and detect_format(ticks) == "ticks"
    merged = open_sources([ticks, daily])
    assert merged.symbols == ["A"]
    got = _all(merged)
    assert got["kind"].tolist() == [KIND_TRADE, 2]
    other = _csv(tmp_path, "a,b,c\n1,2,3\n", "other.csv")
    (tmp_path / "empty").mkdir()
    for bad, message in (
        (other, "unrecognised market data"),
        (tmp_path / "nope", "not found"),
        (tmp_path, "expected exactly one"),  # a folder of several CSVs: ambiguous
        (tmp_path / "empty", "no LEAN tick zips"),
    ):
        with pytest.raises(ValueError, match=message) as err:
            open_source(bad)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="in none of"):
        open_sources([ticks, daily], symbols=["ZZZ"])


@needs_lean
def test_open_source_on_lean_root_and_symbol_mix() -> None:
    src = open_source(LEAN_ROOT, symbols=["BAC", "GC"], start="2013-10-09", end="2013-10-10")
    assert isinstance(src, LeanSource)
    assert "BAC" in src.symbols and "GCZ13" in src.symbols and "SPY" not in src.symbols
    got = _all(src)
    assert (np.diff(got["ts"]) >= 0).all()
    assert (got["sym"] == src.symbols.index("BAC")).sum() == 122_832
    mixed = open_sources([BAC, GC], symbols=["BAC", "GCZ13"], start="2013-10-09", end="2013-10-10")
    assert mixed.symbols == ["BAC", "GCZ13"]
