"""Small problems without compiling: numpy or the plain core in Python, chosen by size.

A numba function costs a process with empty caches 0.1-1 s to compile (2-core dev VM,
2026-11-28), and a short command such as the small CPU `evolve` (16 stocks, 768 days, 500
individuals) ran its report's helpers for milliseconds after compiling them for seconds.
Where a helper's work is small, the same result comes from numpy (a vectorised form of
the same operations: comparisons, bit packing, numpy's own mean) or from the driver's
Python source run by the interpreter over the plain core functions of `gpu.twin` (the
single statement of the money rules; IEEE arithmetic in the same order as the compiled
code, which numba does not contract or reorder without fastmath). `plain` runs a driver's
whole call tree that way (the GP operators: breeding, the first population, postfix
compilation, program checks). Each such path is tested against its compiled twin bit for
bit on real data; larger problems keep the compiled one. Budgets are per process and per
driver (`uncompiled`); a caller that knows its total work ahead (an evolution) announces
it (`expect`), so that work too large for the budget is compiled from its first call.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

#: work (days x stocks of one window, or elements of one array) up to which a helper runs
#: uncompiled: interpreted, about 1 us a cell (a 768-day x 16-stock money pass took 12 ms
#: in Python against 0.05 ms compiled, whose compile took 0.2 s), so at most some 30 ms
SMALL_CELLS = 32_768


#: cells run uncompiled so far in this process, per driver (see `uncompiled`)
_spent: dict[str, int] = {}
#: drivers whose announced work (`expect`) exceeds their budget: compiled from the start
_too_big: set[str] = set()


def _name(driver: Any) -> str:
    return str(getattr(getattr(driver, "py_func", driver), "__qualname__", repr(driver)))


def uncompiled(driver: Any, cells: int, budget: int = SMALL_CELLS) -> bool:
    """Whether to run `cells` of `driver`'s work uncompiled: it is small, the driver has no
    machine code yet (compiled in this process or in numba's disk cache: then that is the
    faster way), and this process's uncompiled work on it stays within `budget` cells,
    about what compiling it costs (many small calls compile it once instead). Charged when
    True."""
    name = _name(driver)
    spent = _spent.get(name, 0)
    if (not is_small(cells) or spent + cells > budget or name in _too_big
            or has_machine_code(driver)):
        return False
    _spent[name] = spent + cells
    return True


def expect(driver: Any, cells: int, budget: int) -> bool:
    """Announce `cells` more of `driver`'s work in this process (an evolution knows its
    generations ahead): when it would not all fit in `budget`, the driver is compiled from
    its first call on (interpreting a part first, then compiling anyway, would cost both).
    Returns whether it fits; charges nothing (each call's `uncompiled` does)."""
    name = _name(driver)
    if _spent.get(name, 0) + cells > budget:
        _too_big.add(name)
        return False
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


def plain(driver: Any) -> Callable[..., Any]:
    """`driver`'s Python source with every numba function it calls by a global name, and
    every one those call in turn, replaced by a plain Python clone: the whole call tree
    runs in the interpreter and nothing compiles (`interpreted` binds named callees only).
    The clones run numba's semantics where this project's kernels rely on them: the same
    IEEE operations in the same order, integer sizes the kernels keep in range; uint64
    arithmetic wraps in numpy as in numba, numpy's overflow warning silenced by
    `run_plain`. Clones are kept per function, so each is built once a process."""
    func = getattr(driver, "py_func", driver)
    clone = _plain.get(func)
    if clone is not None:
        return clone
    namespace = dict(func.__globals__)
    clone = types.FunctionType(func.__code__, namespace, func.__name__, func.__defaults__,
                               func.__closure__)
    _plain[func] = clone  # before the callees: a cycle of calls ends here
    for name in set(_global_names(func.__code__)):
        if _is_dispatcher(namespace.get(name)):
            namespace[name] = plain(namespace[name])
    return clone


def run_plain(driver: Any, *args: Any) -> Any:
    """`plain(driver)(*args)`, numpy's integer overflow warnings off (a splitmix64 step
    wraps on purpose)."""
    with np.errstate(over="ignore"):
        return plain(driver)(*args)


_plain: dict[Callable[..., Any], Callable[..., Any]] = {}


def _global_names(code: types.CodeType) -> Iterator[str]:
    """The names `code` and the functions defined inside it may read as globals."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _global_names(const)


def _is_dispatcher(value: Any) -> bool:
    """A numba CPU function (by its attributes: this module imports no numba)."""
    return callable(value) and hasattr(value, "py_func") and hasattr(value, "_compile_for_args")
