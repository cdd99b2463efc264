"""Arithmetic of the 31 GP terminals, one symbol advanced by one bar: the shared core.

Plain Python functions over a float64 state row, compiled twice by `gpu.indicators.compute` through
`gpu.twin` (numba.njit for the CPU, CUDA device functions for the GPU). The helpers are
`register_jitable`, so either target inlines them. The core never decides array layout: it
indexes `state[k]` and `out[i]`, and the kernels hand it views (a row of a C array on the
CPU, a strided column `state[:, stock]` on the GPU so that neighbouring threads touch
neighbouring addresses).

Bars are counted t = 0, 1, 2, ... per symbol. Prices are in the instrument's currency,
volume in shares. Output index i is `gpu.indicators.catalogue.TERMINALS[i]`. Warm-up and undefined
values are NaN, never filled in; a boolean is NaN whenever an input it depends on is NaN.
"above"/"below" are strict comparisons, done in float64 before the float32 cast.

Formulas (after Achelis, *Technical Analysis from A to Z*):

- smaN: mean of the last N closes, N in 1, 5, 10, 15, 25, 50, 75, 100, 150, 200; valid from
  bar N-1. Running window sums are Neumaier-compensated (add the new close, subtract the
  one leaving a 200-close ring), so they do not drift over millions of bars.
- emaN, N in 5, 9, 15, 20, 25: alpha = 2/(N+1), ema_t = ema_{t-1} + alpha*(C_t - ema_{t-1}),
  seeded at bar N-1 with the SMA of the first N closes (NaN before).
- close: C. typical: TP = (H + L + C)/3.
- MACD = EMA12(C) - EMA26(C) (both seeded as above, valid from bar 25); signal = EMA9 of
  MACD seeded with the mean of the first 9 MACD values (valid from bar 33).
  macd_above_zero: MACD > 0; macd_below_zero: MACD < 0; macd_above_signal: MACD > signal;
  macd_below_signal: MACD < signal.
- MFI(14): raw money flow TP*V. A bar's flow is positive when TP > previous TP, negative
  when TP < previous TP, neither when equal. pos/neg = sums over the last 14 bars (bars
  t-13..t, so valid from bar 14). MFI = 100 - 100/(1 + pos/neg); when neg == 0 (no falling
  bar in the window, including a flat window) MFI = 100. mfi_above_80: MFI > 80,
  mfi_below_20: MFI < 20. pos, neg (and EOM's EMV sum) are Neumaier running sums over
  rings that are reset to exactly 0 once no non-zero entry is left in the window.
- EOM: 14-bar SMA of EMV, EMV_t = ((H+L)/2 - (Hp+Lp)/2) / ((V/10000)/(H-L)), p = previous
  bar. When H == L or V == 0 the box ratio is undefined and EMV is defined as 0 for that
  bar. Valid from bar 14. eom_above_zero: EOM > 0; eom_below_zero: EOM < 0.
- CCI(20): (TP - SMA20(TP)) / (0.015 * MD), MD = mean |TP_i - SMA20(TP)| over the same 20
  bars; when MD == 0 (flat window) CCI is defined as 0. Valid from bar 19. The mean is
  summed as offsets from the current TP, so a flat window gives MD == 0 exactly.
  cci_above_100: CCI > 100; cci_below_minus_100: CCI < -100.
- NVI/PVI: both 1000 on bar 0. NVI_t = NVI + NVI*(C - Cp)/Cp only on bars with V < Vp
  (else unchanged); PVI likewise only on bars with V > Vp. The paper's "NVI/PVI above
  zero" cannot mean literally zero (both indices are always positive), so each index is
  compared with its own 255-bar EMA (seeded with the mean of its first 255 values, valid
  from bar 254): nvi_above: NVI > EMA255(NVI), nvi_below: NVI < EMA255(NVI), same for PVI.

Bad input policy (the callers reject closes that are not finite and > 0, and non-finite or
negative volumes, before calling): a non-finite high or low makes that bar's TP NaN, so
`typical` is NaN on that bar and MFI, EOM and CCI are NaN for every window containing a bar
whose TP, flow or EMV is undefined (as pandas' rolling windows do), then recover. Open is
not used by any terminal.

Besides the 31 outputs, the core keeps the float64 values behind them in
`state[S_RAW : S_RAW + N_RAW]` (names in RAW_NAMES): a test hook to compare with pandas
before the float32 cast.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from numba.extending import register_jitable

from gpu.indicators.catalogue import EMA_WINDOWS, FLOAT_TERMINALS, N_FLOAT, N_TERMINALS, SMA_WINDOWS

NAN = float("nan")

StateRow = npt.NDArray[np.float64]
OutRow = npt.NDArray[np.float32]

# ---- parameters of the terminal set (TERMINAL_SET_VERSION 1) -----------------------------
N_SMA = len(SMA_WINDOWS)
SMA_RING = max(SMA_WINDOWS)                  # closes kept for the longest SMA
MACD_FAST = 12
MACD_SLOW = 26
MACD_SIGNAL = 9
# Close-based EMAs kept in state: the five terminals, then MACD's fast and slow lines.
CLOSE_EMA_SPANS: tuple[int, ...] = (*EMA_WINDOWS, MACD_FAST, MACD_SLOW)
N_CLOSE_EMA = len(CLOSE_EMA_SPANS)
N_TERMINAL_EMA = len(EMA_WINDOWS)
MACD_FIRST_BAR = MACD_SLOW - 1               # first bar with both EMA12 and EMA26
MFI_N = 14
EOM_N = 14
EMV_VOLUME_SCALE = 10000.0
CCI_N = 20
CCI_CONSTANT = 0.015
VOLUME_INDEX_START = 1000.0
VOLUME_INDEX_EMA = 255

# ---- float64 values behind the outputs (test hook) ----------------------------------------
RAW_NAMES: tuple[str, ...] = (
    *FLOAT_TERMINALS,
    "macd", "macd_signal", "mfi", "eom", "cci", "nvi", "nvi_ema255", "pvi", "pvi_ema255",
)
N_RAW = len(RAW_NAMES)
R_MACD = N_FLOAT
R_SIGNAL = N_FLOAT + 1
R_MFI = N_FLOAT + 2
R_EOM = N_FLOAT + 3
R_CCI = N_FLOAT + 4
R_NVI = N_FLOAT + 5
R_NVI_EMA = N_FLOAT + 6
R_PVI = N_FLOAT + 7
R_PVI_EMA = N_FLOAT + 8
R_EMA = N_SMA                                # raw/output index of ema5 (after the SMAs)
R_CLOSE = FLOAT_TERMINALS.index("close")
R_TYPICAL = FLOAT_TERMINALS.index("typical")

# ---- output indices of the booleans (order of gpu.indicators.catalogue.BOOL_TERMINALS) ---
O_NVI_ABOVE = N_FLOAT
O_NVI_BELOW = N_FLOAT + 1
O_PVI_ABOVE = N_FLOAT + 2
O_PVI_BELOW = N_FLOAT + 3
O_MACD_ABOVE_ZERO = N_FLOAT + 4
O_MACD_BELOW_ZERO = N_FLOAT + 5
O_MACD_ABOVE_SIGNAL = N_FLOAT + 6
O_MACD_BELOW_SIGNAL = N_FLOAT + 7
O_MFI_ABOVE_80 = N_FLOAT + 8
O_MFI_BELOW_20 = N_FLOAT + 9
O_EOM_ABOVE_ZERO = N_FLOAT + 10
O_EOM_BELOW_ZERO = N_FLOAT + 11
O_CCI_ABOVE_100 = N_FLOAT + 12
O_CCI_BELOW_MINUS_100 = N_FLOAT + 13


# ---- state layout (float64 slots) --------------------------------------------------------
def _layout() -> dict[str, int]:
    sizes = (
        ("S_BARS", 1),            # bars already seen
        ("S_PREV_CLOSE", 1),
        ("S_PREV_VOLUME", 1),
        ("S_PREV_HIGH", 1),
        ("S_PREV_LOW", 1),
        ("S_PREV_TP", 1),
        # bar index of the last bar whose TP / flow / EMV was undefined (-1: none yet);
        # a window of n bars ending at t is valid when t - last_bad >= n
        ("S_LAST_BAD_TP", 1),
        ("S_LAST_BAD_FLOW", 1),
        ("S_LAST_BAD_EMV", 1),
        # non-zero entries in a window: when none are left the running sum is reset to an
        # exact 0, so "neg == 0" and "EOM > 0" never see compensation residue
        ("S_POS_NONZERO", 1),
        ("S_NEG_NONZERO", 1),
        ("S_EMV_NONZERO", 1),
        ("S_POS_SUM", 2),         # (sum, compensation) pairs
        ("S_NEG_SUM", 2),
        ("S_EMV_SUM", 2),
        ("S_SMA_SUM", 2 * N_SMA),
        ("S_EMA", N_CLOSE_EMA),   # seed sums while warming up, then the EMA values
        ("S_SIGNAL", 1),
        ("S_NVI", 1),
        ("S_PVI", 1),
        ("S_NVI_EMA", 1),
        ("S_PVI_EMA", 1),
        ("S_CLOSE_RING", SMA_RING),
        ("S_TP_RING", CCI_N),
        ("S_POS_RING", MFI_N),
        ("S_NEG_RING", MFI_N),
        ("S_EMV_RING", EOM_N),
        ("S_RAW", N_RAW),
        ("STATE_LEN", 0),
    )
    offsets: dict[str, int] = {}
    at = 0
    for name, size in sizes:
        offsets[name] = at
        at += size
    return offsets


_L = _layout()
S_BARS = _L["S_BARS"]
S_PREV_CLOSE = _L["S_PREV_CLOSE"]
S_PREV_VOLUME = _L["S_PREV_VOLUME"]
S_PREV_HIGH = _L["S_PREV_HIGH"]
S_PREV_LOW = _L["S_PREV_LOW"]
S_PREV_TP = _L["S_PREV_TP"]
S_LAST_BAD_TP = _L["S_LAST_BAD_TP"]
S_LAST_BAD_FLOW = _L["S_LAST_BAD_FLOW"]
S_LAST_BAD_EMV = _L["S_LAST_BAD_EMV"]
S_POS_NONZERO = _L["S_POS_NONZERO"]
S_NEG_NONZERO = _L["S_NEG_NONZERO"]
S_EMV_NONZERO = _L["S_EMV_NONZERO"]
S_POS_SUM = _L["S_POS_SUM"]
S_NEG_SUM = _L["S_NEG_SUM"]
S_EMV_SUM = _L["S_EMV_SUM"]
S_SMA_SUM = _L["S_SMA_SUM"]
S_EMA = _L["S_EMA"]
S_SIGNAL = _L["S_SIGNAL"]
S_NVI = _L["S_NVI"]
S_PVI = _L["S_PVI"]
S_NVI_EMA = _L["S_NVI_EMA"]
S_PVI_EMA = _L["S_PVI_EMA"]
S_CLOSE_RING = _L["S_CLOSE_RING"]
S_TP_RING = _L["S_TP_RING"]
S_POS_RING = _L["S_POS_RING"]
S_NEG_RING = _L["S_NEG_RING"]
S_EMV_RING = _L["S_EMV_RING"]
S_RAW = _L["S_RAW"]
STATE_LEN = _L["STATE_LEN"]
del _L


# ---- helpers (inlined by either target) ---------------------------------------------------
@register_jitable
def _neumaier_add(state: StateRow, k: int, x: float) -> None:
    """Add x to the compensated sum held in state[k] (sum) and state[k + 1] (compensation)."""
    s = state[k]
    t = s + x
    if abs(s) >= abs(x):
        state[k + 1] += (s - t) + x
    else:
        state[k + 1] += (x - t) + s
    state[k] = t


@register_jitable
def _window_push(
    state: StateRow, ring: int, sum_k: int, nonzero_k: int, slot: int, x: float, full: bool
) -> float:
    """Replace ring[slot] by x in a windowed compensated sum; returns the window's sum.

    `full`: the slot holds a value that is leaving the window (else it is still empty).
    """
    if full:
        leaving = state[ring + slot]
        if leaving != 0.0:
            _neumaier_add(state, sum_k, -leaving)
            state[nonzero_k] -= 1.0
    if x != 0.0:
        _neumaier_add(state, sum_k, x)
        state[nonzero_k] += 1.0
    state[ring + slot] = x
    if state[nonzero_k] == 0.0:
        state[sum_k] = 0.0
        state[sum_k + 1] = 0.0
    return state[sum_k] + state[sum_k + 1]


@register_jitable
def _seeded_ema(state: StateRow, k: int, x: float, m: int, span: int) -> float:
    """EMA with alpha 2/(span+1) of a sequence whose m-th value (0-based) is x.

    Seeded with the mean of the first `span` values; NaN before that (and for m < 0). While
    warming up state[k] holds the running seed sum.
    """
    if m < 0:
        return NAN
    if m < span - 1:
        state[k] += x
        return NAN
    if m == span - 1:
        ema = (state[k] + x) / span
    else:
        ema = state[k]
        ema = ema + (2.0 / (span + 1.0)) * (x - ema)
    state[k] = ema
    return ema


@register_jitable
def _above(x: float, threshold: float) -> float:
    if x != x or threshold != threshold:
        return NAN
    return 1.0 if x > threshold else 0.0


@register_jitable
def _below(x: float, threshold: float) -> float:
    if x != x or threshold != threshold:
        return NAN
    return 1.0 if x < threshold else 0.0


# ---- the core ----------------------------------------------------------------------------
def init_state(state: StateRow) -> None:
    """Reset one symbol's state row (length STATE_LEN, float64) to "no bar seen"."""
    for k in range(STATE_LEN):
        state[k] = 0.0
    state[S_LAST_BAD_TP] = -1.0
    state[S_LAST_BAD_FLOW] = -1.0
    state[S_LAST_BAD_EMV] = -1.0
    state[S_PREV_CLOSE] = NAN
    state[S_PREV_VOLUME] = NAN
    state[S_PREV_HIGH] = NAN
    state[S_PREV_LOW] = NAN
    state[S_PREV_TP] = NAN
    for k in range(N_RAW):
        state[S_RAW + k] = NAN


def update_state(
    state: StateRow, o: float, h: float, l: float, c: float, v: float, out: OutRow
) -> None:
    """Advance one symbol by one bar (O(1) amortised) and write its 31 terminals to out.

    state: float64 row of STATE_LEN; o, h, l, c: prices; v: volume in shares; out: float32
    row of N_TERMINALS. The caller guarantees a finite close > 0 and a finite volume >= 0.
    `o` is accepted for a uniform bar signature; no terminal uses it.
    """
    t = int(state[S_BARS])
    raw = S_RAW

    # -- simple moving averages of close over a shared ring of the last SMA_RING closes
    slot = t % SMA_RING
    for i in range(N_SMA):
        w = SMA_WINDOWS[i]
        k = S_SMA_SUM + 2 * i
        if t >= w:
            _neumaier_add(state, k, -state[S_CLOSE_RING + (t - w) % SMA_RING])
        _neumaier_add(state, k, c)
        if t >= w - 1:
            state[raw + i] = (state[k] + state[k + 1]) / w
        else:
            state[raw + i] = NAN
    state[S_CLOSE_RING + slot] = c  # after the reads: the 200-bar window leaves this slot

    # -- exponential moving averages of close (terminals, then MACD's two lines)
    for i in range(N_CLOSE_EMA):
        ema = _seeded_ema(state, S_EMA + i, c, t, CLOSE_EMA_SPANS[i])
        if i < N_TERMINAL_EMA:
            state[raw + R_EMA + i] = ema
    state[raw + R_CLOSE] = c

    if t >= MACD_FIRST_BAR:
        macd = state[S_EMA + N_TERMINAL_EMA] - state[S_EMA + N_TERMINAL_EMA + 1]
    else:
        macd = NAN
    signal = _seeded_ema(state, S_SIGNAL, macd, t - MACD_FIRST_BAR, MACD_SIGNAL)
    state[raw + R_MACD] = macd
    state[raw + R_SIGNAL] = signal

    # -- typical price; a non-finite high or low leaves it undefined
    tp = (h + l + c) / 3.0
    tp_ok = math.isfinite(h) and math.isfinite(l) and math.isfinite(tp)
    if not tp_ok:
        tp = NAN
        state[S_LAST_BAD_TP] = t
    state[raw + R_TYPICAL] = tp

    # -- CCI over the last CCI_N typical prices
    state[S_TP_RING + t % CCI_N] = tp
    if t - state[S_LAST_BAD_TP] >= CCI_N:
        # summed as offsets from the current TP: a flat window then gives mean == TP and
        # MD == 0 exactly (a plain sum of 20 equal values need not divide back to the value)
        offset = 0.0
        for j in range(CCI_N):
            offset += state[S_TP_RING + j] - tp
        mean = tp + offset / CCI_N
        deviation = 0.0
        for j in range(CCI_N):
            deviation += abs(state[S_TP_RING + j] - mean)
        deviation = deviation / CCI_N
        cci = 0.0 if deviation == 0.0 else (tp - mean) / (CCI_CONSTANT * deviation)
    else:
        cci = NAN
    state[raw + R_CCI] = cci

    # -- MFI: money flow of this bar, classified by the move of TP
    prev_tp = state[S_PREV_TP]
    pos_flow = 0.0
    neg_flow = 0.0
    if t == 0 or not (tp_ok and math.isfinite(prev_tp)):
        state[S_LAST_BAD_FLOW] = t
    elif tp > prev_tp:
        pos_flow = tp * v
    elif tp < prev_tp:
        neg_flow = tp * v
    slot = t % MFI_N
    full = t >= MFI_N
    pos = _window_push(state, S_POS_RING, S_POS_SUM, S_POS_NONZERO, slot, pos_flow, full)
    neg = _window_push(state, S_NEG_RING, S_NEG_SUM, S_NEG_NONZERO, slot, neg_flow, full)
    if t - state[S_LAST_BAD_FLOW] >= MFI_N:
        mfi = 100.0 if neg == 0.0 else 100.0 - 100.0 / (1.0 + pos / neg)
    else:
        mfi = NAN
    state[raw + R_MFI] = mfi

    # -- EOM: 14-bar mean of ease of movement
    prev_h = state[S_PREV_HIGH]
    prev_l = state[S_PREV_LOW]
    emv = 0.0
    if t == 0 or not (
        math.isfinite(h) and math.isfinite(l) and math.isfinite(prev_h) and math.isfinite(prev_l)
    ):
        state[S_LAST_BAD_EMV] = t
    elif h != l and v != 0.0:
        emv = ((h + l) / 2.0 - (prev_h + prev_l) / 2.0) / ((v / EMV_VOLUME_SCALE) / (h - l))
    emv_sum = _window_push(
        state, S_EMV_RING, S_EMV_SUM, S_EMV_NONZERO, t % EOM_N, emv, t >= EOM_N
    )
    eom = emv_sum / EOM_N if t - state[S_LAST_BAD_EMV] >= EOM_N else NAN
    state[raw + R_EOM] = eom

    # -- negative / positive volume indices
    if t == 0:
        nvi = VOLUME_INDEX_START
        pvi = VOLUME_INDEX_START
    else:
        nvi = state[S_NVI]
        pvi = state[S_PVI]
        prev_c = state[S_PREV_CLOSE]
        prev_v = state[S_PREV_VOLUME]
        if v < prev_v:
            nvi = nvi + nvi * (c - prev_c) / prev_c
        elif v > prev_v:
            pvi = pvi + pvi * (c - prev_c) / prev_c
    state[S_NVI] = nvi
    state[S_PVI] = pvi
    nvi_ema = _seeded_ema(state, S_NVI_EMA, nvi, t, VOLUME_INDEX_EMA)
    pvi_ema = _seeded_ema(state, S_PVI_EMA, pvi, t, VOLUME_INDEX_EMA)
    state[raw + R_NVI] = nvi
    state[raw + R_NVI_EMA] = nvi_ema
    state[raw + R_PVI] = pvi
    state[raw + R_PVI_EMA] = pvi_ema

    # -- outputs: floats cast to float32, booleans decided in float64
    for i in range(N_FLOAT):
        out[i] = state[raw + i]
    out[O_NVI_ABOVE] = _above(nvi, nvi_ema)
    out[O_NVI_BELOW] = _below(nvi, nvi_ema)
    out[O_PVI_ABOVE] = _above(pvi, pvi_ema)
    out[O_PVI_BELOW] = _below(pvi, pvi_ema)
    out[O_MACD_ABOVE_ZERO] = _above(macd, 0.0)
    out[O_MACD_BELOW_ZERO] = _below(macd, 0.0)
    out[O_MACD_ABOVE_SIGNAL] = _above(macd, signal)
    out[O_MACD_BELOW_SIGNAL] = _below(macd, signal)
    out[O_MFI_ABOVE_80] = _above(mfi, 80.0)
    out[O_MFI_BELOW_20] = _below(mfi, 20.0)
    out[O_EOM_ABOVE_ZERO] = _above(eom, 0.0)
    out[O_EOM_BELOW_ZERO] = _below(eom, 0.0)
    out[O_CCI_ABOVE_100] = _above(cci, 100.0)
    out[O_CCI_BELOW_MINUS_100] = _below(cci, -100.0)

    state[S_PREV_CLOSE] = c
    state[S_PREV_VOLUME] = v
    state[S_PREV_HIGH] = h
    state[S_PREV_LOW] = l
    state[S_PREV_TP] = tp
    state[S_BARS] = t + 1.0


assert N_TERMINALS == O_CCI_BELOW_MINUS_100 + 1
assert FLOAT_TERMINALS.index("ema5") == R_EMA
