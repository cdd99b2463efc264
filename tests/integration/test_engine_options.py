"""Option groups inside the engine: repriced after each underlying tick during a replay."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

import run_engine
from engine.errors import UserError
from engine.options.book import open_option_book
from engine.options.group import OptionGroupConfig
from engine.reporting.report import build_report
from engine.settings.config import EngineConfig, load_config
from engine.trading.replay import replay
from feeds.messages import OptionValue
from feeds.synthetic import SyntheticMarket
from gpu.options.engines import black_scholes
from strategies.sma_cross import SmaCross


def test_replay_reprices_option_group_on_underlying_ticks() -> None:
    strikes = (20.0, 25.0, 30.0)  # around SYN000's price in this market (about 25)
    group = OptionGroupConfig(underlying="SYN000", strikes=strikes, expiries=(30, 90),
                              rights=("C", "P"), style="european", vol=0.3, rate=0.02,
                              grid="default", messages="option")
    book = open_option_book([group], device="cpu")
    market = functools.partial(SyntheticMarket, n_symbols=3, n_ticks=6000, seed=9)
    res = replay(market, SmaCross(), EngineConfig(), option_book=book)
    rep = build_report(res, "sma")
    opts = rep["options"]
    assert opts["options"] == 12
    assert opts["repricings"] > 0
    values = [m for m in res.engine.option_values if isinstance(m, OptionValue)]
    assert values and all(v.underlying == "SYN000" for v in values)
    # the newest value of each option agrees with the analytic Black-Scholes price
    last: dict[str, OptionValue] = {}
    for v in values:
        last[v.symbol] = v
    assert len(last) == 12
    for sym, v in last.items():
        days, rest = sym.split("+")[1].split("D")
        right, strike = rest[0], int(rest[1:]) / 1000
        ref = black_scholes(v.spot, strike, int(days) / 365, 0.3, 0.02, right == "C")
        want = float(np.asarray(ref.price).ravel()[0])
        assert abs(v.price - want) <= max(2e-3 * want, 2e-3), (sym, v.price, want)


def test_options_in_toml_config(tmp_path: Path) -> None:
    cfg = tmp_path / "engine.toml"
    cfg.write_text(
        'bar_seconds = 60\n[[options]]\nunderlying = "SYN001"\nstrikes = [90.0, 110.0]\n'
        'expiries = [60]\nstyle = "american"\n'
    )
    loaded = load_config(cfg)
    assert loaded.options[0].underlying == "SYN001"
    rc = run_engine.main(["replay", "--ticks", "4000", "--n-symbols", "2", "--config", str(cfg),
                          "--device", "cpu", "--json", str(tmp_path / "r.json")])
    assert rc == 0
    import json

    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["options"]["options"] == 4 and rep["options"]["repricings"] > 0
    bad = tmp_path / "bad.toml"
    bad.write_text('[[options]]\nunderlying = "X"\nstrikes = [-1.0]\nexpiries = [30]\n')
    assert run_engine.main(["replay", "--config", str(bad)]) == 2


@pytest.mark.parametrize("n", [1])
def test_option_book_underlyings(n: int) -> None:
    book = open_option_book([OptionGroupConfig(underlying="A", strikes=(1.0,), expiries=(10,))],
                      device="cpu")
    assert book.underlyings == {"A"}


@pytest.mark.parametrize("value", ["-1", "1.5", '"64"', "true"])
def test_receive_batch_that_makes_no_sense_is_one_line(tmp_path: Path, value: str) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(f"receive_batch = {value}\n")
    with pytest.raises(UserError, match="receive_batch"):
        load_config(cfg)


def test_small_receive_batch_replays_the_same_orders(tmp_path: Path) -> None:
    """receive_batch only changes how many messages the engine takes at once: a replay of
    64 a batch gives the default's orders, fills and counts (deterministic on the CPU)."""
    cfg = tmp_path / "small.toml"
    cfg.write_text("receive_batch = 64\n")
    small = load_config(cfg)
    assert small.receive_batch_in_force == 64 and EngineConfig().receive_batch_in_force == 8192
    market = functools.partial(SyntheticMarket, n_symbols=3, n_ticks=20_000, seed=4)
    a = replay(market, SmaCross(), EngineConfig())
    b = replay(market, SmaCross(), small)
    assert a.engine.stats.market_data == b.engine.stats.market_data == 20_000
    assert a.engine.broker.orders  # sma-cross traded: the comparison below is not empty
    assert [(o.symbol, o.side, o.ts) for o in a.engine.broker.orders] == \
        [(o.symbol, o.side, o.ts) for o in b.engine.broker.orders]
    assert a.engine.broker.equity() == b.engine.broker.equity()


def test_clocked_options_from_the_config_file(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """`options_every_ms` in a config file: the replay command prices on the data's clock
    and says so in its report; a bad interval is one line and exit code 2."""
    import json

    group = ('[[options]]\nunderlying = "SYN001"\nstrikes = [90.0, 110.0]\nexpiries = [60]\n'
             'grid = "seed"\n')
    cfg = tmp_path / "clocked.toml"
    cfg.write_text(f"options_every_ms = 250\n{group}")
    rc = run_engine.main(["replay", "--ticks", "4000", "--n-symbols", "2", "--config", str(cfg),
                          "--device", "cpu", "--json", str(tmp_path / "r.json")])
    assert rc == 0
    rep = json.loads((tmp_path / "r.json").read_text())["options"]
    assert rep["dispatch"] == "clocked" and rep["every_ms"] == 250.0
    assert rep["repricings"] == rep["boundaries"] > 0
    assert "on the data's clock every 250 ms" in capsys.readouterr().out
    for bad in ("nan", "-5", "1e12", '"fast"'):
        cfg.write_text(f"options_every_ms = {bad}\n{group}")
        assert run_engine.main(["replay", "--config", str(cfg)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "options_every_ms" in err[0], err
