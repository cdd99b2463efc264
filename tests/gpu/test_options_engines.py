"""Option instruments apart from pricing engines: contracts, market inputs, engines, pricers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.device import cuda_present
from gpu.options import core, engines
from gpu.options.engines import (
    AnalyticEuropeanEngine,
    FdPricingEngine,
    black_scholes,
    contract_rows,
    make_grid,
    price_options,
    price_params,
)
from gpu.options.implied_vol import IVStatus, solve_implied_vols
from gpu.options.instruments import Exercise, MarketInputs, OptionContract, OptionContracts, Right

needs_cuda = pytest.mark.skipif(not cuda_present(), reason="no CUDA device or simulator")

TINY = make_grid("seed", price_steps=16, time_steps=3)


def mixed() -> tuple[OptionContracts, MarketInputs]:
    contracts = OptionContracts.of(
        [90.0, 100.0, 110.0, 100.0], [0.25, 0.5, 1.0, 0.1], [True, False, True, False],
        [False, True, False, False])
    return contracts, MarketInputs(np.array([101.0, 99.0, 100.0, 105.0]), 0.3, 0.02)


def test_contracts_round_trip_and_broadcast() -> None:
    one = [OptionContract(100.0, 0.5, Right.PUT, Exercise.AMERICAN),
           OptionContract(120.0, 1.0)]
    batch = OptionContracts.from_contracts(one)
    assert len(batch) == 2
    assert [batch[0], batch[1]] == one
    same = OptionContracts.of([100.0, 120.0], [0.5, 1.0], [False, True], [True, False])
    for a, b in zip((batch.strike, batch.expiry, batch.is_call, batch.is_american),
                    (same.strike, same.expiry, same.is_call, same.is_american), strict=True):
        np.testing.assert_array_equal(a, b)
    rolled = batch.with_expiry([0.4, 0.9])
    assert rolled[0].expiry == 0.4 and rolled[1].strike == 120.0
    assert batch[0].expiry == 0.5  # the original is unchanged
    assert OptionContracts.of([1.0, 2.0, 3.0], 0.5).is_call.tolist() == [True] * 3


def test_fd_engine_equals_the_row_api_bitwise() -> None:
    contracts, market = mixed()
    engine = FdPricingEngine("default", "cpu")
    got = engine.price(contracts, market)
    want = price_options(market.spot, contracts.strike, contracts.expiry, 0.3, 0.02,
                         contracts.is_call, contracts.is_american, grid="default", device="cpu")
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    # the American put is worth at least the European one (the style reaches the kernel)
    euro = engine.price(contracts.with_exercise(False), market).price
    assert got.price[1] > euro[1] and got.price[0] == euro[0]


def test_analytic_engine_is_black_scholes_and_european_only() -> None:
    contracts, market = mixed()
    euro = contracts.with_exercise(False)
    got = AnalyticEuropeanEngine().price(euro, market)
    want = black_scholes(market.spot, euro.strike, euro.expiry, 0.3, 0.02, euro.is_call)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    with pytest.raises(ValueError, match="European"):
        AnalyticEuropeanEngine().price(contracts, market)


@pytest.mark.parametrize("background", [False, True])
def test_group_pricer_reprices_after_spot_and_expiry_changes(background: bool) -> None:
    contracts, market = mixed()
    engine = FdPricingEngine(TINY, "cpu")
    pricer = engine.group_pricer(contracts, MarketInputs(1.0, 0.3, 0.02), background)
    pricer.set_spot(104.0)
    pricer.set_expiry(contracts.expiry / 2)
    pricer.launch()
    pricer.wait()
    got = pricer.results()
    want = engine.price(contracts.with_expiry(contracts.expiry / 2),
                        MarketInputs(104.0, 0.3, 0.02))
    np.testing.assert_array_equal(got.price, want.price)
    assert not np.array_equal(got.price, engine.price(contracts, MarketInputs(104.0, 0.3,
                                                                               0.02)).price)


def test_engine_implied_vols_recover_the_vols_priced_at() -> None:
    contracts = OptionContracts.of([90.0, 100.0, 110.0], [0.25, 0.5, 1.0], [True, False, True],
                                   [False, True, False])
    vols = np.array([0.2, 0.35, 0.5])
    engine = FdPricingEngine("seed", "cpu")
    market = MarketInputs(100.0, vols, 0.01)
    prices = engine.price(contracts, market).price
    res = solve_implied_vols(engine, contracts, market.with_vol(np.nan), prices)
    assert (res.status == IVStatus.OK).all()
    np.testing.assert_allclose(res.iv, vols, atol=1e-6)


@needs_cuda
def test_cuda_engine_matches_cpu_engine() -> None:
    contracts, market = mixed()
    gpu = FdPricingEngine(TINY, "cuda").price(contracts, market)
    cpu = FdPricingEngine(TINY, "cpu").price(contracts, market)
    # float32 on the GPU against float64 on the CPU
    np.testing.assert_allclose(gpu.price, cpu.price, rtol=1e-4, atol=1e-4)


#: values at and around every column's bounds, and ones no column takes
EDGES = [0.0, -0.0, 1e-300, -1e-300, 1e-8, 9.9e-9, 1e-8 * (1 + 2**-52), 1.0, -1.0,
         1.0000000000000002, 10.0, 10.000000000000002, 100.0, 100.00000000000001, 1e12,
         1.0000000000000002e12, -1e6, -1.0000000000000002e6, 1e300, -1e300, np.nan, np.inf,
         -np.inf, 0.5, 0.02, -0.02]
VALUE = st.one_of(st.sampled_from(EDGES), st.floats(allow_nan=True, allow_infinity=True),
                  st.floats(-2.0, 2.0), st.floats(1e-9, 1e13))


@st.composite
def row_columns(draw: st.DrawFn) -> tuple[list[np.ndarray], int]:
    """Eight columns in row order, each one value or n, mostly ordinary contracts with
    a drawn value from VALUE here and there."""
    n = draw(st.integers(1, 6))
    ordinary = (100.0, 95.0, 0.5, 0.3, 0.02, 1.0, 1.0, 0.01)
    columns = []
    for base in ordinary:
        size = draw(st.sampled_from([1, n]))
        values = [draw(VALUE) if draw(st.integers(0, 7)) == 0 else base for _ in range(size)]
        columns.append(np.array(values, dtype=np.float64))
    return columns, n


@given(row_columns())
@settings(max_examples=300, deadline=None)
def test_compiled_row_builder_accepts_exactly_what_check_params_accepts(
        drawn: tuple[list[np.ndarray], int]) -> None:
    """`core.fill_rows` (the CUDA engine's one pass) against numpy's broadcast and
    `check_params`: the same rows bit for bit, a bad row exactly where numpy raises, and
    `two_marches`'s answer."""
    columns, n = drawn
    rows = np.full((n + 2, core.N_PARAMS), -7.0)
    bad, early = core.fill_rows(rows, 0, n, tuple(columns), engines._ROW_LOWEST,
                                engines._ROW_HIGHEST, engines.MIN_VOL)
    full = np.stack([np.broadcast_to(c, (n,)) for c in columns], axis=1)
    np.testing.assert_array_equal(rows[:n], full)
    assert (rows[n:] == -7.0).all()  # nothing past `last`
    # in two pieces (the chunks of a pipelined launch): the same rows and answers
    split = n // 2
    again = np.full_like(rows, -7.0)
    b1, e1 = core.fill_rows(again, 0, split, tuple(columns), engines._ROW_LOWEST,
                            engines._ROW_HIGHEST, engines.MIN_VOL)
    b2, e2 = core.fill_rows(again, split, n, tuple(columns), engines._ROW_LOWEST,
                            engines._ROW_HIGHEST, engines.MIN_VOL)
    np.testing.assert_array_equal(again, rows)
    assert (b1 + b2, e1 or e2) == (bad, early)
    try:
        engines.check_params(full)
    except ValueError:
        assert bad > 0
    else:
        assert bad == 0
        assert early == core.two_marches(full, True)


@needs_cuda
@pytest.mark.parametrize("spots", [104.0, [101.0, 99.0, 100.0, 105.0]])
def test_cuda_engine_one_pass_equals_the_row_api_bitwise(spots: float | list[float]) -> None:
    """`FdPricingEngine.price` on CUDA builds its rows in one compiled pass: the same
    values as `price_params` of numpy's rows, for per-contract and scalar inputs, one
    contract against many spots, and no contracts."""
    contracts, market = mixed()
    market = MarketInputs(spots, [0.3, 0.25, 0.4, 0.3], 0.02, 0.01)
    engine = FdPricingEngine(TINY, "cuda")
    got = engine.price(contracts, market)
    want = price_params(contract_rows(contracts, market), TINY, "cuda")
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    one = contracts.select(np.array([1]))
    many = MarketInputs(np.array([90.0, 100.0, 110.0]), 0.3, 0.02)
    got = engine.price(one, many)
    want = price_params(contract_rows(one, many), TINY, "cuda")
    assert got.price.shape == (3,)
    np.testing.assert_array_equal(got.price, want.price)
    none = engine.price(contracts.select(np.zeros(4, dtype=bool)), MarketInputs(100.0, 0.3))
    assert none.price.shape == (0,)


@needs_cuda
@pytest.mark.parametrize(("column", "value"), [
    ("spot", 0.0), ("spot", np.nan), ("spot", 1e300), ("strike", 1e-300), ("vol", 1e-12),
    ("vol", -0.1), ("vol", np.inf), ("expiry", 101.0), ("rate", 1.5)])
def test_cuda_engine_refuses_what_the_cpu_engine_refuses(column: str, value: float) -> None:
    """A bad value in one contract of four: the CUDA engine's compiled check gives numpy's
    one-line error, word for word."""
    contracts, market = mixed()
    fields = {"spot": np.array(market.spot, dtype=float), "vol": np.full(4, 0.3),
              "rate": np.full(4, 0.02), "strike": contracts.strike.copy(),
              "expiry": contracts.expiry.copy()}
    fields[column][2] = value
    contracts = type(contracts)(fields["strike"], fields["expiry"], contracts.is_call,
                                contracts.is_american)
    market = MarketInputs(fields["spot"], fields["vol"], fields["rate"])
    with pytest.raises(ValueError) as cpu:
        FdPricingEngine(TINY, "cpu").price(contracts, market)
    with pytest.raises(ValueError) as cuda:
        FdPricingEngine(TINY, "cuda").price(contracts, market)
    assert str(cuda.value) == str(cpu.value) and "\n" not in str(cpu.value)


def test_fd_engine_american_put_matches_quantlib() -> None:
    ql = pytest.importorskip("QuantLib")
    from tests.gpu.quantlib_ref import bs_process

    today = ql.Date(2, 1, 2024)
    contracts = OptionContracts.from_contracts(
        [OptionContract(k, 91 / 365, Right.PUT, Exercise.AMERICAN) for k in (90.0, 100.0, 110.0)])
    got = FdPricingEngine("default", "cpu").price(contracts, MarketInputs(100.0, 0.3, 0.04))
    process = bs_process(today, 100.0, 0.3, 0.04)
    for k, price in zip(contracts.strike, got.price, strict=True):
        opt = ql.VanillaOption(ql.PlainVanillaPayoff(ql.Option.Put, float(k)),
                               ql.AmericanExercise(today, today + 91))
        opt.setPricingEngine(ql.FdBlackScholesVanillaEngine(process, 800, 1600, 0,
                                                            ql.FdmSchemeDesc.CrankNicolson()))
        assert price == pytest.approx(opt.NPV(), rel=1e-3)  # measured: ≤ 3.8e-4
