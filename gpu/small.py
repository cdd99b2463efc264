"""Small problems without compiling: numpy or the plain core in Python, chosen by size.

A numba function costs a process with empty caches 0.1-1 s to compile (2-core dev VM,
2026-11-28), and a short command such as the small CPU `evolve` (16 stocks, 768 days, 500
individuals) ran its report's helpers for milliseconds after compiling them for seconds.
Where a helper's work is small, the same result comes from numpy (a vectorised form of
the same operations: comparisons, bit packing, numpy's own mean) or from the driver's
Python source run by the interpreter over the plain core functions of `gpu.twin` (the
single statement of the money rules; IEEE arithmetic in the same order as the compiled
code, which numba does not contract or reorder without fastmath). Each such path is
tested against its compiled twin bit for bit on real data; larger problems keep the
compiled one.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from typing import Any

#: work (days x stocks of one window, or elements of one array) up to which a helper runs
#: uncompiled: interpreted, about 1 us a cell (a 768-day x 16-stock money pass took 12 ms
#: in Python against 0.05 ms compiled, whose compile took 0.2 s), so at most some 30 ms
SMALL_CELLS = 32_768


#: cells run uncompiled so far in this process, per driver (see `uncompiled`)
_spent: dict[str, int] = {}


def uncompiled(driver: Any, cells: int, budget: int = SMALL_CELLS) -> bool:
    """Whether to run `cells` of `driver`'s work uncompiled: it is small, the driver has no
    machine code yet (compiled in this process or in numba's disk cache: then that is the
    faster way), and this process's uncompiled work on it stays within `budget` cells,
    about what compiling it costs (many small calls compile it once instead). Charged when
    True."""
    name = getattr(getattr(driver, "py_func", driver), "__qualname__", repr(driver))
    spent = _spent.get(name, 0)
    if not is_small(cells) or spent + cells > budget or has_machine_code(driver):
        return False
    _spent[name] = spent + cells
    return True


def has_machine_code(driver: Any) -> bool:
    """Whether a numba dispatcher is compiled in this process or has a disk-cache index."""
    if getattr(driver, "signatures", None):
        return True
    cache_file = getattr(getattr(driver, "_cache", None), "_cache_file", None)
    index = getattr(cache_file, "_index_path", None)
    return index is not None and os.path.isfile(index)


def is_small(*dims: int) -> bool:
    """Whether a problem of these dimensions (their product) runs uncompiled."""
    cells = 1
    for d in dims:
        cells *= max(0, int(d))
    return cells <= SMALL_CELLS


def interpreted(driver: Any, **callees: Any) -> Callable[..., Any]:
    """`driver`'s Python source (a numba dispatcher's `py_func`, or a function) run by the
    interpreter, its global names in `callees` bound to plain functions instead of their
    compiled versions (a compiled callee called from Python would be compiled)."""
    func = getattr(driver, "py_func", driver)
    namespace = {**func.__globals__, **callees}
    return types.FunctionType(func.__code__, namespace, func.__name__, func.__defaults__,
                              func.__closure__)
