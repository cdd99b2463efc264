"""The tests' speed-ups of numba's CUDA simulator (tests/cuda_simulator.py, installed
by tests/conftest.py under NUMBA_ENABLE_CUDASIM=1) against numba's own simulator:
the same values bit for bit, the same barrier rule (only live threads are waited for), the
same error from a failing thread."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from numba import cuda

from gpu.device import cuda_simulated
from gpu.options import core
from gpu.options.engines import make_grid
from tests import cuda_simulator
from tests.gpu.option_rows import random_params

pytestmark = pytest.mark.skipif(not cuda_simulated(), reason="the CUDA simulator's barrier")


@pytest.fixture
def both_barriers() -> Iterator[Callable[[Callable[[], Any]], tuple[Any, Any]]]:
    """Runs a launch under numba's own simulator, then with tests/cuda_simulator.py."""
    was = cuda_simulator.installed()

    def run(launch: Callable[[], Any]) -> tuple[Any, Any]:
        cuda_simulator.uninstall()
        polled = launch()
        cuda_simulator.install()
        assert cuda_simulator.installed()
        return polled, launch()

    yield run
    if not was:
        cuda_simulator.uninstall()


def test_fd_kernels_give_the_pollers_values_bit_for_bit(
        both_barriers: Callable[[Callable[[], Any]], tuple[Any, Any]]) -> None:
    """The lanes kernel with two warps an option (an American row: both warps march and
    meet at a block barrier; a European one: the second warp returns at once and the
    first's barriers wait only for it) and the PCR kernel (64 threads, barriers at every
    reduction level)."""
    grid = make_grid("default", price_steps=40, time_steps=3)
    params = random_params(4, seed=40)[[1, 3]]  # a European put, an American put
    assert params[:, core.IS_AMERICAN].tolist() == [0.0, 1.0]
    assert params[:, core.IS_CALL].tolist() == [0.0, 0.0]
    for solver, split in (("lanes", True), ("pcr", False)):
        kernel, threads = core.fd_kernel(grid.price_steps, solver, split_passes=split)

        def launch(kernel: Any = kernel, threads: int = threads) -> np.ndarray:
            d_out = cuda.device_array((2, core.N_OUT))
            kernel[2, threads](cuda.to_device(params), d_out,
                  *core.launch_args(grid.kernel_args()))
            return d_out.copy_to_host()

        polled, blocking = both_barriers(launch)
        assert np.isfinite(polled).all()
        np.testing.assert_array_equal(blocking, polled)


# kernels at module level: the simulator swaps the module's global `cuda` for its own


@cuda.jit
def _count(flags: Any, out: Any) -> None:
    """Threads past `flags[0]` leave first; the rest count the set flags with
    syncthreads_count and sum them through shared memory over two barriers."""
    tid: int = cuda.threadIdx.x  # type: ignore[assignment]
    if tid >= flags[0]:
        return
    shared = cuda.shared.array(64, np.int64)
    n: int = cuda.syncthreads_count(flags[tid + 1] > 0)  # type: ignore[call-arg]
    shared[tid] = flags[tid + 1]
    cuda.syncthreads()
    if tid == 0:
        total = 0
        for i in range(flags[0]):
            total += shared[i]
        out[0] = n
        out[1] = total


@cuda.jit
def _faulty(out: Any) -> None:
    """Thread 5 writes past the array between two barriers."""
    tid: int = cuda.threadIdx.x  # type: ignore[assignment]
    cuda.syncthreads()  # type: ignore[call-arg]
    if tid == 5:
        out[100] = 1.0
    cuda.syncthreads()
    out[tid] = tid


def test_barriers_wait_only_for_live_threads_and_counts_agree(
        both_barriers: Callable[[Callable[[], Any]], tuple[Any, Any]]) -> None:
    rng = np.random.default_rng(5)
    for live in (64, 37, 1):
        flags = np.concatenate([[live], rng.integers(0, 3, 64)]).astype(np.int64)

        def launch(flags: np.ndarray = flags) -> np.ndarray:
            out = np.zeros(2, np.int64)
            _count[1, 64](flags, out)
            return out

        polled, blocking = both_barriers(launch)
        want = flags[1:live + 1]
        assert polled.tolist() == [np.count_nonzero(want), want.sum()]
        assert blocking.tolist() == polled.tolist()


def test_a_failing_thread_raises_the_same_error(
        both_barriers: Callable[[Callable[[], Any]], tuple[Any, Any]]) -> None:
    """Thread 5 indexes past its array while the others wait at a barrier: both raise the
    simulator's IndexError naming that thread, and the next launch runs normally."""
    def launch() -> str:
        with pytest.raises(IndexError) as err:
            _faulty[1, 32](np.zeros(32))
        return str(err.value)

    polled, blocking = both_barriers(launch)
    assert "tid=[5, 0, 0]" in polled
    assert blocking == polled
    out = np.zeros(2, np.int64)
    _count[1, 64](np.concatenate([[64], np.ones(64)]).astype(np.int64), out)
    assert out.tolist() == [64, 64]


def test_child_processes_install_them_when_they_import_the_simulator() -> None:
    """A Python process started from the tests (an option worker's way: the environment
    inherited) has the speed-ups once it imports numba's simulator, and not before."""
    import os
    import subprocess
    import sys

    probe = ("import sys\n"
             "assert 'numba' not in sys.modules\n"
             "from numba import cuda\n"
             "from numba.cuda.simulator import kernel, kernelapi\n"
             "print(kernel.BlockManager.run.__module__, kernel.BlockThread.syncthreads.__name__,"
             " kernelapi.FakeCUDAShared.array.__name__)\n")
    done = subprocess.run([sys.executable, "-c", probe], env=dict(os.environ),
                          capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["_tests_cuda_simulator", "_syncthreads", "_shared_array"]
    assert done.stderr == ""
