"""`run_engine.py evolve` end to end at a tiny size: JSON report, strategy file, PNG, and
the reported ROIs recomputed from the written file over the reported window."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import run_engine
from gpu.gp.evaluate import buy_hold_cash, roi
from strategies.gp.strategy import simulate_money
from strategies.gp.strategy_file import read_strategy_file
from strategies.gp.window import load_window


def test_evolve_end_to_end(shared_data, tmp_path: Path, capsys: pytest.CaptureFixture[str]
                           ) -> None:
    data = shared_data / "sp500_5yr_daily"
    out = tmp_path / "run" / "best.json"
    report = tmp_path / "report.json"
    code = run_engine.main([
        "evolve", "--data", str(data), "--stocks", "4", "--train-days", "120",
        "--test-days", "60", "--start", "2015-03-02", "--population", "60",
        "--generations", "3", "--seed", "2", "--device", "cpu", "--out", str(out),
        "--json", str(report)])
    assert code == 0
    err = capsys.readouterr().err
    assert sum(line.startswith("gen ") for line in err.splitlines()) == 3

    r = json.loads(report.read_text())
    for key in ("generations", "best", "train", "test", "gp_ops_per_second", "device"):
        assert key in r
    assert len(r["generations"]) == 3 and r["device"] == "cpu" and r["gp_ops_per_second"] > 0
    for g in r["generations"]:
        assert {"best", "mean", "mean_size", "evals_per_second", "seconds"} <= set(g)
    png = Path(r["png"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    sf = read_strategy_file(out)
    assert sf.rule().buy_infix == r["best"]["buy"] and len(sf.hall_of_fame) >= 1
    assert sf.train is not None and sf.train.first_date == r["train"]["first_date"] == "2015-03-02"
    assert r["test"]["symbols"] == r["train"]["symbols"] and len(r["train"]["symbols"]) == 4

    # anyone can replay the same window from the report: recompute the ROIs from the file
    w = load_window(data, None, r["train"]["days"], r["test"]["days"],
                    start=r["train"]["first_date"], symbols=r["train"]["symbols"])
    assert str(w.dates[-1]) == r["test"]["last_date"]
    assert str(w.dates[w.test.day0]) == r["test"]["first_date"]
    for period, rep in ((w.train, r["train"]), (w.test, r["test"])):
        cash = simulate_money(sf.rule(), w.panel, w.close, period.day0, period.day1)
        assert float(np.mean(roi(cash))) == rep["roi"]
        assert float(np.mean(roi(buy_hold_cash(w.close, period.day0, period.day1)))) == \
            rep["roi_buy_hold"]
    assert r["train"]["fitness"] == pytest.approx(r["best"]["fitness"], abs=1e-15)


@pytest.mark.parametrize("args, words", [
    (["--stocks", "100000"], "stocks"),
    (["--train-days", "5000"], "days"),
    (["--data", "/no/such/place"], "no such"),
    (["--population", "1"], "population"),
    (["--test-days", "1"], "test-days"),
])
def test_evolve_bad_input_is_one_line(shared_data, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str], args: list[str],
                                      words: str) -> None:
    base = ["evolve", "--data", str(shared_data / "sp500_5yr_daily"), "--stocks", "2",
            "--train-days", "50", "--test-days", "10", "--population", "10",
            "--generations", "1", "--device", "cpu", "--out", str(tmp_path / "x.json")]
    code = run_engine.main(base + args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("error:") and words in err[-1]


@pytest.mark.parametrize("where", ["folder", "under_a_file", "default_is_a_folder",
                                   "walk_forward_default_is_a_folder"])
def test_evolve_unwritable_png_is_one_line_before_the_work(
        shared_data, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str) -> None:
    """Every way the PNG's path cannot take a file is refused like --out, before the
    evolution runs: it used to end a finished run with an internal error."""
    out = tmp_path / "x.json"
    extra: list[str] = []
    if where == "folder":
        (tmp_path / "p.png").mkdir()
        extra = ["--png", str(tmp_path / "p.png")]
    elif where == "under_a_file":
        (tmp_path / "f").write_text("")
        extra = ["--png", str(tmp_path / "f" / "p.png")]
    elif where == "default_is_a_folder":
        (tmp_path / "x_fitness.png").mkdir()
    else:
        (tmp_path / "x_walk_forward.png").mkdir()
        extra = ["--walk-forward", "30,10"]
    argv = ["evolve", "--data", str(shared_data / "sp500_5yr_daily"), "--stocks", "2",
            "--train-days", "50", "--test-days", "10", "--population", "10",
            "--generations", "1", "--device", "cpu", "--out", str(out), *extra]
    code = run_engine.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("error: --png") and len(err) == 1, err
    assert not out.exists()  # nothing ran


def test_first_run_work_reads_the_window_for_the_run(shared_data, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.commands import evolve
    from strategies.gp import window as gp_window

    monkeypatch.setenv("TRADING_CACHE_DIR", str(tmp_path / "cache"))
    parser = run_engine.build_parser("evolve", "run_engine.py")
    argv = ["evolve", "--data", str(shared_data / "sp500_5yr_daily"), "--stocks", "3",
            "--train-days", "40", "--test-days", "0", "--device", "cpu", "--out",
            str(tmp_path / "b.json")]
    job = evolve.first_run_work(parser.parse_args(argv))
    assert job is not None
    monkeypatch.setattr(evolve.plot_worker, "in_background", lambda: True)
    job()
    assert len(list((tmp_path / "cache").glob("window-*.pickle"))) == 1
    gp_window._cached_table.cache_clear()
    gp_window.load_window(shared_data / "sp500_5yr_daily", 3, 40, 0)
    assert gp_window._cached_table.cache_info().misses == 0  # the run's load parses nothing
    assert evolve.first_run_work(parser.parse_args([*argv, "--walk-forward", "20,10"])) is None
