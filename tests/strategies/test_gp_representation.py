"""GP trees: every generated, crossed and mutated tree is type-correct and within limits;
infix and postfix forms round-trip; operators do what they claim (checked by brute force).

Type-correctness is checked by a recursive typing function written here from the
signatures (not gp_core's tables).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu.gp.core import OP_AND, OP_GT, OP_LT, OP_NOT, OP_OR
from gpu.indicators.catalogue import BOOL_TERMINALS, FLOAT_TERMINALS, TERMINAL_INDEX
from strategies.gp.init import ramped_half_and_half
from strategies.gp.operators import breed
from strategies.gp.representation import (
    GPRule,
    Population,
    parse_infix,
    postfix_to_prefix,
    to_infix,
    tree_depth,
    tree_to_postfix,
)

FLOATS = {TERMINAL_INDEX[n] for n in FLOAT_TERMINALS}
BOOLS = {TERMINAL_INDEX[n] for n in BOOL_TERMINALS}
SIGNATURE = {OP_AND: ("bool", ("bool", "bool")), OP_OR: ("bool", ("bool", "bool")),
             OP_NOT: ("bool", ("bool",)), OP_LT: ("bool", ("float", "float")),
             OP_GT: ("bool", ("float", "float"))}


def typed_depth(tree: list[int]) -> int:
    """Depth of a bool prefix tree; AssertionError if it is ill-typed or malformed."""
    pos = 0

    def node(want: str) -> int:
        nonlocal pos
        assert pos < len(tree), "tree ends early"
        op = tree[pos]
        pos += 1
        if op in FLOATS:
            assert want == "float", f"float terminal {op} where {want} is needed"
            return 0
        if op in BOOLS:
            assert want == "bool", f"bool terminal {op} where {want} is needed"
            return 0
        assert op in SIGNATURE, f"unknown op {op}"
        ret, args = SIGNATURE[op]
        assert ret == want, f"op {op} returns {ret}, {want} needed"
        return 1 + max(node(a) for a in args)

    depth = node("bool")
    assert pos == len(tree), "surplus nodes after the tree"
    return depth


def sizes_brute(tree: list[int]) -> list[int]:
    arity = {op: len(SIGNATURE[op][1]) for op in SIGNATURE}
    out = []
    for i in range(len(tree)):
        need, j = 1, i
        while need:
            need += arity.get(tree[j], 0) - 1
            j += 1
        out.append(j - i)
    return out


def assert_population_ok(pop: Population, max_depth: int, max_nodes: int) -> None:
    assert pop.ops.shape[2] == max_nodes
    for i in range(len(pop)):
        for t in range(2):
            n = int(pop.lengths[i, t])
            assert 1 <= n <= max_nodes
            tree = [int(x) for x in pop.ops[i, t, :n]]
            assert typed_depth(tree) <= max_depth
            assert [int(x) for x in pop.sizes[i, t, :n]] == sizes_brute(tree)
    pop.check(max_depth)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), min_depth=st.integers(1, 4), extra=st.integers(0, 3),
       max_nodes=st.sampled_from([16, 31, 64]))
def test_ramped_half_and_half_is_typed_and_ramped(seed: int, min_depth: int, extra: int,
                                                  max_nodes: int) -> None:
    max_depth = min_depth + extra
    pop = ramped_half_and_half(40, np.random.default_rng(seed), min_depth, max_depth, max_nodes)
    assert_population_ok(pop, max_depth, max_nodes)
    depths = [tree_depth(pop.ops[i, 0, :pop.lengths[i, 0]]) for i in range(len(pop))]
    if max_nodes >= 64 and max_depth <= 5:
        # full trees (even ramp blocks) reach exactly their ramp depth when nothing overflows
        n_depths = max_depth - min_depth + 1
        for i, d in enumerate(depths):
            if (i // n_depths) % 2 == 0:
                assert d == min_depth + i % n_depths


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), max_depth=st.integers(2, 9),
       max_nodes=st.sampled_from([8, 20, 64]), p_cx=st.floats(0, 1), p_sub=st.floats(0, 1),
       p_point=st.floats(0, 1))
def test_breeding_keeps_trees_typed_and_within_limits(seed: int, max_depth: int, max_nodes: int,
                                                      p_cx: float, p_sub: float,
                                                      p_point: float) -> None:
    rng = np.random.default_rng(seed)
    init_max = min(max_depth, 4)
    pop = ramped_half_and_half(30, rng, 1, init_max, max_nodes)
    for _ in range(3):
        rec = rng.integers(0, len(pop), 30)
        don = rng.integers(0, len(pop), 30)
        pop = breed(pop, rec, don, rng, p_crossover=p_cx, p_subtree=p_sub, p_point=p_point,
                    p_node=0.2, max_depth=max_depth, mutation_depth=3)
        assert_population_ok(pop, max_depth, max_nodes)


def _trees(pop: Population, i: int) -> list[list[int]]:
    return [[int(x) for x in pop.ops[i, t, :pop.lengths[i, t]]] for t in range(2)]


def _subtrees(tree: list[int]) -> list[tuple[int, int]]:
    return [(i, s) for i, s in enumerate(sizes_brute(tree))]


def test_crossover_child_is_recipient_with_one_donor_subtree() -> None:
    rng = np.random.default_rng(7)
    parents = ramped_half_and_half(50, rng, 2, 5)
    rec = rng.integers(0, 50, 300)
    don = rng.integers(0, 50, 300)
    kids = breed(parents, rec, don, rng, p_crossover=1.0, p_subtree=0.0, p_point=0.0)
    changed = 0
    for c in range(300):
        r_trees, d_trees = _trees(parents, rec[c]), _trees(parents, don[c])
        k_trees = _trees(kids, c)
        diff = [t for t in range(2) if k_trees[t] != r_trees[t]]
        assert len(diff) <= 1
        if not diff:
            continue
        t = diff[0]
        r, d, k = r_trees[t], d_trees[t], k_trees[t]
        found = any(r[:i] + d[j:j + m] + r[i + s:] == k
                    for i, s in _subtrees(r) for j, m in _subtrees(d))
        assert found, f"child {c} is not a one-subtree crossover of its parents"
        changed += 1
    assert changed > 150


def test_point_mutation_keeps_shape_and_signatures() -> None:
    rng = np.random.default_rng(8)
    parents = ramped_half_and_half(60, rng, 2, 5)
    idx = np.arange(60)
    kids = breed(parents, idx, idx, rng, p_crossover=0.0, p_subtree=0.0, p_point=1.0, p_node=0.3)
    klass = {**{op: "float" for op in FLOATS}, **{op: "bool" for op in BOOLS},
             OP_AND: "andor", OP_OR: "andor", OP_NOT: "not", OP_LT: "cmp", OP_GT: "cmp"}
    changed = 0
    for c in range(60):
        for p_tree, k_tree in zip(_trees(parents, c), _trees(kids, c), strict=True):
            assert len(p_tree) == len(k_tree)
            assert [klass[x] for x in p_tree] == [klass[x] for x in k_tree]
            changed += sum(a != b for a, b in zip(p_tree, k_tree, strict=True))
    assert changed > 60


def test_subtree_mutation_replaces_one_subtree() -> None:
    rng = np.random.default_rng(9)
    parents = ramped_half_and_half(60, rng, 2, 5)
    idx = np.arange(60)
    kids = breed(parents, idx, idx, rng, p_crossover=0.0, p_subtree=1.0, p_point=0.0,
                 max_depth=6, mutation_depth=3)
    for c in range(60):
        p_trees, k_trees = _trees(parents, c), _trees(kids, c)
        diff = [t for t in range(2) if p_trees[t] != k_trees[t]]
        assert len(diff) <= 1
        if diff:
            p, k = p_trees[diff[0]], k_trees[diff[0]]
            assert any(k[:i] == p[:i] and k[len(k) - (len(p) - i - s):] == p[i + s:]
                       and len(k) - len(p) + s >= 1 for i, s in _subtrees(p))
            assert typed_depth(k) <= 6


def test_infix_and_postfix_round_trip() -> None:
    pop = ramped_half_and_half(200, np.random.default_rng(3), 1, 6)
    for i in range(len(pop)):
        rule = pop.rule(i)
        for tree in (rule.buy, rule.sell):
            assert np.array_equal(parse_infix(to_infix(tree)), tree)
            assert np.array_equal(postfix_to_prefix(tree_to_postfix(tree)), tree)
        assert GPRule.from_infix(rule.buy_infix, rule.sell_infix) == rule
    progs, lens = pop.compile()
    for i in range(len(pop)):
        assert np.array_equal(progs[i, :lens[i]], pop.rule(i).program)


def test_postfix_is_children_then_node() -> None:
    # ((sma5 < close) AND NOT nvi_above)  ->  sma5 close < nvi_above NOT AND
    tree = parse_infix("((sma5 < close) AND NOT nvi_above)")
    t = TERMINAL_INDEX
    assert tree.tolist() == [OP_AND, OP_LT, t["sma5"], t["close"], OP_NOT, t["nvi_above"]]
    assert tree_to_postfix(tree).tolist() == [t["sma5"], t["close"], OP_LT, t["nvi_above"],
                                              OP_NOT, OP_AND]


@pytest.mark.parametrize("text", [
    "sma5",                          # float root
    "(sma5 < macd_above_zero)",      # bool argument of <
    "(sma5 AND close)",              # float arguments of AND
    "NOT sma5",
    "(nvi_above OR",                 # ends early
    "(nvi_above OR pvi_above",       # missing )
    "(nvi_above XOR pvi_above)",     # unknown op
    "volume_spike",                  # unknown terminal
    "nvi_above pvi_above",           # two trees
    "(nvi_above OR pvi_above) $",
    "",
])
def test_bad_infix_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_infix(text)


def test_population_check_names_a_corrupt_individual() -> None:
    pop = ramped_half_and_half(10, np.random.default_rng(1), 2, 3)
    pop.check()
    bad = pop.take(np.arange(10))
    bad.ops[4, 1, 0] = TERMINAL_INDEX["sma10"]  # float root
    with pytest.raises(ValueError, match="individual 4 sell"):
        bad.check()
    deep = pop.take(np.arange(10))
    with pytest.raises(ValueError, match="deeper"):
        deep.check(max_depth=1)

