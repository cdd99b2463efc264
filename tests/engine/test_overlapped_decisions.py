"""Overlapped decisions: a bar close whose evaluation runs while the engine applies the
ticks after it gives exactly the orders, fills, signals and equity of a close that waited.

The reference is the same engine with `overlap_decisions = "never"` (the bar close awaits
the strategy) fed every message in one batch; the overlapped engine gets the same messages
cut into seeded random batches (a batch's end settles the close), with GP rules on the CPU
twin and, in the CUDA simulator, on "cuda" (asynchronous, so "auto" overlaps it). Each case
also checks that fills really were held back and applied at settlement, so a run where
nothing overlapped cannot pass for one that did.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import random
from collections.abc import Sequence
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import numpy.typing as npt
import pytest

from engine.errors import StrategyError
from engine.settings.config import BrokerConfig, EngineConfig
from engine.trading.core import Engine
from feeds.messages import Bar, Message, Trade
from gpu.device import cuda_present
from strategies.base import OverlappedStrategy
from strategies.gp.init import ramped_half_and_half
from strategies.gp.strategy import GPEnsemble

NS = 1_000_000_000
DAY = 86_400 * NS
NY = ZoneInfo("America/New_York")
SYMBOLS = [f"S{i}" for i in range(6)]


class CountingEngine(Engine):
    """Counts the bar closes that were overlapped and the held-back first prices that a
    settlement filled (a check that the overlapped path ran, not a second reference)."""

    overlapped_closes = 0
    held_fills = 0

    async def settle(self) -> None:
        pending = self.overlapped
        if pending is not None:
            self.overlapped_closes += 1
            fills = self.stats.fills
            await super().settle()
            # a settlement fills only at the held-back first prices after the close
            self.held_fills += self.stats.fills - fills
        else:
            await super().settle()


def _rules(seed: int, n: int) -> GPEnsemble:
    pop = ramped_half_and_half(n, np.random.default_rng(seed), 2, 5)
    return GPEnsemble([pop.rule(i) for i in range(n)], device="cpu")


def _daily_bars(seed: int, days: int) -> list[Message]:
    """Daily bars of SYMBOLS (random walks); each symbol skips a few days (no bar), so a
    bar close covers a changing subset."""
    rng = np.random.default_rng(seed)
    out: list[Message] = []
    close = {s: 20.0 + 10 * i for i, s in enumerate(SYMBOLS)}
    seq = dict.fromkeys(SYMBOLS, 0)
    t0 = (1_600_000_000 + 20 * 3600) * NS
    for d in range(days):
        for s in SYMBOLS:
            if rng.random() < 0.05:
                continue
            o = close[s] * math.exp(rng.normal(0, 0.01))
            c = o * math.exp(rng.normal(0, 0.02))
            close[s] = c
            seq[s] += 1
            out.append(Bar(seq[s], t0 + d * DAY, s, o, max(o, c) * 1.01, min(o, c) * 0.99,
                           c, float(rng.integers(100, 10_000)), DAY))
    return out


def _session_ticks(seed: int, days: int) -> list[Message]:
    """Trades of SYMBOLS from 09:30 to 16:00 New York time on weekdays, a few a minute,
    each symbol at its own random times (so a bar's first trades come in any order)."""
    rng = random.Random(seed)
    out: list[Message] = []
    price = {s: 20.0 + 10 * i for i, s in enumerate(SYMBOLS)}
    seq = dict.fromkeys(SYMBOLS, 0)
    day = dt.date(2024, 3, 4)
    while days:
        if day.weekday() < 5:
            start = int(dt.datetime(day.year, day.month, day.day, 9, 30, tzinfo=NY)
                        .timestamp()) * NS
            stamps = sorted((start + rng.randrange(390 * 60 * NS), rng.choice(SYMBOLS))
                            for _ in range(390 * 8))
            for ts, s in stamps:
                price[s] *= math.exp(rng.gauss(0, 0.002))
                seq[s] += 1
                out.append(Trade(seq[s], ts, s, price[s], float(rng.randint(1, 500))))
            days -= 1
        day += dt.timedelta(days=1)
    return out


def _batches(msgs: Sequence[Message], seed: int) -> list[Sequence[Message]]:
    """`msgs` cut at seeded random places (1 to 300 messages a batch)."""
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(msgs):
        k = rng.randint(1, 300)
        out.append(msgs[i:i + k])
        i += k
    return out


def _run(msgs: Sequence[Message], strategy: Any, cfg: EngineConfig,
         batches: list[Sequence[Message]] | None = None) -> CountingEngine:
    eng = CountingEngine(list(SYMBOLS), strategy, cfg)

    async def go() -> None:
        for batch in batches if batches is not None else [msgs]:
            await eng.process(batch)
            assert eng.overlapped is None  # a batch always ends settled
            assert not eng.intent_mismatches()
        await eng.finish()

    asyncio.run(go())
    return eng


def _same_outcome(a: Engine, b: Engine) -> None:
    assert a.broker.orders == b.broker.orders
    assert a.broker.fills == b.broker.fills
    assert a.equity_curve == b.equity_curve
    assert a.decisions.signal.tolist() == b.decisions.signal.tolist()
    assert a.decisions.intended == b.decisions.intended
    assert a.stats.orders == b.stats.orders and a.stats.fills == b.stats.fills
    assert a.broker.equity() == b.broker.equity()


def _config(fill: str, overlap: str, **kw: Any) -> EngineConfig:
    return EngineConfig(broker=BrokerConfig(fill=fill),  # type: ignore[arg-type]
                        overlap_decisions=overlap, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(4))
def test_daily_bars_next_open_overlapped_equals_waiting(seed: int) -> None:
    msgs = _daily_bars(seed, 260)
    waited = _run(msgs, _rules(seed, 3), _config("next-open", "never"))
    over = _run(msgs, _rules(seed, 3), _config("next-open", "always"), _batches(msgs, seed))
    assert waited.overlapped_closes == 0
    assert over.overlapped_closes >= 250
    assert waited.stats.fills >= 4, "rules that never trade would prove nothing"
    assert over.held_fills > 0
    _same_outcome(waited, over)


@pytest.mark.parametrize("seed, rule_seed", [(0, 10), (1, 11), (2, 13)])
def test_session_ticks_next_tick_overlapped_equals_waiting(seed: int, rule_seed: int) -> None:
    """One-minute bars over three session days (WAIT/TRADE/LIQUIDATE/STOP and a day
    boundary that settles before it clears), orders filled at each symbol's next trade.
    (Rule seeds whose rule trades on these ticks: seed 12's never does.)"""
    msgs = _session_ticks(seed, 3)
    kw = {"bar_seconds": 60.0, "session": "09:45,15:30,15:55"}
    waited = _run(msgs, _rules(rule_seed, 1), _config("next-tick", "never", **kw))
    over = _run(msgs, _rules(rule_seed, 1), _config("next-tick", "always", **kw),
                _batches(msgs, seed))
    assert over.overlapped_closes > 500
    assert waited.stats.fills >= 4
    assert over.held_fills > 0
    _same_outcome(waited, over)


@pytest.mark.parametrize("seed", range(3))
def test_daily_bars_signal_close_overlapped_equals_waiting(seed: int) -> None:
    """The GP paper's fill model (the headline replay's): orders fill at the close that
    decided them, so an overlapped close fills them, and takes its equity point, when it
    settles, at the close's prices although later bars were applied meanwhile."""
    msgs = _daily_bars(20 + seed, 200)
    waited = _run(msgs, _rules(seed, 3), _config("signal-close", "never"))
    over = _run(msgs, _rules(seed, 3), _config("signal-close", "always"), _batches(msgs, seed))
    assert over.overlapped_closes >= 190
    assert waited.stats.fills >= 4
    assert over.held_fills > 0  # filled when the close settled
    _same_outcome(waited, over)


def test_auto_overlaps_only_asynchronous_strategies() -> None:
    msgs = _daily_bars(7, 40)
    cpu = _run(msgs, _rules(1, 2), _config("next-open", "auto"))
    assert cpu.overlapped_closes == 0  # the CPU twin evaluates at once: nothing to overlap
    never = _run(msgs, _Failing(np.zeros(len(SYMBOLS), np.int8)), _config("next-open", "never"))
    assert never.overlapped_closes == 0
    assert isinstance(_rules(1, 2), OverlappedStrategy)


@pytest.mark.skipif(not cuda_present(), reason="needs CUDA or NUMBA_ENABLE_CUDASIM=1")
def test_gp_on_cuda_is_overlapped_by_default_and_equals_the_cpu_waiting() -> None:
    """On CUDA (the simulator in CI) a GP strategy is asynchronous: "auto" overlaps it, and
    its orders and fills equal the CPU twin's with the close waiting."""
    msgs = _daily_bars(3, 30)
    rules = _rules(3, 2).rules
    waited = _run(msgs, GPEnsemble(rules, device="cpu"), _config("next-open", "never"))
    gpu = _run(msgs, GPEnsemble(rules, device="cuda"), _config("next-open", "auto"),
               _batches(msgs, 3))
    assert gpu.overlapped_closes >= 25
    _same_outcome(waited, gpu)


class _Failing:
    """An overlapped strategy whose evaluation fails when its signals are collected."""

    name = "failing"
    long_only = False
    enter_on_from_zero = False
    asynchronous = True

    def __init__(self, result: npt.NDArray[np.int8] | None) -> None:
        self.result = result

    def reset(self, symbols: list[str]) -> None:
        self.n = len(symbols)

    async def target_signals(self, features: Any, closed: Any) -> Any:
        self.begin_signals(features, closed)
        return await self.end_signals()

    def begin_signals(self, features: Any, closed: Any) -> None:
        self.n = len(closed)

    async def end_signals(self) -> Any:
        if self.result is None:
            raise RuntimeError("device lost")
        return self.result


@pytest.mark.parametrize("result, message", [
    (None, "RuntimeError: device lost"),
    (np.zeros(2, np.int8), "returned signals of shape (2,)"),
    (np.full(len(SYMBOLS), 3, np.int8), "returned signal 3"),
])
def test_a_failed_overlapped_evaluation_names_the_bar(result: Any, message: str) -> None:
    msgs = _daily_bars(0, 5)
    eng = Engine(list(SYMBOLS), _Failing(result), _config("next-open", "auto"))

    async def go() -> None:
        await eng.process(msgs)

    with pytest.raises(StrategyError) as err:
        asyncio.run(go())
    assert message in str(err.value) and "failed at the bar closing 2020-09-1" in str(err.value)
