"""LEAN US-equity ticks replay the regular session (09:30-16:00 New York) unless asked for
extended hours; the summary and report.json name the session used. One real SPY day."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import run_engine
from engine.commands.replay import market_hours
from engine.settings.config import load_config

NY = "America/New_York"


def _replay(day: Path, out: Path, *extra: str) -> tuple[dict[str, Any], pd.Series]:
    assert run_engine.main(["replay", "--data", str(day), "--device", "cpu",
                            "--out", str(out), "--no-plots", *extra]) == 0
    rep = json.loads((out / "report.json").read_text())
    fills = pd.read_csv(out / "fills.csv")
    local = pd.to_datetime(fills["ts"], utc=True).dt.tz_convert(NY)
    return rep, local.dt.hour * 60 + local.dt.minute + local.dt.second / 60


@pytest.fixture(scope="module")
def spy_day(shared_data: Path) -> Path:
    return shared_data / "lean_ticks_2013-10/equity/usa/tick/spy/20131007_trade.zip"


def test_regular_hours_by_default(spy_day: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    rep, minutes = _replay(spy_day, tmp_path / "regular")
    assert len(minutes) > 0
    assert minutes.min() >= 9 * 60 + 30 and minutes.max() <= 16 * 60
    assert rep["session"]["hours"] == "regular"
    assert rep["bars"] == 390  # one bar a minute, 09:30 to 16:00
    assert "session: regular hours 09:30-16:00 New York" in capsys.readouterr().out


def test_extended_hours_when_asked(spy_day: Path, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    rep, minutes = _replay(spy_day, tmp_path / "extended", "--session", "extended")
    outside = (minutes < 9 * 60 + 30) | (minutes > 16 * 60)
    assert outside.any()
    assert rep["session"]["hours"] == "extended"
    assert rep["bars"] > 390
    assert "session: extended hours" in capsys.readouterr().out


def test_config_and_schedule_choose_the_hours(spy_day: Path, tmp_path: Path) -> None:
    """`session = "extended"` in the config asks for extended hours; a phase schedule that
    starts before 09:30 reads the pre-market (its WAIT phase), one inside the regular
    session does not."""
    cfg = tmp_path / "ext.toml"
    cfg.write_text('session = "extended"\n')
    assert market_hours(load_config(cfg).session) == "extended"
    assert market_hours(load_config(None).session) == "regular"
    assert market_hours("04:00,15:50,16:00") == "extended"
    assert market_hours("09:30,15:50,16:30") == "extended"
    rep, minutes = _replay(spy_day, tmp_path / "inside", "--session", "09:45,15:30,15:45")
    assert rep["session"] == {"hours": "regular", "regular_hours": "09:30-16:00 "
                              "America/New_York", "schedule": "09:45,15:30,15:45"}
    assert minutes.min() >= 9 * 60 + 45 and minutes.max() <= 16 * 60
