"""Ising Metropolis core: Philox-4x32-10 draws per site and the checkerboard site updates.

Plain Python functions, compiled twice by `gpu.twin.compile_twin` (CPU njit and CUDA
device functions) in `gpu.ising.lattice`; they also run as plain Python (slowly), which the tests
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
`gpu.ising.lattice.acceptance_table`), kept as thr_hi = thr >> 16 and thr_lo = thr & 0xFFFF:
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

# bit-plane kernels (one bit per spin, see the "Bit-plane kernels" section below)
ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
SH63 = np.uint64(63)
SH63S = np.int64(63)
I64 = np.int64
SH24 = np.uint64(24)
LOW24 = np.uint32(0xFFFFFF)
POP1 = np.uint64(0x5555555555555555)
POP2 = np.uint64(0x3333333333333333)
POP4 = np.uint64(0x0F0F0F0F0F0F0F0F)
SH8 = np.uint64(8)
SH16 = np.uint64(16)
LOW7 = np.uint64(0x7F)
PLANES = 8  # top bits of each uniform held as bit planes (the rest drawn only on a tie)
SPINS_PER_WORD = 64

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
    "ALL": ALL,
    "SH63": SH63,
    "SH63S": SH63S,
    "I64": I64,
    "SH24": SH24,
    "LOW24": LOW24,
    "POP1": POP1,
    "POP2": POP2,
    "POP4": POP4,
    "SH8": SH8,
    "SH16": SH16,
    "LOW7": LOW7,
    "PLANES": PLANES,
    "SPINS_PER_WORD": SPINS_PER_WORD,
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



# ---- Bit-plane kernels ---------------------------------------------------------------------
# One bit per spin (1 = up), 64 sites of one colour per uint64 word: bit n of word w holds
# colour-site k = 64·w + n (the site index of the module docstring), in 2D and 3D alike, so
# a row (2D) or z-line (3D) of one colour is L/128 words (L a multiple of 128).
#
# Random numbers (the bit-plane scheme; the int8 reference `update_octet_bp_int8` draws the
# same numbers site by site): site k = 64·w + n draws the 32-bit uniform
#     u = top8 · 2^24 + low24,
# bit 7-b of top8 (b = 0 … 7) being bit n of plane b of word w, where planes 2q and 2q+1
# are the Philox-4x32-10 words (r0 | r1·2^32) and (r2 | r3·2^32) of counter
# (w, stream, 2·sweep + colour, w>>32 | q<<24) for q = 0 … 3, and low24 the low 24 bits
# of word r0 of counter (w, stream, 2·sweep + colour, w>>32 | n<<24 | 2^31). So 4 Philox
# calls serve a word's 64 spins (16 spins a call, 8 random bits a spin), and the refining
# call is made for one site only when its top 8 bits equal its threshold's (probability
# 2^-8 per site whose acceptance is below 1): u is still a full 32-bit uniform and the
# decision is exactly u < thr as in the other kernels, so there is no quantisation bias
# (acceptance ceil(p·2^32)/2^32, within 2^-32 of p, as before).
#
# Why bit planes: the comparison u < t of all 64 spins against one threshold t is a
# lexicographic compare, plane by plane from the top, in two or three logic operations per
# plane for the whole word; the neighbour counts are bit-sliced adders (a few operations
# per neighbour for 64 spins). Per spin the arithmetic is a few operations and 8 random
# bits plus ~1/256 of a Philox call, against 16 bits and a table lookup per spin in the
# nibble kernel; the lattice is 1 bit per spin, so a sweep moves an eighth of the bytes
# of an int8 lattice and a quarter of the nibble kernel's.


def popcount64(x: Any) -> Any:
    """Number of set bits of a uint64 (SWAR, no multiply: no overflow anywhere)."""
    x = x - ((x >> ONE) & POP1)
    x = (x & POP2) + ((x >> TWO) & POP2)
    x = (x + (x >> SH4)) & POP4
    x = x + (x >> SH8)
    x = x + (x >> SH16)
    x = x + (x >> SH32)
    return x & LOW7


def plane_draws(w: int, q: int, stream: int, sweep: int, colour: int, key0: Any, key1: Any) -> Any:
    """Planes 2q and 2q+1 of word w: the Philox words (r0, r1, r2, r3) of their counter."""
    wo = U64(w)
    return philox4x32_10(
        U32(wo & MASK32),
        U32(U64(stream) & MASK32),
        U32((U64(sweep) * TWO + U64(colour)) & MASK32),
        U32(((wo >> SH32) | (U64(q) << SH24)) & MASK32),
        key0,
        key1,
    )


def refine_draw(w: int, n: int, stream: int, sweep: int, colour: int, key0: Any, key1: Any) -> Any:
    """The low 24 bits of the uniform of site 64·w + n (its own refining Philox call)."""
    wo = U64(w)
    r0, r1, r2, r3 = philox4x32_10(
        U32(wo & MASK32),
        U32(U64(stream) & MASK32),
        U32((U64(sweep) * TWO + U64(colour)) & MASK32),
        U32(((wo >> SH32) | (U64(n) << SH24) | (ONE << SH31)) & MASK32),
        key0,
        key1,
    )
    return r0 & LOW24


def bp_uniform(k: int, stream: int, sweep: int, colour: int, key0: Any, key1: Any) -> Any:
    """The full 32-bit uniform of colour-site k, assembled site by site (the reference)."""
    w = k >> 6
    n = U64(k & 63)
    top = ZERO
    for q in range(4):
        r0, r1, r2, r3 = plane_draws(w, q, stream, sweep, colour, key0, key1)
        pa = U64(r0) | (U64(r1) << SH32)
        pb = U64(r2) | (U64(r3) << SH32)
        top = (top << TWO) | (((pa >> n) & ONE) << ONE) | ((pb >> n) & ONE)
    return (top << SH24) | U64(refine_draw(w, int(n), stream, sweep, colour, key0, key1))


def update_octet_bp_int8(
    spins: Any, off: int, L: int, dim: int, colour: int, octet: int,
    stream: int, sweep: int, key0: Any, key1: Any, thr_hi: Any, thr_lo: Any, tab: int,
) -> None:
    """Reference Metropolis on sites 8·octet … 8·octet+7 of an int8 lattice with the
    bit-plane random numbers, site by site without bit slicing: a site's top 8 bits are
    gathered from the planes of its word (the octet lies in one word), compared with
    thr >> 24 as integers, and on equality its refining draw is compared with the rest,
    i.e. exactly u < thr = thr_hi·2^24 + thr_lo.
    """
    half = L // 2
    n_sites = half * L if dim == 2 else half * L * L
    w = octet >> 3
    a0, a1, a2, a3 = plane_draws(w, 0, stream, sweep, colour, key0, key1)
    b0, b1, b2, b3 = plane_draws(w, 1, stream, sweep, colour, key0, key1)
    c0, c1, c2, c3 = plane_draws(w, 2, stream, sweep, colour, key0, key1)
    d0, d1, d2, d3 = plane_draws(w, 3, stream, sweep, colour, key0, key1)
    for m in range(8):
        k = 8 * octet + m
        if k < n_sites:
            i, j, z = site_coords(L, dim, colour, k)
            at = site_at(off, L, dim, i, j, z)
            nb = neighbour_sum(spins, off, L, dim, i, j, z)
            s = int(spins[at])
            row = int8_row(s, int(nb), dim)
            n = k & 63
            # bit n of plane 2q is bit n of (r0 | r1·2^32): word r0 for n < 32, else r1
            sh = U32(n & 31)
            hi = n >> 5
            top = (
                (((a1 if hi else a0) >> sh) & ONE32) << U32(7)
                | (((a3 if hi else a2) >> sh) & ONE32) << U32(6)
                | (((b1 if hi else b0) >> sh) & ONE32) << U32(5)
                | (((b3 if hi else b2) >> sh) & ONE32) << U32(4)
                | (((c1 if hi else c0) >> sh) & ONE32) << U32(3)
                | (((c3 if hi else c2) >> sh) & ONE32) << U32(2)
                | (((d1 if hi else d0) >> sh) & ONE32) << ONE32
                | (((d3 if hi else d2) >> sh) & ONE32)
            )
            t8 = U32(thr_hi[tab, row])
            if top < t8 or (
                top == t8
                and refine_draw(w, n, stream, sweep, colour, key0, key1) < thr_lo[tab, row]
            ):
                spins[at] = -s


def count_add(c0: Any, c1: Any, c2: Any, a: Any) -> Any:
    """Bit-sliced counter (c0, c1, c2) += a for 64 spins at once (counts stay ≤ 7)."""
    t = c0 & a
    c0 = c0 ^ a
    t2 = c1 & t
    c1 = c1 ^ t
    return c0, c1, c2 | t2


def spread_bit(x: int, bit: int) -> Any:
    """Bit `bit` of x copied to all 64 bits (0 or all ones), without a branch."""
    return U64((I64(x) << I64(63 - bit)) >> SH63S)


def count_is(c0: Any, c1: Any, c2: Any, n: int) -> Any:
    """Mask of the spins whose bit-sliced count equals n (n the same for all threads):
    every count bit equal to n's, as XORs against n's bits spread over the word."""
    return ~((c0 ^ spread_bit(n, 0)) | (c1 ^ spread_bit(n, 1)) | (c2 ^ spread_bit(n, 2)))


def count_lt(c0: Any, c1: Any, c2: Any, t: int) -> Any:
    """Mask of the spins whose bit-sliced count (0 … 7) is below t (the same for all)."""
    if t >= 8:
        return ALL
    if t <= 0:
        return ZERO
    lt = ~c0 & spread_bit(t, 0)
    n1 = ~c1
    tb = spread_bit(t, 1)
    lt = (tb & n1) | (tb & lt) | (n1 & lt)
    n2 = ~c2
    tb = spread_bit(t, 2)
    return (tb & n2) | (tb & lt) | (n2 & lt)


def cmp_plane(lt: Any, eq: Any, p: Any, t8: int, bit: int) -> Any:
    """One plane of the compare u < t for 64 spins, planes taken from the least significant.

    lt is the borrow of u − t over the bits so far ([u < t] on them), eq their equality;
    tb, bit `bit` of t8 spread over a word, is the same for all spins. Each update is one
    three-input logic function (one LOP3 per 32-bit half on the GPU), with no branch.
    """
    tb = spread_bit(t8, bit)
    np_ = ~p
    # borrow' = majority(tb, ~p, borrow): t = 1 gives ~p | borrow, t = 0 gives ~p & borrow
    return (tb & np_) | (tb & lt) | (np_ & lt), eq & ~(p ^ tb)


def class_decisions(
    m: Any, t8: int, p0: Any, p1: Any, p2: Any, p3: Any, p4: Any, p5: Any, p6: Any, p7: Any
) -> Any:
    """(accepted, tied) spins among mask m whose uniforms' top 8 bits are compared to t8.

    t8 = 256 means acceptance 1 (every spin of m flips); tied spins (top bits equal) are
    settled by their refining draws.
    """
    if m == ZERO:
        return ZERO, ZERO
    if t8 >= 256:
        return m, ZERO
    lt = ZERO
    eq = ALL
    lt, eq = cmp_plane(lt, eq, p7, t8, 0)
    lt, eq = cmp_plane(lt, eq, p6, t8, 1)
    lt, eq = cmp_plane(lt, eq, p5, t8, 2)
    lt, eq = cmp_plane(lt, eq, p4, t8, 3)
    lt, eq = cmp_plane(lt, eq, p3, t8, 4)
    lt, eq = cmp_plane(lt, eq, p2, t8, 5)
    lt, eq = cmp_plane(lt, eq, p1, t8, 6)
    lt, eq = cmp_plane(lt, eq, p0, t8, 7)
    return m & lt, m & eq


def decide_word(
    s: Any, c0: Any, c1: Any, c2: Any, dim: int, w: int, stream: int, sweep: int,
    colour: int, key0: Any, key1: Any, thr_hi: Any, thr_lo: Any, tab: int,
) -> Any:
    """The new word of 64 spins s whose up-neighbour counts are (c0, c1, c2): the decisions
    of `decide_main`, then the ties settled one by one by their refining draws (rare:
    2^-8 a spin whose acceptance is below 1)."""
    z = 2 * dim
    flips, ties = decide_main(
        s, c0, c1, c2, dim, w, stream, sweep, colour, key0, key1, thr_hi, thr_lo, tab
    )
    while ties != ZERO:
        low = ties & (~ties + ONE)
        n = int(popcount64(low - ONE))
        sn = U64(n)
        n_up = int(((c0 >> sn) & ONE) | (((c1 >> sn) & ONE) << ONE) | (((c2 >> sn) & ONE) << TWO))
        row = int((s >> sn) & ONE) * (z + 1) + n_up
        if refine_draw(w, n, stream, sweep, colour, key0, key1) < thr_lo[tab, row]:
            flips |= low
        ties ^= low
    return s ^ flips


def decide_main(
    s: Any, c0: Any, c1: Any, c2: Any, dim: int, w: int, stream: int, sweep: int,
    colour: int, key0: Any, key1: Any, thr_hi: Any, thr_lo: Any, tab: int,
) -> Any:
    """(flips, ties) of 64 spins s whose up-neighbour counts are (c0, c1, c2), bit-sliced:
    flips are decided on the top 8 bits of the uniforms, ties still need their refining
    draws.

    thr_hi[tab, row] = thr >> 24 (256 for acceptance 1), thr_lo = thr & 0xFFFFFF, rows
    σ·(2·dim+1) + n_up as in the other kernels, followed by three bounds (see
    `gpu.ising.lattice.bitplane_table`): thr_hi[tab, W] = a1 + 1 and thr_hi[tab, W+1] = a0, the
    classes of acceptance 1 being (σ = 1, n_up ≤ a1) and (σ = 0, n_up ≥ a0) (ΔE is
    monotone in n_up), and thr_lo[tab, W] = the first n whose pair below needs a compare
    (W = 2·(2·dim+1)). Those classes flip through one bit-sliced range test; the others
    go pair by pair: (σ = 1, n_up = n) with (σ = 0, n_up = 2·dim − n), which share a
    threshold when the field is zero and are then compared once together. In 2D at h = 0
    that is one compare for ΔE = 4 and one for ΔE = 8.
    """
    z = 2 * dim
    r0, r1, r2, r3 = plane_draws(w, 0, stream, sweep, colour, key0, key1)
    p0 = U64(r0) | (U64(r1) << SH32)
    p1 = U64(r2) | (U64(r3) << SH32)
    r0, r1, r2, r3 = plane_draws(w, 1, stream, sweep, colour, key0, key1)
    p2 = U64(r0) | (U64(r1) << SH32)
    p3 = U64(r2) | (U64(r3) << SH32)
    r0, r1, r2, r3 = plane_draws(w, 2, stream, sweep, colour, key0, key1)
    p4 = U64(r0) | (U64(r1) << SH32)
    p5 = U64(r2) | (U64(r3) << SH32)
    r0, r1, r2, r3 = plane_draws(w, 3, stream, sweep, colour, key0, key1)
    p6 = U64(r0) | (U64(r1) << SH32)
    p7 = U64(r2) | (U64(r3) << SH32)
    ns = ~s
    W = 2 * (z + 1)
    flips = (s & count_lt(c0, c1, c2, int(thr_hi[tab, W]))) | (
        ns & ~count_lt(c0, c1, c2, int(thr_hi[tab, W + 1]))
    )
    ties = ZERO
    for n in range(int(thr_lo[tab, W]), z + 1):
        up_row = z + 1 + n
        down_row = z - n
        m1 = s & count_is(c0, c1, c2, n)
        m0 = ns & count_is(c0, c1, c2, z - n)
        t1 = int(thr_hi[tab, up_row])
        t0 = int(thr_hi[tab, down_row])
        if t1 == t0 and thr_lo[tab, up_row] == thr_lo[tab, down_row]:
            f, t = class_decisions(m1 | m0, t1, p0, p1, p2, p3, p4, p5, p6, p7)
            flips |= f
            ties |= t
        else:
            f, t = class_decisions(m1, t1, p0, p1, p2, p3, p4, p5, p6, p7)
            flips |= f
            ties |= t
            f, t = class_decisions(m0, t0, p0, p1, p2, p3, p4, p5, p6, p7)
            flips |= f
            ties |= t
    return flips, ties


def bp_neighbours(other: Any, off: int, L: int, dim: int, colour: int, w: int) -> Any:
    """The 2·dim neighbour words (opposite colour, lattice at `off`) of word w of `colour`.

    Returns six words; in 2D the last two are zero (never counted). Lines (2D rows, 3D
    z-lines) are L/128 words; the neighbours across lines share the word index, the two
    along the line are the centre word itself and it shifted by one bit (towards jj+1 or
    jj−1 by the line's parity), its missing bit from the next or previous word.
    """
    # unsigned 32-bit index arithmetic (word counts stay below 2^32, checked by the
    # ensemble): one short division, and no negative-index fix-ups on the loads
    WL = U32(L >> 7)
    uL = U32(L)
    line = U32(w) // WL
    c = U32(w) - line * WL
    o = U64(off)
    if dim == 2:
        i = line
        par = i + U32(colour)
        lu = i - ONE32 if i > U32(0) else uL - ONE32
        ld = i + ONE32 if i < uL - ONE32 else U32(0)
        a = other[o + U64(lu * WL + c)]
        b = other[o + U64(ld * WL + c)]
        e = ZERO
        f = ZERO
    else:
        i = line // uL
        j = line - i * uL
        par = i + j + U32(colour)
        iu = i - ONE32 if i > U32(0) else uL - ONE32
        idn = i + ONE32 if i < uL - ONE32 else U32(0)
        jl = j - ONE32 if j > U32(0) else uL - ONE32
        jr = j + ONE32 if j < uL - ONE32 else U32(0)
        a = other[o + U64((iu * uL + j) * WL + c)]
        b = other[o + U64((idn * uL + j) * WL + c)]
        e = other[o + U64((i * uL + jl) * WL + c)]
        f = other[o + U64((i * uL + jr) * WL + c)]
    base = o + U64(line * WL)
    centre = other[base + U64(c)]
    if (par & ONE32) == ONE32:
        cr = c + ONE32 if c < WL - ONE32 else U32(0)
        side = (centre >> ONE) | (other[base + U64(cr)] << SH63)
    else:
        cl = c - ONE32 if c > U32(0) else WL - ONE32
        side = (centre << ONE) | (other[base + U64(cl)] >> SH63)
    return a, b, centre, side, e, f


def bp_counts(other: Any, off: int, L: int, dim: int, colour: int, w: int) -> Any:
    """Bit-sliced up-neighbour counts (c0, c1, c2) of the 64 spins of word w."""
    a, b, centre, side, e, f = bp_neighbours(other, off, L, dim, colour, w)
    c0 = a
    c1 = ZERO
    c2 = ZERO
    c0, c1, c2 = count_add(c0, c1, c2, b)
    c0, c1, c2 = count_add(c0, c1, c2, centre)
    c0, c1, c2 = count_add(c0, c1, c2, side)
    if dim == 3:
        c0, c1, c2 = count_add(c0, c1, c2, e)
        c0, c1, c2 = count_add(c0, c1, c2, f)
    return c0, c1, c2


def update_word_bp_main(
    own: Any, other: Any, off: int, L: int, dim: int, colour: int, w: int,
    stream: int, sweep: int, key0: Any, key1: Any, thr_hi: Any, thr_lo: Any, tab: int,
) -> Any:
    """Word w's decided flips written; returns its ties (spins still to settle, unchanged
    in the word, by `resolve_tie`)."""
    c0, c1, c2 = bp_counts(other, off, L, dim, colour, w)
    at = U64(off) + U64(w)
    s = own[at]
    flips, ties = decide_main(
        s, c0, c1, c2, dim, w, stream, sweep, colour, key0, key1, thr_hi, thr_lo, tab
    )
    own[at] = s ^ flips
    return ties


def resolve_tie(
    own: Any, other: Any, off: int, L: int, dim: int, colour: int, w: int, low: Any,
    stream: int, sweep: int, key0: Any, key1: Any, thr_lo: Any, tab: int,
) -> None:
    """Settle the tied spin `low` (a one-bit mask) of word w by its refining draw. Its bit
    is unchanged by `update_word_bp_main` and the other colour is fixed during the
    half-sweep, so its class is recomputed from memory: a thread may defer its ties (the
    GPU kernel settles those of all its words in one loop, so a warp waits for the most
    ties of one thread over all its words, not over each word)."""
    z = 2 * dim
    a, b, centre, side, e, f = bp_neighbours(other, off, L, dim, colour, w)
    at = U64(off) + U64(w)
    s = own[at]
    n = int(popcount64(low - ONE))
    sn = U64(n)
    # one spin's count: its bit of each neighbour word (e, f are zero in 2D)
    n_up = int(
        ((a >> sn) & ONE) + ((b >> sn) & ONE) + ((centre >> sn) & ONE) + ((side >> sn) & ONE)
        + ((e >> sn) & ONE) + ((f >> sn) & ONE)
    )
    row = int((s >> sn) & ONE) * (z + 1) + n_up
    if refine_draw(w, n, stream, sweep, colour, key0, key1) < thr_lo[tab, row]:
        own[at] = s ^ low


def update_word_bp(
    own: Any, other: Any, off: int, L: int, dim: int, colour: int, w: int,
    stream: int, sweep: int, key0: Any, key1: Any, thr_hi: Any, thr_lo: Any, tab: int,
) -> None:
    """Metropolis on the 64 spins of word w of colour `colour` (bit-plane kernel)."""
    ties = update_word_bp_main(
        own, other, off, L, dim, colour, w, stream, sweep, key0, key1, thr_hi, thr_lo, tab
    )
    while ties != ZERO:
        low = ties & (~ties + ONE)
        resolve_tie(own, other, off, L, dim, colour, w, low, stream, sweep, key0, key1,
                    thr_lo, tab)
        ties ^= low


def measure_word_bp(black: Any, white: Any, off: int, L: int, dim: int, w: int) -> Any:
    """(Σ s, Σ_bonds s_i s_j) over word w of both colours (bonds via the black spins: each
    bond joins one black and one white site)."""
    a, b, centre, side, e, f = bp_neighbours(white, off, L, dim, 0, w)
    s = black[off + w]
    agree = (
        popcount64(~(s ^ a)) + popcount64(~(s ^ b)) + popcount64(~(s ^ centre))
        + popcount64(~(s ^ side))
    )
    n_bonds = 4
    if dim == 3:
        agree += popcount64(~(s ^ e)) + popcount64(~(s ^ f))
        n_bonds = 6
    mag = 2 * int(popcount64(s)) + 2 * int(popcount64(white[off + w])) - 128
    return mag, 2 * int(agree) - 64 * n_bonds


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
    popcount64,
    plane_draws,
    refine_draw,
    bp_uniform,
    update_octet_bp_int8,
    count_add,
    spread_bit,
    count_is,
    count_lt,
    cmp_plane,
    class_decisions,
    decide_word,
    decide_main,
    bp_counts,
    update_word_bp_main,
    resolve_tie,
    bp_neighbours,
    update_word_bp,
    measure_word_bp,
)
