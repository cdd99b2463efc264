"""The warm start of a GPU command: numba's BLAS probe skipped without changing results, and
no context thread where no GPU is asked for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpu import warm_start

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import sys
from gpu import warm_start
skipped = warm_start.skip_blas_probe()
import numba
import numpy as np

@numba.njit
def f(a, b):
    return np.dot(a, b), np.convolve(a, b)

a, b = np.arange(1.0, 6.0), np.array([0.5, -1.0, 2.0, 0.25, 3.0])
got = f(a, b)
print(skipped, "scipy.linalg" in sys.modules, got[0] == np.dot(a, b),
      np.allclose(got[1], np.convolve(a, b)), warm_start.skip_blas_probe())
"""


def test_blas_probe_skipped_in_a_fresh_process_and_numba_still_right() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True,
                         text=True, check=True, timeout=300).stdout.split()
    # skipped once; np.dot then loads scipy's BLAS itself; a second call is too late
    assert out == ["True", "True", "True", "True", "False"]


def test_no_context_thread_for_the_cpu() -> None:
    assert warm_start.start_context("cpu") is None
    thread = warm_start.start_context("auto")  # no GPU or the simulator: returns at once
    assert thread is not None
    thread.join(timeout=60)
    assert not thread.is_alive()


def test_the_installed_numba_holds_the_probe_the_skip_was_written_for() -> None:
    # the guard must accept the numba this project runs on, or the skip is dead code
    assert warm_start._probe_is_known()


CUDA_PROBE = """
import sys
from gpu import warm_start
skipped = warm_start.skip_blas_probe(cuda=True)
cuda_arraymath = sys.modules["numba.cuda.np.arraymath"]
print(skipped, "scipy.linalg" in sys.modules, cuda_arraymath._HAVE_BLAS)
"""


def test_numba_cudas_copy_of_the_probe_is_skipped_too() -> None:
    """numba-cuda's arraymath runs the same probe when a CUDA kernel is first loaded; with
    `cuda=True` it is imported with scipy.linalg hidden (no GPU needed for the import)."""
    assert warm_start._probe_is_known("numba.cuda.np.arraymath")
    out = subprocess.run([sys.executable, "-c", CUDA_PROBE], cwd=REPO, capture_output=True,
                         text=True, check=True, timeout=300).stdout.split()
    assert out == ["True", "False", "False"]
