"""`evolve --walk-forward` end to end on the shared S&P file: the JSON contract (fold dates,
test ROIs, the stitched ROI compounding exactly), the per-fold table and verdict on stdout,
the PNG and the last fold's strategy file; the same seed gives the same report; a Dask
scheduler gives the serial report; bad plans are one-line errors. And costs end to end: a
replay of an `evolve --commission --slippage-bps` file over its training window with the
same costs ends with evolve's money per stock, to the cent."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import run_engine
from gpu.gp.core import cost_tuple
from strategies.gp.strategy import simulate_money
from strategies.gp.strategy_file import read_strategy_file
from strategies.gp.window import history_matrix, load_window

START = "2017-01-03"   # about 275 trading days to the file's end: three 120/40 folds
ARGS = ["--stocks", "4", "--start", START, "--population", "30", "--generations", "2",
        "--device", "cpu", "--walk-forward", "120,40", "--seed", "7"]


def data_file(shared_data: Path) -> Path:
    return shared_data / "sp500_5yr_daily" / "all_stocks_5yr.csv.gz"


def walk(shared_data: Path, tmp: Path, *extra: str) -> dict[str, Any]:
    tmp.mkdir(parents=True, exist_ok=True)
    code = run_engine.main(["evolve", "--data", str(data_file(shared_data)), *ARGS, *extra,
                            "--out", str(tmp / "best.json"), "--json", str(tmp / "wf.json")])
    assert code == 0
    return dict(json.loads((tmp / "wf.json").read_text()))


@pytest.fixture(scope="module")
def first(shared_data: Path, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[dict[str, Any], Path]:
    tmp = tmp_path_factory.mktemp("wf")
    return walk(shared_data, tmp), tmp


def test_report_contract_and_compounding(first: tuple[dict[str, Any], Path],
                                         shared_data: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    report, tmp = first
    wf = report["walk_forward"]
    m = history_matrix(data_file(shared_data), 4, START)
    dates = [str(d) for d in m.dates]
    folds = wf["folds"]
    assert len(folds) == (len(dates) - 120) // 40 >= 3
    for k, f in enumerate(folds):
        # rolling 120/40, step 40: the dates are the data's own trading days
        assert f["train_start"] == dates[40 * k] and f["train_end"] == dates[40 * k + 119]
        assert f["test_start"] == dates[40 * k + 120] and f["test_end"] == dates[40 * k + 159]
        for key in ("train_start", "train_end", "test_start", "test_end"):
            np.datetime64(f[key], "D")  # YYYY-MM-DD
            assert len(f[key]) == 10
        assert f["test_excess"] == f["test_roi"] - f["test_roi_buy_hold"]
        assert f["seed"] == 7 + k
    assert wf["oos_roi"] == math.prod(1.0 + f["test_roi"] for f in folds) - 1.0
    assert wf["oos_roi_buy_hold"] == math.prod(1.0 + f["test_roi_buy_hold"] for f in folds) - 1
    assert wf["rules_tried"] == len(folds) * 30 * 2 == wf["oos_stats"]["trials"]
    assert wf["oos_stats"]["days"] == 40 * len(folds) == len(wf["curve"]["dates"])
    assert wf["oos_stats"]["total_return"] == pytest.approx(wf["oos_roi"], rel=1e-12)
    assert "$1 a trade" in wf["summary"] and "buy-and-hold" in wf["summary"]
    assert Path(report["png"]).read_bytes()[:4] == b"\x89PNG"
    sf = read_strategy_file(tmp / "best.json")  # the last fold's rules and windows
    assert sf.train is not None and sf.test is not None
    assert (sf.train.first_date, sf.test.last_date) == (folds[-1]["train_start"],
                                                         folds[-1]["test_end"])
    assert sf.rules_tried == wf["rules_tried"] and sf.seed == folds[-1]["seed"]


def test_stdout_table_and_verdict(shared_data: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    report = walk(shared_data, tmp_path, "--ensemble", "3", "--anchored", "--returns-out",
                  str(tmp_path / "r.csv"))
    out, err = capsys.readouterr()
    wf = report["walk_forward"]
    assert wf["anchored"] and wf["ensemble"] == 3
    assert all(f["train_start"] == wf["folds"][0]["train_start"] for f in wf["folds"])
    assert all(len(f["rules"]) == 3 for f in wf["folds"])
    rows = [ln for ln in out.splitlines() if ln[:4].strip().isdigit()]
    assert len(rows) == len(wf["folds"])
    assert wf["oos_stats"]["verdict"] in out
    assert f"{wf['oos_roi']:+.2%}" in out
    n = len(wf["folds"])
    assert [f"fold {k}/{n}" in err for k in range(1, n + 1)] == [True] * n and "ETA" in err
    # --returns-out: the last fold's hall of fame over its (anchored) training days
    rows = (tmp_path / "r.csv").read_text().splitlines()
    last = wf["folds"][-1]
    assert rows[0].startswith("date,hof0") and len(rows) - 1 == last["train_days"]
    assert rows[1].startswith(last["train_start"]) and rows[-1].startswith(last["train_end"])


def test_same_seed_same_report(first: tuple[dict[str, Any], Path], shared_data: Path,
                               tmp_path: Path) -> None:
    report, tmp = first
    again = walk(shared_data, tmp_path)
    assert again["walk_forward"] == report["walk_forward"]
    assert (tmp_path / "best.json").read_bytes() == (tmp / "best.json").read_bytes()


def test_folds_on_a_dask_scheduler_give_the_serial_report(
        first: tuple[dict[str, Any], Path], shared_data: Path, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        on_dask = walk(shared_data, tmp_path, "--scheduler", cluster.scheduler_address)
    assert on_dask["walk_forward"] == first[0]["walk_forward"]


def test_the_last_fold_is_an_evolve_run_and_its_file_replays_to_the_cent(
        first: tuple[dict[str, Any], Path], shared_data: Path, tmp_path: Path) -> None:
    """The last fold = `evolve` over its days with its seed (same rules, same file), and
    `replay --window test` of the walk-forward's strategy file ends with its test money."""
    report, tmp = first
    last = report["walk_forward"]["folds"][-1]
    assert run_engine.main([
        "evolve", "--data", str(data_file(shared_data)), "--symbols",
        ",".join(report["symbols"]), "--start", last["train_start"], "--train-days",
        str(last["train_days"]), "--test-days", str(last["test_days"]), "--population", "30",
        "--generations", "2", "--device", "cpu", "--quiet", "--seed", str(last["seed"]),
        "--out", str(tmp_path / "fold.json"), "--json", str(tmp_path / "fold_r.json")]) == 0
    fold = json.loads((tmp_path / "fold_r.json").read_text())
    assert (fold["best"]["buy"], fold["best"]["sell"]) == (last["rules"][0]["buy"],
                                                           last["rules"][0]["sell"])
    assert fold["test"]["roi"] == last["test_roi"]
    assert fold["test"]["roi_buy_hold"] == last["test_roi_buy_hold"]
    wf_file, fold_file = read_strategy_file(tmp / "best.json"), read_strategy_file(
        tmp_path / "fold.json")
    assert wf_file.hall_of_fame == fold_file.hall_of_fame
    assert (wf_file.train, wf_file.test) == (fold_file.train, fold_file.test)
    out = tmp_path / "replay"
    assert run_engine.main(["replay", "--strategy", str(tmp / "best.json"), "--window", "test",
                            "--device", "cpu", "--fill", "signal-close", "--out",
                            str(out), "--no-plots"]) == 0
    rep = json.loads((out / "report.json").read_text())
    got = np.array([rep["per_symbol"][s]["final_equity"] for s in report["symbols"]])
    assert float(np.mean(got / 10_000 - 1)) == pytest.approx(last["test_roi"], abs=1e-6)
    assert rep["fills"] == last["test_fills"] > 0  # the same trades, and some


@pytest.mark.parametrize(("plan", "says"), [
    ("0,5", "TRAIN >= 2"), ("10", "TRAIN,TEST[,STEP]"), ("a,b", "whole numbers"),
    ("400,40", "needed for one fold"), ("100,40,0", "STEP >= 1"),
    ("120,40 --ensemble 0", "--ensemble must be"), ("120,40 --ensemble 11", "--ensemble must"),
    ("120,40 --islands 2", "drop --islands")])
def test_bad_plans_exit_2_in_one_line(shared_data: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str], plan: str,
                                      says: str) -> None:
    args = [a for arg in ARGS for a in (plan.split() if arg == "120,40" else [arg])]
    code = run_engine.main(["evolve", "--data", str(data_file(shared_data)), *args,
                            "--out", str(tmp_path / "b.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("error:") and says in err[-1]
    assert not (tmp_path / "b.json").exists()


@pytest.mark.slow
def test_replay_with_the_same_costs_ends_with_evolves_money(shared_data: Path,
                                                            tmp_path: Path) -> None:
    data = data_file(shared_data)
    best = tmp_path / "best.json"
    costs = ["--commission", "2.5", "--slippage-bps", "7"]
    assert run_engine.main([
        "evolve", "--data", str(data), "--stocks", "5", "--start", "2014-03-03",
        "--train-days", "200", "--test-days", "30", "--population", "100",
        "--generations", "3", "--seed", "4", "--device", "cpu", "--quiet", *costs,
        "--out", str(best), "--json", str(tmp_path / "evolve.json")]) == 0
    train = json.loads((tmp_path / "evolve.json").read_text())["train"]
    sf = read_strategy_file(best)
    window = load_window(data, 5, 200, 30, start="2014-03-03")
    want = simulate_money(sf.rule(), window.panel, window.close, window.train.day0,
                          window.train.day1, costs=cost_tuple(2.5, 7.0))
    out = tmp_path / "replay"
    assert run_engine.main([
        "replay", "--strategy", str(best), "--window", "train", "--device", "cpu",
        "--fill", "signal-close", *costs, "--out", str(out), "--no-plots"]) == 0
    rep = json.loads((out / "report.json").read_text())
    got = np.array([rep["per_symbol"][s]["final_equity"] for s in train["symbols"]])
    assert rep["fills"] > 0
    np.testing.assert_allclose(got, want, rtol=0, atol=0.005)
    assert float(np.mean(got / 10_000 - 1)) == pytest.approx(train["roi"], abs=1e-9)
