"""CPU placement from the environment: CPU lists parsed like the kernel's, bad ones refused
in one line, the process really pinned, physical cores read from topology files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.affinity import (
    ENGINE_ENV,
    RT_ENV,
    _cpulist,
    core_siblings,
    cpus_from_env,
    parse_cpus,
    pin_from_env,
    realtime_from_env,
    rt_priority_from_env,
)
from engine.errors import UserError

ROOT = Path(__file__).resolve().parents[2]


def test_cpu_lists_round_trip_through_the_kernels_syntax() -> None:
    """Seeded random CPU sets, written as cpulists and parsed back (a brute-force
    expansion of each range is the reference)."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        cpus = {int(c) for c in rng.choice(64, size=int(rng.integers(1, 20)), replace=False)}
        text = _cpulist(cpus)
        expanded: set[int] = set()
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            expanded.update(range(int(lo), int(hi or lo) + 1))
        assert expanded == cpus
        assert parse_cpus(text) == cpus
    assert parse_cpus(" 0, 2-3 ") == {0, 2, 3}


@pytest.mark.parametrize("text", ["", "a", "1-", "-1", "3-1", "1,,2", "1.5", "0x1", "1-2-3",
                                  "+1", "01"])
def test_a_cpu_list_that_makes_no_sense_is_one_line(text: str) -> None:
    with pytest.raises(UserError, match="CPU numbers like"):
        parse_cpus(text, "ENGINE_CPUS")


def test_cpus_the_host_lacks_are_refused_and_the_process_is_pinned(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENGINE_ENV, str(os.cpu_count() or 1))  # one past the last CPU
    with pytest.raises(UserError, match="may not use"):
        cpus_from_env(ENGINE_ENV)
    monkeypatch.setenv(ENGINE_ENV, "")
    assert cpus_from_env(ENGINE_ENV) is None  # unset or empty: the scheduler places it
    before = os.sched_getaffinity(0)
    one = min(before)
    monkeypatch.setenv(ENGINE_ENV, str(one))
    try:
        assert pin_from_env(ENGINE_ENV) == {one}
        assert os.sched_getaffinity(0) == {one}
    finally:
        os.sched_setaffinity(0, before)


def test_run_engine_refuses_a_bad_placement_before_it_starts(tmp_path: Path) -> None:
    env = {**os.environ, "REPLAY_FEED_CPUS": "2-x"}
    proc = subprocess.run([sys.executable, str(ROOT / "run_engine.py"), "replay", "--out",
                           str(tmp_path / "out")], env=env, capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: REPLAY_FEED_CPUS")
    assert not (tmp_path / "out").exists()


def test_physical_cores_come_from_the_sibling_lists(tmp_path: Path) -> None:
    """A fake topology: CPUs 0/2 and 1/3 share cores; CPUs this process may not use
    are left out, and a CPU without a topology file is a core of its own."""
    allowed = sorted(os.sched_getaffinity(0))
    siblings = {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"}
    for cpu, text in siblings.items():
        d = tmp_path / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "thread_siblings_list").write_text(text + "\n")
    cores = core_siblings(tmp_path)
    want = {frozenset(s & set(allowed)) for s in ({0, 2}, {1, 3}) if s & set(allowed)}
    want |= {frozenset({c}) for c in allowed if c > 3}
    assert {frozenset(c) for c in cores} == want


@pytest.mark.parametrize("text", ["abc", "0", "100", "-1", "1.5", "5 5"])
def test_a_realtime_priority_that_makes_no_sense_is_one_line(
        text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RT_ENV, text)
    with pytest.raises(UserError, match=f"^{RT_ENV} must be a SCHED_FIFO priority from 1 "
                                        "to 99, got") as err:
        rt_priority_from_env()
    assert "\n" not in str(err.value)
    monkeypatch.setenv(RT_ENV, " 7 ")
    assert rt_priority_from_env() == 7
    monkeypatch.setenv(RT_ENV, "")
    assert rt_priority_from_env() is None and realtime_from_env() is None


_RT_PROBE = """
import os, sys, threading
from engine.affinity import realtime_from_env
from engine.errors import UserError
try:
    realtime_from_env()
except UserError as exc:
    print("refused", exc)
    sys.exit(0)
seen = [os.sched_getscheduler(0)]
t = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0)))
t.start(); t.join()
pid = os.fork()
if pid == 0:
    os._exit(os.sched_getscheduler(0))
seen.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print("policies", *seen, os.sched_getparam(0).sched_priority)
"""


def test_the_realtime_priority_is_the_calling_threads_alone() -> None:
    """ENGINE_RT_PRIORITY puts the calling thread under SCHED_FIFO (with
    SCHED_RESET_ON_FORK): a thread or a process it starts afterwards runs under the normal
    policy. In a process of its own (the test's own thread keeps its policy)."""
    env = {**os.environ, RT_ENV: "3", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", _RT_PROBE], env=env, capture_output=True,
                         text=True, timeout=60, cwd=ROOT, check=True).stdout.split()
    if out[0] == "refused":  # neither root nor CAP_SYS_NICE here: a one-line refusal
        assert "cannot run the daemon's thread under SCHED_FIFO" in " ".join(out)
        pytest.skip("SCHED_FIFO not permitted to this user")
    fifo_reset = os.SCHED_FIFO | os.SCHED_RESET_ON_FORK
    assert out == ["policies", str(fifo_reset), str(os.SCHED_OTHER), str(os.SCHED_OTHER), "3"]


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=12), st.integers(-10**30, 10**30).map(str),
                 st.floats(allow_nan=True).map(str)))
@example("¹")  # a digit to str.isdigit(), not to int(): found by this test
@example("٣")
@example("１０")
def test_any_realtime_priority_text_is_a_priority_nothing_or_one_line(text: str) -> None:
    """Whatever ENGINE_RT_PRIORITY holds: nothing (blank), a priority in 1..99, or a
    one-line UserError naming the variable; never another exception."""
    import os as os_

    old = os_.environ.get(RT_ENV)
    try:
        os_.environ[RT_ENV] = text.replace("\x00", "")
        try:
            got = rt_priority_from_env()
        except UserError as exc:
            assert str(exc).startswith(f"{RT_ENV} must be") and "\n" not in str(exc)
            return
        if got is None:
            assert not text.replace("\x00", "").strip()
        else:
            assert 1 <= got <= os_.sched_get_priority_max(os_.SCHED_FIFO)
    finally:
        if old is None:
            os_.environ.pop(RT_ENV, None)
        else:
            os_.environ[RT_ENV] = old
