"""Random typed trees and ramped half-and-half initialisation (numba, parallel).

A tree is generated top-down in prefix order from a stack of open argument slots, each
with the type it must return, so every tree is type-correct by construction:
- a float slot always takes one of the 17 float terminals (no float-valued functions);
- a bool slot at the depth limit takes one of the 14 bool terminals;
- `full`: a bool slot above the last level takes AND, OR (2/5 each) or NOT (1/5), at
  the last level above the leaves any of AND, OR, NOT, <, >, so every branch reaches the
  requested depth;
- `grow`: a bool slot above the limit takes a bool terminal with probability 1/2, else one
  of AND, OR, NOT, <, >.

Ramped half-and-half: individual i gets depth `min_depth + i % (max_depth - min_depth + 1)`
and `full` for even `i // n_depths`, `grow` for odd, for both of its trees.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

from gpu import small
from gpu.gp.core import (
    ARG_TYPE,
    ARITY,
    OP_AND,
    OP_GT,
    OP_LT,
    OP_NOT,
    OP_OR,
    TYPE_BOOL,
    TYPE_FLOAT,
)
from gpu.indicators.catalogue import N_BOOL, N_FLOAT
from gpu.threads import run_chunks
from strategies.gp.representation import (
    DEFAULT_MAX_NODES,
    Population,
    slot_stack,
    subtree_sizes,
)
from strategies.gp.rng import Bool, Int, below, child_seeds, uniform

_FUNCTIONS = np.array([OP_AND, OP_OR, OP_NOT, OP_LT, OP_GT], np.int16)
#: NOT drawn less often than AND/OR: chains of NOT add nodes and no meaning
_LOGIC = np.array([OP_AND, OP_OR, OP_AND, OP_OR, OP_NOT], np.int16)
#: `full` = False for random_tree, as a numpy bool: a Python False would compile random_tree
#: once more, for the literal (calls between compiled functions pass int64 and numpy bools)
GROW = np.bool_(False)
#: individuals of a first population drawn uncompiled (gpu.small): the interpreter takes
#: about 0.12 ms an individual, compiling `_ramped_range` 1.1-1.4 s (2-core dev VM,
#: 2026-11-28): up to some 0.7 s, half the compile
RAMPED_BUDGET = 6_000


@numba.njit(cache=True, nogil=True)
def _choose(want: Int, depth: Int, max_depth: Int, full: Bool,
            state: npt.NDArray[np.uint64]) -> int:
    if want == TYPE_FLOAT:
        return below(state, np.int64(N_FLOAT))
    if depth >= max_depth:
        return N_FLOAT + below(state, np.int64(N_BOOL))
    if full:
        if depth < max_depth - 1:
            return int(_LOGIC[below(state, np.int64(5))])
        return int(_FUNCTIONS[below(state, np.int64(5))])
    if uniform(state) < 0.5:
        return N_FLOAT + below(state, np.int64(N_BOOL))
    return int(_FUNCTIONS[below(state, np.int64(5))])


@numba.njit(cache=True, nogil=True)
def random_tree(out: npt.NDArray[np.int16], capacity: Int, root_type: Int, max_depth: Int,
                full: Bool, state: npt.NDArray[np.uint64]) -> int:
    """Write a random tree returning `root_type` (prefix) into out; return its length, or
    -1 if it would exceed `capacity` nodes (out is then garbage)."""
    slot_type, slot_depth = slot_stack(np.int64(capacity + 2), np.int64(root_type))
    sp = 1
    n = 0
    while sp > 0:
        if n >= capacity:
            return -1
        sp -= 1
        want = slot_type[sp]
        depth = slot_depth[sp]
        op = _choose(np.int64(want), np.int64(depth), np.int64(max_depth), full, state)
        out[n] = op
        n += 1
        a = ARITY[op]
        if sp + a > capacity + 2:
            return -1
        for k in range(a - 1, -1, -1):
            slot_type[sp] = ARG_TYPE[op, k]
            slot_depth[sp] = depth + 1
            sp += 1
    return n


@numba.njit(cache=True, nogil=True)
def _ramped_range(lo: int, hi: int, ops: npt.NDArray[np.int16], sizes: npt.NDArray[np.int16],
                  lengths: npt.NDArray[np.int16], seeds: npt.NDArray[np.uint64],
                  min_depth: int, max_depth: int) -> None:
    """Individuals lo..hi-1, each from its own seed (`ramped_half_and_half` runs the range
    in chunks on threads, `gpu.threads.run_chunks`)."""
    n_depths = max_depth - min_depth + 1
    capacity = ops.shape[2]
    for i in range(lo, hi):
        state = np.empty(1, np.uint64)
        state[0] = seeds[i]
        depth = min_depth + i % n_depths
        full = (i // n_depths) % 2 == 0
        for t in range(2):
            d = depth
            n = random_tree(ops[i, t], capacity, np.int64(TYPE_BOOL), d, full, state)
            tries = 0
            while n < 0:  # too many nodes for the capacity: shallower, grown
                tries += 1
                if tries % 4 == 0 and d > 1:
                    d -= 1
                n = random_tree(ops[i, t], capacity, np.int64(TYPE_BOOL), d, GROW, state)
            ops[i, t, n:] = 0
            lengths[i, t] = n
            subtree_sizes(ops[i, t], n, sizes[i, t])


def ramped_half_and_half(n: int, rng: np.random.Generator, min_depth: int = 2,
                         max_depth: int = 5, max_nodes: int = DEFAULT_MAX_NODES) -> Population:
    """A random population of n (buy, sell) tree pairs, depths ramped over
    [min_depth, max_depth], half full and half grow."""
    if not 1 <= min_depth <= max_depth:
        raise ValueError(f"need 1 <= min_depth <= max_depth, got {min_depth}, {max_depth}")
    pop = Population.empty(n, max_nodes)
    if not n:
        return pop
    args = (pop.ops, pop.sizes, pop.lengths, child_seeds(rng, n), min_depth, max_depth)
    if small.uncompiled(_ramped_range, n, RAMPED_BUDGET):
        small.run_plain(_ramped_range, 0, n, *args)  # the same trees, interpreted
    else:
        run_chunks(_ramped_range, n, *args)
    return pop
