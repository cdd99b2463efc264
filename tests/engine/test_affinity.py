"""CPU placement from the environment: CPU lists parsed like the kernel's, bad ones refused
in one line, the process really pinned, physical cores read from topology files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.affinity import (
    ENGINE_ENV,
    _cpulist,
    core_siblings,
    cpus_from_env,
    parse_cpus,
    pin_from_env,
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
