"""A blocking barrier for numba's CUDA simulator (the tests' NUMBA_ENABLE_CUDASIM=1 runs).

numba-cuda's simulator runs each CUDA thread of a block as a Python thread, and its block
manager (numba/cuda/simulator/kernel.py, `BlockManager.run`) finds out that every thread
has reached `cuda.syncthreads()` by polling them in a loop that never blocks: it holds the
GIL until the interpreter's switch interval (5 ms) takes it away, so each thread woken at
a barrier waits for that loop to be preempted. The FD kernels' lanes layout crosses about
18 barriers a time step in the simulator (its warp shuffles are shared memory and block
barriers there), so most of a simulated launch was that polling: one seed-grid option on
16 price steps and 3 time steps took about 0.5 s a block with the poller and 0.1 s with
the barrier below (this machine, 2026-11-25, tests/gpu/test_cuda_sim_barrier.py checks
the two give the same values).

`install()` replaces the poller with a condition variable: a thread reaching the barrier
counts itself and sleeps; the last live thread to arrive (or a thread ending while all
the others wait) opens it, exactly the simulator's rule that a barrier waits only for the
block's live threads (the lanes kernel relies on it: a second warp with no march to run
returns early). A thread's exception aborts the others at their next barrier, and the
launch raises the first exception, as the poller does. Only the scheduling changes: every
thread still runs the kernel's Python code on its own, one block after another.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

_original: dict[str, Any] = {}


def _syncthreads(self: Any) -> None:
    """BlockThread.syncthreads: wait until every live thread of the block has arrived."""
    if self.abort:
        raise RuntimeError("abort flag set on syncthreads call")
    block = self._manager
    with block._cond:
        generation = block._generation
        block._waiting += 1
        if block._waiting == block._live:
            _open(block)
        else:
            while block._generation == generation and not self.abort:
                block._cond.wait()
    if self.abort:
        raise RuntimeError("abort flag set on syncthreads clear")


def _open(block: Any) -> None:
    """Release the threads waiting at the barrier (the caller holds block._cond)."""
    block._waiting = 0
    block._generation += 1
    block._cond.notify_all()


def _run(self: Any, grid_point: tuple[int, ...], *args: Any) -> None:
    """BlockManager.run: start the block's threads, wait for them, raise the first error."""
    self._cond = threading.Condition()
    self._generation = 0
    self._waiting = 0
    self._first_failure = None
    threads: list[Any] = []
    kernel = self._f

    def target() -> None:
        try:
            kernel(*args)
        except BaseException:
            with self._cond:
                if self._first_failure is None:
                    self._first_failure = threading.current_thread()
                    for t in threads:
                        t.abort = True
                    self._cond.notify_all()
            raise
        finally:
            with self._cond:
                self._live -= 1
                if self._live and self._waiting == self._live:
                    _open(self)  # the others were waiting only for this thread

    from numba.cuda.simulator import kernel as sim

    for block_point in np.ndindex(*self._block_dim):
        threads.append(sim.BlockThread(target, self, grid_point, block_point, self._debug))
    self._live = len(threads)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = self._first_failure
    if failed is not None and failed.exception:
        raise failed.exception[0].with_traceback(failed.exception[1])
    for t in threads:
        if t.exception:
            raise t.exception[0].with_traceback(t.exception[1])


def install() -> None:
    """Use the blocking barrier in this process (no-op if installed)."""
    from numba.cuda.simulator import kernel as sim

    if _original:
        return
    _original["syncthreads"] = sim.BlockThread.syncthreads
    _original["run"] = sim.BlockManager.run
    sim.BlockThread.syncthreads = _syncthreads  # type: ignore[method-assign]
    sim.BlockManager.run = _run  # type: ignore[method-assign]


def uninstall() -> None:
    """Back to numba's polling block manager (for the test that compares the two)."""
    from numba.cuda.simulator import kernel as sim

    if not _original:
        return
    sim.BlockThread.syncthreads = _original.pop("syncthreads")  # type: ignore[method-assign]
    sim.BlockManager.run = _original.pop("run")  # type: ignore[method-assign]


def installed() -> bool:
    return bool(_original)
