"""Trading decisions: strategy signals -> trading-phase action -> intended position.

The orders that reach each intended position go to the order desk (engine/trading/orders.py).

Per bar event the strategy gives a target signal per symbol; `phases.phase_action` (one
exhaustive `match`) turns the previous and new signal, the phase and whether a position is
intended into an action, and the action into at most two orders (close, then enter). The
intended position is set before the order is placed; the order desk sets it back when
nothing can be bought, so intent and the broker's position agree after every bar.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol, cast

import numpy as np

from engine.errors import StrategyError
from engine.phases import Action, Phase, SessionSchedule, action_for
from strategies.base import Features, OverlappedStrategy, Strategy, WeightStrategy

#: places an order: (symbol index, side, reason "close" or "enter", ts)
PlaceOrder = Callable[[int, int, str, int], None]


class ActiveSignals(Protocol):
    """The account's count of symbols with an active signal (engine/trading/sizing.py)."""

    active_signals: int


def checked_signals(signals: np.ndarray, n: int) -> np.ndarray:
    """`signals` if it is one signal per symbol, each -1, 0 or +1; else a ValueError."""
    if signals.shape != (n,):
        raise ValueError(f"returned signals of shape {signals.shape}, expected ({n},)")
    # a NaN would be a traceback at `int()` and a 2 a switch long -> long (a close
    # and a re-entry): only -1, 0 and +1 are signals. (One vector compare per bar.)
    valid = (signals == 1) | (signals == 0) | (signals == -1)  # bool arrays too
    if not valid.all():
        bad = signals[~valid][0].item()  # 3, not np.int8(3)
        raise ValueError(f"returned signal {bad!r}; signals are -1, 0 or +1")
    return signals


def checked_weights(weights: np.ndarray, n: int) -> np.ndarray:
    """`weights` if one finite weight in [-1, 1] per symbol; else a ValueError."""
    if weights.shape != (n,):
        raise ValueError(f"returned weights of shape {weights.shape}, expected ({n},)")
    bad = ~(np.abs(weights) <= 1.0)  # NaN too
    if bad.any():
        raise ValueError(f"returned weight {weights[bad][0].item()!r}; weights are in [-1, 1]")
    return weights


def _failed(strategy: Strategy, when: Callable[[], datetime], exc: Exception) -> StrategyError:
    return StrategyError(f"strategy {strategy.name!r} failed at the bar closing "
                         f"{when().isoformat()}: {type(exc).__name__}: {exc}")


class Decisions:
    """Each symbol's last signal and intended position (sign), and the session schedule.

    The strategy is passed per call, not kept: the daemon may wrap the engine's strategy
    after a restart (`snapshot.WarmupGuard`)."""

    def __init__(self, schedule: SessionSchedule, n: int,
                 account: ActiveSignals | None = None) -> None:
        self.schedule = schedule
        #: told how many symbols' signals are active after each decision (equal-weight
        #: sizing divides the equity by it)
        self.account = account
        #: a weight strategy's (strategies.base.WeightStrategy) last weights, else None
        self.weighted = False
        self.weights: np.ndarray | None = None
        self.signal = np.zeros(n, np.int8)
        #: sign of the position once pending orders fill
        self.intended: list[int] = [0] * n

    def add_symbol(self) -> None:
        self.signal = np.concatenate([self.signal, np.zeros(1, np.int8)])
        if self.weights is not None:
            self.weights = np.concatenate([self.weights, np.zeros(1)])
        self.intended.append(0)

    def phase_at(self, local_seconds: Callable[[int], int], ts: int) -> Phase:
        """The trading phase at `ts`; `local_seconds` reads the exchange's clock (only
        needed, and only called, with a session schedule)."""
        if self.schedule.always_trade:
            return Phase.TRADE
        return self.schedule.phase_at(local_seconds(ts))

    async def signals_of(self, strategy: Strategy, features: Features, closed: np.ndarray,
                         when: Callable[[], datetime]) -> np.ndarray:
        """`target_signals`, or for a weight strategy its weights' signs (the weights are
        kept in `weights`), checked the same way."""
        if not self.weighted:
            return await self.target_signals(strategy, features, closed, when)
        try:
            w = checked_weights(np.asarray(
                await cast(WeightStrategy, strategy).target_weights(features, closed),
                np.float64), len(closed))
        except Exception as exc:
            raise _failed(strategy, when, exc) from exc
        self.weights = w
        return np.sign(w).astype(np.int8)

    @staticmethod
    async def target_signals(strategy: Strategy, features: Features, closed: np.ndarray,
                             when: Callable[[], datetime]) -> np.ndarray:
        """The strategy's signals for every symbol; any failure (or a wrong shape) is a
        `StrategyError` naming the bar (`when`, called only then)."""
        try:
            signals = np.asarray(await strategy.target_signals(features, closed))
            return checked_signals(signals, len(closed))
        except Exception as exc:
            raise _failed(strategy, when, exc) from exc

    @staticmethod
    def begin_signals(strategy: OverlappedStrategy, features: Features, closed: np.ndarray,
                      when: Callable[[], datetime]) -> None:
        """Start the strategy's evaluation of one bar close (`end_signals` takes it)."""
        try:
            strategy.begin_signals(features, closed)
        except Exception as exc:
            raise _failed(strategy, when, exc) from exc

    @staticmethod
    async def end_signals(strategy: OverlappedStrategy, n: int,
                          when: Callable[[], datetime]) -> np.ndarray:
        """The signals of the evaluation `begin_signals` started, checked as
        `target_signals` checks them."""
        try:
            return checked_signals(np.asarray(await strategy.end_signals()), n)
        except Exception as exc:
            raise _failed(strategy, when, exc) from exc

    def decide(self, strategy: Strategy, idx: list[int], signals: np.ndarray, phase: Phase,
               ts: int, place: PlaceOrder, active: int | None = None) -> None:
        """Apply the phase table to the symbols of `idx`; under STOP also clear every other
        symbol that still intends a position. `active`: the count of active signals if
        the caller has it (the compiled close, engine/trading/compiled_close.py), whose
        `idx` then holds only the symbols whose signal changed: outside STOP the others
        are NO_CHANGE, which the table leaves alone."""
        long_only = strategy.long_only
        intended = self.intended
        signal = self.signal
        stop = phase is Phase.STOP
        if self.account is not None:
            if active is None:
                active = int(np.count_nonzero(signals > 0 if long_only else signals != 0))
            self.account.active_signals = max(1, active)
        new_signals = signals.tolist()  # Python scalars: cheaper per item than numpy's
        prev_signals = signal.tolist()
        for i in idx:
            new = int(new_signals[i])
            if long_only and new < 0:
                new = 0
            prev = prev_signals[i]
            if new == prev and not stop:
                continue  # NO_CHANGE is NONE in every phase but STOP (tests/engine/test_phases)
            action = action_for(phase, intended[i] != 0, prev, new,
                                strategy.enter_on_from_zero)
            signal[i] = new
            if action is Action.NONE:
                continue
            if action is Action.CLEAR or action is Action.SWITCH:
                side = -intended[i]
                intended[i] = 0
                place(i, side, "close", ts)
            if action is Action.ENTER or action is Action.SWITCH:
                side = 1 if new > 0 else -1
                intended[i] = side
                place(i, side, "enter", ts)
        if phase is Phase.STOP:
            self.clear_all(ts, place, skip=idx)

    def clear_all(self, ts: int, place: PlaceOrder, skip: list[int] | None = None) -> None:
        """Close every intended position (STOP): the end of data, a kill switch, a day end."""
        intended = self.intended
        for i in range(len(intended)):
            if intended[i] != 0 and (skip is None or i not in skip):
                side = -intended[i]
                intended[i] = 0
                place(i, side, "close", ts)

    def hold(self, sym: int, sign: int) -> None:
        """A restart found `sign` held in `sym`: intend it, as if its signal had led there."""
        self.intended[sym] = sign
        self.signal[sym] = sign
