"""Valuing a chain through an engine: the vol chosen per contract, expiry, checks."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pytest

from engine.errors import UserError
from engine.options.chain_pricing import generated_chain, value_chain
from gpu.options.engines import FdPricingEngine
from gpu.options.implied_vol import IVStatus
from gpu.options.instruments import MarketInputs, OptionContracts

ENGINE = FdPricingEngine("seed", "cpu")


def test_generated_chain_round_trips_its_implied_vols() -> None:
    chain, years = generated_chain(48, 100.0, 0.3)
    american = np.zeros(len(chain), dtype=bool)
    engine = FdPricingEngine("default", "cpu")
    val = value_chain(chain, dt.date(2000, 1, 3), chain.spot, american, 0.01, engine,
                      vol=0.3, solve_iv=True, generated=True)
    assert val.vol_source == "--vol" and val.priced.all()
    assert (val.status == IVStatus.OK).sum() > 40
    assert val.checks["iv_roundtrip_max_abs_error"] < 1e-6
    assert val.checks["analytic_max_rel_error"] < 1e-3  # the default grid: ≤ 0.07% in ±2σ√T
    # the prices are the engine's, contract by contract
    want = engine.price(OptionContracts.of(chain.strike, years, chain.is_call),
                        MarketInputs(chain.spot, 0.3, 0.01)).price
    np.testing.assert_array_equal(val.price, want)
    report = val.report("gen", engine)
    assert report["priced"] == 48 and report["grid"]["name"] == "default"
    assert report["iv_solved"] == int(val.iv_ok.sum())


def test_expired_contracts_are_counted_not_priced() -> None:
    chain, _ = generated_chain(16, 100.0, 0.3)  # expiries 7 to 730 days after 2000-01-03
    asof = dt.date(2000, 2, 10)  # after the 7-, 14- and 30-day expiries
    val = value_chain(chain, asof, chain.spot, np.zeros(16, dtype=bool), 0.0, ENGINE, vol=0.3)
    expired = chain.years_to_expiry(asof) < 0
    assert val.checks["expired"] == expired.sum() == 6
    assert np.isnan(val.price[expired]).all() and np.isfinite(val.price[~expired]).all()
    with pytest.raises(UserError, match="every contract has expired"):
        value_chain(chain, dt.date(2003, 1, 1), chain.spot, np.zeros(16, dtype=bool), 0.0,
                    ENGINE, vol=0.3)


def test_no_vol_is_a_user_error() -> None:
    chain, _ = generated_chain(8, 100.0, 0.3)
    with pytest.raises(UserError, match="no volatility"):
        value_chain(chain, dt.date(2000, 1, 3), chain.spot, np.zeros(8, dtype=bool), 0.0,
                    ENGINE)


def test_dividend_yield_from_the_flag_or_the_chain_column(tmp_path: Path) -> None:
    import run_engine
    from feeds.option_chain import read_chain

    csv = tmp_path / "chain.csv"
    csv.write_text("expiry,strike,right,style,spot,iv,dividend_yield,snapshot_time\n"
                   "2016-01-15,100,C,american,100,0.3,0.03,2015-12-24T13:00\n"
                   "2016-01-15,100,P,american,100,0.3,,2015-12-24T13:00\n"
                   "2016-01-15,90,P,american,100,0.3,5%,2015-12-24T13:00\n")
    chain = read_chain(csv)
    assert chain.skipped == {"bad_dividend_yield": 1}
    np.testing.assert_array_equal(chain.dividend_yields(0.01), [0.03, 0.01])
    val = value_chain(chain, dt.date(2015, 12, 24), chain.spot, chain.is_american, 0.02,
                      ENGINE, dividend_yield=chain.dividend_yields(0.0))
    want = ENGINE.price(OptionContracts.of(chain.strike, 22 / 365, chain.is_call, True),
                        MarketInputs(100.0, 0.3, 0.02, [0.03, 0.0])).price
    np.testing.assert_array_equal(val.price, want)
    out = tmp_path / "out.json"
    assert run_engine.main(["price", "--chain", str(csv), "--device", "cpu",
                            "--interest-rate", "0.02", "--dividend-yield", "0.03",
                            "--json", str(out)]) == 0
    import json

    report = json.loads(out.read_text())
    assert report["dividend_yield"] == 0.03
    assert [o["dividend_yield"] for o in report["options"]] == [0.03, 0.03]


@pytest.mark.parametrize("bad", ["nan", "inf", "-1.5", "2"])
def test_bad_dividend_yield_flag_is_a_one_line_error(
        bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    import run_engine

    rc = run_engine.main(["price", "--generate", "4", "--device", "cpu",
                          "--dividend-yield", bad])
    err = capsys.readouterr().err.strip()
    assert rc != 0
    assert err.count("\n") == 0 and "--dividend-yield must be a finite number" in err
