"""CPU placement of the engine's processes: the replay feed, the engine and the option worker.

Three busy processes share the host during a replay with an option group: the feed
publishing ticks, the engine consuming them, and the GPU worker spinning over its launches.
Where the scheduler puts them decides how fast the engine runs: two of them on the two
hardware threads of one core share its execution units. Each may be pinned to a set of CPUs
through the environment (children read it when they start):

    ENGINE_CPUS          the engine's process (applied by `pin_engine`, e.g. run_engine.py)
    REPLAY_FEED_CPUS     the replay's feed process (ipc/tcp transports)
    OPTION_WORKER_CPUS   the GPU option worker process

each a list such as "2", "2,3" or "4-7" (CPU numbers as the kernel counts them). Unset: the
scheduler's choice, as before. `distinct_cores(n)` proposes n CPUs on n different physical
cores (from the kernel's sibling lists), for benchmarks and for users who want a plan.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.errors import UserError

ENGINE_ENV, FEED_ENV, WORKER_ENV = "ENGINE_CPUS", "REPLAY_FEED_CPUS", "OPTION_WORKER_CPUS"


def parse_cpus(text: str, name: str = "CPU list") -> set[int]:
    """CPUs of a list like "0,2-3" (the kernel's cpulist syntax); one-line error otherwise."""
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise UserError(f"{name} must be CPU numbers like 2 or 0,2-3, got {text!r}"
                            ) from None
        if a < 0 or b < a or str(a) != lo or (sep and str(b) != hi):
            raise UserError(f"{name} must be CPU numbers like 2 or 0,2-3, got {text!r}")
        cpus.update(range(a, b + 1))
    return cpus


def cpus_from_env(name: str, allowed: set[int] | None = None) -> set[int] | None:
    """The CPUs the environment variable `name` asks for, checked against `allowed`
    (default: the CPUs the host has; a process already pinned elsewhere may still move
    its children anywhere its cgroup allows); None when it is unset or empty."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    cpus = parse_cpus(raw, name)
    allowed = set(range(os.cpu_count() or 1)) if allowed is None else allowed
    if not cpus <= allowed:
        raise UserError(f"{name}={raw!r} names CPUs this process may not use: "
                        f"{sorted(cpus - allowed)} (allowed: {_cpulist(allowed)})")
    return cpus


def _cpulist(cpus: set[int]) -> str:
    """"0-3,8" for {0, 1, 2, 3, 8}: the kernel's cpulist syntax, short for messages."""
    out: list[str] = []
    for c in sorted(cpus):
        if out and int(out[-1].rpartition("-")[2]) == c - 1:
            out[-1] = f"{out[-1].partition('-')[0]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out)


def pin_from_env(name: str) -> set[int] | None:
    """Pin the calling process (and the threads it starts later) to the CPUs `name` asks
    for; returns them, or None when unset."""
    cpus = cpus_from_env(name)
    if cpus is not None:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError as exc:  # outside this process's cgroup
            raise UserError(f"{name}={os.environ[name]!r}: cannot pin to these CPUs "
                            f"({exc.strerror})") from None
    return cpus


def pin_engine() -> set[int] | None:
    """ENGINE_CPUS for the engine's own process (the feed and the worker read theirs)."""
    return pin_from_env(ENGINE_ENV)


def check_env() -> None:
    """Every placement variable parsed now, against the CPUs this process may use (before
    the engine pins itself): a typo is one line before anything starts."""
    allowed = os.sched_getaffinity(0)
    for name in (ENGINE_ENV, FEED_ENV, WORKER_ENV):
        cpus_from_env(name, allowed)


def core_siblings(root: Path = Path("/sys/devices/system/cpu")) -> list[set[int]]:
    """The CPUs of each physical core (hardware threads that share it), from the kernel's
    topology files, restricted to the CPUs this process may use; one set per CPU where
    the files are missing."""
    allowed = os.sched_getaffinity(0)
    cores: list[set[int]] = []
    seen: set[int] = set()
    for cpu in sorted(allowed):
        if cpu in seen:
            continue
        path = root / f"cpu{cpu}" / "topology" / "thread_siblings_list"
        try:
            group = parse_cpus(path.read_text().strip()) & allowed
        except (OSError, UserError):
            group = {cpu}
        group.add(cpu)
        seen |= group
        cores.append(group)
    return cores


def distinct_cores(n: int) -> list[int]:
    """n CPUs on n different physical cores, leaving the first core (where the kernel and
    interrupts tend to run) while there are enough; fewer when the host has fewer cores."""
    cores = core_siblings()
    pick = cores[1:] if len(cores) > n else cores
    return [min(c) for c in pick[:n]]
