"""evolve --returns-out -> select -> best.json#ensemble:select=FILE, against plain-Python money."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import run_engine
from strategies.gp import reference
from strategies.gp.representation import GPRule
from strategies.gp.returns import hall_of_fame_indices
from strategies.gp.strategy_file import read_strategy_file, strategy_from_file
from strategies.gp.window import GPWindow, load_window
from strategies.registry import strategy_from_spec as load_engine_strategy
from strategies.selection import read_returns


def _daily_values_plain(rule: GPRule, w: GPWindow) -> list[float]:
    """Portfolio value after each training day's trade, by the paper's rules in plain Python."""
    day0, day1 = w.train.day0, w.train.day1
    totals = [0.0] * (day1 - day0)
    for s in range(w.n_stocks):
        cash, shares, long_signal = reference.START_CASH, 0, False
        for d in range(day0, day1):
            values = [float(v) for v in w.panel[d, :, s]]
            buy, sell = reference.eval_tree(rule.buy, values), reference.eval_tree(rule.sell,
                                                                                  values)
            price = float(w.close[d, s])
            if buy and not sell and not long_signal:
                long_signal = True
                n = math.floor((cash - reference.FEE) / price)
                if n >= 1:
                    cash, shares = cash - (n * price + reference.FEE), n
            elif sell and not buy and long_signal:
                long_signal = False
                if shares > 0:
                    cash, shares = cash + (shares * price - reference.FEE), 0
            last = d == day1 - 1
            value = cash + (shares * price - reference.FEE if shares > 0 else 0.0) if last \
                else cash + shares * price
            totals[d - day0] += value
    return totals


@pytest.fixture(scope="module")
def evolved(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("ens")
    code = run_engine.main([
        "evolve", "--data", str(shared_data / "sp500_5yr_daily"), "--stocks", "4",
        "--train-days", "120", "--test-days", "0", "--start", "2015-03-02", "--population",
        "80", "--generations", "3", "--seed", "3", "--hall-of-fame", "8", "--device", "cpu",
        "--quiet", "--out", str(tmp / "best.json"), "--returns-out", str(tmp / "returns.csv"),
        "--json", str(tmp / "evolve.json")])
    assert code == 0
    return {"dir": tmp, "best": tmp / "best.json", "returns": tmp / "returns.csv",
            "report": tmp / "evolve.json", "data": shared_data / "sp500_5yr_daily"}


def test_returns_out_equals_plain_python_money(evolved: dict[str, Path]) -> None:
    sf = read_strategy_file(evolved["best"])
    r = json.loads(evolved["report"].read_text())
    w = load_window(evolved["data"], None, r["train"]["days"], 0,
                    start=r["train"]["first_date"], symbols=r["train"]["symbols"])
    lines = evolved["returns"].read_text().splitlines()
    header = lines[0].split(",")
    rules = sf.rules()
    assert header == ["date"] + [f"hof{i}" for i in range(len(rules))]
    assert len(lines) == 1 + w.train.days
    assert lines[1].split(",")[0] == r["train"]["first_date"]
    table = np.array([[float(x) for x in line.split(",")[1:]] for line in lines[1:]])
    start = w.n_stocks * reference.START_CASH
    for i, rule in enumerate(rules):
        values = _daily_values_plain(rule, w)
        np.testing.assert_allclose(start * np.cumprod(1 + table[:, i]), values, rtol=1e-12)
        assert values[-1] == pytest.approx(sum(reference.final_cash(
            rule, w.panel, w.close, w.train.day0, w.train.day1)), rel=1e-12)


def test_select_then_ensemble_votes_over_the_chosen_rules(
        evolved: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    table = read_returns(evolved["returns"])
    k = min(3, len(table.names))
    sel = evolved["dir"] / "select.json"
    code = run_engine.main(["select", "--returns", str(evolved["returns"]), "--k", str(k),
                            "--device", "cpu", "--json", str(sel)])
    assert code == 0, capsys.readouterr().err
    chosen = json.loads(sel.read_text())["subset"]
    assert len(chosen) == k and set(chosen) <= set(table.names)
    rules = read_strategy_file(evolved["best"]).rules()
    ens = strategy_from_file(evolved["best"], device="cpu", select=sel)
    idx = hall_of_fame_indices(chosen, len(rules))
    assert [(r.buy.tolist(), r.sell.tolist()) for r in ens.rules] == \
        [(rules[i].buy.tolist(), rules[i].sell.tolist()) for i in idx]
    via_spec = load_engine_strategy(f"{evolved['best']}#ensemble:select={sel}", device="cpu")
    assert via_spec.name.endswith(":select") and len(via_spec.rules) == k  # type: ignore[attr-defined]


@pytest.mark.parametrize(("subset", "match"), [
    (["hof0", "momentum"], "not a hall-of-fame column"),
    (["hof0", "hof99"], "has 8 rules|has \\d+ rules"),
    ([], "non-empty"),
])
def test_bad_selection_files(evolved: dict[str, Path], subset: list[str], match: str) -> None:
    sel = evolved["dir"] / "bad_select.json"
    sel.write_text(json.dumps({"subset": subset}))
    with pytest.raises(ValueError, match=match):
        strategy_from_file(evolved["best"], device="cpu", select=sel)


@pytest.mark.parametrize("fragment", ["#ensembl", "#ensemble:select=", "#ensemble:pick=x"])
def test_bad_strategy_fragment(evolved: dict[str, Path], fragment: str) -> None:
    with pytest.raises(ValueError, match="after '#'"):
        load_engine_strategy(f"{evolved['best']}{fragment}", device="cpu")


def test_replay_with_a_selected_ensemble(evolved: dict[str, Path], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    table = read_returns(evolved["returns"])
    sel = tmp_path / "sel.json"
    sel.write_text(json.dumps({"subset": table.names[:2]}))
    out = tmp_path / "replay.json"
    code = run_engine.main(["replay", "--strategy", f"{evolved['best']}#ensemble:select={sel}",
                            "--window", "train", "--data", str(evolved["data"]), "--device",
                            "cpu", "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    assert json.loads(out.read_text())["bars"] > 0
