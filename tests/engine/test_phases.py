"""The trading-phase table: every combination against the seed's table, and exhaustiveness."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.phases import (
    Action,
    InconsistentState,
    Phase,
    SessionSchedule,
    Transition,
    action_for,
    phase_action,
    transition,
)

# The seed's table written out independently, one row per combination:
# (phase, has_position, transition) -> action, with enter_on_from_zero=False.
EXPECTED: dict[tuple[Phase, bool, Transition], Action | type[Exception]] = {}
for has, tr in itertools.product((False, True), Transition):
    EXPECTED[(Phase.WAIT, has, tr)] = Action.NONE
    EXPECTED[(Phase.STOP, has, tr)] = Action.CLEAR if has else Action.NONE
    EXPECTED[(Phase.LIQUIDATE, has, tr)] = (
        Action.CLEAR if has and tr in (Transition.CHANGE, Transition.TO_ZERO) else Action.NONE
    )
EXPECTED[(Phase.TRADE, False, Transition.FROM_ZERO)] = Action.NONE
EXPECTED[(Phase.TRADE, False, Transition.TO_ZERO)] = Action.NONE
EXPECTED[(Phase.TRADE, False, Transition.CHANGE)] = Action.ENTER
EXPECTED[(Phase.TRADE, False, Transition.NO_CHANGE)] = Action.NONE
EXPECTED[(Phase.TRADE, True, Transition.FROM_ZERO)] = InconsistentState
EXPECTED[(Phase.TRADE, True, Transition.TO_ZERO)] = Action.CLEAR
EXPECTED[(Phase.TRADE, True, Transition.CHANGE)] = Action.SWITCH
EXPECTED[(Phase.TRADE, True, Transition.NO_CHANGE)] = Action.NONE


def test_table_covers_every_combination() -> None:
    assert len(EXPECTED) == len(Phase) * 2 * len(Transition) == 32


@pytest.mark.parametrize("key", sorted(EXPECTED, key=str))
def test_every_combination(key: tuple[Phase, bool, Transition]) -> None:
    want = EXPECTED[key]
    if isinstance(want, type):
        with pytest.raises(want, match="TRADE.*FROM_ZERO"):
            phase_action(*key)
    else:
        assert phase_action(*key) is want


def test_an_unchanged_signal_does_nothing_outside_stop() -> None:
    """`Decisions.decide` skips the table for an unchanged signal outside STOP: this is the
    table's own answer there, whatever the holding and policy."""
    for phase, has, policy in itertools.product(Phase, (False, True), (False, True)):
        got = phase_action(phase, has, Transition.NO_CHANGE, policy)
        if phase is Phase.STOP:
            assert got is (Action.CLEAR if has else Action.NONE)
        else:
            assert got is Action.NONE


def test_enter_on_from_zero_policy_only_changes_flat_trade_from_zero() -> None:
    for key, want in EXPECTED.items():
        if key == (Phase.TRADE, False, Transition.FROM_ZERO):
            assert phase_action(*key, enter_on_from_zero=True) is Action.ENTER
        elif isinstance(want, type):
            with pytest.raises(want):
                phase_action(*key, enter_on_from_zero=True)
        else:
            assert phase_action(*key, enter_on_from_zero=True) is want


@pytest.mark.parametrize(
    ("prev", "new", "want"),
    [
        (0, 0, Transition.NO_CHANGE), (1, 1, Transition.NO_CHANGE), (-1, -1, Transition.NO_CHANGE),
        (0, 1, Transition.FROM_ZERO), (0, -1, Transition.FROM_ZERO),
        (1, 0, Transition.TO_ZERO), (-1, 0, Transition.TO_ZERO),
        (1, -1, Transition.CHANGE), (-1, 1, Transition.CHANGE),
    ],
)
def test_transition(prev: int, new: int, want: Transition) -> None:
    assert transition(prev, new) is want


def test_schedule_phases() -> None:
    s = SessionSchedule.parse("09:35,15:45,15:55")
    assert s.phase_at(9 * 3600) is Phase.WAIT
    assert s.phase_at(9 * 3600 + 35 * 60) is Phase.TRADE
    assert s.phase_at(15 * 3600 + 50 * 60) is Phase.LIQUIDATE
    assert s.phase_at(16 * 3600) is Phase.STOP
    assert SessionSchedule.parse("").phase_at(0) is Phase.TRADE
    with pytest.raises(ValueError, match="t1 < t2 < t3"):
        SessionSchedule.parse("10:00,09:00,11:00")
    with pytest.raises(ValueError, match="HH:MM"):
        SessionSchedule.parse("10:00,xx,11:00")


@pytest.mark.slow
def test_mypy_rejects_a_missing_case(tmp_path: Path) -> None:
    """Delete one case from the real module: mypy must then report the gap."""
    if shutil.which("mypy") is None and not _has_module("mypy"):
        pytest.skip("mypy not installed")
    src = (Path(__file__).resolve().parents[2] / "engine" / "phases.py").read_text()
    removed = src.replace(
        "                case Transition.CHANGE:\n                    return Action.SWITCH\n", "", 1
    )
    assert removed != src
    ok = tmp_path / "phases_ok.py"
    bad = tmp_path / "phases_missing.py"
    ok.write_text(src)
    bad.write_text(removed)
    cmd = [sys.executable, "-m", "mypy", "--no-incremental", "--ignore-missing-imports"]
    good = subprocess.run([*cmd, str(ok)], capture_output=True, text=True)
    assert good.returncode == 0, good.stdout
    res = subprocess.run([*cmd, str(bad)], capture_output=True, text=True)
    assert res.returncode != 0
    assert "assert_never" in res.stdout and "Transition.CHANGE" in res.stdout


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_action_for_remembers_the_table_and_never_an_impossible_state() -> None:
    """Every (phase, position, previous, new, policy), asked twice (the second answer is
    the remembered one), is the table's own answer; an impossible one raises both times."""
    for phase, has, prev, new, policy in itertools.product(
            Phase, (False, True), (-1, 0, 1), (-1, 0, 1), (False, True)):
        for _ in range(2):
            try:
                want: Action | type[Exception] = phase_action(
                    phase, has, transition(prev, new), policy)
            except InconsistentState:
                want = InconsistentState
            if want is InconsistentState:
                with pytest.raises(InconsistentState):
                    action_for(phase, has, prev, new, policy)
            else:
                assert action_for(phase, has, prev, new, policy) is want
