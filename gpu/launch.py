"""Pre-bound CUDA launches: numba's per-call argument typing and marshalling done once.

A numba kernel call types every argument and turns it into ctypes values on each launch
(tens of microseconds of Python on the host). Where the arguments never change (the same
device or mapped arrays, the same scalars) they can be prepared once and only the driver
launch kept: `bind` returns `go(grid)`, one driver call per launch. It uses numba-cuda's
internals (0.30.x), so it returns None wherever they do not fit (the simulator, an
unexpected dispatcher, arguments numba would write back) and callers check one bound
launch against an ordinary one before they trust it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)

Launcher = Callable[[int], None]


def prebind_enabled() -> bool:
    """GPU_OPTIONS_PREBIND=0 switches pre-bound launches off (benchmarks compare both)."""
    return (os.environ.get("GPU_OPTIONS_PREBIND", "1") != "0"
            and os.environ.get("NUMBA_ENABLE_CUDASIM", "0") != "1")


def bind(kernel: Any, args: Sequence[Any], stream: Any, block: int) -> Launcher | None:
    """`go(grid)` launching `kernel[grid, block, stream](*args)` without numba's per-call
    work, or None. The kernel must have been launched once with arguments of these types
    (so it is compiled); `args` must stay alive and unchanged while `go` is used."""
    if not prebind_enabled():
        return None
    try:
        import numba.cuda.dispatcher

        nd: Any = numba.cuda.dispatcher  # internals mypy's stubs do not list

        overloads = getattr(kernel, "overloads", {})
        kern = None
        if len(overloads) == 1:
            kern = next(iter(overloads.values()))
        else:  # the overload these arguments select
            key = tuple(kernel.typeof_pyval(a) for a in args)
            kern = overloads.get(key)
        if kern is None:
            return None
        retr: list[Any] = []
        kernelargs: list[Any] = []
        for ty, val in zip(kern.argument_types, args, strict=True):
            kern._prepare_args(ty, val, stream, retr, kernelargs)
        if retr or kern.debug:
            return None  # write-backs or debug checks need numba's own launch
        coop = "is_cooperative" if nd.CUDA_CORE_GE_1_0 else "cooperative_launch"
        func = kern._codelibrary.get_cufunc().kernel
        launch, make_config = nd.launch, nd.LaunchConfig
        cooperative = kern.cooperative
        configs: dict[int, Any] = {}

        def go(grid: int) -> None:
            config = configs.get(grid)
            if config is None:  # one config per grid size, made once
                config = make_config(grid=grid, block=block, shmem_size=0,
                                     **{coop: cooperative})
                configs[grid] = config
            launch(stream, config, func, *kernelargs)

        return go
    except Exception as exc:  # noqa: BLE001 - any internals mismatch: the ordinary path
        log.warning("CUDA launch not pre-bound (%s)", exc)
        return None


def event_query(event: Any) -> Callable[[], bool]:
    """A cheap `event.query()`: numba's raises (and logs) an error for every not-ready
    answer, some microseconds a poll; this asks the driver directly and compares codes.
    The CUDA simulator's events have no query (its launches are synchronous): always True.
    GPU_FAST_EVENT_QUERY=0 keeps numba's query."""
    query = getattr(event, "query", None)
    if query is None:
        return lambda: True
    if os.environ.get("GPU_FAST_EVENT_QUERY", "1") == "0":  # numba's (benchmarks compare)
        return lambda: bool(query())
    try:
        from cuda.bindings import driver as binding

        handle = event.handle
        fn = binding.cuEventQuery
        success = binding.CUresult.CUDA_SUCCESS
        not_ready = binding.CUresult.CUDA_ERROR_NOT_READY
        fn(handle)  # the handle is the driver's: this must not raise
    except Exception:  # noqa: BLE001 - another binding: numba's query
        return lambda: bool(query())

    def fast() -> bool:
        code = fn(handle)[0]
        if code == success:
            return True
        if code == not_ready:
            return False
        return bool(query())  # numba's query raises the driver's error

    return fast


def untimed_event() -> Any:
    """A CUDA event without timing (cheaper to record and query); the simulator's Event
    takes no arguments."""
    from numba import cuda

    try:
        return cuda.event(timing=False)  # type: ignore[call-arg]
    except TypeError:
        return cuda.event()
