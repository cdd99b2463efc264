"""Trading phases and the exhaustive decision table.

The decision for a symbol is a pure function of (trading phase, whether the symbol holds a
position, the transition between its previous and new target signal) and one strategy
policy. It is one `match` statement ending in `assert_never`, so mypy proves that every
combination is handled; impossible states raise with a message naming the state.

Table (the seed's, plus the policy `enter_on_from_zero`):

| phase     | flat                                   | positioned                       |
|-----------|----------------------------------------|----------------------------------|
| WAIT      | NONE                                   | NONE                             |
| TRADE     | TO_ZERO: NONE, CHANGE: ENTER,          | TO_ZERO: CLEAR, CHANGE: SWITCH,  |
|           | NO_CHANGE: NONE, FROM_ZERO: ENTER if   | NO_CHANGE: NONE,                 |
|           | enter_on_from_zero else NONE           | FROM_ZERO: raises (inconsistent) |
| LIQUIDATE | NONE                                   | CHANGE or TO_ZERO: CLEAR, else NONE |
| STOP      | NONE                                   | CLEAR                            |
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import assert_never


class Phase(Enum):
    WAIT = "wait"
    TRADE = "trade"
    LIQUIDATE = "liquidate"
    STOP = "stop"


class Transition(Enum):
    FROM_ZERO = "from_zero"
    TO_ZERO = "to_zero"
    CHANGE = "change"
    NO_CHANGE = "no_change"


class Action(Enum):
    NONE = "none"
    ENTER = "enter"
    SWITCH = "switch"
    CLEAR = "clear"


class InconsistentState(RuntimeError):
    """A combination the table declares impossible (a bug upstream, never bad market data)."""


def transition(previous: int, new: int) -> Transition:
    """Classify the move between two signals in {-1, 0, +1}."""
    if previous == new:
        return Transition.NO_CHANGE
    if previous == 0:
        return Transition.FROM_ZERO
    if new == 0:
        return Transition.TO_ZERO
    return Transition.CHANGE


class Holding(Enum):
    FLAT = "flat"
    POSITIONED = "positioned"


def phase_action(
    phase: Phase, has_position: bool, move: Transition, enter_on_from_zero: bool = False
) -> Action:
    """The action for one symbol; raises InconsistentState for impossible states.

    Written as nested matches over one enum at a time because mypy narrows a single
    subject exhaustively but not the cross product of a tuple subject: this way a missing
    combination is a type error, not a silent fall-through.
    """
    holding = Holding.POSITIONED if has_position else Holding.FLAT
    match phase:
        case Phase.WAIT:
            return Action.NONE
        case Phase.TRADE:
            return _trade(holding, move, enter_on_from_zero)
        case Phase.LIQUIDATE:
            return _liquidate(holding, move)
        case Phase.STOP:
            match holding:
                case Holding.POSITIONED:
                    return Action.CLEAR
                case Holding.FLAT:
                    return Action.NONE
                case _:
                    assert_never(holding)
        case _:
            assert_never(phase)


#: `action_for`'s answers: (phase, has_position, previous, new, enter_on_from_zero) ->
#: action, at most 4 x 2 x 3 x 3 x 2 of them
_ACTIONS: dict[tuple[Phase, bool, int, int, bool], Action] = {}


def action_for(phase: Phase, has_position: bool, previous: int, new: int,
               enter_on_from_zero: bool = False) -> Action:
    """`phase_action(phase, has_position, transition(previous, new), ...)`, each
    combination asked once and then remembered (the table is a pure function of it: a
    live bar close's decisions cost one dict lookup per symbol, not two calls through the
    matches). An impossible combination raises every time; it is never remembered."""
    key = (phase, has_position, previous, new, enter_on_from_zero)
    action = _ACTIONS.get(key)
    if action is None:
        action = phase_action(phase, has_position, transition(previous, new),
                              enter_on_from_zero)
        _ACTIONS[key] = action
    return action


def _trade(holding: Holding, move: Transition, enter_on_from_zero: bool) -> Action:
    match holding:
        case Holding.FLAT:
            match move:
                case Transition.TO_ZERO | Transition.NO_CHANGE:
                    return Action.NONE
                case Transition.CHANGE:
                    return Action.ENTER
                case Transition.FROM_ZERO:
                    return Action.ENTER if enter_on_from_zero else Action.NONE
                case _:
                    assert_never(move)
        case Holding.POSITIONED:
            match move:
                case Transition.TO_ZERO:
                    return Action.CLEAR
                case Transition.CHANGE:
                    return Action.SWITCH
                case Transition.NO_CHANGE:
                    return Action.NONE
                case Transition.FROM_ZERO:
                    raise InconsistentState(
                        "phase TRADE, has_position=True, transition FROM_ZERO: a position is "
                        "held while the previous target signal was flat"
                    )
                case _:
                    assert_never(move)
        case _:
            assert_never(holding)


def _liquidate(holding: Holding, move: Transition) -> Action:
    match holding:
        case Holding.FLAT:
            return Action.NONE
        case Holding.POSITIONED:
            match move:
                case Transition.CHANGE | Transition.TO_ZERO:
                    return Action.CLEAR
                case Transition.FROM_ZERO | Transition.NO_CHANGE:
                    return Action.NONE
                case _:
                    assert_never(move)
        case _:
            assert_never(holding)


NS_PER_SECOND = 1_000_000_000
#: session names that choose the hours of data, not phases (engine/commands/replay.py)
MARKET_HOURS = ("regular", "extended")


@dataclass(frozen=True, slots=True)
class SessionSchedule:
    """Phase by time of day: WAIT before t1, TRADE in [t1, t2), LIQUIDATE in [t2, t3), STOP after.

    Times are seconds after midnight in the exchange's time zone. The default (None) keeps
    every bar in TRADE, which is what daily bars need; the engine reaches STOP after the
    last bar of a replay, which liquidates whatever is held.
    """

    t1: float | None = None
    t2: float | None = None
    t3: float | None = None
    timezone: str = "America/New_York"

    def __post_init__(self) -> None:
        given = [t for t in (self.t1, self.t2, self.t3) if t is not None]
        if given and len(given) != 3:
            raise ValueError("a session schedule needs all three times t1 < t2 < t3, or none")
        if given and not (self.t1 < self.t2 < self.t3):  # type: ignore[operator]
            raise ValueError(f"session times must satisfy t1 < t2 < t3, got {given}")

    @classmethod
    def parse(cls, text: str | None, timezone: str = "America/New_York") -> SessionSchedule:
        """"09:35,15:45,15:55" -> schedule; None, "" or a market-hours name ("regular",
        "extended": which hours of LEAN US-equity ticks a replay reads) -> always TRADE."""
        if not text or text.strip().lower() in MARKET_HOURS:
            return cls(timezone=timezone)
        parts = text.split(",")
        if len(parts) != 3:
            raise ValueError(f"--session expects regular, extended or three times "
                             f"HH:MM,HH:MM,HH:MM, got {text!r}")
        secs = []
        for p in parts:
            try:
                hh, mm = (int(x) for x in p.strip().split(":"))
                if not (0 <= hh <= 24 and 0 <= mm < 60 and hh * 60 + mm <= 24 * 60):
                    raise ValueError
                secs.append(hh * 3600 + mm * 60)
            except ValueError:
                raise ValueError(f"bad time {p!r} in --session {text!r}: use HH:MM") from None
        return cls(float(secs[0]), float(secs[1]), float(secs[2]), timezone)

    @property
    def always_trade(self) -> bool:
        return self.t1 is None

    def phase_at(self, seconds_of_day: float) -> Phase:
        if self.t1 is None:
            return Phase.TRADE
        if seconds_of_day < self.t1:
            return Phase.WAIT
        if seconds_of_day < self.t2:  # type: ignore[operator]
            return Phase.TRADE
        if seconds_of_day < self.t3:  # type: ignore[operator]
            return Phase.LIQUIDATE
        return Phase.STOP
