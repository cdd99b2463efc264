"""Two speed-ups of numba's CUDA simulator for the tests' NUMBA_ENABLE_CUDASIM=1 runs: a block
barrier that hands the GIL from thread to thread instead of polling, and a cheap lookup
of a shared array's call site. Installed by tests/conftest.py under the simulator.

numba-cuda's simulator runs each CUDA thread of a block as a Python thread, and its block
manager (numba/cuda/simulator/kernel.py, `BlockManager.run`) finds out that every thread
has reached `cuda.syncthreads()` by polling them in a loop that never blocks: it holds the
GIL until the interpreter's switch interval (5 ms) takes it away, and the 32 or more
threads woken at each barrier then contend for it. The FD kernels' lanes layout crosses
about 18 barriers a time step in the simulator (its warp shuffles are shared memory and
block barriers there), so most of a simulated launch was that polling.

`install()` runs a block's threads in turns instead (`_Baton`): one thread runs until it
reaches a barrier or ends, then wakes the next and sleeps; when every live thread has
arrived, the barrier opens and they run again in turn. That is the simulator's rule that
a barrier waits only for the block's live threads (the lanes kernel relies on it: a
second warp with no march to run returns early). A thread's exception aborts the others
at their next barrier and the launch raises it, as with the poller. Each thread still
runs the kernel's Python code itself, and blocks still run one after another; only who
waits how changes (the simulator's threads never ran at once anyway, under the GIL). Between
two barriers the threads now run in thread order, the same order every launch, where the
poller's order was the OS's and the switch interval's: a kernel whose threads race between
barriers is no more (nor less) caught here than there; the real-GPU tests (-m gpu) are the
ones that can see such a race.

`cuda.shared.array` in the simulator finds the block's array by its call site (file,
line), which it took from `traceback.extract_stack`: the whole stack (some 80 frames
under pytest), each frame's source line read through linecache (a stat of its file),
for every thread and every shared array of every launch. `_shared_array` reads the same
(file, line) from the caller's frame.

Measured side by side (benchmarks/cuda_simulator.py; results and the test files' times
before and after: benchmarks/results/devbox-2026-11-25-cuda-simulator/README.md): about
six times faster a launch. tests/gpu/test_cuda_simulator.py checks both give numba's
simulator's values bit for bit.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import deque
from typing import Any

import numpy as np

_original: dict[str, Any] = {}


class _Baton:
    """One block's schedule: exactly one simulated thread runs at a time, until it reaches
    a barrier or ends, then hands over to the next (a thread's `_turn` lock, held while it
    must not run). When every live thread has arrived at the barrier it opens: the
    arrived threads run again, in the order they arrived."""

    def __init__(self, threads: list[Any]) -> None:
        self.ready: deque[Any] = deque(threads)
        self.arrived: list[Any] = []
        self.failure: Any = None
        self.done = threading.Lock()
        self.done.acquire()

    def pass_on(self) -> None:
        if not self.ready:  # each live thread has arrived: the barrier opens
            self.ready = deque(self.arrived)
            self.arrived = []
        if self.ready:
            self.ready.popleft()._turn.release()
        else:  # no live thread left: the block is done
            self.done.release()


def _syncthreads(self: Any) -> None:
    """BlockThread.syncthreads: wait until every live thread of the block has arrived."""
    if self.abort:
        raise RuntimeError("abort flag set on syncthreads call")
    baton = self._manager._baton
    baton.arrived.append(self)
    baton.pass_on()
    self._turn.acquire()
    if self.abort:
        raise RuntimeError("abort flag set on syncthreads clear")


def _run(self: Any, grid_point: tuple[int, ...], *args: Any) -> None:
    """BlockManager.run: run the block's threads in turns, raise the first error."""
    from numba.cuda.simulator import kernel as sim

    kernel = self._f
    threads: list[Any] = []

    def target() -> None:
        me = threading.current_thread()
        me._turn.acquire()  # type: ignore[attr-defined]
        try:
            kernel(*args)
        except BaseException:
            if baton.failure is None:  # the others stop at their next barrier
                baton.failure = me
                for t in threads:
                    t.abort = True
            raise
        finally:
            baton.pass_on()

    for block_point in np.ndindex(*self._block_dim):
        t: Any = sim.BlockThread(target, self, grid_point, block_point, self._debug)
        t._turn = threading.Lock()
        t._turn.acquire()
        threads.append(t)
    baton = self._baton = _Baton(threads)
    for t in threads:
        t.start()
    baton.pass_on()
    baton.done.acquire()
    for t in threads:
        t.join()
    failed = baton.failure
    for t in ([failed] if failed is not None else []) + threads:
        if t.exception:
            raise t.exception[0].with_traceback(t.exception[1])


def _shared_array(self: Any, shape: Any, dtype: Any, alignment: Any = None) -> Any:
    """FakeCUDAShared.array with the call site from the caller's frame (numba-cuda 0.30.4's
    body otherwise)."""
    from numba.cuda.simulator.kernelapi import numpy_support, types

    if alignment is not None:
        raise RuntimeError("Array alignment is not supported in cudasim")
    if isinstance(dtype, types.Type):
        dtype = numpy_support.as_dtype(dtype)
    if shape == 0:  # dynamic shared memory: one buffer for every such array
        count = self._dynshared_size // dtype.itemsize
        return np.frombuffer(self._dynshared.data, dtype=dtype, count=count)
    frame = sys._getframe(1)
    caller = (frame.f_code.co_filename, frame.f_lineno)
    res = self._allocations.get(caller)
    if res is None:
        res = np.empty(shape, dtype)
        self._allocations[caller] = res
    return res


def install() -> None:
    """Use the blocking barrier and the call-site lookup in this process (no-op if
    installed)."""
    from numba.cuda.simulator import kernel as sim
    from numba.cuda.simulator import kernelapi

    if _original:
        return
    _original["syncthreads"] = sim.BlockThread.syncthreads
    _original["run"] = sim.BlockManager.run
    _original["shared"] = kernelapi.FakeCUDAShared.array
    sim.BlockThread.syncthreads = _syncthreads  # type: ignore[method-assign]
    sim.BlockManager.run = _run  # type: ignore[method-assign]
    kernelapi.FakeCUDAShared.array = _shared_array  # type: ignore[method-assign]


def uninstall() -> None:
    """Back to numba's own simulator (for the tests that compare the two)."""
    from numba.cuda.simulator import kernel as sim
    from numba.cuda.simulator import kernelapi

    if not _original:
        return
    sim.BlockThread.syncthreads = _original.pop("syncthreads")  # type: ignore[method-assign]
    sim.BlockManager.run = _original.pop("run")  # type: ignore[method-assign]
    kernelapi.FakeCUDAShared.array = _original.pop("shared")  # type: ignore[method-assign]


def install_in_child_processes() -> None:
    """Python processes started from now on (with this environment) install the speed-ups
    when they import the simulator: tests/simulator_site/sitecustomize.py goes first on
    their PYTHONPATH."""
    site = os.path.join(os.path.dirname(os.path.abspath(__file__)), "simulator_site")
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if site not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([site, *paths])


def installed() -> bool:
    return bool(_original)
