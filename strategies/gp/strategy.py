"""Evolved GP rules as engine strategies (strategies.base.Strategy), and their money.

Signal mapping (the paper's decision matrix on the engine's phase table): for a symbol
whose bar closed, buy&!sell -> +1, sell&!buy -> 0, otherwise the previous signal (initially
0). `enter_on_from_zero=True`, `long_only=True`: the engine enters on 0 -> +1 and clears on
+1 -> 0, which is exactly gpu.gp.core's money simulation.

`GPEnsemble` votes several rules (a hall of fame): buy when more than half of the buy trees
are true, sell when more than half of the sell trees are true, then the same matrix.

Evaluation: all rules x all symbols in one batched call per bar close. On a GPU that is one
kernel launch on the strategy's own stream. When the signals are needed and the launch is
not done, the event loop runs once more (whatever else is ready), then the engine's thread
waits on the launch's CUDA event with the GIL released (`AsyncDecider.wait`): polling the
event from the loop held the GIL, and a replay's feed thread, starved of it, published a
few bars between bar closes (18,149 receive batches for 98,306 bar messages on an H100
against 39 on the CPU twin, and twice the CPU's wall time; benchmarks/gp_replay.py).
Elsewhere the numba CPU twin (`gpu/gp/decider.py`; under `--device auto` the faster
backend for the strategy's size, measured at start-up).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from gpu.gp.core import CODE_BUY, CODE_SELL, DEFAULT_COSTS
from gpu.gp.decider import AsyncDecider
from gpu.gp.evaluate import cash_from_codes, decision_codes, final_cash
from strategies.base import Features, Signals
from strategies.gp.representation import GPRule, rules_programs

F64 = npt.NDArray[np.float64]
I8 = npt.NDArray[np.int8]


def vote(codes: I8) -> I8:
    """Majority decision codes (n_symbols,) of member codes (n_members, n_symbols)."""
    codes = np.asarray(codes, np.int8)
    if codes.shape[0] == 1:
        return codes[0].copy()
    m = codes.shape[0]
    buys = np.count_nonzero(codes & CODE_BUY, axis=0)
    sells = np.count_nonzero(codes & CODE_SELL, axis=0)
    return ((2 * buys > m) * CODE_BUY + (2 * sells > m) * CODE_SELL).astype(np.int8)


def next_signals(codes: I8, previous: Signals) -> Signals:
    """Decision matrix: buy-only -> +1, sell-only -> 0, else keep the previous signal."""
    return np.where(codes == CODE_BUY, 1, np.where(codes == CODE_SELL, 0, previous)).astype(
        np.int8)


class GPEnsemble:
    """Majority vote of GP rules, trading through the engine (Strategy protocol)."""

    enter_on_from_zero = True
    long_only = True

    def __init__(self, rules: Sequence[GPRule], device: str = "auto", name: str = "gp-ensemble"
                 ) -> None:
        if not rules:
            raise ValueError("a GP strategy needs at least one rule")
        self.rules = list(rules)
        self.name = name
        programs, lengths = rules_programs(self.rules)
        self._decider = AsyncDecider(programs, lengths, device)
        self.device = self._decider.device
        self._signal: Signals = np.zeros(0, np.int8)
        self._closed: npt.NDArray[np.bool_] = np.zeros(0, np.bool_)

    def reset(self, symbols: list[str]) -> None:
        # device "auto": the faster backend for this many symbols, measured (gp_decider)
        self.device = self._decider.choose_backend(len(symbols))
        self._signal = np.zeros(len(symbols), np.int8)

    def backend_for(self, n_symbols: int) -> str:
        """Where bar closes of `n_symbols` will run, "cpu" or "cuda" (under device "auto"
        the measured choice, `AsyncDecider.choose_backend`, paid once per size): a replay
        puts its feed in a process of its own for a GPU strategy
        (`engine.trading.replay.feed_transport`)."""
        return self._decider.choose_backend(max(n_symbols, 1))

    @property
    def asynchronous(self) -> bool:
        """Whether a bar close's evaluation runs on the GPU (returns before it is done)."""
        return self.device == "cuda"

    async def decision_codes(self, features: Features) -> I8:
        """Voted decision codes (n_symbols,) for one feature matrix (n_symbols, 31)."""
        self._decider.start(features)
        return await self._voted_codes()

    async def _voted_codes(self) -> I8:
        decider = self._decider
        if not decider.ready():
            await asyncio.sleep(0)  # what else the loop has ready runs first
            decider.wait()  # then the GIL is free for other threads until the GPU is done
        return vote(decider.result())

    def begin_signals(self, features: Features, closed: npt.NDArray[np.bool_]) -> None:
        n = features.shape[0]
        if self._signal.shape[0] < n:  # symbols registered after reset (live mode)
            self._signal = np.concatenate([self._signal,
                                           np.zeros(n - self._signal.shape[0], np.int8)])
        self._decider.start(features)
        self._closed = closed

    async def end_signals(self) -> Signals:
        closed = self._closed
        n = closed.shape[0]
        codes = await self._voted_codes()
        new = next_signals(codes, self._signal[:n])
        self._signal[:n] = np.where(np.asarray(closed, np.bool_), new, self._signal[:n])
        return self._signal[:n].copy()

    async def target_signals(self, features: Features, closed: npt.NDArray[np.bool_]
                             ) -> Signals:
        self.begin_signals(features, closed)
        return await self.end_signals()


class GPStrategy(GPEnsemble):
    """One evolved GP rule trading through the engine (Strategy protocol)."""

    def __init__(self, rule: GPRule, device: str = "auto", name: str = "gp") -> None:
        super().__init__([rule], device, name)
        self.rule = rule


class SwappableGP(GPEnsemble):
    """GP rules that can be replaced while the engine runs (re-evolution,
    engine/live/reevolution.py): the engine swaps them at a session boundary, between bar closes,
    never inside an evaluation.

    With no rules (before the first version is adopted) it holds every signal where it is:
    nothing trades. `swap(rules, flat=False)` keeps each symbol's signal, so a position
    carries over and the new rule's first decision goes through the phase table like any
    other (buy-only keeps +1, sell-only gives 0: a ToZero that clears in TRADE);
    `flat=True` (a walk-forward fold, which starts flat as evolve's does) starts every
    symbol at signal 0."""

    def __init__(self, rules: Sequence[GPRule] = (), device: str = "auto",
                 name: str = "gp-reevolved") -> None:
        self._requested = device
        self._symbols = 0
        if rules:
            super().__init__(rules, device, name)
        else:
            self.rules = []
            self.name = name
            self.device = "cpu"
            self._signal = np.zeros(0, np.int8)
            self._closed = np.zeros(0, np.bool_)

    def reset(self, symbols: list[str]) -> None:
        self._symbols = len(symbols)
        if self.rules:
            super().reset(symbols)
        else:
            self._signal = np.zeros(len(symbols), np.int8)

    def backend_for(self, n_symbols: int) -> str:
        if self.rules:
            return super().backend_for(n_symbols)
        # before the first rule: the device asked for ("auto" decides per rule set later)
        return "cuda" if self._requested == "cuda" else "cpu"

    def swap(self, rules: Sequence[GPRule], flat: bool = False) -> None:
        """Trade `rules` from the next bar close on (call between bar closes)."""
        if not rules:
            raise ValueError("a rule swap needs at least one rule")
        self.rules = list(rules)
        programs, lengths = rules_programs(self.rules)
        self._decider = AsyncDecider(programs, lengths, self._requested)
        self.device = self._decider.choose_backend(max(self._symbols, 1))
        if flat:
            self._signal[:] = 0

    def begin_signals(self, features: Features, closed: npt.NDArray[np.bool_]) -> None:
        if self.rules:
            super().begin_signals(features, closed)
            return
        n = features.shape[0]
        if self._signal.shape[0] < n:
            self._signal = np.concatenate([self._signal,
                                           np.zeros(n - self._signal.shape[0], np.int8)])
        self._closed = closed

    async def end_signals(self) -> Signals:
        if self.rules:
            return await super().end_signals()
        return self._signal[:self._closed.shape[0]].copy()


def simulate_money(strategy_or_rule: GPRule | GPEnsemble | Sequence[GPRule],
                   panel: npt.NDArray[np.float32], close: F64, day0: int = 0,
                   day1: int | None = None,
                   last_day: npt.NDArray[np.int64] | None = None,
                   costs: tuple[float, float, float] = DEFAULT_COSTS,
                   method: str = "stack") -> F64:
    """Final cash per stock (dollars, float64) of the paper's simulation over days
    [day0, day1) of `panel` (n_days, 31, n_stocks) and `close` (n_days, n_stocks), on the
    CPU evaluator. A single rule runs the evaluator the GP uses; several rules (an ensemble)
    are voted day by day, then traded with the same money rules.

    `method` ("stack" or "bitwise", as in gpu.gp.evaluate.PopulationEvaluator; both give
    the same cash) evaluates a single rule: a caller that has compiled the bitwise evaluator
    already (`evolve`) passes "bitwise", so a cold run does not compile the stack one too.

    `last_day[s]` (optional) is the last day stock s trades: from that day on its decision
    is SELL, so a position is closed at the stock's last price and nothing trades after.
    `costs` (gp_core.cost_tuple): the broker's commission and slippage on every trade."""
    if isinstance(strategy_or_rule, GPRule):
        rules = [strategy_or_rule]
    elif isinstance(strategy_or_rule, GPEnsemble):
        rules = strategy_or_rule.rules
    else:
        rules = list(strategy_or_rule)
    day1 = panel.shape[0] if day1 is None else day1
    programs, lengths = rules_programs(rules)
    stops = last_day is not None and bool(np.any(last_day < day1 - 1))
    if len(rules) == 1 and not stops:
        return final_cash(programs, lengths, panel, close, day0, day1, device="cpu",
                          method=method, costs=costs)[0]
    codes = decision_codes(programs, lengths, panel, day0, day1, device="cpu")
    if len(rules) == 1:
        voted = np.array(codes[0], np.int8)
    else:
        voted = np.stack([vote(codes[:, d, :]) for d in range(day1 - day0)])
    if stops:
        assert last_day is not None
        for s, d in enumerate(last_day.tolist()):
            if d < day1 - 1:
                voted[max(d - day0, 0):, s] = CODE_SELL
    return cash_from_codes(voted, close, day0, day1, costs)


def next_open_prices(open_: F64, close: F64, day0: int, day1: int) -> F64:
    """Fill prices of the next-open model in the shape of `close`: a decision taken at day
    d's close fills at day d+1's open; the window's last decision (and the liquidation after
    it) fills at the last close, as there is no next open inside the window."""
    prices = np.array(close, np.float64, copy=True)
    prices[day0:day1 - 1] = open_[day0 + 1:day1]
    return prices


def simulate_money_next_open(strategy_or_rule: GPRule | GPEnsemble | Sequence[GPRule],
                             panel: npt.NDArray[np.float32], open_: F64, close: F64,
                             day0: int = 0, day1: int | None = None,
                             last_day: npt.NDArray[np.int64] | None = None,
                             costs: tuple[float, float, float] = DEFAULT_COSTS,
                             method: str = "stack") -> F64:
    """`simulate_money` under the next-open fill model: the same decisions (read at each
    day's close), the same money rules, filled at the next day's open instead of the close
    that produced them. The difference to `simulate_money` is the edge the same-close
    assumption gives a rule."""
    day1 = panel.shape[0] if day1 is None else day1
    prices = next_open_prices(open_, close, day0, day1)
    if last_day is not None:  # a stock that stops trading is closed at its last close
        for s, d in enumerate(last_day.tolist()):
            if d < day1 - 1:
                prices[max(d, day0):day1, s] = close[d, s]
    return simulate_money(strategy_or_rule, panel, prices, day0, day1, last_day, costs, method)
