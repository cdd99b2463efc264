"""Many Ising lattices advanced together by checkerboard Metropolis, on the GPU or the CPU.

`IsingEnsemble` holds a batch of lattices of one dimension (any mix of sizes, one
temperature each, one field), all advanced by one launch per half-sweep (CUDA) or one
`prange` over lattices (CPU twin), with observables reduced where the spins live: each
measuring sweep yields, per lattice, Σ s and Σ_bonds s_i s_j as int64, never the lattice.

Kernels, in two pairs; within a pair the random numbers and the acceptance table are the
same, so the lattices are identical bit for bit:
- `bitplane` (the default): 2D and 3D, one bit per spin, 64 sites of a colour per uint64
  word, neighbour counts by bit-sliced adders and the Metropolis test u < thr as a
  bit-sliced compare of 8 random bit planes (4 Philox calls per 64 spins), the remaining
  24 bits drawn only for the spins whose top 8 bits tie their threshold (see the
  "Bit-plane kernels" section of `gpu.ising.core`: an exact 32-bit uniform, no
  quantisation bias). One thread per BP_WORDS words THREADS apart, so every warp access
  covers 32 consecutive words; needs L to be a multiple of 128. Per sweep it moves ≥ 3 × 8
  bytes per 64 spins and colour (own word read and written, the other colour read once
  when its neighbouring rows stay in L2): a quarter of `multispin`'s bytes, and half its
  random bits per spin;
- `bitplane-int8`: its reference, one byte per spin, any even L: each site gathers its
  own top 8 bits from the same planes and compares integers, site by site;
- `int8`: one byte per spin, 2D and 3D; one thread per 8 sites of a colour (one Philox
  call feeds 8 sites, 16 bits each, a refining call on a 16-bit tie);
- `multispin`: its 2D partner, 16 spins per uint64 word at 4 bits per spin, one thread
  per 8 consecutive words of a row (fewer where L/32 is not a multiple of 8); needs L to
  be a multiple of 32.

Both halves of a `multispin` sweep, the Philox draws and the update, are bound by
instruction issue rather than by the bytes moved, and overlap only partly. A small
lattice is bound by the host's launch cost: batch many lattices per launch (measured:
benchmarks/ising.py, benchmarks/results/h200-2026-11-22/README.md).

Cold start (all spins up). Lattice `n` of an ensemble draws from Philox stream
`streams[n]`, so a run is reproducible from (seed, streams) whatever the launch shape.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import cuda, njit, prange

from gpu.device import resolve_device
from gpu.ising import core
from gpu.twin import compile_twin, cuda_kernel_cache, flush_stale_caches

flush_stale_caches(__file__, [core.__file__])
TWIN = compile_twin(__name__, core.FUNCTIONS, core.CONSTANTS)

KERNELS = ("int8", "multispin", "bitplane", "bitplane-int8")
BITPLANE_KERNELS = ("bitplane", "bitplane-int8")  # the bit-plane random numbers
BP_WORDS = 4  # words per thread in the bit-plane kernel, THREADS apart (coalesced; the
# kernel names its four words one by one)
THREADS = 128  # threads per block: enough warps per SM while small lattices still spread
MAX_SWEEPS = 2**31 - 1  # the counter word holds 2·sweep + colour
TABLE_WIDTH = 16  # acceptance entries per temperature, 2·(2·dim+1) ≤ 14, + 2 (bitplane)

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]


def acceptance_table(dim: int, temperatures: Sequence[float], field: float = 0.0) -> U64:
    """thr[t, σ·(2·dim+1) + n_up] = ceil(min(1, exp(-ΔE/T))·2^32) as uint64.

    σ ∈ {0, 1} is the spin (1 = up), n_up the number of up neighbours, and
    ΔE = 2·s·(Σ neighbours + h) the energy cost of flipping s = 2σ-1 (J = 1). A 32-bit
    uniform u then flips iff u < thr, which is exactly u·2^-32 < exp(-ΔE/T): p·2^32 is
    exact in float64 and u is an integer.
    """
    z = 2 * dim
    out = np.empty((len(temperatures), 2 * (z + 1)), dtype=np.uint64)
    for t, temp in enumerate(temperatures):
        if not (temp > 0 and math.isfinite(temp)):
            raise ValueError(f"temperature must be positive and finite, got {temp}")
        for sigma in (0, 1):
            for n_up in range(z + 1):
                s = 2 * sigma - 1
                d_e = 2.0 * s * ((2 * n_up - z) + field)
                p = 1.0 if d_e <= 0 else math.exp(-d_e / temp)
                out[t, sigma * (z + 1) + n_up] = np.uint64(math.ceil(p * 2.0**32))
    return out


def bitplane_table(dim: int, thr: U64) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
    """(thr_hi, thr_lo) of the bit-plane kernels: thr >> 24 and thr & 0xFFFFFF per class,
    then the bounds `gpu.ising.core.decide_word` reads: thr_hi[:, W] = a1 + 1,
    thr_hi[:, W+1] = a0, thr_lo[:, W] = first pair index to compare, with W = 2·(2·dim+1),
    (σ = 1, n_up ≤ a1) and (σ = 0, n_up ≥ a0) the classes of acceptance 1."""
    z = 2 * dim
    width = 2 * (z + 1)
    full = np.uint64(1) << np.uint64(32)
    hi = np.zeros((thr.shape[0], width + 2), dtype=np.uint32)
    lo = np.zeros((thr.shape[0], width + 2), dtype=np.uint32)
    hi[:, :width] = (thr >> np.uint64(24)).astype(np.uint32)
    lo[:, :width] = (thr & np.uint64(0xFFFFFF)).astype(np.uint32)
    for t in range(thr.shape[0]):
        ones_up = [n for n in range(z + 1) if thr[t, z + 1 + n] == full]
        ones_down = [n for n in range(z + 1) if thr[t, n] == full]
        # ΔE grows with n_up for an up spin and falls for a down one: contiguous ranges
        a1 = max(ones_up, default=-1)
        a0 = min(ones_down, default=z + 1)
        if ones_up != list(range(a1 + 1)) or ones_down != list(range(a0, z + 1)):
            raise AssertionError("acceptance 1 not monotone in the neighbour count")
        hi[t, width] = a1 + 1
        hi[t, width + 1] = a0
        lo[t, width] = max(0, min(a1, z - a0) + 1)
    return hi, lo


def seed_key(seed: int) -> tuple[np.uint64, np.uint64]:
    """The Philox key (two 32-bit words) of a 64-bit seed."""
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must be in [0, 2^64), got {seed}")
    return np.uint64(seed & 0xFFFFFFFF), np.uint64((seed >> 32) & 0xFFFFFFFF)


def _colour_sites(shape: tuple[int, ...], colour: int) -> tuple[npt.NDArray[np.int64], ...]:
    """Index arrays of the sites of one colour in site-index order k (see gpu.ising.core)."""
    L = shape[0]
    half = L // 2
    if len(shape) == 2:
        i2, jj = np.meshgrid(np.arange(L), np.arange(half), indexing="ij")
        return i2.reshape(-1), (2 * jj + ((i2 + colour) & 1)).reshape(-1)
    i, j, zz = np.meshgrid(np.arange(L), np.arange(L), np.arange(half), indexing="ij")
    return i.reshape(-1), j.reshape(-1), (2 * zz + ((i + j + colour) & 1)).reshape(-1)


def pack_bits(spins: npt.NDArray[np.int8], colour: int) -> U64:
    """One colour of a 2D or 3D ±1 lattice as bit-plane words: bit n of word w is site
    k = 64·w + n (1 = up); L must be a multiple of 128."""
    bits = (spins[_colour_sites(spins.shape, colour)] > 0).astype(np.uint64).reshape(-1, 64)
    shifts = np.arange(64, dtype=np.uint64)[None, :]
    return np.bitwise_or.reduce(bits << shifts, axis=1)


def unpack_bits(black: U64, white: U64, L: int, dim: int) -> npt.NDArray[np.int8]:
    """The ±1 int8 lattice (L,)*dim from its two bit-plane colours."""
    out = np.empty((L,) * dim, dtype=np.int8)
    shifts = np.arange(64, dtype=np.uint64)[None, :]
    for colour, words in ((0, black), (1, white)):
        bits = ((words[:, None] >> shifts) & np.uint64(1)).reshape(-1).astype(np.int8)
        out[_colour_sites(out.shape, colour)] = 2 * bits - 1
    return out


def pack_colour(spins: npt.NDArray[np.int8], colour: int) -> U64:
    """One colour of a 2D ±1 int8 lattice as multi-spin words (L rows × L/32)."""
    L = spins.shape[0]
    half = L // 2
    i = np.arange(L)[:, None]
    jj = np.arange(half)[None, :]
    j = 2 * jj + ((i + colour) & 1)
    bits = (spins[i, j] > 0).astype(np.uint64).reshape(L, L // 32, 16)
    shifts = (4 * np.arange(16, dtype=np.uint64))[None, None, :]
    return np.bitwise_or.reduce(bits << shifts, axis=2).reshape(-1)


def unpack_colours(black: U64, white: U64, L: int) -> npt.NDArray[np.int8]:
    """The 2D ±1 int8 lattice from its two multi-spin colours."""
    out = np.empty((L, L), dtype=np.int8)
    half = L // 2
    shifts = (4 * np.arange(16, dtype=np.uint64))[None, None, :]
    i = np.arange(L)[:, None]
    jj = np.arange(half)[None, :]
    for colour, words in ((0, black), (1, white)):
        nib = (words.reshape(L, L // 32, 1) >> shifts) & np.uint64(1)
        s = (2 * nib.reshape(L, half).astype(np.int8) - 1).astype(np.int8)
        out[i, 2 * jj + ((i + colour) & 1)] = s
    return out


# ---- CPU twin ------------------------------------------------------------------------------
_update_int8 = TWIN.cpu.update_octet_int8
_measure_int8 = TWIN.cpu.measure_octet_int8
_update_words = TWIN.cpu.update_words_2d
_measure_word = TWIN.cpu.measure_word_2d
_update_bp = TWIN.cpu.update_word_bp
_measure_bp = TWIN.cpu.measure_word_bp
_update_bp_int8 = TWIN.cpu.update_octet_bp_int8


@njit(parallel=True, cache=True)
def _cpu_int8(spins, offs, sizes, streams, dim, thr_hi, thr_lo, key0, key1, sweep0, n_sweeps, measure, obs):  # noqa: E501
    for lat in prange(sizes.shape[0]):
        L = sizes[lat]
        off = offs[lat]
        n_sites = (L // 2) * L if dim == 2 else (L // 2) * L * L
        n_groups = (n_sites + 7) // 8
        for t in range(n_sweeps):
            for colour in range(2):
                for g in range(n_groups):
                    _update_int8(
                        spins, off, L, dim, colour, g, streams[lat], sweep0 + t,
                        key0, key1, thr_hi, thr_lo, lat,
                    )
            if measure:
                mag = 0
                bonds = 0
                for g in range(n_groups):
                    m, b = _measure_int8(spins, off, L, dim, g)
                    mag += m
                    bonds += b
                obs[t, lat, 0] = mag
                obs[t, lat, 1] = bonds


@njit(parallel=True, cache=True)
def _cpu_multispin(black, white, offs, sizes, streams, thr_hi, thr_lo, key0, key1, sweep0, n_sweeps, measure, obs):  # noqa: E501
    for lat in prange(sizes.shape[0]):
        L = sizes[lat]
        off = offs[lat]
        n_words = L * L // 32
        for t in range(n_sweeps):
            W = L // 32
            for i in range(L):
                _update_words(
                    black, white, off, L, 0, i * W, W, streams[lat], sweep0 + t, key0, key1,
                    thr_hi, thr_lo, lat,
                )
            for i in range(L):
                _update_words(
                    white, black, off, L, 1, i * W, W, streams[lat], sweep0 + t, key0, key1,
                    thr_hi, thr_lo, lat,
                )
            if measure:
                mag = 0
                bonds = 0
                for w in range(n_words):
                    m, b = _measure_word(black, white, off, L, w)
                    mag += m
                    bonds += b
                obs[t, lat, 0] = mag
                obs[t, lat, 1] = bonds


@njit(parallel=True, cache=True)
def _cpu_bp_int8(spins, offs, sizes, streams, dim, thr_hi, thr_lo, key0, key1, sweep0, n_sweeps, measure, obs):  # noqa: E501
    for lat in prange(sizes.shape[0]):
        L = sizes[lat]
        off = offs[lat]
        n_sites = (L // 2) * L if dim == 2 else (L // 2) * L * L
        n_groups = (n_sites + 7) // 8
        for t in range(n_sweeps):
            for colour in range(2):
                for g in range(n_groups):
                    _update_bp_int8(
                        spins, off, L, dim, colour, g, streams[lat], sweep0 + t,
                        key0, key1, thr_hi, thr_lo, lat,
                    )
            if measure:
                mag = 0
                bonds = 0
                for g in range(n_groups):
                    m, b = _measure_int8(spins, off, L, dim, g)
                    mag += m
                    bonds += b
                obs[t, lat, 0] = mag
                obs[t, lat, 1] = bonds


@njit(parallel=True, cache=True)
def _cpu_bitplane(black, white, offs, sizes, streams, dim, thr_hi, thr_lo, key0, key1, sweep0, n_sweeps, measure, obs):  # noqa: E501
    for lat in prange(sizes.shape[0]):
        L = sizes[lat]
        off = offs[lat]
        n_words = L * L // 128 if dim == 2 else L * L * L // 128
        for t in range(n_sweeps):
            for w in range(n_words):
                _update_bp(black, white, off, L, dim, 0, w, streams[lat], sweep0 + t,
                           key0, key1, thr_hi, thr_lo, lat)
            for w in range(n_words):
                _update_bp(white, black, off, L, dim, 1, w, streams[lat], sweep0 + t,
                           key0, key1, thr_hi, thr_lo, lat)
            if measure:
                mag = 0
                bonds = 0
                for w in range(n_words):
                    m, b = _measure_bp(black, white, off, L, dim, w)
                    mag += m
                    bonds += b
                obs[t, lat, 0] = mag
                obs[t, lat, 1] = bonds


# ---- CUDA kernels --------------------------------------------------------------------------
_update_int8_dev = TWIN.cuda.update_octet_int8
_measure_int8_dev = TWIN.cuda.measure_octet_int8
_update_words_dev = TWIN.cuda.update_words_2d
_words_per_thread_dev = TWIN.cuda.words_per_thread
_measure_word_dev = TWIN.cuda.measure_word_2d
_update_bp_main_dev = TWIN.cuda.update_word_bp_main
_resolve_tie_dev = TWIN.cuda.resolve_tie
_measure_bp_dev = TWIN.cuda.measure_word_bp
_update_bp_int8_dev = TWIN.cuda.update_octet_bp_int8
_jit = cuda.jit(cache=cuda_kernel_cache())


# Kernel arguments are packed (meta = offset, L, stream per lattice; blocks = lattice,
# first work item per block; thr = thr_hi, thr_lo): numba-cuda marshals every array
# argument on each launch, and small lattices are bound by that host cost.
def _load_table(table, thr, lat):
    # The block's lattice's acceptance row in shared memory: every spin reads it, and a
    # shared load is far cheaper than an indexed global one. All threads reach the barrier.
    t = cuda.threadIdx.x
    if t < TABLE_WIDTH:  # type: ignore[operator]
        table[0, t] = thr[0, lat, t]
        table[1, t] = thr[1, lat, t]
    cuda.syncthreads()  # type: ignore[call-arg]


_load_table_dev = cuda.jit(device=True)(_load_table)


@_jit
def _k_update_int8(spins, meta, thr, blocks, dim, key0, key1, sweep, colour):  # noqa: E501
    lat = blocks[cuda.blockIdx.x, 0]
    table = cuda.shared.array((2, TABLE_WIDTH), dtype=np.uint32)
    _load_table_dev(table, thr, lat)
    g = blocks[cuda.blockIdx.x, 1] + cuda.threadIdx.x
    L = meta[lat, 1]
    n_sites = (L // 2) * L if dim == 2 else (L // 2) * L * L
    if 8 * g < n_sites:
        _update_int8_dev(
            spins, meta[lat, 0], L, dim, colour, g, meta[lat, 2], sweep, key0, key1,
            table[0:1], table[1:2], 0,
        )


@_jit
def _k_update_word(own, other, meta, thr, blocks, key0, key1, sweep, colour):  # noqa: E501
    lat = blocks[cuda.blockIdx.x, 0]
    table = cuda.shared.array((2, TABLE_WIDTH), dtype=np.uint32)
    _load_table_dev(table, thr, lat)
    L = meta[lat, 1]
    count = _words_per_thread_dev(L)
    w0 = (blocks[cuda.blockIdx.x, 1] + cuda.threadIdx.x) * count
    if w0 < L * L // 32:
        _update_words_dev(
            own, other, meta[lat, 0], L, colour, w0, count, meta[lat, 2], sweep, key0, key1,
            table[0:1], table[1:2], 0,
        )


@_jit
def _k_update_bp_int8(spins, meta, thr, blocks, dim, key0, key1, sweep, colour):  # noqa: E501
    lat = blocks[cuda.blockIdx.x, 0]
    table = cuda.shared.array((2, TABLE_WIDTH), dtype=np.uint32)
    _load_table_dev(table, thr, lat)
    g = blocks[cuda.blockIdx.x, 1] + cuda.threadIdx.x
    L = meta[lat, 1]
    n_sites = (L // 2) * L if dim == 2 else (L // 2) * L * L
    if 8 * g < n_sites:
        _update_bp_int8_dev(
            spins, meta[lat, 0], L, dim, colour, g, meta[lat, 2], sweep, key0, key1,
            table[0:1], table[1:2], 0,
        )


@_jit
def _k_update_bp(own, other, meta, thr, blocks, dim, key0, key1, sweep, colour):  # noqa: E501
    # A block owns THREADS·BP_WORDS consecutive words; thread t takes words t, t+THREADS,
    # …, so every load and store of a warp covers 32 consecutive words (256 bytes).
    # The ties of its four words (BP_WORDS) are settled after all four in one loop: a warp
    # then runs as many refining draws as its thread with the most ties over four words
    # (≈ 3 at Tc in 2D), not the most per word four times over (≈ 1.6 each).
    lat = blocks[cuda.blockIdx.x, 0]
    table = cuda.shared.array((2, TABLE_WIDTH), dtype=np.uint32)
    _load_table_dev(table, thr, lat)
    L = meta[lat, 1]
    off = meta[lat, 0]
    stream = meta[lat, 2]
    n_words = L * L // 128 if dim == 2 else L * L * (L // 128)
    w0 = blocks[cuda.blockIdx.x, 1] + cuda.threadIdx.x
    w1 = w0 + THREADS
    w2 = w1 + THREADS
    w3 = w2 + THREADS
    hi = table[0:1]
    lo = table[1:2]
    t0 = t1 = t2 = t3 = np.uint64(0)
    for k in range(4):  # a loop, not four inlined copies: a quarter of the code, fewer registers
        w = w0 + k * THREADS
        t = np.uint64(0)
        if w < n_words:
            t = _update_bp_main_dev(own, other, off, L, dim, colour, w, stream, sweep, key0,
                                    key1, hi, lo, 0)
        if k == 0:
            t0 = t
        elif k == 1:
            t1 = t
        elif k == 2:
            t2 = t
        else:
            t3 = t
    one = np.uint64(1)
    while (t0 | t1 | t2 | t3) != np.uint64(0):
        if t0 != np.uint64(0):
            low = t0 & (~t0 + one)
            t0 ^= low
            w = w0
        elif t1 != np.uint64(0):
            low = t1 & (~t1 + one)
            t1 ^= low
            w = w1
        elif t2 != np.uint64(0):
            low = t2 & (~t2 + one)
            t2 ^= low
            w = w2
        else:
            low = t3 & (~t3 + one)
            t3 ^= low
            w = w3
        _resolve_tie_dev(own, other, off, L, dim, colour, w, low, stream, sweep, key0, key1,
                         lo, 0)


def _block_sum_and_store(partial, mag, bonds, obs, row, lat):
    # Shared-memory tree reduction of one block, then one atomic add per block and
    # observable: the lattice is read once per measurement and never leaves the GPU.
    tid = cuda.threadIdx.x
    partial[tid, 0] = mag
    partial[tid, 1] = bonds
    cuda.syncthreads()  # type: ignore[call-arg]
    step = THREADS // 2
    while step > 0:
        if tid < step:
            partial[tid, 0] += partial[tid + step, 0]
            partial[tid, 1] += partial[tid + step, 1]
        cuda.syncthreads()
        step //= 2
    if tid == 0:
        cuda.atomic.add(obs, (row, lat, 0), partial[0, 0])
        cuda.atomic.add(obs, (row, lat, 1), partial[0, 1])


_block_sum_dev = cuda.jit(device=True)(_block_sum_and_store)


@_jit
def _k_measure_int8(spins, meta, blocks, dim, obs, row):
    partial = cuda.shared.array((THREADS, 2), dtype=np.int64)
    lat = blocks[cuda.blockIdx.x, 0]
    g = blocks[cuda.blockIdx.x, 1] + cuda.threadIdx.x
    L = meta[lat, 1]
    n_sites = (L // 2) * L if dim == 2 else (L // 2) * L * L
    mag = 0
    bonds = 0
    if 8 * g < n_sites:  # no early return: every thread must reach the barriers
        mag, bonds = _measure_int8_dev(spins, meta[lat, 0], L, dim, g)
    _block_sum_dev(partial, mag, bonds, obs, row, lat)


@_jit
def _k_measure_word(black, white, meta, blocks, obs, row):
    partial = cuda.shared.array((THREADS, 2), dtype=np.int64)
    lat = blocks[cuda.blockIdx.x, 0]
    L = meta[lat, 1]
    count = _words_per_thread_dev(L)  # the update kernel's work split
    w0 = (blocks[cuda.blockIdx.x, 1] + cuda.threadIdx.x) * count
    mag = 0
    bonds = 0
    if w0 < L * L // 32:
        for k in range(count):
            m, b = _measure_word_dev(black, white, meta[lat, 0], L, w0 + k)
            mag += m
            bonds += b
    _block_sum_dev(partial, mag, bonds, obs, row, lat)


@_jit
def _k_measure_bp(black, white, meta, blocks, dim, obs, row):
    partial = cuda.shared.array((THREADS, 2), dtype=np.int64)
    lat = blocks[cuda.blockIdx.x, 0]
    L = meta[lat, 1]
    n_words = L * L // 128 if dim == 2 else L * L * (L // 128)
    w = blocks[cuda.blockIdx.x, 1] + cuda.threadIdx.x
    mag = 0
    bonds = 0
    for _ in range(BP_WORDS):  # the update kernel's work split
        if w < n_words:
            m, b = _measure_bp_dev(black, white, meta[lat, 0], L, dim, w)
            mag += m
            bonds += b
        w += THREADS
    _block_sum_dev(partial, mag, bonds, obs, row, lat)


# ---- the ensemble --------------------------------------------------------------------------
def _check_ensemble(dim: int, sizes: Sequence[int], temperatures: Sequence[float],
                    field: float, kernel: str) -> None:
    """The ensemble's shape and kernel choice, or a ValueError naming what is wrong."""
    if dim not in (2, 3):
        raise ValueError(f"dimension must be 2 or 3, got {dim}")
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    if len(sizes) != len(temperatures) or not sizes:
        raise ValueError("need one temperature per lattice and at least one lattice")
    for L in sizes:
        if L < 2 or L % 2:
            raise ValueError(f"lattice size must be even and ≥ 2, got {L}")
        if kernel == "multispin" and (dim != 2 or L % 32):
            raise ValueError(f"the multispin kernel needs 2D and L a multiple of 32, got {L}")
        if kernel == "bitplane" and L % 128:
            raise ValueError(f"the bitplane kernel needs L a multiple of 128, got {L}")
        if kernel == "bitplane" and L**dim // 128 >= 2**32:  # 32-bit word arithmetic
            raise ValueError(f"lattice too large for the bitplane kernel: L = {L}")
    if not math.isfinite(field):
        raise ValueError("field must be finite")


class IsingEnsemble:
    """A batch of lattices (sizes[n], temperatures[n]) of one dimension, advanced together.

    `run(n, measure)` advances every lattice by n sweeps (a sweep = both colours); with
    `measure` it returns obs[t, n, :] = (Σ s, Σ_bonds s_i s_j) after each sweep (int64).
    """

    def __init__(
        self,
        dim: int,
        sizes: Sequence[int],
        temperatures: Sequence[float],
        *,
        field: float = 0.0,
        seed: int = 0,
        streams: Sequence[int] | None = None,
        kernel: str = "int8",
        device: str = "auto",
    ) -> None:
        _check_ensemble(dim, sizes, temperatures, field, kernel)
        self.dim = dim
        self.kernel = kernel
        self.device = resolve_device(device, "Ising Metropolis")
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.temperatures = np.asarray(temperatures, dtype=np.float64)
        self.field = float(field)
        self.streams = np.asarray(
            range(len(sizes)) if streams is None else streams, dtype=np.int64
        )
        if (
            self.streams.shape != self.sizes.shape
            or (self.streams < 0).any()
            or (self.streams >= 2**32).any()
        ):
            raise ValueError("need one stream id in [0, 2^32) per lattice")
        self.key0, self.key1 = seed_key(seed)
        self.thr = acceptance_table(dim, list(self.temperatures), self.field)
        # the kernels compare a site's uniform in two parts (see gpu.ising.core): its top
        # 16 bits (int8, multispin) or top 8 bits (bit-plane kernels), then the rest on a tie
        if kernel in BITPLANE_KERNELS:
            self.thr_hi, self.thr_lo = bitplane_table(dim, self.thr)
        else:
            split = np.uint64(16)
            self.thr_hi = (self.thr >> split).astype(np.uint32)
            self.thr_lo = (self.thr & ((np.uint64(1) << split) - np.uint64(1))).astype(np.uint32)
        self.n_spins = self.sizes**dim
        self.sweep = 0
        if kernel in ("int8", "bitplane-int8"):
            per_lattice = self.n_spins
            self._units = ((self.n_spins // 2) + 7) // 8  # thread work items per lattice
        elif kernel == "bitplane":
            per_lattice = self.n_spins // 128
            self._units = (per_lattice + BP_WORDS - 1) // BP_WORDS
        else:
            per_lattice = self.sizes * self.sizes // 32
            self._units = per_lattice // np.array(
                [core.words_per_thread(int(L)) for L in self.sizes], dtype=np.int64
            )
        self.offsets = np.concatenate([[0], np.cumsum(per_lattice)[:-1]]).astype(np.int64)
        total = int(per_lattice.sum())
        if kernel in ("int8", "bitplane-int8"):
            self._host: tuple[Any, ...] = (np.ones(total, dtype=np.int8),)
        elif kernel == "bitplane":
            self._host = (np.full(total, core.ALL), np.full(total, core.ALL))
        else:
            up = np.uint64(0x1111111111111111)  # every nibble 1: all spins up
            self._host = (np.full(total, up), np.full(total, up))
        blocks = (self._units + THREADS - 1) // THREADS
        self._blk_lat = np.repeat(np.arange(len(sizes), dtype=np.int64), blocks)
        # first work item of each block (a word, for bitplane: a block spans BP_WORDS·THREADS)
        stride = THREADS * (BP_WORDS if kernel == "bitplane" else 1)
        self._blk_first = np.concatenate(
            [np.arange(b, dtype=np.int64) * stride for b in blocks]
        )
        self._dev: tuple[Any, ...] | None = None
        if self.device == "cuda":
            self._to_device()
            self._configure_launches()

    def _configure_launches(self) -> None:
        """Configure the kernel launches once: a fresh kernel[grid, block] per call costs
        host time that dominates the sweep of lattices below L ≈ 8,192."""
        grid = int(self._blk_lat.shape[0])
        kernel = self.kernel
        if kernel == "int8":
            self._launch_update = _k_update_int8[grid, THREADS]
            self._launch_measure = _k_measure_int8[grid, THREADS]
        elif kernel == "bitplane-int8":
            self._launch_update = _k_update_bp_int8[grid, THREADS]
            self._launch_measure = _k_measure_int8[grid, THREADS]
        elif kernel == "bitplane":
            self._launch_update = _k_update_bp[grid, THREADS]
            self._launch_measure = _k_measure_bp[grid, THREADS]
        else:
            self._launch_update = _k_update_word[grid, THREADS]
            self._launch_measure = _k_measure_word[grid, THREADS]

    # -- state access (tests, plots); not for the hot loop --------------------------------
    def _to_device(self) -> None:
        to = cuda.to_device
        self._dev = tuple(to(a) for a in self._host)
        thr = np.zeros((2, self.sizes.shape[0], TABLE_WIDTH), dtype=np.uint32)
        thr[0, :, : self.thr_hi.shape[1]] = self.thr_hi
        thr[1, :, : self.thr_lo.shape[1]] = self.thr_lo
        self._d_meta = (
            to(np.stack([self.offsets, self.sizes, self.streams], axis=1)),
            to(thr),
            to(np.stack([self._blk_lat, self._blk_first], axis=1)),
        )

    def _sync_host(self) -> None:
        if self._dev is not None:
            self._host = tuple(d.copy_to_host() for d in self._dev)

    def spins(self, n: int) -> npt.NDArray[np.int8]:
        """Lattice n as a ±1 int8 array of shape (L,)*dim."""
        self._sync_host()
        L = int(self.sizes[n])
        off = int(self.offsets[n])
        if self.kernel in ("int8", "bitplane-int8"):
            return self._host[0][off : off + L**self.dim].reshape((L,) * self.dim).copy()
        if self.kernel == "bitplane":
            w = L**self.dim // 128
            return unpack_bits(
                self._host[0][off : off + w], self._host[1][off : off + w], L, self.dim
            )
        w = L * L // 32
        return unpack_colours(self._host[0][off : off + w], self._host[1][off : off + w], L)

    def set_spins(self, n: int, spins: npt.NDArray[np.integer[Any]]) -> None:
        """Replace lattice n (±1 values, shape (L,)*dim)."""
        L = int(self.sizes[n])
        spins = np.asarray(spins)
        if spins.shape != (L,) * self.dim or not np.isin(spins, (-1, 1)).all():
            raise ValueError(f"spins must be ±1 of shape {(L,) * self.dim}")
        self._sync_host()
        off = int(self.offsets[n])
        s8 = spins.astype(np.int8)
        if self.kernel in ("int8", "bitplane-int8"):
            self._host[0][off : off + L**self.dim] = s8.reshape(-1)
        elif self.kernel == "bitplane":
            w = L**self.dim // 128
            self._host[0][off : off + w] = pack_bits(s8, 0)
            self._host[1][off : off + w] = pack_bits(s8, 1)
        else:
            w = L * L // 32
            self._host[0][off : off + w] = pack_colour(s8, 0)
            self._host[1][off : off + w] = pack_colour(s8, 1)
        if self._dev is not None:
            self._to_device()

    # -- advancing -------------------------------------------------------------------------
    def run(self, n_sweeps: int, measure: bool = False) -> I64 | None:
        """Advance every lattice by n_sweeps; with `measure`, (Σ s, Σ bonds) per sweep."""
        if n_sweeps < 0 or self.sweep + n_sweeps > MAX_SWEEPS:
            raise ValueError(f"sweep count out of range: {n_sweeps}")
        n_lat = self.sizes.shape[0]
        obs = np.zeros((n_sweeps if measure else 0, n_lat, 2), dtype=np.int64)
        if n_sweeps == 0:
            return obs if measure else None
        if self.device == "cpu":
            self._run_cpu(n_sweeps, measure, obs)
        else:
            obs = self._run_cuda(n_sweeps, measure, obs)
        self.sweep += n_sweeps
        return obs if measure else None

    def _run_cpu(self, n_sweeps: int, measure: bool, obs: I64) -> None:
        holder = obs if measure else np.zeros((1, 1, 2), dtype=np.int64)
        if self.kernel in ("int8", "bitplane-int8"):
            driver = _cpu_int8 if self.kernel == "int8" else _cpu_bp_int8
            driver(
                self._host[0], self.offsets, self.sizes, self.streams, self.dim, self.thr_hi,
                self.thr_lo, self.key0, self.key1, self.sweep, n_sweeps, measure, holder,
            )
        elif self.kernel == "bitplane":
            _cpu_bitplane(
                self._host[0], self._host[1], self.offsets, self.sizes, self.streams, self.dim,
                self.thr_hi, self.thr_lo, self.key0, self.key1, self.sweep, n_sweeps, measure,
                holder,
            )
        else:
            _cpu_multispin(
                self._host[0], self._host[1], self.offsets, self.sizes, self.streams,
                self.thr_hi, self.thr_lo, self.key0, self.key1, self.sweep, n_sweeps, measure,
                holder,
            )

    def _run_cuda(self, n_sweeps: int, measure: bool, obs: I64) -> I64:
        assert self._dev is not None
        meta, thr, blocks = self._d_meta
        update, measure_sums = self._launch_update, self._launch_measure
        d_obs = cuda.to_device(obs) if measure else None
        for t in range(n_sweeps):
            sweep = self.sweep + t
            if self.kernel in ("int8", "bitplane-int8"):
                (spins,) = self._dev
                for colour in (0, 1):
                    update(spins, meta, thr, blocks, self.dim, self.key0, self.key1, sweep, colour)
                if measure:
                    measure_sums(spins, meta, blocks, self.dim, d_obs, t)
            elif self.kernel == "bitplane":
                black, white = self._dev
                for colour, own, other in ((0, black, white), (1, white, black)):
                    update(own, other, meta, thr, blocks, self.dim, self.key0, self.key1, sweep,
                           colour)
                if measure:
                    measure_sums(black, white, meta, blocks, self.dim, d_obs, t)
            else:
                black, white = self._dev
                for colour, own, other in ((0, black, white), (1, white, black)):
                    update(own, other, meta, thr, blocks, self.key0, self.key1, sweep, colour)
                if measure:
                    measure_sums(black, white, meta, blocks, d_obs, t)
        if d_obs is not None:
            return np.asarray(d_obs.copy_to_host())
        cuda.synchronize()
        return obs


def run_ensemble(
    ensemble: IsingEnsemble,
    sweeps: int,
    therm: int,
    *,
    chunk: int = 200,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], float]:
    """Thermalise, then measure every sweep: (m[t, n], e[t, n]) per spin, and seconds.

    m is the magnetisation per spin, e the energy per spin -(Σ bonds + h·Σ s)/N. Work goes
    in chunks so that `progress(done, total)` can report between them.
    """
    total = therm + sweeps
    done = 0
    start = time.perf_counter()
    while done < therm:
        n = min(chunk, therm - done)
        ensemble.run(n)
        done += n
        if progress:
            progress(done, total)
    parts = []
    while done < total:
        n = min(chunk, total - done)
        obs = ensemble.run(n, measure=True)
        assert obs is not None
        parts.append(obs)
        done += n
        if progress:
            progress(done, total)
    seconds = time.perf_counter() - start
    raw = np.concatenate(parts, axis=0) if parts else np.zeros((0, len(ensemble.sizes), 2))
    n_spins = ensemble.n_spins.astype(np.float64)[None, :]
    m = raw[:, :, 0] / n_spins
    e = -(raw[:, :, 1] + ensemble.field * raw[:, :, 0]) / n_spins
    return m, e, seconds
