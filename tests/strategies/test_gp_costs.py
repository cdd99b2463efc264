"""Costs in the GP fitness: the evaluators' money under any commission and slippage equals
the paper broker's own fills (engine.trading.broker.PaperBroker, driven order by order), to the
cent;
buy-and-hold pays the same costs; an evolution under costs ranks rules by that money; the
strategy file records the costs and the rules tried; bad costs are one-line errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.trading.broker import PaperBroker
from gpu.device import cuda_present
from gpu.gp import evaluate as gp_eval
from gpu.gp.core import CODE_BUY, CODE_SELL, cost_tuple
from strategies.gp.evolution import EvolutionConfig, evolve
from strategies.gp.reference import eval_tree
from strategies.gp.representation import rules_programs
from strategies.gp.strategy import simulate_money
from strategies.gp.strategy_file import read_strategy_file
from strategies.gp.window import GPWindow, load_window


def broker_cash(codes: list[int], close: list[float], commission: float, bps: float) -> float:
    """Final cash of one stock's decision codes traded through the paper broker: the signal
    matrix (buy-only enters when flat, sell-only closes when long), all-in entries, the
    position closed at the last close."""
    broker = PaperBroker(["X"], commission=commission, slippage_bps=bps)
    signal = 0
    for day, (code, price) in enumerate(zip(codes, close, strict=True)):
        if code == CODE_BUY and signal == 0:
            signal = 1
            qty = broker.entry_quantity(0, 1, price)
            broker.execute(broker.new_order(day, 0, 1, qty, "entry"), 0, price, day)
        elif code == CODE_SELL and signal == 1:
            signal = 0
            if broker.accounts[0].position:
                broker.execute(broker.new_order(day, 0, -1, broker.accounts[0].position,
                                                "close"), 0, price, day)
    if broker.accounts[0].position:
        broker.execute(broker.new_order(len(close), 0, -1, broker.accounts[0].position,
                                        "close"), 0, close[-1], len(close))
    return broker.accounts[0].cash


@settings(max_examples=300, deadline=None)
@given(data=st.data(), commission=st.floats(0.0, 25.0),
       bps=st.one_of(st.just(0.0), st.floats(0.0, 150.0)), days=st.integers(2, 40))
def test_evaluator_money_is_the_brokers_under_any_costs(data: st.DataObject, commission: float,
                                                        bps: float, days: int) -> None:
    close = data.draw(st.lists(st.floats(0.5, 12_000.0), min_size=days, max_size=days))
    codes = data.draw(st.lists(st.sampled_from([0, CODE_BUY, CODE_SELL, 3]), min_size=days,
                               max_size=days))
    costs = cost_tuple(commission, bps)
    got = gp_eval.cash_from_codes(np.array(codes, np.int8)[:, None],
                                  np.array(close)[:, None], 0, days, costs)[0]
    assert same_money(got, broker_cash(codes, close, commission, bps))
    hold = [CODE_BUY] + [0] * (days - 1)
    bh = gp_eval.buy_hold_cash(np.array(close)[:, None], 0, days, costs)[0]
    assert same_money(bh, broker_cash(hold, close, commission, bps))


def same_money(got: float, want: float) -> bool:
    """Equal to the last bit while the money is below 2**53; beyond it (a share count or a
    sum of dollars no float64 holds exactly) the broker and the evaluator, each rounding
    its own correct order of the same operations, agree to float64's precision."""
    if max(abs(got), abs(want)) < 2.0**53:
        return got == want
    return math.isclose(got, want, rel_tol=1e-13)


def test_money_beyond_2_to_the_53_agrees_to_float64_precision() -> None:
    """Hypothesis's find: buying at 0.5 and selling at 7,296 and 7,731 (and 3,999 at 1.0)
    takes $17-commission money past 2**53, where the two paths' sums differ in the last
    bits (by 32 of 9.007e15)."""
    close = [1.0] * 13 + [0.5, 7296.0, 1.0, 0.5, 7731.0] + [1.0] * 16 + [3999.0, 1.0]
    codes = [0] * 13 + [CODE_BUY, CODE_SELL, 0, CODE_BUY, CODE_SELL] + [0] * 15 + [
        CODE_BUY, CODE_SELL, CODE_BUY]
    want = broker_cash(codes, close, 17.0, 0.0)
    got = gp_eval.cash_from_codes(np.array(codes, np.int8)[:, None], np.array(close)[:, None],
                                  0, len(close), cost_tuple(17.0, 0.0))[0]
    assert want > 2.0**53 and same_money(got, want)
    assert not same_money(got * (1 + 1e-12), want)  # the tolerance still sees an error


@pytest.fixture(scope="module")
def window(shared_data: Path) -> GPWindow:
    return load_window(shared_data / "sp500_5yr_daily", 4, 120, 0, start="2015-06-01")


def reference_cash(rule: object, w: GPWindow, commission: float, bps: float) -> list[float]:
    """Per stock: the reference evaluator's trees (plain recursion) through the broker."""
    out = []
    for s in range(w.close.shape[1]):
        codes = []
        for d in range(w.close.shape[0]):
            values = [float(v) for v in w.panel[d, :, s]]
            codes.append(CODE_BUY * eval_tree(rule.buy, values)  # type: ignore[attr-defined]
                         + CODE_SELL * eval_tree(rule.sell, values))  # type: ignore[attr-defined]
        out.append(broker_cash(codes, [float(c) for c in w.close[:, s]], commission, bps))
    return out


@pytest.mark.parametrize(("commission", "bps"), [(0.0, 0.0), (4.95, 12.5), (1.0, 3.0)])
def test_evolution_under_costs_ranks_by_the_brokers_money(window: GPWindow, commission: float,
                                                          bps: float) -> None:
    costs = cost_tuple(commission, bps)
    ev = gp_eval.PopulationEvaluator(window.panel, window.close, 0, window.close.shape[0],
                                     "cpu", costs=costs)
    result = evolve(ev, EvolutionConfig(population=40, generations=3, seed=3, elite=2,
                                        hall_of_fame=4))
    rules = [c.rule for c in result.hall_of_fame]
    bh = gp_eval.buy_hold_cash(window.close, 0, window.close.shape[0], costs)
    stack = gp_eval.PopulationEvaluator(window.panel, window.close, 0, window.close.shape[0],
                                        "cpu", method="stack", costs=costs)
    cash_stack = stack.final_cash(*rules_programs(rules))
    for i, c in enumerate(result.hall_of_fame):
        want = np.array(reference_cash(c.rule, window, commission, bps))
        got = simulate_money(c.rule, window.panel, window.close, costs=costs)
        assert np.array_equal(got, want)            # to the cent, and in fact to the bit
        assert np.array_equal(cash_stack[i], want)  # the stack interpreter too
        fitness = np.mean((want / 10_000 - 1) - (bh / 10_000 - 1))
        assert c.fitness == pytest.approx(fitness, abs=1e-15)
    for s in range(window.close.shape[1]):
        hold = [CODE_BUY] + [0] * (window.close.shape[0] - 1)
        assert bh[s] == broker_cash(hold, [float(x) for x in window.close[:, s]], commission,
                                    bps)


@pytest.mark.skipif(not cuda_present(), reason="no CUDA device or simulator")
def test_cuda_money_under_costs_equals_cpu(window: GPWindow) -> None:
    costs = cost_tuple(2.0, 9.0)
    panel = np.ascontiguousarray(window.panel[:40, :, :2])
    close = np.ascontiguousarray(window.close[:40, :2])
    rng = np.random.default_rng(1)
    from strategies.gp.init import ramped_half_and_half

    programs, lengths = ramped_half_and_half(6, rng, 2, 3).compile()
    cpu = gp_eval.PopulationEvaluator(panel, close, 0, 40, "cpu", costs=costs)
    gpu = gp_eval.PopulationEvaluator(panel, close, 0, 40, "cuda", costs=costs)
    assert np.array_equal(cpu.final_cash(programs, lengths), gpu.final_cash(programs, lengths))


@pytest.mark.parametrize(("commission", "bps"), [(-1.0, 0.0), (math.nan, 0.0), (1.0, -2.0),
                                                 (1.0, math.inf), (1.0, 10_000.0)])
def test_bad_costs_are_refused(commission: float, bps: float) -> None:
    with pytest.raises(ValueError, match="commission"):
        cost_tuple(commission, bps)


def _evolve_args(data: Path, out: Path, *extra: str) -> list[str]:
    return ["evolve", "--data", str(data), "--stocks", "3", "--start", "2015-06-01",
            "--train-days", "80", "--test-days", "20", "--population", "30",
            "--generations", "2", "--device", "cpu", "--quiet", "--out", str(out), *extra]


def _exit_code(argv: list[str]) -> int:
    import run_engine

    try:
        return run_engine.main(argv)
    except SystemExit as e:  # argparse's own refusal of a value that is not a number
        return int(e.code or 0)


@pytest.mark.parametrize("bad", [["--commission", "-1"], ["--slippage-bps", "nan"],
                                 ["--commission", "x"]])
def test_command_refuses_bad_costs_in_one_line(shared_data: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               bad: list[str]) -> None:
    code = _exit_code(_evolve_args(shared_data / "sp500_5yr_daily", tmp_path / "b.json", *bad))
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert "Traceback" not in err and "error:" in err.splitlines()[-1]
    assert not (tmp_path / "b.json").exists()


def test_strategy_file_records_costs_and_rules_tried(shared_data: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    import run_engine

    out = tmp_path / "best.json"
    assert run_engine.main(_evolve_args(shared_data / "sp500_5yr_daily", out, "--commission",
                                        "3.5", "--slippage-bps", "6", "--json",
                                        str(tmp_path / "e.json"), "--returns-out",
                                        str(tmp_path / "r.csv"))) == 0
    printed = capsys.readouterr().out
    sf = read_strategy_file(out)
    assert (sf.commission, sf.slippage_bps, sf.rules_tried) == (3.5, 6.0, 30 * 2)
    report = json.loads((tmp_path / "e.json").read_text())
    for period in ("train", "test"):
        stats = report[period]["stats"]
        assert stats["trials"] == 60 and stats["days"] == report[period]["days"]
        assert stats["total_return"] == pytest.approx(report[period]["roi"], abs=1e-12) or \
            report[period]["stopped_trading"]
        # the summary says it in words; an interval containing zero is named as such
        assert stats["verdict"] in printed
        lo, hi = stats["excess_ci95"]
        assert ("contains zero" in stats["verdict"]) == (lo <= 0.0 <= hi)
    assert "$3.5 a trade, 6 bp slippage" in printed
    # the hall of fame's daily returns for `select` pay the same costs: the best rule's
    # compound to its training ROI
    rows = [ln.split(",") for ln in (tmp_path / "r.csv").read_text().splitlines()]
    col = rows[0].index("hof0")
    assert math.prod(1.0 + float(r[col]) for r in rows[1:]) - 1.0 == pytest.approx(
        report["train"]["roi"], abs=1e-12)
    # a file written before the fields existed still loads, with the paper's costs
    raw = json.loads(out.read_text())
    for k in ("commission", "slippage_bps", "rules_tried"):
        raw.pop(k)
    old = tmp_path / "old.json"
    old.write_bytes(msgspec.json.encode(raw))
    sf_old = read_strategy_file(old)
    assert (sf_old.commission, sf_old.slippage_bps, sf_old.rules_tried) == (1.0, 0.0, None)
