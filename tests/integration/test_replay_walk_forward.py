"""`replay --walk-forward` end to end: the daily bars go through the real engine, each
fold's rule is evolved in a background process and swapped in at the fold's first session,
and the report gives `evolve --walk-forward`'s numbers with the same options: each fold's
rules, dates and seed, its test ROI to the cent (money over 4 stocks x $10,000), the
stitched `oos_roi` to 1e-9 relative. Every rule version is in report.json with its
training window, seed and fitness; the equity curve is the stitched one."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

import run_engine

START = "2017-01-03"   # about 275 trading days to the file's end: three 120/40 folds
ARGS = ["--stocks", "4", "--start", START, "--population", "30", "--generations", "2",
        "--device", "cpu", "--walk-forward", "120,40", "--seed", "7"]
MONEY = 4 * 10_000.0


def data_file(shared_data: Path) -> Path:
    return shared_data / "sp500_5yr_daily" / "all_stocks_5yr.csv.gz"


def run(shared_data: Path, tmp: Path, command: str, *extra: str) -> dict[str, Any]:
    out = ["--out", str(tmp / ("best.json" if command == "evolve" else "replay"))]
    code = run_engine.main([command, "--data", str(data_file(shared_data)), *ARGS, *extra,
                            *out, "--json", str(tmp / f"{command}.json")])
    assert code == 0
    return dict(json.loads((tmp / f"{command}.json").read_text()))


@pytest.fixture(scope="module")
def both(shared_data: Path, tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[dict[str, Any], dict[str, Any], Path]:
    tmp = tmp_path_factory.mktemp("rwf")
    return run(shared_data, tmp, "evolve"), run(shared_data, tmp, "replay"), tmp


def test_replay_gives_evolves_walk_forward_to_the_cent(
        both: tuple[dict[str, Any], dict[str, Any], Path]) -> None:
    evolved, replayed, _ = both
    e, r = evolved["walk_forward"], replayed["walk_forward"]
    assert len(r["folds"]) == len(e["folds"]) >= 3
    for a, b in zip(e["folds"], r["folds"], strict=True):
        # the same trades: evolve's evaluator counts them as the engine's broker fills them
        for key in ("train_start", "train_end", "test_start", "test_end", "seed", "rules",
                    "test_fills"):
            assert a[key] == b[key], key
        assert abs((a["test_roi"] - b["test_roi"]) * MONEY) < 0.005
        assert abs((a["test_roi_buy_hold"] - b["test_roi_buy_hold"]) * MONEY) < 0.005
    assert r["oos_roi"] == pytest.approx(e["oos_roi"], rel=1e-9, abs=1e-12)
    assert r["oos_roi_buy_hold"] == pytest.approx(e["oos_roi_buy_hold"], rel=1e-9, abs=1e-12)
    assert r["fill_model"] == "signal-close" and r["like_evolve"]
    # the engine traded: fills in every fold, and the headline ROI is the stitched one
    assert replayed["fills"] > 0 and replayed["roi"] == r["oos_roi"]
    # a CPU strategy's feed stays a thread of the engine's process (--transport auto)
    assert (replayed["strategy_device"], replayed["transport"]) == ("cpu", "inproc")
    # every test day of every stock was a traded bar (the training days only warmed)
    assert replayed["bars"] == 4 * sum(f["test_days"] for f in r["folds"])


def test_rule_versions_are_in_the_report(
        both: tuple[dict[str, Any], dict[str, Any], Path]) -> None:
    evolved, replayed, tmp = both
    versions = replayed["rule_versions"]
    folds = replayed["walk_forward"]["folds"]
    assert [v["version"] for v in versions] == list(range(1, len(folds) + 1))
    for v, f in zip(versions, folds, strict=True):
        assert (v["train_start"], v["train_end"], v["seed"]) == (
            f["train_start"], f["train_end"], f["seed"])
        assert v["rules"] == f["rules"] and v["origin"] == f"fold {f['fold']}"
        assert v["fitness"] == f["train_fitness"]
        # asked for once the training window's last day was in: data time, not later
        assert v["evolved_at"][:10] == f["train_end"]
    on_disk = json.loads((tmp / "replay" / "report.json").read_text())
    assert on_disk["rule_versions"] == versions
    # the equity curve is stitched: its last point is the compounded out-of-sample money
    rows = list(csv.DictReader((tmp / "replay" / "equity.csv").open()))
    assert float(rows[-1]["equity"]) == pytest.approx(MONEY * (1 + replayed["roi"]),
                                                      abs=0.005)


@pytest.mark.parametrize(("extra", "says"), [
    (["--walk-forward", "120,40,20"], "STEP must equal TEST"),
    (["--walk-forward", "120"], "TRAIN,TEST[,STEP]"),
    (["--walk-forward", "120,40", "--strategy", "sma-cross:5,20"], "drop --strategy"),
    (["--walk-forward", "120,40", "--end", "2017-06-01"], "drop --end"),
])
def test_bad_walk_forward_options_exit_2_in_one_line(
        shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        extra: list[str], says: str) -> None:
    args = [a for a in ARGS if a not in ("--walk-forward", "120,40")]
    code = run_engine.main(["replay", "--data", str(data_file(shared_data)), *args, *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("error:") and says in err[-1]


def test_anchored_ensemble_with_costs_equal_to_the_cent(shared_data: Path,
                                                        tmp_path: Path) -> None:
    extra = ("--anchored", "--ensemble", "2", "--commission", "2.5", "--slippage-bps", "7")
    e = run(shared_data, tmp_path, "evolve", *extra)["walk_forward"]
    replayed = run(shared_data, tmp_path, "replay", *extra, "--no-plots")
    r = replayed["walk_forward"]
    assert replayed["costs"] == {"commission": 2.5, "slippage_bps": 7.0}
    assert all(f["train_start"] == START for f in r["folds"])  # anchored: one first day
    for a, b in zip(e["folds"], r["folds"], strict=True):
        assert a["rules"] == b["rules"] and len(b["rules"]) == 2
        assert abs((a["test_roi"] - b["test_roi"]) * MONEY) < 0.005
    assert r["oos_roi"] == pytest.approx(e["oos_roi"], rel=1e-9, abs=1e-12)
