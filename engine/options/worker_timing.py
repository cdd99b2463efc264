"""Where the option worker's loop spends its time (OPTION_WORKER_TIMING=PATH, a diagnostic
off by default): a clock read around each step, far lighter than cProfile."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

#: one step of the worker's loop over a batch: True when it did some work
Step = Callable[[Any], bool]


class StepTimes:
    """Each step's calls that did work and those that found nothing to do, with their
    nanoseconds."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = collections.defaultdict(int)
        self.ns: dict[str, int] = collections.defaultdict(int)
        self.started = time.perf_counter_ns()

    def wrap(self, name: str, step: Step) -> Step:
        """`step`, timed under `name` (or `name`_nothing where it did no work)."""
        clock, counts, ns = time.perf_counter_ns, self.counts, self.ns

        def timed(batch: Any) -> bool:
            t = clock()
            did = step(batch)
            kind = name if did else name + "_nothing"
            ns[kind] += clock() - t
            counts[kind] += 1
            return bool(did)

        return timed

    def write(self, path: str, launch_latencies_ns: Iterable[float],
              want_waits_ns: Iterable[int]) -> None:
        """The report as JSON: the steps, the process's CPU time and context switches, each
        batch's smoothed launch latency and how long a raised WANT waited for a request."""
        import resource

        wall = time.perf_counter_ns() - self.started
        use = resource.getrusage(resource.RUSAGE_SELF)
        # a worker pushed off its core by other busy threads shows many involuntary switches
        report: dict[str, Any] = {
            "wall_ns": wall, "counts": dict(self.counts), "ns": dict(self.ns),
            "us_each": {k: self.ns[k] / 1e3 / c for k, c in self.counts.items() if c},
            "cpu_s": use.ru_utime + use.ru_stime, "involuntary_switches": use.ru_nivcsw,
            "voluntary_switches": use.ru_nvcsw,
            "launch_latency_us": [x / 1e3 for x in launch_latencies_ns]}
        waits = np.fromiter(want_waits_ns, dtype=np.float64) / 1e3
        if waits.size:  # how long a raised WANT waited for the engine's request
            report["want_wait_us"] = {"launches": int(waits.size),
                                      "p50": float(np.median(waits)),
                                      "p90": float(np.percentile(waits, 90)),
                                      "mean": float(waits.mean())}
        Path(path).write_bytes(msgspec.json.encode(report))
