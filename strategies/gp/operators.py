"""Genetic operators on flat prefix trees: subtree crossover, subtree and point mutation.

Each operator is a small numba function on one tree; `breed` applies them to a whole
generation in parallel (`gpu.threads.run_chunks`: chunks of children on Python threads),
each child with its own random stream
(strategies.gp.rng), so breeding 25,000 children takes milliseconds.

Type safety by construction: crossover only swaps subtrees whose roots return the same type
(a float terminal for a float terminal, a bool subtree for a bool subtree); subtree mutation
grows a replacement of the replaced node's type; point mutation swaps an op for another of
the same signature (float terminal <-> float terminal, bool terminal <-> bool terminal,
AND <-> OR, < <-> >). Limits against bloat: a crossover or subtree mutation whose result
would exceed `max_nodes` nodes or `max_depth` depth is retried with other points up to
MAX_TRIES times, then abandoned (the child keeps its tree unchanged).

Crossover points follow Koza's 90/10 rule: 90% function nodes, 10% leaves (in the donor,
among the nodes of the type required).
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

from gpu import small
from gpu.gp.core import ARITY, OP_AND, OP_GT, OP_LT, OP_NOT, OP_OR, RETURN_TYPE
from gpu.indicators.catalogue import N_BOOL, N_FLOAT, N_TERMINALS
from gpu.threads import run_chunks
from strategies.gp.init import random_tree
from strategies.gp.representation import Population, scan_tree, subtree_sizes
from strategies.gp.rng import Int, below, child_seeds, uniform

I16 = npt.NDArray[np.int16]
I32 = npt.NDArray[np.int32]
U64 = npt.NDArray[np.uint64]

MAX_TRIES = 8
#: calls between the compiled operators pass int64 (and numpy bools) only: numba compiles a
#: callee once per argument type, and a Python constant is a type of its own (Literal[int]
#: 2 is not Literal[int] 5, nor int16, nor int64); on the 2-core VM each extra copy of a
#: callee cost 0.06-1.1 s of a cold start (2026-11-28)
TWO = np.int64(2)
GROW = np.bool_(False)  # random_tree's `full`: grow, not full
INTERNAL_BIAS = 0.9
#: children a process breeds uncompiled (gpu.small): `_breed_range`'s own source run by the
#: interpreter takes about 0.11 ms a child, compiling it 2.75 s (2-core dev VM, 2026-11-28),
#: so up to some 1.3 s of interpreting, half the compile: a small `evolve` (500 x 5) breeds
#: 2,000 children in 0.25 s, a default one (5,000 x 30, 150,000 children) compiles
BREED_BUDGET = 12_000


@numba.njit(cache=True, nogil=True)
def pick_node(ops: I16, n: Int, want_type: Int, state: U64) -> int:
    """A node of ops[:n] returning `want_type` (-1: any type), 90% internal; -1 if none."""
    n_internal = 0
    n_leaf = 0
    for k in range(n):
        if want_type < 0 or RETURN_TYPE[ops[k]] == want_type:
            if ARITY[ops[k]] > 0:
                n_internal += 1
            else:
                n_leaf += 1
    if n_internal + n_leaf == 0:
        return -1
    internal = n_leaf == 0 or (n_internal > 0 and uniform(state) < INTERNAL_BIAS)
    target = below(state, np.int64(n_internal if internal else n_leaf))
    for k in range(n):
        typed = want_type < 0 or RETURN_TYPE[ops[k]] == want_type
        if typed and (ARITY[ops[k]] > 0) == internal:
            if target == 0:
                return k
            target -= 1
    return -1


@numba.njit(cache=True, nogil=True)
def _splice(base: I16, n: Int, at: Int, cut: Int, piece: I16, p0: Int, m: Int,
            out: I16) -> int:
    """out = base[:at] + piece[p0:p0+m] + base[at+cut:n]; returns the new length."""
    for k in range(at):
        out[k] = base[k]
    for k in range(m):
        out[at + k] = piece[p0 + k]
    tail = n - at - cut
    for k in range(tail):
        out[at + m + k] = base[at + cut + k]
    return at + m + tail


@numba.njit(cache=True, nogil=True)
def crossover(recipient: I16, r_sizes: I16, r_n: int, donor: I16, d_sizes: I16, d_n: int,
              out: I16, max_nodes: int, max_depth: int, state: U64) -> int:
    """Replace a random subtree of the recipient by a same-typed random subtree of the donor,
    writing into `out` (not aliasing either). Returns the child length or -1 (no valid pair
    found within the limits)."""
    r_depths = np.empty(r_n, np.int32)
    d_depths = np.empty(d_n, np.int32)
    scan_tree(recipient, np.int64(r_n), r_depths)
    scan_tree(donor, np.int64(d_n), d_depths)
    for _ in range(MAX_TRIES):
        i = pick_node(recipient, np.int64(r_n), np.int64(-1), state)
        j = pick_node(donor, np.int64(d_n), np.int64(RETURN_TYPE[recipient[i]]), state)
        if j < 0:
            continue
        cut = r_sizes[i]
        m = d_sizes[j]
        if r_n - cut + m > max_nodes:
            continue
        height = 0
        for k in range(j, j + m):
            if d_depths[k] - d_depths[j] > height:
                height = d_depths[k] - d_depths[j]
        if r_depths[i] + height > max_depth:
            continue
        return _splice(recipient, np.int64(r_n), np.int64(i), np.int64(cut), donor,
                       np.int64(j), np.int64(m), out)
    return -1


@numba.njit(cache=True, nogil=True)
def subtree_mutation(tree: I16, sizes: I16, n: int, out: I16, max_nodes: int, max_depth: int,
                     mutation_depth: int, state: U64) -> int:
    """Replace a random node's subtree by a freshly grown one of the same type (depth at most
    `mutation_depth`), writing into `out`. Returns the new length or -1."""
    depths = np.empty(n, np.int32)
    scan_tree(tree, np.int64(n), depths)
    piece = np.empty(max_nodes, np.int16)
    for _ in range(MAX_TRIES):
        i = below(state, np.int64(n))
        room = max_depth - depths[i]
        depth = mutation_depth if mutation_depth < room else room
        cut = sizes[i]
        capacity = max_nodes - (n - cut)
        m = random_tree(piece, np.int64(capacity), np.int64(RETURN_TYPE[tree[i]]),
                        np.int64(depth), GROW, state)
        if m < 0:
            continue
        return _splice(tree, np.int64(n), np.int64(i), np.int64(cut), piece, np.int64(0),
                       np.int64(m), out)
    return -1


@numba.njit(cache=True, nogil=True)
def _replacement(op: int, state: U64) -> int:
    """Another op of the same signature (NOT has no other and stays)."""
    if op < N_FLOAT:
        return (op + 1 + below(state, np.int64(N_FLOAT - 1))) % N_FLOAT
    if op < N_TERMINALS:
        return N_FLOAT + (op - N_FLOAT + 1 + below(state, np.int64(N_BOOL - 1))) % N_BOOL
    if op == OP_AND:
        return OP_OR
    if op == OP_OR:
        return OP_AND
    if op == OP_LT:
        return OP_GT
    if op == OP_GT:
        return OP_LT
    return OP_NOT


@numba.njit(cache=True, nogil=True)
def point_mutation(tree: I16, n: int, p_node: float, state: U64) -> None:
    """In place: one random node, and every other with probability p_node, takes another op
    of the same signature. Shape and sizes do not change."""
    forced = below(state, np.int64(n))
    for k in range(n):
        if k == forced or uniform(state) < p_node:
            tree[k] = _replacement(tree[k], state)


@numba.njit(cache=True, nogil=True)
def copy_nodes(src: I16, dst: I16) -> None:
    """dst[:] = src element by element: a slice assignment between arrays makes numba
    compile its shape-mismatch message (string formatting), about 2 s of a cold start on
    the 2-core VM, in every process that compiles a caller."""
    for k in range(src.shape[0]):
        dst[k] = src[k]


@numba.njit(cache=True, nogil=True)
def _breed_range(lo: int, hi: int, p_ops: I16, p_sizes: I16, p_lengths: I16,
                 recipients: npt.NDArray[np.int64], donors: npt.NDArray[np.int64],
                 seeds: U64, p_crossover: float, p_subtree: float, p_point: float,
                 p_node: float, max_depth: int, mutation_depth: int, c_ops: I16,
                 c_sizes: I16, c_lengths: I16) -> None:
    """Children lo..hi-1 (each from its own seed, so any split of the range gives the same
    children); `breed` runs the range in parallel (`gpu.threads.run_chunks`)."""
    max_nodes = p_ops.shape[2]
    for c in range(lo, hi):
        state = np.empty(1, np.uint64)
        state[0] = seeds[c]
        r = recipients[c]
        d = donors[c]
        scratch = np.empty(max_nodes, np.int16)
        for t in range(2):
            copy_nodes(p_ops[r, t], c_ops[c, t])
            copy_nodes(p_sizes[r, t], c_sizes[c, t])
            c_lengths[c, t] = p_lengths[r, t]
        if uniform(state) < p_crossover:
            t = below(state, TWO)
            m = crossover(p_ops[r, t], p_sizes[r, t], p_lengths[r, t], p_ops[d, t],
                          p_sizes[d, t], p_lengths[d, t], c_ops[c, t], max_nodes, max_depth,
                          state)
            if m > 0:
                c_ops[c, t, m:] = 0
                c_lengths[c, t] = m
                subtree_sizes(c_ops[c, t], m, c_sizes[c, t])
            else:  # crossover abandoned: restore the recipient's tree
                copy_nodes(p_ops[r, t], c_ops[c, t])
        if uniform(state) < p_subtree:
            t = below(state, TWO)
            n = c_lengths[c, t]
            copy_nodes(c_ops[c, t], scratch)
            m = subtree_mutation(scratch, c_sizes[c, t], n, c_ops[c, t], max_nodes, max_depth,
                                 mutation_depth, state)
            if m > 0:
                c_ops[c, t, m:] = 0
                c_lengths[c, t] = m
                subtree_sizes(c_ops[c, t], m, c_sizes[c, t])
            else:
                copy_nodes(scratch, c_ops[c, t])
        if uniform(state) < p_point:
            t = below(state, TWO)
            point_mutation(c_ops[c, t], c_lengths[c, t], p_node, state)


def breed(parents: Population, recipients: npt.ArrayLike, donors: npt.ArrayLike,
          rng: np.random.Generator, *, p_crossover: float = 0.9, p_subtree: float = 0.1,
          p_point: float = 0.1, p_node: float = 0.1, max_depth: int = 8,
          mutation_depth: int = 4, out: Population | None = None,
          seeds: npt.NDArray[np.uint64] | None = None) -> Population:
    """Children of (recipient, donor) parent pairs: crossover with probability p_crossover
    (else a copy of the recipient), then subtree mutation with probability p_subtree and
    point mutation with probability p_point, each on one randomly chosen tree.

    `out`: where to write them (one row per pair, every slot overwritten; may be a view
    into a larger population, which saves the evolution a copy), else a new population.
    `seeds`: the children's stream seeds (`child_seeds`), else drawn from rng here; a
    generation bred in parts with slices of one seed array equals it bred at once."""
    rec = np.ascontiguousarray(recipients, np.int64)
    don = np.ascontiguousarray(donors, np.int64)
    if rec.shape != don.shape or rec.ndim != 1:
        raise ValueError("recipients and donors must be 1-D arrays of equal length")
    if out is None:
        out = Population.empty(rec.size, parents.max_nodes)
    if len(out) != rec.size or out.max_nodes != parents.max_nodes:
        raise ValueError(f"out holds {len(out)} x {out.max_nodes} nodes, need {rec.size} x "
                         f"{parents.max_nodes}")
    if rec.size:
        if seeds is None:
            seeds = child_seeds(rng, rec.size)
        elif seeds.shape != rec.shape:
            raise ValueError(f"{seeds.size} seeds for {rec.size} children")
        if small.uncompiled(_breed_range, rec.size, BREED_BUDGET):
            # the same children from the interpreter, on this thread (it holds the GIL)
            small.run_plain(_breed_range, 0, rec.size, parents.ops, parents.sizes,
                            parents.lengths, rec, don, seeds, p_crossover, p_subtree, p_point,
                            p_node, max_depth, mutation_depth, out.ops, out.sizes, out.lengths)
            return out
        # in chunks on Python threads whatever the thread count (one hand-off a generation):
        # on numba's prange the breeding body is optimised twice, which put 6.7 s on a cold
        # headline's critical path on 16 cores (H200 host, 2026-11-28: 3.5 s of it the
        # body alone) for 1.3 ms a generation (2.54 ms on prange, 3.80 ms in 16 chunks)
        run_chunks(_breed_range, rec.size, parents.ops, parents.sizes, parents.lengths, rec,
                   don, seeds, p_crossover, p_subtree, p_point, p_node, max_depth,
                   mutation_depth, out.ops, out.sizes, out.lengths)
    return out


def expect_children(n: int) -> None:
    """Announce `n` children this process will breed (an evolution's remaining
    generations): more than BREED_BUDGET, and breeding compiles from the first child."""
    small.expect(_breed_range, n, BREED_BUDGET)
