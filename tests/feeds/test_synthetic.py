"""The synthetic market: reproducible, realistic enough for the engine, checked with pandas."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from feeds.records import CHUNK_RECORDS, KIND_QUOTE, KIND_TRADE, RECORD_DTYPE, Source
from feeds.synthetic import REGIME_MEAN_REVERT, REGIME_TREND, SyntheticMarket


def _all(market: SyntheticMarket) -> np.ndarray:
    chunks = list(market.chunks())
    assert all(c.dtype == RECORD_DTYPE and 0 < len(c) <= CHUNK_RECORDS for c in chunks)
    return np.concatenate(chunks)


@pytest.fixture(scope="module")
def default_market() -> tuple[SyntheticMarket, np.ndarray]:
    market = SyntheticMarket()
    return market, _all(market)


def test_is_a_source_with_exact_tick_count(
    default_market: tuple[SyntheticMarket, np.ndarray],
) -> None:
    market, ticks = default_market
    assert isinstance(market, Source)
    assert len(ticks) == 200_000
    assert market.symbols == [f"SYN{i:03d}" for i in range(10)]
    assert (ticks["kind"] == KIND_TRADE).all()
    assert set(np.unique(ticks["sym"]).tolist()) == set(range(10))


def test_same_seed_same_market_other_seed_differs() -> None:
    a = _all(SyntheticMarket(n_symbols=7, n_ticks=70_000, seed=42, with_quotes=True))
    b = _all(SyntheticMarket(n_symbols=7, n_ticks=70_000, seed=42, with_quotes=True))
    c = _all(SyntheticMarket(n_symbols=7, n_ticks=70_000, seed=43, with_quotes=True))
    assert a.tobytes() == b.tobytes()
    assert len(a) == len(c) and not np.array_equal(a["f0"], c["f0"])
    ra = SyntheticMarket(n_symbols=7, n_ticks=70_000, seed=42, with_quotes=True).regimes()
    assert len(ra) == len(a)
    # prefix property: a shorter run with the same seed is the start of the longer one
    short = _all(SyntheticMarket(n_symbols=7, n_ticks=1_000, seed=42, with_quotes=True))
    assert short.tobytes() == a[: len(short)].tobytes()


def test_lag1_autocorrelation_of_trade_price_changes_is_negative(
    default_market: tuple[SyntheticMarket, np.ndarray],
) -> None:
    _, ticks = default_market
    for s in range(10):
        prices = ticks["f0"][ticks["sym"] == s]
        d = np.diff(prices)
        rho_numpy = np.corrcoef(d[:-1], d[1:])[0, 1]
        rho_pandas = pd.Series(prices).diff().autocorr(lag=1)
        assert rho_numpy == pytest.approx(rho_pandas, abs=1e-12)
        assert rho_pandas < -0.05, (s, rho_pandas)


def test_prices_sizes_and_session_times(default_market: tuple[SyntheticMarket, np.ndarray]) -> None:
    _, ticks = default_market
    assert (ticks["f0"] >= 0.01).all()
    cents = ticks["f0"] * 100
    np.testing.assert_allclose(cents, np.round(cents), atol=1e-6)
    assert (ticks["f1"] >= 100).all() and (ticks["f1"] % 100 == 0).all()
    assert (np.diff(ticks["ts"]) >= 0).all()
    local = pd.to_datetime(ticks["ts"], utc=True).tz_convert("America/New_York")
    minutes = local.hour * 60 + local.minute
    assert (minutes >= 9 * 60 + 30).all() and (minutes < 16 * 60).all()
    assert (local.day_of_week < 5).all()
    assert str(local[0].date()) == "2024-01-02"


def test_several_hundred_minute_bars_per_symbol(
    default_market: tuple[SyntheticMarket, np.ndarray],
) -> None:
    _, ticks = default_market
    frame = pd.DataFrame(
        {"minute": pd.to_datetime(ticks["ts"], utc=True).floor("min"), "sym": ticks["sym"]}
    )
    bars = frame.groupby("sym")["minute"].nunique()
    assert len(bars) == 10 and bars.min() >= 300, bars.to_dict()
    # within a session no symbol goes quiet for long: the rarest trades every ~4 s on average
    ts = pd.Series(ticks["ts"])
    same_day = pd.to_datetime(ticks["ts"], utc=True).tz_convert("America/New_York").date
    frame["day"], frame["ts"] = same_day, ts
    gap_s = frame.groupby(["sym", "day"])["ts"].diff().dropna() / 1e9
    assert gap_s.max() < 120, gap_s.max()


def test_trending_regimes_drift_more_than_mean_reverting(
    default_market: tuple[SyntheticMarket, np.ndarray],
) -> None:
    market, ticks = default_market
    labels = market.regimes()
    assert len(labels) == len(ticks)
    assert set(np.unique(labels).tolist()) == {REGIME_TREND, REGIME_MEAN_REVERT}
    drift: dict[int, list[float]] = {REGIME_TREND: [], REGIME_MEAN_REVERT: []}
    for s in range(10):
        mine = ticks["sym"] == s
        logp, lab, sec = np.log(ticks["f0"][mine]), labels[mine], ticks["ts"][mine] / 1e9
        cuts = np.flatnonzero(np.diff(lab) != 0) + 1
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(lab)], strict=True):
            if hi - lo >= 50:  # segments long enough to measure
                drift[int(lab[lo])].append(abs(logp[hi - 1] - logp[lo]) / (sec[hi - 1] - sec[lo]))
    assert len(drift[REGIME_TREND]) >= 30 and len(drift[REGIME_MEAN_REVERT]) >= 30
    assert np.median(drift[REGIME_TREND]) > 2 * np.median(drift[REGIME_MEAN_REVERT])


def test_quotes_precede_trades_and_trades_hit_bid_or_ask() -> None:
    market = SyntheticMarket(n_symbols=5, n_ticks=20_000, seed=3, with_quotes=True)
    recs = _all(market)
    quotes, trades = recs[0::2], recs[1::2]
    assert (quotes["kind"] == KIND_QUOTE).all() and (trades["kind"] == KIND_TRADE).all()
    np.testing.assert_array_equal(quotes["ts"], trades["ts"])
    np.testing.assert_array_equal(quotes["sym"], trades["sym"])
    assert (quotes["f0"] < quotes["f2"]).all() and (quotes["f0"] > 0).all()
    assert ((trades["f0"] == quotes["f0"]) | (trades["f0"] == quotes["f2"])).all()
    assert (quotes["f1"] % 100 == 0).all() and (quotes["f3"] >= 100).all()


def test_many_symbols_and_dst_start() -> None:
    market = SyntheticMarket(n_symbols=1_200, n_ticks=30_000, seed=9, start="2024-07-06")
    ticks = _all(market)
    assert market.symbols[0] == "SYN0000" and market.symbols[-1] == "SYN1199"
    first = pd.Timestamp(int(ticks["ts"][0]), tz="UTC")
    assert str(first.tz_convert("America/New_York").date()) == "2024-07-08"  # Sat -> Mon
    assert first.hour == 13 and first.minute >= 30  # 09:30 EDT = 13:30 UTC
    assert [str(d) for d in market.session_dates()][:1] == ["2024-07-08"]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="n_symbols"):
        SyntheticMarket(n_symbols=0)
    with pytest.raises(ValueError, match="n_ticks"):
        SyntheticMarket(n_ticks=-1)
    assert list(SyntheticMarket(n_ticks=0).chunks()) == []
