"""Flat-array representation of GP trading rules, infix text, and compilation to postfix.

A population is three arrays (EvoGP / gplearn style, no Python object per node):
- `ops`     int16 (n, 2, max_nodes): op codes (gpu.gp.core) in prefix order, tree 0 = buy,
  tree 1 = sell; slots past a tree's length are unused (kept 0);
- `sizes`   int16 (n, 2, max_nodes): size of the subtree rooted at each node;
- `lengths` int16 (n, 2): node count of each tree.

In prefix order a subtree is a contiguous slice [i, i + sizes[i]), which is what makes
crossover and subtree mutation slice copies. Every tree is strongly typed: the root returns
bool, AND/OR/NOT take bools, < and > take floats, and the only float-valued nodes are the
17 float terminals. `scan_tree` checks that (and measures depths) in one pass.

Depth counts edges: a lone terminal has depth 0, `(sma5 < close)` depth 1.

Infix text is fully parenthesised and round-trips exactly:
`((sma5 < ema20) AND NOT macd_above_zero)`; grammar
`expr := TERMINAL | NOT expr | ( expr AND|OR expr ) | ( float < float ) | ( float > float )`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from gpu import small
from gpu.gp.core import (
    ARG_TYPE,
    ARITY,
    FUNCTION_NAMES,
    N_OPS,
    OP_AND,
    OP_GT,
    OP_LT,
    OP_NOT,
    OP_OR,
    RETURN_TYPE,
    STACK_SIZE,
    TYPE_BOOL,
)
from gpu.indicators.catalogue import N_FLOAT, TERMINAL_INDEX, TERMINALS
from gpu.threads import chunk_lo, parallel_range, run_chunks
from strategies.gp.rng import Int

I16 = npt.NDArray[np.int16]
I32 = npt.NDArray[np.int32]

BUY = 0
SELL = 1
TREE_NAMES = ("buy", "sell")

#: individuals a process compiles to postfix uncompiled (gpu.small): about 0.04 ms each
#: interpreted, 0.56 s to compile `_compile_population` (2-core dev VM, 2026-11-28)
COMPILE_BUDGET = 8_192

#: default limits against bloat
DEFAULT_MAX_DEPTH = 8
DEFAULT_MAX_NODES = 64


# --------------------------------------------------------------------------- numba helpers
@numba.njit(cache=True, nogil=True)
def slot_stack(size: Int, root_type: Int) -> tuple[npt.NDArray[np.int8], I32]:
    """The open argument slots of a top-down walk in prefix order, (types, depths) of room
    `size`, holding the root's slot: a tree is read (scan_tree) and grown
    (init.random_tree) by popping a slot per node and pushing one per argument."""
    types = np.empty(size, np.int8)
    depths = np.empty(size, np.int32)
    types[0] = root_type
    depths[0] = 0
    return types, depths


@numba.njit(cache=True, nogil=True)
def scan_tree(ops: I16, n: Int, depths: I32) -> int:
    """Check that ops[:n] is one type-correct bool tree in prefix order; fill depths[:n].

    Returns the tree's depth (edges from root to deepest node), or -1 if it is not a
    well-formed, type-correct tree (op code out of range, wrong argument type, missing or
    surplus nodes).
    """
    if n <= 0:
        return -1
    want_type, want_depth = slot_stack(np.int64(n + 1), np.int64(TYPE_BOOL))
    sp = 1
    height = 0
    for i in range(n):
        if sp == 0:
            return -1
        sp -= 1
        op = ops[i]
        if op < 0 or op >= N_OPS or RETURN_TYPE[op] != want_type[sp]:
            return -1
        d = want_depth[sp]
        depths[i] = d
        if d > height:
            height = d
        a = ARITY[op]
        if sp + a > n:
            return -1
        for k in range(a - 1, -1, -1):
            want_type[sp] = ARG_TYPE[op, k]
            want_depth[sp] = d + 1
            sp += 1
    if sp != 0:
        return -1
    return height


@numba.njit(cache=True, nogil=True)
def subtree_sizes(ops: I16, n: int, sizes: I16) -> None:
    """Fill sizes[:n] with the size of the subtree rooted at each node of prefix ops[:n]."""
    stack = np.empty(n, np.int32)
    sp = 0
    for i in range(n - 1, -1, -1):
        s = 1
        for _ in range(ARITY[ops[i]]):
            sp -= 1
            s += stack[sp]
        stack[sp] = s
        sp += 1
        sizes[i] = s


@numba.njit(cache=True, nogil=True)
def prefix_to_postfix(ops: I16, n: Int, sizes: I16, depths: I32, out: I16) -> None:
    """Write the postfix order of prefix ops[:n] into out[:n].

    A subtree occupies one contiguous slice in both orders; in postfix it starts `depth`
    places earlier than in prefix (each ancestor moved behind it), and its root is its
    last element: post[i - depth[i] + size[i] - 1] = op[i].
    """
    for i in range(n):
        out[i - depths[i] + sizes[i] - 1] = ops[i]


@numba.njit(cache=True, nogil=True)
def _compile_population(lo: int, hi: int, ops: I16, sizes: I16, lengths: I16, programs: I16,
                        prog_len: I32) -> None:
    """Individuals lo..hi-1 to postfix programs (in parallel: `gpu.threads.parallel_range`)."""
    depths = np.empty(ops.shape[2], np.int32)
    for i in range(lo, hi):
        at = 0
        for t in range(2):
            n = lengths[i, t]
            scan_tree(ops[i, t], np.int64(n), depths)
            prefix_to_postfix(ops[i, t], np.int64(n), sizes[i, t], depths,
                              programs[i, at:at + n])
            at += n
        prog_len[i] = at


@numba.njit(cache=True, parallel=True)
def _compile_population_parallel(chunks: int, n: int, ops: I16, sizes: I16, lengths: I16,
                                 programs: I16, prog_len: I32) -> None:
    for k in numba.prange(chunks):
        _compile_population(chunk_lo(k, chunks, n), chunk_lo(k + 1, chunks, n), ops, sizes,
                            lengths, programs, prog_len)


@numba.njit(cache=True, nogil=True)
def _validate_population(lo: int, hi: int, ops: I16, sizes: I16, lengths: I16, max_depth: int,
                         out: I16) -> None:
    """out[i, t] = 0 if tree t of individual i is valid, else a reason code, for i in
    lo..hi-1 (run in chunks on threads)."""
    max_nodes = ops.shape[2]
    depths = np.empty(max_nodes, np.int32)
    check = np.empty(max_nodes, np.int16)
    for i in range(lo, hi):
        for t in range(2):
            n = lengths[i, t]
            if n < 1 or n > max_nodes:
                out[i, t] = 1
                continue
            h = scan_tree(ops[i, t], np.int64(n), depths)
            if h < 0:
                out[i, t] = 2
                continue
            if h > max_depth:
                out[i, t] = 3
                continue
            subtree_sizes(ops[i, t], n, check)
            bad = False
            for k in range(n):
                if check[k] != sizes[i, t, k]:
                    bad = True
            out[i, t] = 4 if bad else 0


_REASONS = {1: "length out of range", 2: "not a type-correct tree",
            3: "deeper than max_depth", 4: "stale subtree sizes"}


# --------------------------------------------------------------------------- population
@dataclass
class Population:
    """A population of (buy, sell) tree pairs in flat prefix arrays (see module doc)."""

    ops: I16
    sizes: I16
    lengths: I16

    @classmethod
    def empty(cls, n: int, max_nodes: int = DEFAULT_MAX_NODES) -> Population:
        return cls(np.zeros((n, 2, max_nodes), np.int16), np.zeros((n, 2, max_nodes), np.int16),
                   np.zeros((n, 2), np.int16))

    @classmethod
    def uninitialised(cls, n: int, max_nodes: int = DEFAULT_MAX_NODES) -> Population:
        """Arrays not zeroed, for a writer that fills every slot (breeding does): a fresh
        zeroed 13 MB population each generation costs the evolution page faults and a pass."""
        return cls(np.empty((n, 2, max_nodes), np.int16), np.empty((n, 2, max_nodes), np.int16),
                   np.empty((n, 2), np.int16))

    def rows(self, start: int, stop: int | None = None) -> Population:
        """Individuals start..stop as views (writes go to this population)."""
        return Population(self.ops[start:stop], self.sizes[start:stop],
                          self.lengths[start:stop])

    def __len__(self) -> int:
        return int(self.ops.shape[0])

    @property
    def max_nodes(self) -> int:
        return int(self.ops.shape[2])

    def take(self, index: npt.ArrayLike) -> Population:
        idx = np.asarray(index, np.int64)
        return Population(self.ops[idx].copy(), self.sizes[idx].copy(), self.lengths[idx].copy())

    @staticmethod
    def concat(parts: list[Population]) -> Population:
        return Population(np.concatenate([p.ops for p in parts]),
                          np.concatenate([p.sizes for p in parts]),
                          np.concatenate([p.lengths for p in parts]))

    def node_counts(self) -> npt.NDArray[np.int64]:
        """Buy plus sell nodes of each individual."""
        return np.asarray(self.lengths, np.int64).sum(axis=1)

    def compile(self) -> tuple[I16, I32]:
        """Postfix programs (n, 2 * max_nodes) int16 (buy then sell) and their lengths."""
        n = len(self)
        programs = np.zeros((n, 2 * self.max_nodes), np.int16)
        lengths = np.zeros(n, np.int32)
        if n and small.uncompiled(_compile_population, n, COMPILE_BUDGET):
            small.run_plain(_compile_population, 0, n, self.ops, self.sizes, self.lengths,
                            programs, lengths)
        elif n:
            parallel_range(_compile_population, _compile_population_parallel, n, self.ops,
                           self.sizes, self.lengths, programs, lengths, min_chunk=256)
        return programs, lengths

    def check(self, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
        """Raise ValueError naming the first individual whose tree is malformed."""
        if max_depth > STACK_SIZE - 3:
            raise ValueError(f"max_depth {max_depth} exceeds the interpreter's limit "
                             f"{STACK_SIZE - 3}")
        out = np.zeros((len(self), 2), np.int16)
        if len(self):
            run_chunks(_validate_population, len(self), self.ops, self.sizes, self.lengths,
                       max_depth, out, min_chunk=256)
        bad = np.argwhere(out != 0)
        if bad.size:
            i, t = (int(x) for x in bad[0])
            raise ValueError(f"individual {i} {TREE_NAMES[t]} tree: {_REASONS[int(out[i, t])]}")

    def rule(self, i: int) -> GPRule:
        return GPRule(self.ops[i, BUY, :self.lengths[i, BUY]].copy(),
                      self.ops[i, SELL, :self.lengths[i, SELL]].copy())

    def key(self, i: int) -> bytes:
        """Identity of individual i's trees (for de-duplicating a hall of fame)."""
        nb, ns = int(self.lengths[i, BUY]), int(self.lengths[i, SELL])
        return self.ops[i, BUY, :nb].tobytes() + b"|" + self.ops[i, SELL, :ns].tobytes()

    @staticmethod
    def from_rules(rules: list[GPRule], max_nodes: int = DEFAULT_MAX_NODES) -> Population:
        pop = Population.empty(len(rules), max_nodes)
        for i, r in enumerate(rules):
            for t, tree in enumerate((r.buy, r.sell)):
                if tree.size > max_nodes:
                    raise ValueError(f"rule {i}: {TREE_NAMES[t]} tree has {tree.size} nodes, "
                                     f"more than max_nodes={max_nodes}")
                pop.ops[i, t, :tree.size] = tree
                pop.lengths[i, t] = tree.size
                _per_tree(subtree_sizes)(pop.ops[i, t], tree.size, pop.sizes[i, t])
        return pop


def expect_compiles(n: int) -> None:
    """Announce `n` individuals this process will compile to postfix (an evolution's):
    more than COMPILE_BUDGET, and `Population.compile` is compiled from its first call."""
    small.expect(_compile_population, n, COMPILE_BUDGET)


# --------------------------------------------------------------------------- one rule
#: trees a process reads one at a time uncompiled (rules built from Python: a hall of
#: fame's, a strategy file's): about 0.02 ms a tree interpreted, against 0.6 s to compile
#: `scan_tree`, `subtree_sizes` and `prefix_to_postfix` (2-core dev VM, 2026-11-28)
TREE_BUDGET = 8_192


def _per_tree(helper: Any) -> Any:
    """`helper` for one tree called from Python: its plain clone while the budget lasts and
    it has no machine code (gpu.small), else the compiled function."""
    return small.plain(helper) if small.uncompiled(helper, 1, TREE_BUDGET) else helper


def tree_depth(prefix: I16) -> int:
    """Depth of a prefix tree, or -1 if it is not a type-correct bool tree."""
    prefix = np.ascontiguousarray(prefix, np.int16)
    if prefix.size == 0:
        return -1
    return int(_per_tree(scan_tree)(prefix, prefix.size, np.empty(prefix.size, np.int32)))


def tree_to_postfix(prefix: I16) -> I16:
    prefix = np.ascontiguousarray(prefix, np.int16)
    n = prefix.size
    depths = np.empty(n, np.int32)
    if _per_tree(scan_tree)(prefix, n, depths) < 0:
        raise ValueError("not a type-correct bool tree")
    sizes = np.empty(n, np.int16)
    _per_tree(subtree_sizes)(prefix, n, sizes)
    out = np.empty(n, np.int16)
    _per_tree(prefix_to_postfix)(prefix, n, sizes, depths, out)
    return out


def postfix_to_prefix(postfix: I16) -> I16:
    """Inverse of tree_to_postfix; raises ValueError unless postfix is one bool tree."""
    post = [int(x) for x in np.asarray(postfix).ravel()]
    stack: list[list[int]] = []
    for op in post:
        if not 0 <= op < N_OPS:
            raise ValueError(f"op code {op} out of range 0..{N_OPS - 1}")
        a = int(ARITY[op])
        if len(stack) < a:
            raise ValueError("postfix program pops an empty stack")
        args = stack[len(stack) - a:] if a else []
        del stack[len(stack) - a:]
        stack.append([op] + [x for arg in args for x in arg])
    if len(stack) != 1:
        raise ValueError(f"postfix program leaves {len(stack)} values, expected 1")
    prefix = np.asarray(stack[0], np.int16)
    if tree_depth(prefix) < 0:
        raise ValueError("postfix program is not a type-correct bool tree")
    return prefix


def to_infix(prefix: I16) -> str:
    """Fully parenthesised infix text of a prefix tree."""
    ops = [int(x) for x in np.asarray(prefix).ravel()]
    pos = 0

    def walk() -> str:
        nonlocal pos
        op = ops[pos]
        pos += 1
        if op < len(TERMINALS):
            return TERMINALS[op]
        if op == OP_NOT:
            return "NOT " + walk()
        left = walk()
        right = walk()
        return f"({left} {FUNCTION_NAMES[op]} {right})"

    text = walk()
    if pos != len(ops):
        raise ValueError("prefix array holds more than one tree")
    return text


_TOKEN = re.compile(r"\s*(?:(\()|(\))|(<|>)|([A-Za-z_][A-Za-z0-9_]*))")
_BINARY = {"AND": OP_AND, "OR": OP_OR, "<": OP_LT, ">": OP_GT}


def parse_infix(text: str) -> I16:
    """Prefix op codes of an infix tree (see module doc); ValueError on bad text or types."""
    tokens: list[str] = []
    pos = 0
    stripped = text.rstrip()
    while pos < len(stripped):
        m = _TOKEN.match(stripped, pos)
        if m is None:
            raise ValueError(f"unexpected character {stripped[pos]!r} at {pos} in {text!r}")
        tokens.append(m.group(m.lastindex or 0))
        pos = m.end()
    out: list[int] = []
    at = 0

    def expect_more() -> str:
        if at >= len(tokens):
            raise ValueError(f"infix text ends early: {text!r}")
        return tokens[at]

    def expr() -> None:
        nonlocal at
        tok = expect_more()
        at += 1
        if tok == "(":
            slot = len(out)
            out.append(-1)
            expr()
            op_tok = expect_more()
            at += 1
            if op_tok not in _BINARY:
                raise ValueError(f"expected AND, OR, < or > but got {op_tok!r} in {text!r}")
            out[slot] = _BINARY[op_tok]
            expr()
            if expect_more() != ")":
                raise ValueError(f"expected ')' but got {tokens[at]!r} in {text!r}")
            at += 1
        elif tok == "NOT":
            out.append(OP_NOT)
            expr()
        elif tok in TERMINAL_INDEX:
            out.append(TERMINAL_INDEX[tok])
        else:
            raise ValueError(f"unknown terminal or misplaced token {tok!r} in {text!r}")

    expr()
    if at != len(tokens):
        raise ValueError(f"trailing text after the tree in {text!r}")
    prefix = np.asarray(out, np.int16)
    if tree_depth(prefix) < 0:
        raise ValueError(f"tree is not type-correct (bool root, float args of < >): {text!r}")
    return prefix


@dataclass(frozen=True, eq=False)
class GPRule:
    """One trading rule: a buy tree and a sell tree (prefix op codes), validated."""

    buy: I16
    sell: I16
    _program: I16 = field(init=False, repr=False)

    def __post_init__(self) -> None:
        parts = []
        for name, tree in (("buy", self.buy), ("sell", self.sell)):
            arr = np.ascontiguousarray(tree, np.int16)
            if tree_depth(arr) < 0:
                raise ValueError(f"{name} tree is not a type-correct bool tree")
            if tree_depth(arr) > STACK_SIZE - 3:
                raise ValueError(f"{name} tree deeper than the interpreter's limit "
                                 f"{STACK_SIZE - 3}")
            object.__setattr__(self, name, arr)
            parts.append(tree_to_postfix(arr))
        object.__setattr__(self, "_program", np.concatenate(parts))

    @classmethod
    def from_infix(cls, buy: str, sell: str) -> GPRule:
        return cls(parse_infix(buy), parse_infix(sell))

    @property
    def buy_infix(self) -> str:
        return to_infix(self.buy)

    @property
    def sell_infix(self) -> str:
        return to_infix(self.sell)

    @property
    def size(self) -> int:
        return int(self.buy.size + self.sell.size)

    @property
    def program(self) -> I16:
        """Postfix program, buy tree then sell tree (what the evaluators run)."""
        return self._program

    def programs(self) -> tuple[I16, I32]:
        """This rule as a one-row (programs, lengths) pair for gpu.gp.evaluate."""
        return self._program[None, :].copy(), np.asarray([self._program.size], np.int32)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, GPRule) and np.array_equal(self.buy, other.buy)
                and np.array_equal(self.sell, other.sell))

    def __hash__(self) -> int:
        return hash((self.buy.tobytes(), self.sell.tobytes()))

    def __str__(self) -> str:
        return f"buy: {self.buy_infix}  sell: {self.sell_infix}"


def rules_programs(rules: list[GPRule]) -> tuple[I16, I32]:
    """Postfix programs (n, longest) and lengths of several rules, for gpu.gp.evaluate."""
    width = max((r.program.size for r in rules), default=2)
    programs = np.zeros((len(rules), width), np.int16)
    lengths = np.zeros(len(rules), np.int32)
    for i, r in enumerate(rules):
        programs[i, :r.program.size] = r.program
        lengths[i] = r.program.size
    return programs, lengths


assert N_FLOAT == 17 and len(FUNCTION_NAMES) == 5
