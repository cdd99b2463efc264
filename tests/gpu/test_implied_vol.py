"""Implied vols: quote checks, no-arbitrage bounds, round trips, the real GOOG chain."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from feeds.option_chain import read_chain
from gpu.device import cuda_present
from gpu.options import core
from gpu.options.engines import black_scholes, make_grid, option_params, price_params
from gpu.options.implied_vol import (
    IVStatus,
    arbitrage_bounds,
    european_implied_vols,
    implied_vols,
    quote_mids,
)
from tests.gpu.quantlib_ref import bs_process

needs_cuda = pytest.mark.skipif(not cuda_present(), reason="no CUDA device or simulator")
CHAIN = "lean_goog_option_chain_2015-12-24/goog_option_chain_2015-12-24T1300ET.csv"


def test_quote_mids_report_each_defect() -> None:
    nan = np.nan
    bid = [1.0, nan, 2.0, 0.0, 3.0, nan]
    ask = [1.2, 1.0, nan, 0.5, 2.9, nan]
    mid, status = quote_mids(bid, ask)
    assert mid[0] == pytest.approx(1.1)
    assert np.isnan(mid[1:]).all()
    assert [IVStatus(int(s)).reason for s in status] == [
        "pending", "missing_bid", "missing_ask", "zero_bid", "crossed", "missing_bid",
    ]


def test_prices_outside_no_arbitrage_bounds_are_rejected_not_solved() -> None:
    # call above S, call below S − K e^(−rT), American put below K − S, expired
    params = option_params([100.0, 100.0, 80.0, 100.0], 100.0, [0.5, 0.5, 0.5, 0.0], 0.2, 0.05,
                           [True, True, False, True], [False, False, True, False])
    lower, upper = arbitrage_bounds(params)
    assert lower[1] == pytest.approx(100.0 - 100.0 * np.exp(-0.025))
    assert lower[2] == pytest.approx(20.0) and upper[2] == pytest.approx(100.0)
    res = implied_vols([100.5, 1.0, 19.0, 3.0], params, grid=make_grid("seed"), device="cpu")
    assert [IVStatus(int(s)).reason for s in res.status] == [
        "above_upper_bound", "below_lower_bound", "below_lower_bound", "expired",
    ]
    assert np.isnan(res.iv).all()
    # a quote needing more than vol_max, or less than vol_min
    params = option_params(100.0, 100.0, 0.5, 0.2, 0.0, True)
    hi = black_scholes(100.0, 100.0, 0.5, 2.0, 0.0, True).price[0]
    lo = black_scholes(100.0, 100.0, 0.5, 0.005, 0.0, True).price[0]
    res = implied_vols([hi, lo], np.vstack([params, params]), grid="seed", device="cpu",
                       vol_max=1.0)
    assert [IVStatus(int(s)).reason for s in res.status] == ["vol_above_max", "vol_below_min"]


def test_round_trip_recovers_the_volatility() -> None:
    """Price at known vols with the PDE, solve back: within 1e-4 (European and American,
    calls and puts; American puts deep in the exercise region have no vega and are left out)."""
    rng = np.random.default_rng(3)
    n = 120
    vol = rng.uniform(0.08, 1.2, n)
    params = option_params(100.0, rng.uniform(70, 140, n), rng.uniform(0.02, 2.0, n), vol,
                           rng.uniform(0.0, 0.05, n), rng.random(n) < 0.5, rng.random(n) < 0.5)
    price = price_params(params, "default", "cpu").price
    lower, _ = arbitrage_bounds(params)
    vega = black_scholes(100.0, params[:, core.STRIKE], params[:, core.EXPIRY], vol,
                         params[:, core.RATE], params[:, core.IS_CALL] > 0.5).vega
    usable = (price - lower > 1e-3) & (vega > 1e-2)
    res = implied_vols(price, params, grid="default", device="cpu")
    assert (res.status[usable] == IVStatus.OK).all(), res.rejected()
    assert np.abs(res.iv[usable] - vol[usable]).max() < 1e-4
    assert res.iterations <= 12


def test_european_implied_vol_matches_quantlib() -> None:
    ql = pytest.importorskip("QuantLib")
    rng = np.random.default_rng(8)
    for _ in range(10):
        s, k, days = rng.uniform(80, 120), rng.uniform(80, 120), int(rng.integers(10, 700))
        vol, r, call = rng.uniform(0.1, 0.9), rng.uniform(0.0, 0.05), bool(rng.random() < 0.5)
        price = black_scholes(s, k, days / 365, vol, r, call).price[0]
        today = ql.Date(2, 1, 2024)
        process = bs_process(today, s, 0.3, r)
        opt = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Call if call else ql.Option.Put, k),
                               ql.EuropeanExercise(today + days))
        opt.setPricingEngine(ql.AnalyticEuropeanEngine(process))
        ref = opt.impliedVolatility(price, process, 1e-12, 500, 1e-4, 5.0)
        out = np.empty(1)
        european_implied_vols(option_params(s, k, days / 365, 0.3, r, call), np.array([price]),
                              1e-4, 5.0, out)
        assert out[0] == pytest.approx(ref, abs=1e-8)


def test_real_goog_chain_on_cpu(shared_data) -> None:
    path = shared_data / CHAIN
    chain = read_chain(path)
    raw = pd.read_csv(path)
    asof = chain.asof_date()
    assert asof is not None
    t = chain.years_to_expiry(asof)
    mid, status = quote_mids(chain.bid, chain.ask)
    # quote defects against pandas' own reading of the file
    assert (status == IVStatus.MISSING_BID).sum() == raw["bid"].isna().sum()
    assert (status == IVStatus.MISSING_ASK).sum() == (raw["bid"].notna() & raw["ask"].isna()).sum()
    params = option_params(chain.spot, chain.strike, t, 0.3, 0.0, chain.is_call,
                           chain.is_american)
    res = implied_vols(mid, params, grid="default", device="cpu", status=status)
    counts = res.rejected()
    ok = res.status == IVStatus.OK
    assert counts["missing_bid"] == 495
    both = raw["bid"].notna() & raw["ask"].notna()
    # every contract expiring on the snapshot day with a two-sided quote is reported expired
    assert counts["expired"] == int((both & (raw["expiry"] == "2015-12-24")).sum())
    assert ok.sum() + sum(counts.values()) == len(chain)
    assert ok.sum() > 1300
    # solved quotes are matched by the model
    assert np.abs(res.model_price[ok] - mid[ok]).max() < 1e-4 * max(1.0, mid[ok].max())
    spot = chain.spot[0]
    for expiry in ("2016-01-08", "2016-01-15", "2016-01-22"):
        m = ok & (chain.expiry == np.datetime64(expiry))
        near = m & (np.abs(chain.strike - spot) <= 10)
        atm = np.median(res.iv[near])
        assert 0.1 < atm < 0.4, (expiry, atm)
        # the equity skew: out-of-the-money puts 4-8% below spot trade at higher vols
        otm_put = m & ~chain.is_call & (chain.strike >= 0.92 * spot) & (chain.strike <= 0.96 * spot)
        assert otm_put.sum() >= 3
        assert np.median(res.iv[otm_put]) > atm + 0.02


@needs_cuda
def test_cuda_implied_vols_match_cpu() -> None:
    grid = make_grid("seed", price_steps=20, time_steps=4)
    vol = np.array([0.2, 0.45, 0.3])
    params = option_params(100.0, [95.0, 105.0, 100.0], [0.25, 0.5, 1.0], vol, 0.02,
                           [True, False, False], [False, False, True])
    price = price_params(params, grid, "cpu").price
    cpu = implied_vols(price, params, grid=grid, device="cpu")
    gpu = implied_vols(price, params, grid=grid, device="cuda", vol_tol=1e-6)
    assert (gpu.status == IVStatus.OK).all() and (cpu.status == IVStatus.OK).all()
    np.testing.assert_allclose(cpu.iv, vol, atol=1e-6)
    np.testing.assert_allclose(gpu.iv, vol, atol=1e-4)
