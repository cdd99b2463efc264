"""Options with a continuous dividend yield: analytic values against QuantLib, the finite-
difference engine against the stored American reference (QuantLib's QdFp engine), the
grids' accuracy ordering, the CUDA kernels against the CPU twin, implied vols, q = 0 bit for
bit as before, and bad yields refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.reference.american import Reference, accuracy, load_reference
from gpu.device import FD_SOLVERS, cuda_present
from gpu.options import core
from gpu.options.engines import (
    GRIDS,
    AnalyticEuropeanEngine,
    FdPricingEngine,
    black_scholes,
    make_grid,
    option_params,
    price_options,
    price_params,
)
from gpu.options.implied_vol import IVStatus, arbitrage_bounds, solve_implied_vols
from gpu.options.instruments import MarketInputs, OptionContracts

needs_cuda = pytest.mark.skipif(not cuda_present(), reason="no CUDA device or simulator")


@pytest.fixture(scope="module")
def sample() -> Reference:
    """A seeded 250-contract sample of the 1,000-contract reference portfolio."""
    return load_reference().sample(250, seed=2030)


# -- analytic Black–Scholes–Merton ----------------------------------------------------------


def test_analytic_values_with_dividends_match_quantlib() -> None:
    ql = pytest.importorskip("QuantLib")
    from tests.gpu.quantlib_ref import bs_process

    today = ql.Date(2, 1, 2024)
    rng = np.random.default_rng(17)
    for _ in range(40):
        s, k = rng.uniform(50, 150), rng.uniform(60, 140)
        days, vol = int(rng.integers(5, 800)), rng.uniform(0.05, 0.9)
        r, q = rng.uniform(-0.01, 0.08), rng.uniform(-0.02, 0.06)
        call = bool(rng.random() < 0.5)
        ours = black_scholes(s, k, days / 365, vol, r, call, dividend_yield=q)
        opt = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Call if call else ql.Option.Put,
                                                     k), ql.EuropeanExercise(today + days))
        opt.setPricingEngine(ql.AnalyticEuropeanEngine(bs_process(today, s, vol, r, q)))
        assert ours.price[0] == pytest.approx(opt.NPV(), rel=1e-9, abs=1e-11)
        assert ours.delta[0] == pytest.approx(opt.delta(), rel=1e-9, abs=1e-11)
        assert ours.gamma[0] == pytest.approx(opt.gamma(), rel=1e-8, abs=1e-11)
        assert ours.vega[0] == pytest.approx(opt.vega(), rel=1e-8, abs=1e-9)


def test_engine_takes_the_yield_from_the_market_inputs() -> None:
    contracts = OptionContracts.of([90.0, 110.0], 1.0, [True, False])
    got = AnalyticEuropeanEngine().price(contracts, MarketInputs(100.0, 0.3, 0.02, 0.03))
    want = black_scholes(100.0, [90.0, 110.0], 1.0, 0.3, 0.02, [True, False],
                         dividend_yield=0.03)
    np.testing.assert_array_equal(got.price, want.price)
    no_q = black_scholes(100.0, [90.0, 110.0], 1.0, 0.3, 0.02, [True, False]).price
    assert got.price[0] < no_q[0] and got.price[1] > no_q[1]  # the yield lowers the forward


# -- q = 0: the core arithmetic is the one without dividends, bit for bit -------------------


def _old_node_coefficients(s: float, ds: float, vol: float, rate: float,
                           compact: bool) -> tuple[float, ...]:
    """The operator as written before the dividend yield existed (commit 515d462)."""
    x = s / ds
    diffusion = 0.5 * vol * vol * x * x
    drift = 0.5 * rate * x
    if compact:
        q = 2.0 * (rate - 2.0 * vol * vol) / (vol * vol)
        kappa = (1.0 + q) * (vol * vol + rate) / 12.0
        skew = q / (24.0 * x)
        if abs(skew) <= 1.0 / 12.0 and diffusion + kappa >= abs(drift):
            return (diffusion + kappa - drift, -2.0 * (diffusion + kappa) - rate,
                    diffusion + kappa + drift, 1.0 / 12.0 - skew, 10.0 / 12.0, 1.0 / 12.0 + skew)
    return diffusion - drift, -2.0 * diffusion - rate, diffusion + drift, 0.0, 1.0, 0.0


def _old_bs(spot: float, strike: float, t: float, vol: float, rate: float,
            call: bool) -> tuple[float, float, float, float]:
    """Black–Scholes as written before the dividend yield existed (commit 515d462)."""
    sqrt_t = math.sqrt(t)
    sig_t = vol * sqrt_t
    d1 = (math.log(spot / strike) + (rate + 0.5 * vol * vol) * t) / sig_t
    d2 = d1 - sig_t
    disc_k = strike * math.exp(-rate * t)
    pdf1 = core.norm_pdf(d1)
    gamma = pdf1 / (spot * sig_t)
    vega = spot * pdf1 * sqrt_t
    if call:
        return spot * core.norm_cdf(d1) - disc_k * core.norm_cdf(d2), core.norm_cdf(d1), gamma, vega
    return (disc_k * core.norm_cdf(-d2) - spot * core.norm_cdf(-d1), core.norm_cdf(d1) - 1.0,
            gamma, vega)


def test_zero_yield_is_the_arithmetic_without_dividends_bit_for_bit() -> None:
    rng = np.random.default_rng(5)
    for _ in range(300):
        s, ds = rng.uniform(1, 400), rng.uniform(0.05, 5)
        vol, rate = rng.uniform(0.02, 1.0), rng.uniform(-0.02, 0.1)
        for compact in (True, False):
            assert core.node_coefficients(s, ds, vol, rate, 0.0, compact) == \
                _old_node_coefficients(s, ds, vol, rate, compact)
        k, t, call = rng.uniform(50, 150), rng.uniform(0.01, 2), bool(rng.random() < 0.5)
        assert core.bs_price_greeks(s, k, t, vol, rate, 0.0, call) == _old_bs(s, k, t, vol,
                                                                              rate, call)
        tau, lo, hi = rng.uniform(0, 2), rng.uniform(0, 50), rng.uniform(150, 600)
        disc_k = k * math.exp(-rate * tau)
        old_call_hi = max(max(hi - disc_k, hi - k), 0.0)
        assert core.boundary_values(k, tau, rate, 0.0, lo, hi, True, True) == (0.0, old_call_hi)
        assert core.boundary_values(k, tau, rate, 0.0, lo, hi, False, False) == \
            (max(disc_k - lo, 0.0), 0.0)
    # a call without dividends is still never exercised early (r ≥ 0); with q > 0 it is
    assert not core.early_exercise(True, True, 0.03, 0.0)
    assert core.early_exercise(True, True, 0.03, 0.01)


# -- finite differences against the QuantLib reference --------------------------------------


def test_default_grid_meets_its_accuracy_with_dividends(sample: Reference) -> None:
    """RRMSE ≤ 1e-4 on a 250-contract sample of the American reference (q up to 4%)."""
    got = FdPricingEngine("default", "cpu").price(sample.contracts, sample.market).price
    acc = accuracy(got, sample.price)
    assert acc["relative_count"] > 200
    assert acc["rrmse"] <= 1e-4, acc
    assert acc["max_rel_error"] <= 2e-3, sample.describe(acc["max_rel_index"])
    # the American feature is there: calls with q > 0 are worth more than European ones
    euro = load_reference(american=False).sample(250, seed=2030)
    assert (sample.price >= euro.european - 1e-9).all()
    assert (got > euro.european + 1e-3).sum() > 100


def test_european_subset_against_the_analytic_price_with_dividends(sample: Reference) -> None:
    euro = load_reference(american=False).sample(250, seed=2030)
    got = FdPricingEngine("default", "cpu").price(euro.contracts, euro.market).price
    ref = AnalyticEuropeanEngine().price(euro.contracts, euro.market).price
    np.testing.assert_allclose(ref, euro.european, rtol=1e-9, atol=1e-12)  # QuantLib's
    assert accuracy(got, ref)["rrmse"] <= 1e-4


def test_every_named_grid_is_at_least_as_accurate_as_the_coarser_ones(
        sample: Reference) -> None:
    """Grids in GRIDS's order, the coarsest first (the seed grid has more price nodes than
    the default, over [0, 3K]: far fewer per standard deviation): each one's RRMSE and
    worst absolute error on the reference sample are at most the coarser ones'."""
    names = list(GRIDS)
    assert names == ["seed", "default", "fine"]
    results = []
    for name in names:
        got = FdPricingEngine(name, "cpu").price(sample.contracts, sample.market).price
        results.append(accuracy(got, sample.price))
    for coarse, fine in zip(results, results[1:], strict=False):
        assert fine["rrmse"] <= coarse["rrmse"]
        assert fine["max_abs_error"] <= coarse["max_abs_error"]


def test_richardson_extrapolation_reduces_the_american_error(sample: Reference) -> None:
    on = FdPricingEngine("default", "cpu").price(sample.contracts, sample.market).price
    off = FdPricingEngine(GRIDS["default"]._replace(richardson=False), "cpu").price(
        sample.contracts, sample.market).price
    assert accuracy(on, sample.price)["rrmse"] < 0.5 * accuracy(off, sample.price)["rrmse"]
    # European options are marched once: the flag changes nothing for them
    euro = load_reference(american=False).sample(40, seed=1)
    a = FdPricingEngine("default", "cpu").price(euro.contracts, euro.market).price
    b = FdPricingEngine(GRIDS["default"]._replace(richardson=False), "cpu").price(
        euro.contracts, euro.market).price
    np.testing.assert_array_equal(a, b)


def test_american_call_with_a_yield_is_exercised_deep_in_the_money() -> None:
    """Deep in the money, with q > r, the American call is worth its exercise value while
    the European call is worth less than intrinsic."""
    am = price_options(160.0, 100.0, 1.0, 0.2, 0.01, True, True, dividend_yield=0.08,
                       device="cpu")
    eu = black_scholes(160.0, 100.0, 1.0, 0.2, 0.01, True, dividend_yield=0.08)
    assert eu.price[0] < 60.0
    assert am.price[0] == pytest.approx(60.0, abs=1e-6)
    assert am.delta[0] == pytest.approx(1.0, abs=1e-3)


# -- CUDA kernels against the CPU twin --------------------------------------------------------


def _rows_with_yields(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return option_params(rng.uniform(80, 120, n), rng.uniform(85, 115, n),
                         rng.uniform(0.05, 1.0, n), rng.uniform(0.15, 0.45, n),
                         rng.uniform(0.0, 0.06, n), np.arange(n) % 2 == 0,
                         np.arange(n) % 4 != 3, rng.uniform(0.03, 0.08, n))


@needs_cuda
@pytest.mark.parametrize("solver", FD_SOLVERS)
def test_cuda_kernels_match_the_cpu_twin_with_dividends(
        solver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """American and European calls and puts with yields, on a tiny default-style grid
    with Richardson extrapolation (two marches per American option)."""
    monkeypatch.setenv("GPU_FD_SOLVER", solver)
    grid = make_grid("default", price_steps=24, time_steps=6)
    assert grid.richardson
    params = _rows_with_yields(4, seed=3)
    gpu = price_params(params, grid, "cuda")
    cpu = price_params(params, grid, "cpu")
    np.testing.assert_allclose(gpu.price, cpu.price, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gpu.delta, cpu.delta, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gpu.gamma, cpu.gamma, rtol=1e-3, atol=1e-4)
    # the yield reached the kernel: without it the calls are worth more, the puts less
    no_q = params.copy()
    no_q[:, core.DIVIDEND] = 0.0
    calls = params[:, core.IS_CALL] > 0.5
    diff = price_params(no_q, grid, "cuda").price - gpu.price
    assert (diff[calls] > 0.05).all() and (diff[~calls] < -0.05).all()


# -- implied vols with dividends --------------------------------------------------------------


def test_implied_vols_with_dividends_round_trip() -> None:
    contracts = OptionContracts.of([90.0, 100.0, 110.0, 95.0], [0.25, 0.5, 1.0, 0.75],
                                   [True, False, True, True], [False, True, True, False])
    vols = np.array([0.2, 0.35, 0.5, 0.25])
    market = MarketInputs(100.0, vols, 0.01, 0.03)
    engine = FdPricingEngine("seed", "cpu")
    prices = engine.price(contracts, market).price
    res = solve_implied_vols(engine, contracts, market.with_vol(np.nan), prices)
    assert (res.status == IVStatus.OK).all()
    np.testing.assert_allclose(res.iv, vols, atol=1e-6)
    # solved without the yield, the same prices give other vols
    wrong = solve_implied_vols(engine, contracts, MarketInputs(100.0, np.nan, 0.01), prices)
    assert np.abs(wrong.iv - vols).max() > 1e-3


def test_arbitrage_bounds_hold_the_dividend_prices() -> None:
    params = _rows_with_yields(40, seed=9)
    lower, upper = arbitrage_bounds(params)
    values = price_params(params, "default", "cpu").price
    assert (values >= lower - 1e-9).all() and (values <= upper + 1e-9).all()


# -- bad yields --------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -1.5, 1.01])
def test_bad_dividend_yield_is_a_one_line_error(bad: float) -> None:
    for make in (lambda: option_params(100.0, 100.0, 0.5, 0.2, dividend_yield=bad),
                 lambda: MarketInputs(100.0, 0.2, 0.0, bad),
                 lambda: MarketInputs(100.0, 0.2, 0.0, [0.01, bad])):
        with pytest.raises(ValueError, match=r"dividend yield must be a finite number in "
                                             r"\[-1, 1\]") as info:
            make()
        assert "\n" not in str(info.value)


def test_a_price_at_the_exercise_value_has_no_single_implied_vol() -> None:
    """Deep in the money with a yield, the American call is worth its exercise value for
    every σ up to some bound: reported as such, not solved to an arbitrary σ in that range
    (an in-the-money American call without dividends is still solved)."""
    contracts = OptionContracts.of([60.0, 60.0, 95.0], 1.0, True, True)
    market = MarketInputs(100.0, 0.25, 0.02, [0.05, 0.0, 0.05])
    engine = FdPricingEngine("default", "cpu")
    prices = engine.price(contracts, market).price
    assert prices[0] == pytest.approx(40.0, abs=1e-9)  # exercised at once
    res = solve_implied_vols(engine, contracts, market.with_vol(np.nan), prices)
    assert [IVStatus(int(s)).reason for s in res.status] == ["at_exercise_value", "ok", "ok"]
    np.testing.assert_allclose(res.iv[1:], 0.25, atol=1e-6)


@pytest.mark.gpu
def test_real_gpu_default_grid_meets_its_accuracy_on_the_whole_reference() -> None:
    """float32 on the GPU: the default grid's RRMSE ≤ 1e-4 on all 1,000 contracts, and
    within 1e-3 of the float64 twin on every contract worth ≥ 0.5."""
    ref = load_reference()
    gpu = FdPricingEngine("default", "cuda").price(ref.contracts, ref.market).price
    cpu = FdPricingEngine("default", "cpu").price(ref.contracts, ref.market).price
    assert accuracy(gpu, ref.price)["rrmse"] <= 1e-4
    worth = ref.price >= 0.5
    assert np.max(np.abs(gpu - cpu)[worth] / cpu[worth]) <= 1e-3
