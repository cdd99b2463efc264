"""Lag sums of a price series over one time tile: the arithmetic the CPU and CUDA kernels share.

For a lag Δt and the time points t of one tile, `tile_lag_sums` adds up

- |p(t+Δt) − p(t)|           (the q = 1 moment behind the Hurst exponent),
- r(t)·r(t+Δt)               (r: price changes with their mean removed once),
- a(t)·a(t+Δt)               (a: absolute price changes with their mean removed once),

over `count` consecutive t. Operands are read from two windows (`*_a` at `ia`, `*_b` at
`ib`) so that the CPU passes the whole series twice (`ia = t0`, `ib = t0 + Δt`) and a CUDA
thread passes two shared-memory tiles (`ia = 0`, `ib = its lag offset`): one summation
order, hence the same per-tile partial sums on both backends (up to the GPU's fused
multiply-add). Accumulators have the input's float type, so float32 input sums in float32
within a tile (at most a few hundred terms); tiles are then added in float64
(`sum_over_tiles`), in tile order, on both backends.

Compiled twice by `gpu.timeseries.analysis` through `gpu.twin.compile_twin`.
"""

from __future__ import annotations

from typing import Any


def tile_lag_sums(
    pa: Any, ra: Any, aa: Any, ia: int, pb: Any, rb: Any, ab: Any, ib: int, count: int
) -> tuple[Any, Any, Any]:
    """(Σ|pb−pa|, Σ ra·rb, Σ aa·ab) over k < count of pa[ia+k] against pb[ib+k], etc."""
    zero = pa[ia] - pa[ia]  # the input's float type: float32 input accumulates in float32
    s_abs = zero
    s_r = zero
    s_a = zero
    for k in range(count):
        s_abs += abs(pb[ib + k] - pa[ia + k])
        s_r += ra[ia + k] * rb[ib + k]
        s_a += aa[ia + k] * ab[ib + k]
    return s_abs, s_r, s_a


def store_tile_lag(
    partial: Any, tile: int, lag: int,
    pa: Any, ra: Any, aa: Any, ia: int, pb: Any, rb: Any, ab: Any, ib: int, count: int,
) -> None:
    """partial[tile, :, lag] = the tile's `tile_lag_sums`, or zeros where the tile holds no
    pair at this lag (count ≤ 0: the lag reaches past the series' end)."""
    if count > 0:
        s_abs, s_r, s_a = tile_lag_sums(pa, ra, aa, ia, pb, rb, ab, ib, count)
        partial[tile, 0, lag] = s_abs
        partial[tile, 1, lag] = s_r
        partial[tile, 2, lag] = s_a
    else:
        partial[tile, 0, lag] = 0.0
        partial[tile, 1, lag] = 0.0
        partial[tile, 2, lag] = 0.0


def sum_over_tiles(partial: Any, quantity: int, lag: int) -> float:
    """Σ over tiles of partial[tile, quantity, lag], in float64 and in tile order."""
    total = 0.0
    for tile in range(partial.shape[0]):
        total += partial[tile, quantity, lag]
    return total


CORE_FUNCTIONS = (tile_lag_sums, store_tile_lag, sum_over_tiles)
