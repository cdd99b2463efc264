"""Parity: an evolved GP strategy replayed through the event-driven engine over its training
window ends with the same money per stock, to the cent, as the GP evaluator."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import run_engine
from strategies.gp.strategy import simulate_money
from strategies.gp.strategy_file import read_strategy_file
from strategies.gp.window import load_window


@pytest.mark.slow
def test_replay_matches_evaluator_to_the_cent(shared_data: Path, tmp_path: Path) -> None:
    data = shared_data / "sp500_5yr_daily" / "all_stocks_5yr.csv.gz"
    best = tmp_path / "best.json"
    rc = run_engine.main([
        "evolve", "--data", str(data), "--stocks", "6", "--start", "2014-03-03",
        "--train-days", "260", "--test-days", "40", "--population", "120",
        "--generations", "3", "--seed", "4", "--device", "cpu", "--quiet",
        "--out", str(best), "--json", str(tmp_path / "evolve.json"),
    ])
    assert rc == 0
    evolve = json.loads((tmp_path / "evolve.json").read_text())
    train = evolve["train"]
    sf = read_strategy_file(best)

    # the evaluator's money per stock over the training days
    window = load_window(data, 6, 260, 40, start="2014-03-03")
    assert window.symbols == train["symbols"]
    want = simulate_money(sf.rule(), window.panel, window.close, window.train.day0,
                          window.train.day1)

    # the same strategy through the engine: real sockets, bars, phases, broker; bar closes
    # that wait for the strategy, and bar closes overlapped with the next day's bars
    for overlap in ("never", "always"):
        config = tmp_path / f"{overlap}.toml"
        config.write_text(f'overlap_decisions = "{overlap}"\n')
        out = tmp_path / f"replay-{overlap}"
        rc = run_engine.main([  # the window (symbols, dates, data file) comes from best.json
            "replay", "--strategy", str(best), "--window", "train", "--device", "cpu",
            "--fill", "signal-close", "--config", str(config), "--out", str(out), "--no-plots",
        ])
        assert rc == 0
        rep = json.loads((out / "report.json").read_text())
        assert rep["fill"] == "signal-close"
        assert rep["bars"] == 6 * 260
        overlapped = rep["overlapped_bar_events"]
        assert overlapped == (0 if overlap == "never" else rep["bar_events"]), overlapped
        got = np.array([rep["per_symbol"][s]["final_equity"] for s in train["symbols"]])
        np.testing.assert_allclose(got, want, rtol=0, atol=0.005)
        # and the strategy actually traded, so the comparison means something
        assert rep["fills"] > 0
        roi = float(np.mean(got / 10_000 - 1))
        assert roi == pytest.approx(train["roi"], abs=1e-9)


@pytest.mark.gpu
def test_engine_gp_strategy_on_cuda_trades_like_cpu(shared_data: Path, tmp_path: Path) -> None:
    """The engine's batched GPU launch per bar close gives the CPU twin's trades exactly."""
    data = shared_data / "sp500_5yr_daily" / "all_stocks_5yr.csv.gz"
    best = tmp_path / "best.json"
    assert run_engine.main([
        "evolve", "--data", str(data), "--stocks", "32", "--train-days", "300",
        "--test-days", "50", "--population", "500", "--generations", "4", "--seed", "2",
        "--device", "cpu", "--quiet", "--out", str(best), "--json", str(tmp_path / "e.json"),
    ]) == 0
    train = json.loads((tmp_path / "e.json").read_text())["train"]
    reports = {}
    for device in ("cpu", "cuda"):
        out = tmp_path / device
        assert run_engine.main([
            "replay", "--data", str(data), "--symbols", ",".join(train["symbols"]),
            "--start", train["first_date"], "--end", train["last_date"],
            "--strategy", f"{best}#ensemble", "--device", device, "--out", str(out),
            "--no-plots",
        ]) == 0
        reports[device] = json.loads((out / "report.json").read_text())
    assert reports["cpu"]["per_symbol"] == reports["cuda"]["per_symbol"]
    assert reports["cpu"]["fills"] > 0
    # on CUDA the bar closes overlap the next bars (asynchronous), on the CPU twin they wait
    assert reports["cuda"]["overlapped_bar_events"] > 0
    assert reports["cpu"]["overlapped_bar_events"] == 0
