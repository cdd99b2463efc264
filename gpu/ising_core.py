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
Site k draws the 32-bit uniform u = hi·2^16 + lo, where hi is 16-bit half (k&1) of word
(k>>1)&3 of Philox-4x32-10 with counter (k>>3, stream, 2·sweep+colour, k>>35) and key
(seed_lo, seed_hi), and lo the same half of the same word of the *refining* draw, whose
counter has bit 31 of its last word set. One Philox call thus serves 8 sites, and the
refining call is made only where hi alone cannot decide (hi equal to the threshold's top
16 bits, probability 2^-16), so u is a full 32-bit uniform at a quarter of the cost.
Acceptance: flip iff u < thr[σ·(2·dim+1) + n_up], where σ ∈ {0, 1} is the spin (1 = up),
n_up the number of up neighbours and thr = ceil(min(1, exp(-β·ΔE))·2^32) (see
`gpu.ising.acceptance_table`), kept as thr_hi = thr >> 16 and thr_lo = thr & 0xFFFF:
u < thr ⟺ hi < thr_hi or (hi = thr_hi and lo < thr_lo). u < thr is exactly
u·2^-32 < exp(-β·ΔE); the int8 and multi-spin kernels take identical decisions, so their
lattices agree bit for bit.

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
SH31 = np.uint64(31)
LOW16 = np.uint32(0xFFFF)
NIBBLE32 = np.uint32(0xF)
ONE32 = np.uint32(1)
SH60 = np.uint64(60)
ONE = np.uint64(1)
TWO = np.uint64(2)
NIBBLE = np.uint64(0xF)
ZERO = np.uint64(0)
PHILOX_M0 = np.uint64(0xD2511F53)
PHILOX_M1 = np.uint64(0xCD9E8D57)
PHILOX_W0 = np.uint64(0x9E3779B9)
PHILOX_W1 = np.uint64(0xBB67AE85)

WORDS_MAX = 8  # words of a row per CUDA thread (when the row length allows; 16 is slower)

CONSTANTS: dict[str, Any] = {
    "WORDS_MAX": WORDS_MAX,
    "U64": U64,
    "U32": U32,
    "MASK32": MASK32,
    "SH32": SH32,
    "SH4": SH4,
    "SH31": SH31,
    "LOW16": LOW16,
    "NIBBLE32": NIBBLE32,
    "ONE32": ONE32,
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


def site_draws(
    octet: int, stream: int, sweep: int, colour: int, key0: Any, key1: Any, refine: int
) -> Any:
    """The Philox words of sites 8·octet … 8·octet+7 of one colour in one sweep.

    refine = 0: the main draw (the top 16 bits of each site's uniform); refine = 1: the
    refining draw (the low 16 bits), needed only where the top bits tie the threshold.
    """
    o = U64(octet)
    return philox4x32_10(
        U32(o & MASK32),
        U32(U64(stream) & MASK32),
        U32((U64(sweep) * TWO + U64(colour)) & MASK32),
        U32(((o >> SH32) | (U64(refine) << SH31)) & MASK32),
        key0,
        key1,
    )


def half16(r0: Any, r1: Any, r2: Any, r3: Any, m: int) -> Any:
    """16-bit half (m&1) of Philox word (m>>1) (an if-chain: CUDA keeps it in registers)."""
    q = m >> 1
    if q == 0:
        r = r0
    elif q == 1:
        r = r1
    elif q == 2:
        r = r2
    else:
        r = r3
    return (U32(r) >> U32(16 * (m & 1))) & LOW16


def accepts(
    hi: Any, row: int, octet: int, m: int, stream: int, sweep: int, colour: int,
    key0: Any, key1: Any, thr_hi: Any, thr_lo: Any, tab: int,
) -> bool:
    """u < thr for site 8·octet+m whose main draw gave the top 16 bits `hi`."""
    t = thr_hi[tab, row]
    if hi != t:
        return hi < t
    f0, f1, f2, f3 = site_draws(octet, stream, sweep, colour, key0, key1, 1)
    return half16(f0, f1, f2, f3, m) < thr_lo[tab, row]


def int8_row(s: int, nb: int, dim: int) -> int:
    """Acceptance-table row of spin s whose neighbours sum to nb: σ·(2·dim+1) + n_up."""
    n_up = (nb + 2 * dim) >> 1
    return n_up + (2 * dim + 1) if s > 0 else n_up


def site_coords(L: int, dim: int, colour: int, k: int) -> tuple[int, int, int]:
    """(i, j, z) of site k of colour `colour` (z = 0 in 2D; see the module docstring)."""
    half = L // 2
    if dim == 2:
        i = k // half
        return i, 2 * (k - i * half) + ((i + colour) & 1), 0
    ij = k // half
    i = ij // L
    j = ij - i * L
    return i, j, 2 * (k - ij * half) + ((i + j + colour) & 1)


def site_at(off: int, L: int, dim: int, i: int, j: int, z: int) -> int:
    """Index in the int8 lattice array of site (i, j[, z]) of the lattice at `off`."""
    return off + i * L + j if dim == 2 else off + (i * L + j) * L + z


def neighbour_sum(spins: Any, off: int, L: int, dim: int, i: int, j: int, z: int) -> Any:
    """Σ of the 2·dim nearest neighbours' spins of site (i, j[, z]) (periodic)."""
    iu = i - 1 if i > 0 else L - 1
    idn = i + 1 if i < L - 1 else 0
    jl = j - 1 if j > 0 else L - 1
    jr = j + 1 if j < L - 1 else 0
    if dim == 2:
        return (
            spins[off + iu * L + j] + spins[off + idn * L + j]
            + spins[off + i * L + jl] + spins[off + i * L + jr]
        )
    zb = z - 1 if z > 0 else L - 1
    zf = z + 1 if z < L - 1 else 0
    return (
        spins[off + (iu * L + j) * L + z] + spins[off + (idn * L + j) * L + z]
        + spins[off + (i * L + jl) * L + z] + spins[off + (i * L + jr) * L + z]
        + spins[off + (i * L + j) * L + zb] + spins[off + (i * L + j) * L + zf]
    )


def update_octet_int8(
    spins: Any, off: int, L: int, dim: int, colour: int, octet: int,
    stream: int, sweep: int, key0: Any, key1: Any, thr_hi: Any, thr_lo: Any, tab: int,
) -> None:
    """Metropolis on sites 8·octet … 8·octet+7 of one colour of an int8 lattice at `off`."""
    half = L // 2
    n_sites = half * L if dim == 2 else half * L * L
    r0, r1, r2, r3 = site_draws(octet, stream, sweep, colour, key0, key1, 0)
    for m in range(8):
        k = 8 * octet + m
        if k < n_sites:
            i, j, z = site_coords(L, dim, colour, k)
            at = site_at(off, L, dim, i, j, z)
            nb = neighbour_sum(spins, off, L, dim, i, j, z)
            s = int(spins[at])
            row = int8_row(s, int(nb), dim)
            if accepts(
                half16(r0, r1, r2, r3, m), row, octet, m, stream, sweep, colour,
                key0, key1, thr_hi, thr_lo, tab,
            ):
                spins[at] = -s


def measure_octet_int8(spins: Any, off: int, L: int, dim: int, octet: int) -> Any:
    """(Σ s, Σ_bonds s_i s_j) over colour-0 sites 8·octet… and their colour-1 twins.

    Every bond joins a colour-0 and a colour-1 site, so Σ over colour-0 sites of s·(sum of
    its neighbours) counts each bond once; the colour-1 site with the same k adds its spin
    to the magnetisation.
    """
    half = L // 2
    n_sites = half * L if dim == 2 else half * L * L
    mag = 0
    bonds = 0
    for m in range(8):
        k = 8 * octet + m
        if k < n_sites:
            i, j, z = site_coords(L, dim, 0, k)
            s = int(spins[site_at(off, L, dim, i, j, z)])
            nb = neighbour_sum(spins, off, L, dim, i, j, z)
            i1, j1, z1 = site_coords(L, dim, 1, k)
            mag += s + int(spins[site_at(off, L, dim, i1, j1, z1)])
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


def octet_decisions(
    rows: Any, r0: Any, r1: Any, r2: Any, r3: Any, thr_hi: Any, tab: int
) -> Any:
    """(flip bits, tie bits) of the 8 spins of one 32-bit half word (one octet of sites).

    `rows` holds each nibble's acceptance row σ·5 + n_up (≤ 9, so word-parallel arithmetic
    builds it without carries); r0..r3 are the octet's main Philox words. A tie (top 16
    bits equal to the threshold's) is settled later by the refining draw. All in 32 bits:
    the half word and the octet's draw line up, and 32-bit shifts are single instructions.
    """
    flips = U32(0)
    ties = U32(0)
    for n in range(8):
        sh = U32(4 * n)
        t = thr_hi[tab, int((rows >> sh) & NIBBLE32)]
        hi = half16(r0, r1, r2, r3, n)
        if hi < t:
            flips = U32(flips | (ONE32 << sh))
        elif hi == t:
            ties = U32(ties | (ONE32 << sh))
    return flips, ties


def words_per_thread(L: int) -> int:
    """How many consecutive words of a row one thread updates: the most of WORDS_MAX, …,
    2, 1 that divides the row (L/32 words), so the row set-up is shared and no thread
    straddles rows."""
    W = L // 32
    n = WORDS_MAX
    while W % n:
        n //= 2
    return n


def update_words_2d(
    own: Any, other: Any, off: int, L: int, colour: int, w0: int, count: int,
    stream: int, sweep: int, key0: Any, key1: Any, thr_hi: Any, thr_lo: Any, tab: int,
) -> None:
    """Metropolis on words w0 … w0+count-1 (one row) of colour `colour`, 16 spins each.

    Per word, two main Philox calls serve its two octets of sites; the rare ties go
    through the refining draw afterwards, outside the hot path. The side neighbours are
    jj and jj±1 (see `neighbour_nibbles`), so the fourth neighbour word is the centre word
    shifted by one nibble, with the missing nibble from the next word along the row.
    """
    W = L // 32
    i = int(U64(w0) // U64(W))  # unsigned: no floor-division fix-ups on the GPU
    c0 = w0 - i * W
    iu = i - 1 if i > 0 else L - 1
    idn = i + 1 if i < L - 1 else 0
    row = off + i * W
    row_up = off + iu * W
    row_down = off + idn * W
    to_right = ((i + colour) & 1) == 1
    octet_row = i * (L // 16)
    for k in range(count):
        c = c0 + k
        centre = other[row + c]
        if to_right:
            cr = c + 1 if c < W - 1 else 0
            side = (centre >> SH4) | (other[row + cr] << SH60)
        else:
            cl = c - 1 if c > 0 else W - 1
            side = (centre << SH4) | (other[row + cl] >> SH60)
        up = other[row_up + c] + other[row_down + c] + centre + side
        word = own[row + c]
        rows = word + (word << TWO) + up  # σ·5 + n_up in every nibble
        first_octet = octet_row + 2 * c
        r0, r1, r2, r3 = site_draws(first_octet, stream, sweep, colour, key0, key1, 0)
        f_lo, t_lo = octet_decisions(U32(rows & MASK32), r0, r1, r2, r3, thr_hi, tab)
        r0, r1, r2, r3 = site_draws(first_octet + 1, stream, sweep, colour, key0, key1, 0)
        f_hi, t_hi = octet_decisions(U32(rows >> SH32), r0, r1, r2, r3, thr_hi, tab)
        flips = U64(f_lo) | (U64(f_hi) << SH32)
        ties = U64(t_lo) | (U64(t_hi) << SH32)
        if ties != ZERO:
            for n in range(16):
                sh = U64(4 * n)
                if (ties >> sh) & ONE:
                    octet = first_octet + (n >> 3)
                    f0, f1, f2, f3 = site_draws(octet, stream, sweep, colour, key0, key1, 1)
                    if half16(f0, f1, f2, f3, n & 7) < thr_lo[tab, int((rows >> sh) & NIBBLE)]:
                        flips |= ONE << sh
        own[row + c] = word ^ flips


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
    half16,
    accepts,
    int8_row,
    site_coords,
    site_at,
    neighbour_sum,
    update_octet_int8,
    measure_octet_int8,
    neighbour_nibbles,
    octet_decisions,
    words_per_thread,
    update_words_2d,
    measure_word_2d,
)
