"""Exact least-correlated subset search over a range of combination ranks: the shared arithmetic.

Combinations of k of n strategies {0 … n−1} are numbered in lexicographic order, the order
of `itertools.combinations(range(n), k)`: rank 0 is (0, 1, …, k−1). `unrank` turns a rank
(64-bit) into the combination through a table of binomial coefficients; `next_combination`
steps to the following one in place. A CUDA thread (or a CPU work item) unranks the first
rank of its range once, then steps, which costs far less than unranking every rank.

The objective of a combination S is the sum of squared correlations over its pairs,
Σ_{i<j∈S} c_ij², read from the packed lower triangle q[a(a−1)/2 + b] = c_ab² (a > b). The
Frobenius distance of the k×k correlation sub-matrix to the identity is √(2·objective).
`prefix_objective` keeps partial[i] = objective of (s_0 … s_i), built by additions only in a
fixed order from the combination alone, so a stepped and a freshly unranked combination
get bit-identical values on the CPU and the GPU (no multiplications: no fused
multiply-add can differ). After a step from position i only partial[i:] is recomputed.

Each range keeps its smallest (objective, rank), comparing strictly so the lowest rank
wins ties; the caller reduces ranges the same way. `best_in_ranges` is the CPU's work item
over many ranges (a CUDA block reduces its threads' ranges itself). Compiled twice by
`gpu.subset.kernels`; `gpu.subset.search` runs a small search on these plain functions
(gpu/small.py), without importing numba.
"""

from __future__ import annotations

from typing import Any

import numpy as np

K_MAX = 32
"""Largest subset (local arrays of a CUDA thread have a fixed size)."""
BLOCK = 256
"""Threads of a CUDA block of the search (and the length of its reduction's arrays)."""
INT64_MAX = np.iinfo(np.int64).max


def unrank(rank: int, n: int, k: int, binom: Any, comb: Any) -> None:
    """comb[0:k] = the combination of lexicographic `rank` (binom[m, j] = C(m, j))."""
    x = 0
    for i in range(k):
        while True:
            count = binom[n - 1 - x, k - 1 - i]
            if rank < count:
                break
            rank -= count
            x += 1
        comb[i] = x
        x += 1


def next_combination(comb: Any, n: int, k: int) -> int:
    """Step comb to the next combination; return the first position changed (−1: was last)."""
    i = k - 1
    while i >= 0 and comb[i] == n - k + i:
        i -= 1
    if i < 0:
        return -1
    comb[i] += 1
    for j in range(i + 1, k):
        comb[j] = comb[j - 1] + 1
    return i


def prefix_objective(q: Any, comb: Any, partial: Any, start: int, k: int) -> Any:
    """Recompute partial[start:k] (sums of q over pairs within comb[:i+1]); return partial[k−1]."""
    for i in range(start, k):
        a = comb[i]
        base = (a * (a - 1)) // 2
        row = 0.0
        for j in range(i):
            row += q[base + comb[j]]
        partial[i] = row if i == 0 else partial[i - 1] + row
    return partial[k - 1]


def scan_ranks(q: Any, binom: Any, n: int, k: int, rank0: int, count: int, comb: Any,
               partial: Any) -> tuple[float, int]:
    """(smallest objective, its lowest rank) over ranks rank0 … rank0+count−1 (count ≥ 1)."""
    unrank(rank0, n, k, binom, comb)
    best = prefix_objective(q, comb, partial, 0, k)
    best_rank = rank0
    for step in range(1, count):
        changed = next_combination(comb, n, k)
        value = prefix_objective(q, comb, partial, changed, k)
        if value < best:
            best = value
            best_rank = rank0 + step
    return best, best_rank


def best_in_ranges(lo: int, hi: int, q: Any, binom: Any, n: int, k: int, first: int,
                   total: int, chunk: int, out_value: Any, out_rank: Any) -> None:
    """Items lo … hi−1: item i's smallest (objective, rank) over its `chunk` ranks from
    first + i·chunk (the last range ends at `total`) into out_value[i], out_rank[i]."""
    for item in range(lo, hi):
        rank0 = first + item * chunk
        count = min(chunk, total - rank0)
        comb = np.empty(K_MAX, np.int64)
        partial = np.empty(K_MAX, np.float64)
        v, r = scan_ranks(q, binom, n, k, rank0, count, comb, partial)
        out_value[item] = v
        out_rank[item] = r


CORE_FUNCTIONS = (unrank, next_combination, prefix_objective, scan_ranks, best_in_ranges)
#: the globals the core reads (compile_twin's constants)
CORE_CONSTANTS = {"np": np, "K_MAX": K_MAX}
