"""Option-chain CSV reader on the real GOOG chain and on malformed files; the price command."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import run_engine
from engine.commands import price as price_cmd
from engine.errors import UserError
from feeds.option_chain import option_symbol, read_chain

CHAIN = "lean_goog_option_chain_2015-12-24/goog_option_chain_2015-12-24T1300ET.csv"


def test_reads_the_real_goog_chain(shared_data) -> None:
    path = shared_data / CHAIN
    chain = read_chain(path)
    raw = pd.read_csv(path)
    assert len(chain) == 2192 == len(raw)
    assert chain.skipped == {}
    assert int(chain.is_call.sum()) == 1096 and int((~chain.is_call).sum()) == 1096
    assert chain.is_american.all()
    assert len(np.unique(chain.strike)) == 188
    assert chain.strike.min() == 290 and chain.strike.max() == 1140
    assert [str(e) for e in chain.expiries] == sorted(raw["expiry"].unique().tolist())
    assert len(chain.expiries) == 12
    assert chain.snapshot_time == dt.datetime.fromisoformat("2015-12-24T13:00:00-05:00")
    np.testing.assert_allclose(chain.spot, (748.10 + 748.38) / 2)
    np.testing.assert_array_equal(np.isnan(chain.bid), raw["bid"].isna().to_numpy())
    np.testing.assert_allclose(chain.ask[~np.isnan(chain.ask)], raw["ask"].dropna().to_numpy())
    assert set(chain.underlying) == {"GOOG"}
    assert chain.symbol[0] == "GOOG151224C00590000"
    t = chain.years_to_expiry(dt.date(2015, 12, 24))
    jan15 = chain.expiry == np.datetime64("2016-01-15")
    np.testing.assert_allclose(t[jan15], 22 / 365)
    assert (t[chain.expiry == np.datetime64("2015-12-24")] == 0).all()


def test_malformed_rows_are_counted_and_skipped(tmp_path: Path) -> None:
    p = tmp_path / "chain.csv"
    p.write_text(
        "expiry,strike,right,bid,ask,spot,style\n"
        "2024-03-15,100,C,1.0,1.2,101,american\n"
        "2024-03-15,abc,C,1.0,1.2,101,american\n"
        "2024-13-40,100,P,1.0,1.2,101,american\n"
        "2024-03-15,100,X,1.0,1.2,101,american\n"
        "2024-03-15,-5,P,1.0,1.2,101,american\n"
        "2024-03-15,100,put,,1.2,101,bermudan\n"
        "2024-03-15,95,put,,0.8,101,\n"
    )
    chain = read_chain(p)
    assert len(chain) == 2
    assert chain.skipped == {"bad_strike": 2, "bad_expiry": 1, "bad_right": 1, "bad_style": 1}
    assert chain.is_american.tolist() == [True, False]  # an empty style means european
    assert np.isnan(chain.bid[1]) and chain.ask[1] == 0.8
    assert chain.snapshot_time is None


def test_unusable_files_raise_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        read_chain(tmp_path / "nope.csv")
    p = tmp_path / "a.csv"
    p.write_text("expiry,strike\n2024-01-01,100\n")
    with pytest.raises(ValueError, match="missing column"):
        read_chain(p)
    p.write_text("expiry,strike,right\n2024-01-01,zero,C\n")
    with pytest.raises(ValueError, match="no usable option rows"):
        read_chain(p)


def test_option_symbol_is_occ_style() -> None:
    assert option_symbol("GOOG", dt.date(2016, 1, 15), "P", 752.5) == "GOOG160115P00752500"


def _args(**kw: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    price_cmd.add_arguments(parser)
    ns = parser.parse_args([])
    ns.json = None
    ns.quiet = False  # -v/-q belong to run_engine's top-level parser, shared by every command
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


def test_price_command_on_the_real_chain_with_implied_vols(
    shared_data, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.json"
    res = price_cmd.run(_args(chain=shared_data / CHAIN, iv=True, device="cpu", json=str(out)))
    json.dumps(res)  # JSON-able as it is
    assert res["count"] == 2192 and len(res["options"]) == 2192
    assert isinstance(res["seconds"], float)
    assert res["iv_rejected"]["missing_bid"] == 495
    assert res["iv_solved"] + sum(res["iv_rejected"].values()) == 2192
    # the whole chain is priced: unsolved contracts at their expiry's smile
    assert res["priced"] == 2192
    assert all(o["price"] is not None and o["price"] >= 0 for o in res["options"])
    solved = [o for o in res["options"] if o["iv_status"] == "ok"]
    # priced at its own implied vol, a contract is worth its mid
    assert max(abs(o["price"] - o["mid"]) for o in solved) < 1e-3
    assert all(-1.0 <= o["delta"] <= 1.0 and o["gamma"] >= -1e-9 for o in solved)
    plot = Path(res["plot"])
    assert plot == tmp_path / "out_smile.png" and plot.stat().st_size > 10_000
    text = capsys.readouterr().out
    assert "2192 options" in text and "implied vols" in text


def test_price_command_generated_group_matches_analytic(tmp_path: Path) -> None:
    res = price_cmd.run(_args(generate=64, vol=0.3, interest_rate=0.02, device="cpu", iv=True,
                              plot=tmp_path / "g.png"))
    assert res["count"] == 64
    assert res["analytic_max_rel_error"] < 1e-3
    assert res["iv_roundtrip_max_abs_error"] < 1e-4
    assert Path(res["plot"]).is_file()


def test_price_command_rejects_bad_input(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        price_cmd.run(_args(chain=tmp_path / "missing.csv", vol=0.2, device="cpu"))
    p = tmp_path / "c.csv"
    p.write_text("expiry,strike,right,spot\n2024-03-15,100,C,100\n")
    with pytest.raises(UserError, match="asof"):
        price_cmd.run(_args(chain=p, vol=0.2, device="cpu"))
    with pytest.raises(UserError, match="no volatility"):
        price_cmd.run(_args(chain=p, asof="2024-01-02", device="cpu"))
    with pytest.raises(UserError, match="--vol"):
        price_cmd.run(_args(chain=p, asof="2024-01-02", vol=-1.0, device="cpu"))
    res = price_cmd.run(_args(chain=p, asof="2024-01-02", vol=0.2, device="cpu"))
    assert res["options"][0]["price"] > 0 and "iv" not in res["options"][0]


def test_contracts_expired_at_the_valuation_date_are_counted_not_priced(tmp_path: Path) -> None:
    """Their time to expiry is negative: the PDE would hand back the intrinsic value and it
    passed for a priced option (even against the analytic check)."""
    out = tmp_path / "p.json"
    assert run_engine.main(["price", "--generate", "32", "--device", "cpu", "--grid", "seed",
                            "--asof", "2000-02-15", "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    expired = [o for o in rep["options"] if o["years"] < 0]
    assert expired and rep["expired"] == len(expired)
    assert all(o["price"] is None for o in expired)
    assert rep["priced"] == rep["count"] - len(expired)
    assert run_engine.main(["price", "--generate", "8", "--device", "cpu",
                            "--asof", "2010-01-01"]) == 2  # all of them: one-line error


def test_a_file_the_csv_module_cannot_read_is_a_one_line_error(tmp_path: Path) -> None:
    """csv.Error is not a ValueError: it reached the user as an internal error."""
    p = tmp_path / "huge.csv"
    p.write_text("expiry,strike,right\n2024-01-01,\"" + "x" * 200_000 + "\",C\n")
    with pytest.raises(ValueError, match=r"huge\.csv: line \d+: not a readable CSV"):
        read_chain(p)
    p.write_text("\"" + "x" * 200_000 + "\"\n")  # in the header itself
    with pytest.raises(ValueError, match=r"huge\.csv: line 1: not a readable CSV"):
        read_chain(p)
    with pytest.raises(UserError, match="not a readable CSV"):
        price_cmd.run(_args(chain=p, vol=0.2, device="cpu"))


def test_an_infinite_spot_is_no_spot_not_an_internal_error(tmp_path: Path) -> None:
    """`inf` in the spot column reached the pricer as a parameter error (an internal
    error); it is a missing spot: the underlying's quote stands in, or --spot is asked."""
    p = tmp_path / "c.csv"
    p.write_text("expiry,strike,right,spot,underlying_bid,underlying_ask\n"
                 "2024-03-15,100,C,inf,99,101\n2024-03-15,105,C,100,,\n")
    np.testing.assert_array_equal(read_chain(p).spot, [100.0, 100.0])
    p.write_text("expiry,strike,right,spot\n2024-03-15,100,C,inf\n2024-03-15,105,C,100\n")
    assert np.isnan(read_chain(p).spot[0])
    with pytest.raises(UserError, match="give --spot"):
        price_cmd.run(_args(chain=p, asof="2024-01-02", vol=0.2, device="cpu"))


def test_summary_of_a_chain_without_underlying_names(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "c.csv"
    p.write_text("expiry,strike,right,spot\n2024-03-15,100,C,100\n")
    price_cmd.run(_args(chain=p, asof="2024-01-02", vol=0.2, device="cpu"))
    assert "1 options (1 expiries)" in capsys.readouterr().out
