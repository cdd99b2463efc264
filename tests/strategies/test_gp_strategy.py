"""GP strategies: files round-trip and corrupt ones fail in one line; GPStrategy's signals
equal the reference trees day by day; the engine's signal mapping reproduces the
evaluator's money; the ensemble votes by majority."""

from __future__ import annotations

import math
from pathlib import Path

import msgspec
import numpy as np
import pytest

from gpu.device import cuda_present
from gpu.indicators.catalogue import TERMINAL_SET_VERSION
from strategies.base import Strategy
from strategies.gp import reference
from strategies.gp.init import ramped_half_and_half
from strategies.gp.representation import GPRule
from strategies.gp.strategy import GPEnsemble, GPStrategy, simulate_money, vote
from strategies.gp.strategy_file import (
    PeriodRecord,
    StrategyFile,
    read_strategy_file,
    rule_record,
    save_strategy,
    strategy_from_file,
)
from strategies.gp.window import GPWindow, load_window


@pytest.fixture(scope="module")
def window(shared_data) -> GPWindow:
    return load_window(shared_data / "sp500_5yr_daily", 6, 300, 0, start="2015-06-01")


def some_rules(n: int, seed: int) -> list[GPRule]:
    pop = ramped_half_and_half(n, np.random.default_rng(seed), 2, 4)
    return [pop.rule(i) for i in range(n)]


def strategy_file(rules: list[GPRule]) -> StrategyFile:
    period = PeriodRecord(symbols=["A", "AAL"], first_date="2013-02-08",
                          last_date="2016-02-09", days=768, roi=0.1, roi_buy_hold=0.05)
    return StrategyFile(data="x.csv", train=period, seed=1,
                        best=rule_record(rules[0], 0.25, 3),
                        hall_of_fame=[rule_record(r, 0.25 - 0.01 * i, i)
                                      for i, r in enumerate(rules)])


# ------------------------------------------------------------------------------------ files
def test_strategy_file_round_trip(tmp_path: Path) -> None:
    rules = some_rules(4, 1)
    sf = strategy_file(rules)
    path = tmp_path / "s.json"
    save_strategy(path, sf)
    back = read_strategy_file(path)
    assert back == sf
    assert back.rule() == rules[0]
    assert back.rules() == rules
    text = path.read_text()
    assert rules[0].buy_infix in text and '"postfix"' in text
    strat = strategy_from_file(path, device="cpu")
    assert isinstance(strat, GPStrategy) and isinstance(strat, Strategy)
    assert strat.rule == rules[0]
    ens = strategy_from_file(path, device="cpu", ensemble=True)
    assert ens.rules == rules


def _corruptions(good: dict) -> list[tuple[str, bytes]]:
    def edited(fn) -> bytes:
        d = msgspec.json.decode(msgspec.json.encode(good))
        fn(d)
        return msgspec.json.encode(d)

    def setp(path: list, value: object):
        def f(d: dict) -> None:
            for k in path[:-1]:
                d = d[k]
            d[path[-1]] = value
        return f

    buy_post = good["best"]["buy"]["postfix"]
    return [
        ("empty", b""),
        ("not json", b"{this is not json"),
        ("truncated", msgspec.json.encode(good)[:-20]),
        ("a list", b"[1, 2, 3]"),
        ("wrong format", edited(setp(["format"], "something-else"))),
        ("unknown field", edited(setp(["colour"], "blue"))),
        ("wrong type", edited(setp(["best", "fitness"], "high"))),
        ("missing best", edited(lambda d: d.pop("best"))),
        ("terminal version", edited(setp(["terminal_set_version"], TERMINAL_SET_VERSION + 1))),
        ("terminal names", edited(setp(["terminals", 0], "sma2"))),
        ("op out of range", edited(setp(["best", "buy", "postfix"], buy_post[:-1] + [99]))),
        ("negative op", edited(setp(["best", "sell", "postfix", 0], -1))),
        ("bad infix", edited(setp(["best", "buy", "infix"], "(sma5 <"))),
        ("ill-typed postfix", edited(setp(["best", "buy", "postfix"], [0, 1, 31]))),
        ("forms disagree", edited(setp(["best", "buy", "infix"], "(sma5 < close)"))),
        ("bad hall of fame", edited(setp(["hall_of_fame", 1, "sell", "postfix"], [17, 18]))),
    ]


def test_corrupt_files_give_one_line_errors(tmp_path: Path) -> None:
    sf = strategy_file(some_rules(3, 2))
    good = msgspec.json.decode(msgspec.json.encode(sf))
    for name, raw in _corruptions(good):
        path = tmp_path / f"{name.replace(' ', '_')}.json"
        path.write_bytes(raw)
        with pytest.raises(ValueError) as info:
            read_strategy_file(path)
        msg = str(info.value)
        assert "\n" not in msg and str(path) in msg, (name, msg)
    with pytest.raises(ValueError, match="cannot read"):
        read_strategy_file(tmp_path / "missing.json")


# ------------------------------------------------------------------------------- signals
def expected_signals(rules: list[GPRule], window: GPWindow, days: range) -> list[np.ndarray]:
    """Signals per day from the reference trees, majority vote and decision matrix."""
    n = window.n_stocks
    prev = np.zeros(n, np.int8)
    out = []
    for d in days:
        new = prev.copy()
        for s in range(n):
            values = window.panel[d, :, s]
            buys = sum(reference.eval_tree(r.buy, values) for r in rules)
            sells = sum(reference.eval_tree(r.sell, values) for r in rules)
            buy, sell = 2 * buys > len(rules), 2 * sells > len(rules)
            if buy and not sell:
                new[s] = 1
            elif sell and not buy:
                new[s] = 0
        out.append(new)
        prev = new
    return out


async def drive(strategy: GPEnsemble, window: GPWindow, days: range,
                closed_mask: np.ndarray | None = None) -> list[np.ndarray]:
    strategy.reset(list(window.symbols))
    got = []
    for k, d in enumerate(days):
        closed = np.ones(window.n_stocks, np.bool_) if closed_mask is None else closed_mask[k]
        features = np.ascontiguousarray(window.panel[d].T)
        got.append(await strategy.target_signals(features, closed))
    return got


async def each_rule(rules: list[GPRule], window: GPWindow) -> list[list[np.ndarray]]:
    """Each rule's signals on every day of the window, as one CPU `GPStrategy` each."""
    days = range(window.panel.shape[0])
    return [await drive(GPStrategy(rule, device="cpu"), window, days) for rule in rules]


async def test_gp_strategy_signals_equal_reference(window: GPWindow) -> None:
    rules = some_rules(5, 3)
    days = range(window.panel.shape[0])
    for rule, got in zip(rules[:3], await each_rule(rules[:3], window), strict=True):
        want = expected_signals([rule], window, days)
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    got = await drive(GPEnsemble(rules[:5], device="cpu"), window, days)
    want = expected_signals(rules[:5], window, days)
    assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    assert any(np.any(g == 1) for g in got)


async def test_symbols_whose_bar_did_not_close_keep_their_signal(window: GPWindow) -> None:
    rule = GPRule.from_infix("(close > sma10)", "(close < sma10)")
    days = range(20, 120)
    mask = np.random.default_rng(0).random((len(days), window.n_stocks)) < 0.5
    got = await drive(GPStrategy(rule, device="cpu"), window, days, mask)
    full = await drive(GPStrategy(rule, device="cpu"), window, days)
    prev = np.zeros(window.n_stocks, np.int8)
    for k in range(len(days)):
        assert np.array_equal(got[k][~mask[k]], prev[~mask[k]])
        prev = got[k]
    assert not all(np.array_equal(a, b) for a, b in zip(got, full, strict=True))


@pytest.mark.skipif(not cuda_present(), reason="no CUDA device or simulator")
async def test_gp_strategy_on_cuda_equals_cpu(window: GPWindow) -> None:
    rules = some_rules(3, 4)
    days = range(250, 262)  # simulator: a few days
    cpu = await drive(GPEnsemble(rules, device="cpu"), window, days)
    gpu = await drive(GPEnsemble(rules, device="cuda"), window, days)
    assert all(np.array_equal(a, b) for a, b in zip(cpu, gpu, strict=True))


def engine_like_money(signals: list[np.ndarray], close: np.ndarray) -> np.ndarray:
    """The engine's use of the signals: enter all-in on 0 -> +1, clear on +1 -> 0, close
    at the end; plain Python, written from the paper's rules."""
    n = close.shape[1]
    out = np.empty(n)
    for s in range(n):
        cash, shares, prev = 10_000.0, 0, 0
        for d, sig in enumerate(signals):
            new, price = int(sig[s]), float(close[d, s])
            if prev == 0 and new == 1:
                q = math.floor((cash - 1.0) / price)
                if q > 0:
                    cash -= q * price + 1.0
                    shares = q
            elif prev == 1 and new == 0 and shares:
                cash -= -shares * price + 1.0
                shares = 0
            prev = new
        if shares:
            cash -= -shares * float(close[-1, s]) + 1.0
        out[s] = cash
    return out


async def test_signals_through_engine_rules_give_the_evaluator_money(window: GPWindow) -> None:
    rules = some_rules(8, 5)
    days = range(window.panel.shape[0])
    for rule, signals in zip(rules[:4], await each_rule(rules[:4], window), strict=True):
        want = engine_like_money(signals, window.close)
        assert np.array_equal(simulate_money(rule, window.panel, window.close), want)
        assert np.array_equal(simulate_money(rule, window.panel, window.close),
                              np.array(reference.final_cash(rule, window.panel, window.close)))
    ens = GPEnsemble(rules[:5], device="cpu")
    signals = await drive(ens, window, days)
    assert np.array_equal(simulate_money(ens, window.panel, window.close),
                          engine_like_money(signals, window.close))


def test_vote_is_a_strict_majority() -> None:
    rng = np.random.default_rng(1)
    for m in (1, 2, 3, 4, 7):
        codes = rng.integers(0, 4, size=(m, 50)).astype(np.int8)
        got = vote(codes)
        for s in range(50):
            buys = sum(int(c) & 1 for c in codes[:, s])
            sells = sum(int(c) >> 1 for c in codes[:, s])
            assert got[s] == (buys * 2 > m) + 2 * (sells * 2 > m)
