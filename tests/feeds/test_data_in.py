"""Data in: epoch units, ISO times with and without offset, Yahoo daily CSVs, Parquet,
--strict, and warnings that count what they skipped (issue 25, part 3).

References are pandas' own conversions (pd.Timestamp, tz_localize, read_csv), not ours.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import run_engine
from feeds import tick_csv
from feeds.daily import DailySource
from feeds.records import KIND_BAR
from feeds.sources import detect_format, open_source, open_sources
from feeds.tick_csv import TickCsvSource

T0 = pd.Timestamp("2024-01-02T14:30:00Z")


def _all(src: object) -> np.ndarray:
    chunks = list(src.chunks())  # type: ignore[attr-defined]
    return np.concatenate(chunks) if chunks else np.zeros(0)


def _ticks(path: Path, stamps: list[str], price: float = 10.0) -> Path:
    rows = [f"{t},AAA,{price + i * 0.01:.2f},5" for i, t in enumerate(stamps)]
    path.write_text("ts,symbol,price,size\n" + "\n".join(rows) + "\n")
    return path


SCALE = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_each_epoch_unit_is_detected_by_magnitude(tmp_path: Path, unit: str) -> None:
    secs = [int(T0.timestamp()) + i for i in range(5)]
    path = _ticks(tmp_path / "t.csv", [str(s * SCALE[unit]) for s in secs])
    want = [pd.Timestamp(s * SCALE[unit], unit=unit).value for s in secs]
    assert _all(TickCsvSource(path))["ts"].tolist() == want
    # the same file read with the unit given
    assert _all(TickCsvSource(path, ts_unit=unit))["ts"].tolist() == want


def test_fractional_epoch_seconds_are_exact(tmp_path: Path) -> None:
    path = _ticks(tmp_path / "t.csv", ["1704205800.123456789", "1704205801.5"])
    got = _all(TickCsvSource(path))["ts"].tolist()
    assert got == [pd.Timestamp("2024-01-02T14:30:00.123456789Z").value,
                   pd.Timestamp("2024-01-02T14:30:01.5Z").value]


def test_mixed_magnitudes_are_counted_not_misread(tmp_path: Path) -> None:
    s0 = int(T0.timestamp())
    stamps = [str(s0), str(s0 + 1), str((s0 + 2) * 1000), str(s0 + 3)]  # one ms among s
    src = TickCsvSource(_ticks(tmp_path / "t.csv", stamps))
    got = _all(src)
    assert got["ts"].tolist() == [pd.Timestamp(s, unit="s").value for s in (s0, s0 + 1, s0 + 3)]
    assert src.skipped.counts == {"mixed_ts_unit": 1}
    # below 1e8 every unit is 1970-1973: read as ns, the engine's unit (as before)
    assert _all(TickCsvSource(_ticks(tmp_path / "n.csv", ["5", "6"])))["ts"].tolist() == [5, 6]


def test_epoch_millisecond_replay_is_not_1970(tmp_path: Path) -> None:
    ms0 = int(T0.timestamp()) * 1000
    path = _ticks(tmp_path / "t.csv", [str(ms0 + 1000 * i) for i in range(600)])
    out = tmp_path / "r.json"
    assert run_engine.main(["replay", "--data", str(path), "--device", "cpu",
                            "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["first_time"].startswith("2024-01-02T14:3")
    assert rep["bars"] == 10  # ten minutes of one-second ticks, one-minute bars


def test_naive_iso_needs_tz_and_offsets_ignore_it(tmp_path: Path) -> None:
    naive = ["2024-07-01T09:30:00", "2024-07-01 09:30:01.25"]
    path = _ticks(tmp_path / "naive.csv", naive)
    with pytest.raises(ValueError, match="--tz") as err:
        TickCsvSource(path)
    assert "\n" not in str(err.value)
    got = _all(TickCsvSource(path, tz="America/New_York"))["ts"].tolist()
    assert got == [pd.Timestamp(t).tz_localize("America/New_York").value for t in naive]
    aware = ["2024-07-01T09:30:00-04:00", "2024-07-01T13:30:01Z"]
    got = _all(TickCsvSource(_ticks(tmp_path / "aware.csv", aware), tz="Asia/Tokyo"))["ts"]
    assert got.tolist() == [pd.Timestamp(t).value for t in aware]
    # through the command: one line naming --tz, exit 2
    assert run_engine.main(["replay", "--data", str(path), "--device", "cpu"]) == 2


def test_naive_time_after_good_rows_is_an_error_too(tmp_path: Path) -> None:
    path = _ticks(tmp_path / "t.csv", ["2024-07-01T09:30:00Z", "2024-07-01T09:30:01"])
    with pytest.raises(ValueError, match="--tz"):
        _all(TickCsvSource(path))


YAHOO = """Date,Open,High,Low,Close,Adj Close,Volume
2024-01-02,187.149994,188.440002,183.889999,185.639999,184.734970,82488700
2024-01-03,184.220001,185.880005,183.429993,184.250000,183.351761,58414500
2024-01-04,null,null,null,null,null,null
2024-01-05,181.990005,182.759995,180.169998,181.179993,180.296738,62303300
"""


def test_yahoo_daily_csv_is_named_by_its_file_or_symbols(tmp_path: Path) -> None:
    path = tmp_path / "aapl.csv"
    path.write_text(YAHOO)
    assert detect_format(path) == "daily"
    src = open_source(path)
    assert isinstance(src, DailySource) and src.symbols == ["AAPL"]
    got = _all(src)
    ref = pd.read_csv(path, na_values=["null"]).dropna()
    assert got["kind"].tolist() == [KIND_BAR] * len(ref)
    np.testing.assert_array_equal(got["f0"], ref["Open"].to_numpy())
    np.testing.assert_array_equal(got["f3"], ref["Close"].to_numpy())  # not Adj Close
    np.testing.assert_array_equal(got["f4"], ref["Volume"].to_numpy())
    closes = pd.to_datetime(ref["Date"]).dt.tz_localize("America/New_York") + pd.Timedelta(
        hours=16)
    assert got["ts"].tolist() == [t.value for t in closes]
    assert src.skipped.counts == {"bad_close": 1}
    assert open_sources([path], symbols=["MSFT"]).symbols == ["MSFT"]


def test_strict_makes_a_skipped_row_an_error(tmp_path: Path) -> None:
    s0 = int(T0.timestamp())
    path = _ticks(tmp_path / "t.csv", [str(s0), "soon", str(s0 + 2)])
    assert len(_all(TickCsvSource(path))) == 2
    with pytest.raises(ValueError, match="--strict") as err:
        _all(TickCsvSource(path, strict=True))
    assert "\n" not in str(err.value) and "bad_ts" in str(err.value)
    assert run_engine.main(["replay", "--data", str(path), "--strict", "--device", "cpu"]) == 2
    daily = tmp_path / "spy.csv"
    daily.write_text(YAHOO)
    with pytest.raises(ValueError, match="bad_close"):
        open_source(daily, strict=True)


def test_warnings_count_every_skipped_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(tick_csv, "BLOCK_BYTES", 4096)  # many blocks, as a big file has
    s0 = int(T0.timestamp())
    stamps = [str(s0 + i) if i % 3 else "junk" for i in range(9000)]
    with caplog.at_level(logging.WARNING):
        got = _all(TickCsvSource(_ticks(tmp_path / "t.csv", stamps)))
    assert len(got) == 6000
    warned = [r.getMessage() for r in caplog.records if "bad_ts" in r.getMessage()]
    assert len(warned) == 1 and "skipped 3000 record(s)" in warned[0], warned


def _parquet(df: pd.DataFrame, path: Path) -> Path:
    pytest.importorskip("pyarrow")
    df.to_parquet(path, index=False)
    return path


def test_parquet_ticks_round_trip(tmp_path: Path) -> None:
    n = 2000
    rng = np.random.default_rng(3)
    ts = T0 + pd.to_timedelta(np.sort(rng.integers(0, 3_600_000, n)), unit="ms")
    df = pd.DataFrame({"ts": ts, "symbol": rng.choice(["AAA", "BBB"], n),
                       "price": rng.uniform(10, 20, n).round(2), "size": 1 + rng.integers(0, 9, n)})
    csv = tmp_path / "t.csv"
    df.assign(ts=df["ts"].map(lambda t: t.isoformat())).to_csv(csv, index=False)
    want = _all(TickCsvSource(csv))
    for name, frame in (("aware", df),
                        ("epoch_ms", df.assign(ts=(df["ts"] - pd.Timestamp(0, tz="UTC"))
                                               // pd.Timedelta(1, "ms"))),
                        ("iso", df.assign(ts=df["ts"].map(lambda t: t.isoformat())))):
        src = open_source(_parquet(frame, tmp_path / f"{name}.parquet"))
        assert src.symbols == ["AAA", "BBB"]
        got = _all(src)
        for field in ("ts", "sym", "kind", "f0", "f1"):
            np.testing.assert_array_equal(got[field], want[field], err_msg=f"{name} {field}")
    naive = _parquet(df.assign(ts=df["ts"].dt.tz_convert("America/New_York")
                               .dt.tz_localize(None)), tmp_path / "naive.parquet")
    with pytest.raises(ValueError, match="--tz"):
        open_source(naive)
    got = _all(open_source(naive, tz="America/New_York"))
    np.testing.assert_array_equal(got["ts"], want["ts"])


def test_parquet_daily_bars_round_trip(tmp_path: Path) -> None:
    from tests.helpers import daily_csv

    csv = daily_csv(tmp_path / "d.csv", 60, seed=4)
    df = pd.read_csv(csv)
    df["date"] = pd.to_datetime(df["date"]).dt.date
    src = open_source(_parquet(df, tmp_path / "d.parquet"))
    want = _all(DailySource(csv))
    got = _all(src)
    assert src.symbols == ["AAA", "BBB", "CCC"]
    for field in ("ts", "sym", "kind", "f0", "f1", "f2", "f3", "f4"):
        np.testing.assert_array_equal(got[field], want[field], err_msg=field)


def test_parquet_replay_equals_the_csv_replay(tmp_path: Path) -> None:
    from tests.helpers import daily_csv

    csv = daily_csv(tmp_path / "d.csv", 80, seed=5)
    pq = _parquet(pd.read_csv(csv), tmp_path / "d.parquet")
    reports = []
    for path in (csv, pq):
        out = tmp_path / f"{path.suffix[1:]}.json"
        assert run_engine.main(["replay", "--data", str(path), "--strategy", "sma-cross:5,25",
                                "--device", "cpu", "--json", str(out)]) == 0
        reports.append(json.loads(out.read_text()))
    for key in ("final_equity", "fills", "trades", "roi_buy_hold", "bars"):
        assert reports[0][key] == reports[1][key], key


JUNK = st.text(alphabet=st.sampled_from(list("0123456789,.-+:TZeE aA\t\"x")), max_size=40)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(JUNK, max_size=30))
def test_junk_rows_are_counted_or_one_line_errors(tmp_path: Path, rows: list[str]) -> None:
    path = tmp_path / "junk.csv"
    path.write_text("ts,symbol,price,size\n" + "\n".join(rows) + "\n")
    try:
        src = TickCsvSource(path)
        got = _all(src)
    except ValueError as exc:  # unsorted, naive time without --tz: one line
        assert "\n" not in str(exc)
        return
    data_lines = [r for r in rows if r.strip() and "\n" not in r and "\r" not in r]
    assert len(got) + src.skipped.total == len(data_lines)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(JUNK, min_size=1, max_size=12))
def test_junk_through_replay_is_exit_0_or_2(tmp_path: Path, rows: list[str],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The command never shows a traceback: a run (0) or one line (2)."""
    path = tmp_path / "junk.csv"
    path.write_text("ts,symbol,price,size\n" + "\n".join(rows) + "\n")
    rc = run_engine.main(["replay", "--data", str(path), "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc in (0, 2) and "Traceback" not in err
    if rc == 2:
        assert len([x for x in err.splitlines() if x.startswith("error")]) == 1
