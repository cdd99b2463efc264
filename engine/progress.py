"""Progress lines of long work: elapsed time and the estimated time left (ETA).

The estimate is the plain linear one, elapsed / done x (total - done): the steps of every
long command here (generations, sweeps, folds) cost about the same each, so it needs no
smoothing. Nothing before the first step is done: no estimate yet.
"""

from __future__ import annotations


def duration(seconds: float) -> str:
    """Seconds as people read them: 42 s, 3 min 05 s, 1 h 02 min."""
    s = max(int(round(seconds)), 0)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def eta(done: int, total: int, elapsed: float) -> str:
    """"ETA 1 min 05 s" for `done` of `total` steps after `elapsed` seconds; "" before the
    first step and after the last."""
    if done <= 0 or done >= total or elapsed <= 0:
        return ""
    return f"ETA {duration(elapsed / done * (total - done))}"
