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

    ENGINE_RT_PRIORITY   the live daemon's loop thread under SCHED_FIFO at this priority
                         (1-99; applied by `realtime_from_env`, right before the loop)

A thread under SCHED_FIFO runs whenever it is ready, ahead of every normal process: on the
2-core dev VM, with the feed and other work beside the daemon, its order latency's p99
halved (1,215/1,499/847 -> 601/501/433 us end to end, 2026-11-28 16:34-16:35 UTC, load
4.3-4.7) and its p50 stayed (benchmarks/results/devbox-2026-11-28f-live-latency). Only
the loop's thread: the ZeroMQ I/O threads are started before it, and the processes and
threads it starts afterwards (re-evolution, option workers) run under the normal policy
again (SCHED_RESET_ON_FORK). The daemon blocks in its poll when no message waits, so it
takes from others only the time its work needs; the kernel keeps 5% of each second for
normal threads whatever an RT thread does (`/proc/sys/kernel/sched_rt_runtime_us`).
It needs root or CAP_SYS_NICE (or an RLIMIT_RTPRIO at least the priority).
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.errors import UserError

ENGINE_ENV, FEED_ENV, WORKER_ENV = "ENGINE_CPUS", "REPLAY_FEED_CPUS", "OPTION_WORKER_CPUS"
RT_ENV = "ENGINE_RT_PRIORITY"


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
    rt_priority_from_env()


def rt_priority_from_env() -> int | None:
    """The SCHED_FIFO priority ENGINE_RT_PRIORITY asks for; None when unset or empty."""
    raw = os.environ.get(RT_ENV, "").strip()
    if not raw:
        return None
    top = os.sched_get_priority_max(os.SCHED_FIFO)
    # isdigit() alone takes '¹' or '٣', which int() then rejects (found by hypothesis)
    if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= top):
        raise UserError(f"{RT_ENV} must be a SCHED_FIFO priority from 1 to {top}, got {raw!r}")
    return int(raw)


def realtime_from_env() -> int | None:
    """Put the calling thread under SCHED_FIFO at the priority ENGINE_RT_PRIORITY asks for
    (the processes and threads it starts later under the normal policy again); returns
    the priority, or None when unset."""
    priority = rt_priority_from_env()
    if priority is not None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK,
                                  os.sched_param(priority))
        except OSError as exc:  # neither root nor CAP_SYS_NICE nor RLIMIT_RTPRIO
            raise UserError(f"{RT_ENV}={os.environ[RT_ENV]!r}: cannot run the daemon's "
                            f"thread under SCHED_FIFO ({exc.strerror}; it needs root, "
                            "CAP_SYS_NICE or an RLIMIT_RTPRIO)") from None
    return priority


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
