"""Per-individual random streams for the numba genetic operators.

All randomness of a run comes from one `np.random.Generator(PCG64(seed))` on the host. The
operators run in parallel (numba prange; the first population in chunks on threads), so the
host draws one uint64 seed per child and each child consumes its own splitmix64 stream: the
result does not depend on how children are scheduled over threads, nor on the evaluator's
device.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

#: an integer argument of a compiled function: callers in compiled code pass np.int64, so
#: that numba compiles one specialisation (see strategies.gp.operators.TWO)
Int = int | np.integer
#: the same for a flag (np.bool_ in compiled callers)
Bool = bool | np.bool_

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_TO_UNIT = 1.0 / 9007199254740992.0  # 2**-53


@numba.njit(cache=True, nogil=True)
def next_u64(state: npt.NDArray[np.uint64]) -> np.uint64:
    """Advance a splitmix64 state (1-element uint64 array) and return 64 random bits."""
    state[0] += _GOLDEN
    z = state[0]
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


@numba.njit(cache=True, nogil=True)
def uniform(state: npt.NDArray[np.uint64]) -> float:
    """Uniform float in [0, 1)."""
    return float(next_u64(state) >> _S11) * _TO_UNIT


@numba.njit(cache=True, nogil=True)
def below(state: npt.NDArray[np.uint64], n: Int) -> int:
    """Uniform integer in [0, n), n >= 1 (53-bit multiply, bias below 2**-40 for n < 2**13)."""
    k = int(uniform(state) * n)
    return k if k < n else n - 1


def child_seeds(rng: np.random.Generator, n: int) -> npt.NDArray[np.uint64]:
    """n independent stream seeds drawn from the run's generator."""
    return rng.integers(0, np.iinfo(np.uint64).max, size=n, dtype=np.uint64, endpoint=True)
