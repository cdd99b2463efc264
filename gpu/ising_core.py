"""Ising Metropolis core: Philox-4x32-10 draws per site and the checkerboard site updates.

Plain Python functions, compiled twice by `gpu.twin.compile_twin` (CPU njit and CUDA
device functions) in `gpu.ising`; they also run as plain Python (slowly), which the tests
use as a third witness.

Model: H = -J Σ_<ij> s_i s_j - h Σ_i s_i with J = 1, s = ±1, periodic boundaries, on an
L^dim lattice (L even). A site's colour is (Σ coordinates) mod 2; the sites of one colour
do not touch each other, so a half-sweep updates all of them at once in any order.

Site index within a colour (what the random numbers are keyed on, and how the multi-spin
words are packed): 2D site (i, j) of colour c has k = i·L/2 + jj with j = 2·jj + ((i+c)&1);
3D site (i, j, z) has k = (i·L + j)·L/2 + zz with z = 2·zz + ((i+j+c)&1).

Random numbers: counter-based, so the number a site draws depends only on
(seed, lattice stream, sweep, colour, k) and never on the launch shape or the kernel.
One Philox-4x32-10 call with counter (k>>2, stream, 2·sweep+colour, k>>34) and key
(seed_lo, seed_hi) yields four 32-bit words; site k takes word k&3. Acceptance: flip iff
u < thr[σ·(2·dim+1) + n_up], where σ ∈ {0, 1} is the spin (1 = up), n_up the number of
up neighbours and thr = ceil(min(1, exp(-β·ΔE))·2^32) (see `gpu.ising.acceptance_table`);
u < thr is then exactly u·2^-32 < exp(-β·ΔE), and the int8 and multi-spin kernels take
identical decisions, so their lattices agree bit for bit.

Multi-spin coding (2D): each colour is stored as L rows of L/32 uint64 words, 16 spins
per word, 4 bits per spin (nibble n of word c holds jj = 16·c + n, value 0 or 1), so the
four neighbour nibbles add without carries (sum ≤ 4 < 16). All values held in uint64
here stay below 2^32 except the packed words, so no product overflows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

U64 = np.uint64
U32 = np.uint32
MASK32 = np.uint64(0xFFFFFFFF)
SH32 = np.uint64(32)
SH4 = np.uint64(4)
SH8 = np.uint64(8)
SH12 = np.uint64(12)
FIVE = np.uint64(5)
SH60 = np.uint64(60)
ONE = np.uint64(1)
TWO = np.uint64(2)
NIBBLE = np.uint64(0xF)
ZERO = np.uint64(0)
PHILOX_M0 = np.uint64(0xD2511F53)
PHILOX_M1 = np.uint64(0xCD9E8D57)
PHILOX_W0 = np.uint64(0x9E3779B9)
PHILOX_W1 = np.uint64(0xBB67AE85)

CONSTANTS: dict[str, Any] = {
    "U64": U64,
    "U32": U32,
    "SH8": SH8,
    "SH12": SH12,
    "FIVE": FIVE,
    "MASK32": MASK32,
    "SH32": SH32,
    "SH4": SH4,
    "SH60": SH60,
    "ONE": ONE,
    "TWO": TWO,
    "NIBBLE": NIBBLE,
    "ZERO": ZERO,
    "PHILOX_M0": PHILOX_M0,
    "PHILOX_M1": PHILOX_M1,
    "PHILOX_W0": PHILOX_W0,
    "PHILOX_W1": PHILOX_W1,
}


def philox_round(c0: Any, c1: Any, c2: Any, c3: Any, k0: Any, k1: Any) -> Any:
    """One Philox-4x32 round on uint32 words.

    The products are uint64 of zero-extended uint32 operands, which CUDA turns into one
    32×32→64 multiply (IMAD.WIDE) each; the three-way XORs become one LOP3 each.
    """
    p0 = U64(c0) * PHILOX_M0
    p1 = U64(c2) * PHILOX_M1
    return (
        U32(((p1 >> SH32) ^ U64(c1) ^ U64(k0)) & MASK32),
        U32(p1 & MASK32),
        U32(((p0 >> SH32) ^ U64(c3) ^ U64(k1)) & MASK32),
        U32(p0 & MASK32),
    )


def philox4x32_10(c0: Any, c1: Any, c2: Any, c3: Any, k0: Any, k1: Any) -> Any:
    """Philox-4x32-10 (Salmon et al. 2011, Random123): counter (c0..c3), key (k0, k1)."""
    c0, c1, c2, c3 = philox_round(U32(c0), U32(c1), U32(c2), U32(c3), U32(k0), U32(k1))
    k0 = U32(k0)
    k1 = U32(k1)
    for _ in range(9):
        k0 = U32((U64(k0) + PHILOX_W0) & MASK32)
        k1 = U32((U64(k1) + PHILOX_W1) & MASK32)
        c0, c1, c2, c3 = philox_round(c0, c1, c2, c3, k0, k1)
    return c0, c1, c2, c3


def site_draws(group: int, stream: int, sweep: int, colour: int, key0: Any, key1: Any) -> Any:
    """The four 32-bit uniforms of sites 4·group … 4·group+3 of one colour in one sweep."""
    g = U64(group)
    return philox4x32_10(
        U32(g & MASK32),
        U32(U64(stream) & MASK32),
        U32((U64(sweep) * TWO + U64(colour)) & MASK32),
        U32(g >> SH32),
        key0,
        key1,
    )


def pick4(r0: Any, r1: Any, r2: Any, r3: Any, q: int) -> Any:
    """Word q of a Philox output (an if-chain: CUDA keeps it in registers)."""
    if q == 0:
        return r0
    if q == 1:
        return r1
    if q == 2:
        return r2
    return r3


def flip_int8(spins: Any, at: int, s: int, nb: int, u: Any, thr: Any, tab: int, dim: int) -> None:
    """Metropolis decision for the spin s = spins[at] whose neighbours sum to nb."""
    n_up = (nb + 2 * dim) >> 1
    row = n_up + (2 * dim + 1) if s > 0 else n_up
    if u < thr[tab, row]:
        spins[at] = -s


def update_group_int8(
    spins: Any, off: int, L: int, dim: int, colour: int, group: int,
    stream: int, sweep: int, key0: Any, key1: Any, thr: Any, tab: int,
) -> None:
    """Metropolis on sites 4·group … 4·group+3 of one colour of an int8 lattice at `off`."""
    half = L // 2
    n_sites = half * L if dim == 2 else half * L * L
    r0, r1, r2, r3 = site_draws(group, stream, sweep, colour, key0, key1)
    for q in range(4):
        k = 4 * group + q
        if k < n_sites:
            u = pick4(r0, r1, r2, r3, q)
            if dim == 2:
                i = k // half
                j = 2 * (k - i * half) + ((i + colour) & 1)
                iu = i - 1 if i > 0 else L - 1
                idn = i + 1 if i < L - 1 else 0
                jl = j - 1 if j > 0 else L - 1
                jr = j + 1 if j < L - 1 else 0
                at = off + i * L + j
                nb = (
                    spins[off + iu * L + j] + spins[off + idn * L + j]
                    + spins[off + i * L + jl] + spins[off + i * L + jr]
                )
            else:
                ij = k // half
                i = ij // L
                j = ij - i * L
                z = 2 * (k - ij * half) + ((i + j + colour) & 1)
                iu = i - 1 if i > 0 else L - 1
                idn = i + 1 if i < L - 1 else 0
                jl = j - 1 if j > 0 else L - 1
                jr = j + 1 if j < L - 1 else 0
                zb = z - 1 if z > 0 else L - 1
                zf = z + 1 if z < L - 1 else 0
                at = off + (i * L + j) * L + z
                nb = (
                    spins[off + (iu * L + j) * L + z] + spins[off + (idn * L + j) * L + z]
                    + spins[off + (i * L + jl) * L + z] + spins[off + (i * L + jr) * L + z]
                    + spins[off + (i * L + j) * L + zb] + spins[off + (i * L + j) * L + zf]
                )
            flip_int8(spins, at, int(spins[at]), int(nb), u, thr, tab, dim)


def measure_group_int8(spins: Any, off: int, L: int, dim: int, group: int) -> Any:
    """(Σ s, Σ_bonds s_i s_j) over colour-0 sites 4·group… and their colour-1 twins.

    Every bond joins a colour-0 and a colour-1 site, so Σ over colour-0 sites of s·(sum of
    its neighbours) counts each bond once; the colour-1 site with the same k adds its spin
    to the magnetisation.
    """
    half = L // 2
    n_sites = half * L if dim == 2 else half * L * L
    mag = 0
    bonds = 0
    for q in range(4):
        k = 4 * group + q
        if k < n_sites:
            if dim == 2:
                i = k // half
                j = 2 * (k - i * half) + (i & 1)
                j1 = 2 * (k - i * half) + ((i + 1) & 1)
                iu = i - 1 if i > 0 else L - 1
                idn = i + 1 if i < L - 1 else 0
                jl = j - 1 if j > 0 else L - 1
                jr = j + 1 if j < L - 1 else 0
                s = int(spins[off + i * L + j])
                nb = (
                    spins[off + iu * L + j] + spins[off + idn * L + j]
                    + spins[off + i * L + jl] + spins[off + i * L + jr]
                )
                mag += s + int(spins[off + i * L + j1])
            else:
                ij = k // half
                i = ij // L
                j = ij - i * L
                z = 2 * (k - ij * half) + ((i + j) & 1)
                z1 = 2 * (k - ij * half) + ((i + j + 1) & 1)
                iu = i - 1 if i > 0 else L - 1
                idn = i + 1 if i < L - 1 else 0
                jl = j - 1 if j > 0 else L - 1
                jr = j + 1 if j < L - 1 else 0
                zb = z - 1 if z > 0 else L - 1
                zf = z + 1 if z < L - 1 else 0
                s = int(spins[off + (i * L + j) * L + z])
                nb = (
                    spins[off + (iu * L + j) * L + z] + spins[off + (idn * L + j) * L + z]
                    + spins[off + (i * L + jl) * L + z] + spins[off + (i * L + jr) * L + z]
                    + spins[off + (i * L + j) * L + zb] + spins[off + (i * L + j) * L + zf]
                )
                mag += s + int(spins[off + (i * L + j) * L + z1])
            bonds += s * int(nb)
    return mag, bonds


def neighbour_nibbles(other: Any, off: int, L: int, colour: int, w: int) -> Any:
    """Nibble-wise count of up neighbours of the 16 spins in word w of colour `colour`.

    `other` holds the opposite colour. Up and down neighbours share the word index; the
    side neighbours are jj itself and jj-1 or jj+1 (which one depends on the row parity
    and colour), so the fourth word is the centre word shifted by one nibble, with the
    missing nibble taken from the word to its left or right (periodic).
    """
    W = L // 32
    i = w // W
    c = w - i * W
    iu = i - 1 if i > 0 else L - 1
    idn = i + 1 if i < L - 1 else 0
    centre = other[off + i * W + c]
    if ((i + colour) & 1) == 1:
        cr = c + 1 if c < W - 1 else 0
        side = (centre >> SH4) | (other[off + i * W + cr] << SH60)
    else:
        cl = c - 1 if c > 0 else W - 1
        side = (centre << SH4) | (other[off + i * W + cl] >> SH60)
    return other[off + iu * W + c] + other[off + idn * W + c] + centre + side


def flip_bit(word: Any, up: Any, sh: Any, u: Any, thr: Any, tab: int) -> Any:
    """The flip bit (at nibble shift sh) of one multi-spin coded spin drawing u."""
    row = ((word >> sh) & ONE) * FIVE + ((up >> sh) & NIBBLE)
    if u < thr[tab, int(row)]:
        return ONE << sh
    return ZERO


def update_word_2d(
    own: Any, other: Any, off: int, L: int, colour: int, w: int,
    stream: int, sweep: int, key0: Any, key1: Any, thr: Any, tab: int,
) -> None:
    """Metropolis on the 16 spins of word w of colour `colour` (multi-spin coded 2D)."""
    W = L // 32
    i = w // W
    c = w - i * W
    up = neighbour_nibbles(other, off, L, colour, w)
    word = own[off + w]
    flips = ZERO
    first_group = i * (L // 8) + 4 * c
    for g in range(4):
        r0, r1, r2, r3 = site_draws(first_group + g, stream, sweep, colour, key0, key1)
        sh = U64(16 * g)
        flips |= (
            flip_bit(word, up, sh, r0, thr, tab)
            | flip_bit(word, up, sh + SH4, r1, thr, tab)
            | flip_bit(word, up, sh + SH8, r2, thr, tab)
            | flip_bit(word, up, sh + SH12, r3, thr, tab)
        )
    own[off + w] = word ^ flips


def measure_word_2d(black: Any, white: Any, off: int, L: int, w: int) -> Any:
    """(Σ s, Σ_bonds s_i s_j) over word w of both colours (bonds via the black spins)."""
    up = neighbour_nibbles(white, off, L, 0, w)
    b = black[off + w]
    wh = white[off + w]
    mag = 0
    bonds = 0
    for n in range(16):
        sh = U64(4 * n)
        sb = 2 * int((b >> sh) & ONE) - 1
        sw = 2 * int((wh >> sh) & ONE) - 1
        nb = 2 * int((up >> sh) & NIBBLE) - 4
        mag += sb + sw
        bonds += sb * nb
    return mag, bonds


FUNCTIONS = (
    philox_round,
    philox4x32_10,
    site_draws,
    pick4,
    flip_int8,
    update_group_int8,
    measure_group_int8,
    neighbour_nibbles,
    flip_bit,
    update_word_2d,
    measure_word_2d,
)
