"""Implied volatilities of a whole chain: batched, safeguarded Newton/secant with bisection.

Each iteration is ONE batched repricing (`gpu.options.engines.price_params`, one CUDA launch or all
CPU cores) of every option not yet converged, by the same Crank–Nicolson model that prices
them (so American options get American implied vols). Per option a bracket [lo, hi] of σ
is kept: a model price above the target lowers hi, below it raises lo. The next σ is a
secant step through the last two evaluations (the first step uses the analytic European
vega), and a step that leaves the bracket is replaced by bisection, so every option
converges however poor the slope. The start is the analytic European implied vol.

Quotes that cannot give an implied vol are reported with a reason, never raised on:
missing or zero bid, missing ask, crossed market, expired option, a price outside the
no-arbitrage bounds, a price that needs σ outside [vol_min, vol_max], or an American price
at its exercise value (deep in the money, immediate exercise is optimal for every σ up to
some bound, so no single σ gives that price; with a dividend yield this includes calls).

`implied_vols` works on the engine's parameter rows; `solve_implied_vols` takes contracts,
market inputs and an `FdPricingEngine`.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
from numba import njit, prange

from gpu.device import resolve_device
from gpu.options import core
from gpu.options.engines import (
    FdGrid,
    FdPricingEngine,
    check_params,
    contract_rows,
    make_grid,
    price_params,
)
from gpu.options.instruments import MarketInputs, OptionContracts
from gpu.threads import chunk_lo, parallel_range

FloatArray = npt.NDArray[np.float64]


class IVStatus(IntEnum):
    """Outcome per quote; the names are the reasons reported to the user."""

    OK = 0
    PENDING = 1
    MISSING_BID = 2
    MISSING_ASK = 3
    ZERO_BID = 4
    CROSSED = 5
    EXPIRED = 6
    BELOW_LOWER_BOUND = 7
    ABOVE_UPPER_BOUND = 8
    VOL_BELOW_MIN = 9
    VOL_ABOVE_MAX = 10
    NOT_CONVERGED = 11
    NO_PRICE = 12
    AT_EXERCISE_VALUE = 13

    @property
    def reason(self) -> str:
        return self.name.lower()


class IVResult(NamedTuple):
    """iv: implied vol per year (NaN unless status is OK); status: IVStatus codes (int8);
    model_price: the model price at iv; iterations: batched repricings used."""

    iv: FloatArray
    status: npt.NDArray[np.int8]
    model_price: FloatArray
    iterations: int

    def rejected(self) -> dict[str, int]:
        """Count of unsolved quotes by reason."""
        counts: dict[str, int] = {}
        for code, n in zip(*np.unique(self.status, return_counts=True), strict=True):
            if code != IVStatus.OK:
                counts[IVStatus(int(code)).reason] = int(n)
        return counts


def quote_mids(bid: npt.ArrayLike, ask: npt.ArrayLike) -> tuple[FloatArray, npt.NDArray[np.int8]]:
    """Mid prices of bid/ask quotes (NaN = side absent) and an IVStatus per quote.

    PENDING means a usable mid; otherwise the first reason found, in the order missing
    bid, missing ask, zero bid, crossed (ask < bid).
    """
    b = np.asarray(bid, dtype=np.float64)
    a = np.asarray(ask, dtype=np.float64)
    b, a = np.broadcast_arrays(b, a)
    status = np.full(b.shape, IVStatus.PENDING, dtype=np.int8)
    crossed = a < b
    zero = b <= 0
    no_ask = ~np.isfinite(a) | (a <= 0)
    no_bid = ~np.isfinite(b)
    # later assignments win: the most basic reason is applied last
    status[crossed] = IVStatus.CROSSED
    status[zero] = IVStatus.ZERO_BID
    status[no_ask] = IVStatus.MISSING_ASK
    status[no_bid] = IVStatus.MISSING_BID
    mid = np.where(status == IVStatus.PENDING, 0.5 * (a + b), np.nan)
    return mid, status


def arbitrage_bounds(params: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Model-free (lower, upper) price bounds per parameter row, with the dividend yield q.

    Call: max(0, S e^(−qT) − K e^(−rT)) ≤ C ≤ S e^(−qT) (American: also ≥ S − K, and
    ≤ max(S, S e^(−qT))). Put: max(0, K e^(−rT) − S e^(−qT)) ≤ P ≤ K e^(−rT); American
    put: also ≥ K − S and ≤ max(K, K e^(−rT)). At q = 0 the factor e^(−qT) is exactly 1.
    """
    s = params[:, core.SPOT]
    k = params[:, core.STRIKE]
    t = np.maximum(params[:, core.EXPIRY], 0.0)
    disc_k = k * np.exp(-params[:, core.RATE] * t)
    disc_s = s * np.exp(-params[:, core.DIVIDEND] * t)
    call = params[:, core.IS_CALL] > 0.5
    american = params[:, core.IS_AMERICAN] > 0.5
    lower = np.where(call, np.maximum(disc_s - disc_k, 0.0), np.maximum(disc_k - disc_s, 0.0))
    lower = np.where(american, np.maximum(lower, np.where(call, s - k, k - s)), lower)
    upper = np.where(call, np.where(american, np.maximum(s, disc_s), disc_s),
                     np.where(american, np.maximum(k, disc_k), disc_k))
    return lower, upper


def european_implied_vols(
    params: np.ndarray, target: np.ndarray, vol_min: float, vol_max: float, out: np.ndarray
) -> None:
    """Analytic Black–Scholes implied vols (Newton with bisection), NaN where none exists.

    The starting point of the PDE solve; exact for European options. In parallel:
    `gpu.threads.parallel_range`.
    """
    parallel_range(_european_ivs_range, _european_ivs_parallel, params.shape[0], params,
                   target, vol_min, vol_max, out, min_chunk=64)


@njit(cache=True, parallel=True)
def _european_ivs_parallel(chunks: int, n: int, params: np.ndarray, target: np.ndarray,
                           vol_min: float, vol_max: float, out: np.ndarray) -> None:
    for k in prange(chunks):
        _european_ivs_range(chunk_lo(k, chunks, n), chunk_lo(k + 1, chunks, n), params,
                            target, vol_min, vol_max, out)


@njit(cache=True, nogil=True)
def _european_ivs_range(row_lo: int, row_hi: int, params: np.ndarray, target: np.ndarray,
                        vol_min: float, vol_max: float, out: np.ndarray) -> None:
    for o in range(row_lo, row_hi):
        s, k, t, _, r, q, call, _ = core.row_fields(params, o)
        lo = vol_min
        hi = vol_max
        p_lo = core.bs_price_greeks_cpu(s, k, t, lo, r, q, call)[0]
        p_hi = core.bs_price_greeks_cpu(s, k, t, hi, r, q, call)[0]
        y = target[o]
        if t <= 0.0 or not (p_lo <= y <= p_hi):
            out[o] = np.nan
            continue
        sig = 0.5 * (lo + hi) if not (lo < 0.3 < hi) else 0.3
        for _ in range(100):
            p, _d, _g, vega = core.bs_price_greeks_cpu(s, k, t, sig, r, q, call)
            f = p - y
            if f > 0.0:
                hi = sig
            else:
                lo = sig
            nxt = sig - f / vega if vega > 1e-300 else 0.5 * (lo + hi)
            if not (lo < nxt < hi):
                nxt = 0.5 * (lo + hi)
            if abs(nxt - sig) < 1e-12 or hi - lo < 1e-12:
                sig = nxt
                break
            sig = nxt
        out[o] = sig


def implied_vols(
    price: npt.ArrayLike,
    params: FloatArray,
    *,
    grid: str | FdGrid = "default",
    device: str = "auto",
    vol_min: float = 0.01,
    vol_max: float = 5.0,
    vol_tol: float | None = None,
    max_iter: int = 40,
    status: npt.ArrayLike | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> IVResult:
    """Implied vols per parameter row (the VOL column is ignored) from target prices.

    price: the option prices to match (e.g. bid/ask mids), NaN where there is none.
    status: an initial IVStatus per row (e.g. from `quote_mids`); rows not PENDING are
      passed through unsolved.
    vol_min, vol_max: the σ range searched, per year; vol_tol: convergence in σ (default
      1e-7 on the CPU, 1e-5 on the GPU, whose float32 prices carry noise of ~1e-6 relative;
      a residual below that noise also counts as converged).
    progress(iteration, still_active) is called after each batched repricing.
    The model is the PDE on `grid`, so American rows get American implied vols. On the
    GPU the model is float32: implied vols are then good to about 1e-5.
    """
    g = make_grid(grid)
    backend = resolve_device(device, "implied vols")
    if vol_tol is None:
        vol_tol = 1e-5 if backend == "cuda" else 1e-7
    price_noise = 2e-6 if backend == "cuda" else 1e-13
    params = np.array(params, dtype=np.float64, copy=True)
    check_params(params)
    target = np.asarray(price, dtype=np.float64).reshape(-1)
    st = _screen(params, target, status)
    search = _BracketSearch(params, target, vol_min, vol_max, vol_tol, price_noise)
    iterations = 0
    for _ in range(max_iter):
        act = np.flatnonzero(st == IVStatus.PENDING)
        if act.size == 0:
            break
        p = params[act]
        p[:, core.VOL] = search.sig[act]
        values = price_params(p, g, backend)
        iterations += 1
        search.update(act, p, values.price, st)
        if progress is not None:
            progress(iterations, int((st == IVStatus.PENDING).sum()))
    st[st == IVStatus.PENDING] = IVStatus.NOT_CONVERGED
    return IVResult(search.iv, st, search.model, iterations)


def solve_implied_vols(
    engine: FdPricingEngine,
    contracts: OptionContracts,
    market: MarketInputs,
    price: npt.ArrayLike,
    **options: Any,
) -> IVResult:
    """Implied vols of contracts under `engine`'s model (market.vol is ignored); `options`
    as for `implied_vols` (status, progress, vol_min, vol_max, vol_tol, max_iter)."""
    rows = contract_rows(contracts, market.with_vol(0.2))
    return implied_vols(price, rows, grid=engine.grid, device=engine.device, **options)


def _screen(params: FloatArray, target: FloatArray,
            status: npt.ArrayLike | None) -> npt.NDArray[np.int8]:
    """Initial status per row: the caller's, then no price, expired, outside the bounds."""
    n = params.shape[0]
    if target.shape[0] != n:
        raise ValueError(f"{target.shape[0]} prices for {n} options")
    st = (
        np.full(n, IVStatus.PENDING, dtype=np.int8)
        if status is None
        else np.array(status, dtype=np.int8).reshape(-1).copy()
    )
    if st.shape[0] != n:
        raise ValueError(f"{st.shape[0]} statuses for {n} options")
    pending = st == IVStatus.PENDING
    st[pending & ~np.isfinite(target)] = IVStatus.NO_PRICE
    pending = st == IVStatus.PENDING
    st[pending & (params[:, core.EXPIRY] <= 0)] = IVStatus.EXPIRED
    lower, upper = arbitrage_bounds(params)
    pending = st == IVStatus.PENDING
    # a hair of tolerance: a quote at exactly the intrinsic value is not an arbitrage (it is
    # left to the solver, which reports vol_below_min when no σ ≥ vol_min reaches it)
    slack = 1e-9 * np.maximum(np.abs(lower), 1.0)
    st[pending & (target < lower - slack)] = IVStatus.BELOW_LOWER_BOUND
    st[pending & (target >= upper)] = IVStatus.ABOVE_UPPER_BOUND
    pending = st == IVStatus.PENDING
    st[pending & _at_exercise_value(params, target)] = IVStatus.AT_EXERCISE_VALUE
    return st


def _at_exercise_value(params: FloatArray, target: FloatArray) -> npt.NDArray[np.bool_]:
    """American rows that can be exercised early, in the money, quoted at their exercise
    value (to 1e-9 relative): the model price equals it for a whole range of σ."""
    s, k = params[:, core.SPOT], params[:, core.STRIKE]
    call = params[:, core.IS_CALL] > 0.5
    never = call & (params[:, core.RATE] >= 0.0) & (params[:, core.DIVIDEND] <= 0.0)
    early = (params[:, core.IS_AMERICAN] > 0.5) & ~never
    payoff = np.where(call, s - k, k - s)
    return early & (payoff > 0.0) & (target <= payoff * (1.0 + 1e-9))


class _BracketSearch:
    """Per row: the σ bracket [lo, hi], the next σ to try, the last evaluation (for the
    secant) and the result; `update` takes one batched repricing of the active rows."""

    def __init__(self, params: FloatArray, target: FloatArray, vol_min: float,
                 vol_max: float, vol_tol: float, price_noise: float) -> None:
        n = params.shape[0]
        self.target = target
        self.vol_min, self.vol_max = vol_min, vol_max
        self.vol_tol, self.price_noise = vol_tol, price_noise
        self.iv = np.full(n, np.nan)
        self.model = np.full(n, np.nan)
        self.lo = np.full(n, vol_min)
        self.hi = np.full(n, vol_max)
        self.tried_min = np.zeros(n, dtype=bool)
        self.tried_max = np.zeros(n, dtype=bool)
        self.prev_sig = np.full(n, np.nan)
        self.prev_f = np.full(n, np.nan)
        start = np.full(n, np.nan)
        european_implied_vols(params, np.nan_to_num(target), vol_min, vol_max, start)
        sig = np.where(np.isfinite(start), start, 0.3)
        self.sig = np.clip(sig, vol_min, vol_max)

    def update(self, act: npt.NDArray[np.intp], p: FloatArray, model: FloatArray,
               st: npt.NDArray[np.int8]) -> None:
        """Rows `act` were priced at σ = sig[act] (rows `p`) to `model`: narrow, step, and
        settle the status of the rows that converged or cannot converge."""
        vol_min, vol_max, target = self.vol_min, self.vol_max, self.target
        s = self.sig[act]
        f = model - target[act]
        self.model[act] = model
        self.tried_min[act] |= s <= vol_min
        self.tried_max[act] |= s >= vol_max
        above = f > 0
        hi_a = np.where(above, s, self.hi[act])
        lo_a = np.where(above, self.lo[act], s)
        self.hi[act] = hi_a
        self.lo[act] = lo_a
        # the model price at σ_min is already too high: the quote is below any σ we allow
        at_min = above & (s <= vol_min)
        at_max = (f < 0) & (s >= vol_max)

        # slope: secant through the last two evaluations, else the analytic vega
        vega = _analytic_vega(p, s)
        ps, pf = self.prev_sig[act], self.prev_f[act]
        with np.errstate(divide="ignore", invalid="ignore"):
            secant = (f - pf) / (s - ps)
        slope = np.where(np.isfinite(secant) & (secant > 0), secant, vega)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = np.where(slope > 0, s - f / slope, np.nan)
        # safeguard: leaving the bracket means bisection, except that the bracket's ends
        # σ_min and σ_max are tried once each so an unreachable quote is recognised
        go_min = ~(step > lo_a) & (lo_a <= vol_min) & ~self.tried_min[act]
        go_max = ~(step < hi_a) & (hi_a >= vol_max) & ~self.tried_max[act]
        inside = (step > lo_a) & (step < hi_a)
        nxt = np.where(inside, step, 0.5 * (lo_a + hi_a))
        nxt = np.where(go_min, vol_min, np.where(go_max, vol_max, nxt))
        small = np.abs(f) <= self.price_noise * np.maximum(target[act], 1e-2)
        converged = (np.abs(nxt - s) < self.vol_tol) | (hi_a - lo_a < self.vol_tol) | small
        self.prev_sig[act] = s
        self.prev_f[act] = f
        self.sig[act] = nxt

        done_ok = converged & ~at_min & ~at_max
        new_status = st[act]
        new_status[at_min] = IVStatus.VOL_BELOW_MIN
        new_status[at_max] = IVStatus.VOL_ABOVE_MAX
        new_status[done_ok] = IVStatus.OK
        st[act] = new_status
        # a Newton step converged in σ is taken; a residual at the noise floor keeps σ
        self.iv[act[done_ok]] = np.where(small[done_ok], s[done_ok], nxt[done_ok])


def _analytic_vega(params: FloatArray, vol: FloatArray) -> FloatArray:
    p = params.copy()
    p[:, core.VOL] = vol
    out = np.empty((p.shape[0], 4))
    core.bs_price_greeks_batch(p, out)
    return out[:, 3]
