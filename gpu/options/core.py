"""Black–Scholes PDE by Crank–Nicolson: the arithmetic once, a CUDA kernel and a CPU twin.

The option value V(S, τ) (τ = time to expiry in years, S = spot in price units) solves
V_τ = ½σ²S²V_SS + (r − q)SV_S − rV (q the continuous dividend yield) on a uniform grid
S_j = S_lo + j·ΔS, j = 0..N, with Dirichlet boundary values (deep in/out of the money).
In space the operator is discretised on three points, M·dV/dτ = L·V: plain central
differences (M = I, second order) or, by default, the fourth-order compact scheme (M
tridiagonal), with the payoff kink smoothed by a fourth-order kernel and the strike on a
node. In time each step solves the tridiagonal system
(M − θΔτ·L)·Vⁿ⁺¹ = (M + (1−θ)Δτ·L)·Vⁿ, θ = ½ (Crank–Nicolson); an optional Rannacher start
replaces the first CN steps by two fully implicit half steps each, which damps the kink so
greeks do not oscillate and the scheme keeps second order. American options are projected
onto the payoff after each step (an American call with q ≤ 0 and r ≥ 0 is never exercised
early and is priced as the European one; with q > 0 it is projected like a put). Price,
delta and gamma at the spot come from a quartic through the five nearest nodes.

Two backends over the same per-node functions (compiled by gpu/twin.py):
- CUDA, float32, two kernels for the tridiagonal solve (`fd_kernel`, GPU_FD_SOLVER):
  - "lanes" (the default, `fd_lanes_kernel`): one warp per option, lane l owning P
    consecutive rows; Thomas's sweeps run over a lane's rows and are carried across the
    lanes by scans (warp shuffles; shared memory in the simulator). O(N) work per step.
    A launch on a Richardson grid gives each option two warps, one per march, when the
    device holds all of them at once (`split_passes`).
  - "pcr" (`fd_price_kernel`): one block per option, one thread per grid node; parallel
    cyclic reduction (PCR) in shared memory. The matrix is the same for every step of a
    phase, so the PCR elimination factors of each level are computed once per phase and
    kept in registers; each step then reduces only the right-hand side (one shared-memory
    read pair and one barrier per level). O(N log N) work per step.
- CPU: float64, Thomas algorithm, one option per `prange` iteration.

Parameter rows (`params[option, column]`, float64) use the column indices below; results
(`out[option, :]`) are price, delta (∂V/∂S) and gamma (∂²V/∂S²) at the row's spot.
"""

from __future__ import annotations

import math
import os
import weakref
from typing import Any

import numpy as np
from numba import cuda, njit, prange

from gpu.device import fd_max_registers, fd_solver
from gpu.options.grids import (
    DOMAIN_LOG_WIDTH,
    DOMAIN_STRIKE_MULTIPLE,
    MAX_LEVELS,
    MAX_NODES,
    threads_per_option,
)
from gpu.threads import chunk_lo, parallel_range
from gpu.twin import compile_twin

# -- parameter-row layout -----------------------------------------------------------------
SPOT, STRIKE, EXPIRY, VOL, RATE, IS_CALL, IS_AMERICAN, DIVIDEND = range(8)
N_PARAMS = 8  # eight float64 columns: rows stay 64-byte aligned
PRICE, DELTA, GAMMA = range(3)
N_OUT = 3

# -- grid domains and node limits: gpu/options/grids.py (no numba there, so the settings can
# name and check a grid without importing the kernels)

SQRT1_2 = 0.7071067811865476
INV_SQRT_2PI = 0.3989422804014327


# =========================================================================================
# Core arithmetic: plain Python, compiled below for both backends.
# =========================================================================================


def norm_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x * SQRT1_2)


def norm_pdf(x: float) -> float:
    return INV_SQRT_2PI * math.exp(-0.5 * x * x)


def bs_price_greeks(
    spot: float, strike: float, expiry: float, vol: float, rate: float, div: float,
    is_call: bool,
) -> tuple[float, float, float, float]:
    """Analytic European Black–Scholes–Merton with a continuous dividend yield `div`:
    price, delta, gamma, vega (per unit σ).

    At expiry ≤ 0 or σ ≤ 0 the value is the discounted-forward intrinsic value. Every
    dividend term enters as a factor e^(−qT) or a difference r − q, which are exactly 1
    and r at q = 0: the values without dividends are unchanged to the last bit.
    """
    if expiry <= 0.0 or vol <= 0.0:
        tau = max(expiry, 0.0)
        fwd_k = strike * math.exp(-rate * tau)
        carry = math.exp(-div * tau)
        fwd_s = spot * carry
        if is_call:
            if fwd_s > fwd_k:
                return fwd_s - fwd_k, carry, 0.0, 0.0
            return 0.0, 0.0, 0.0, 0.0
        if fwd_s < fwd_k:
            return fwd_k - fwd_s, -carry, 0.0, 0.0
        return 0.0, 0.0, 0.0, 0.0
    sqrt_t = math.sqrt(expiry)
    sig_t = vol * sqrt_t
    d1 = (math.log(spot / strike) + (rate - div + 0.5 * vol * vol) * expiry) / sig_t
    d2 = d1 - sig_t
    disc_k = strike * math.exp(-rate * expiry)
    carry = math.exp(-div * expiry)
    disc_s = spot * carry
    pdf1 = norm_pdf(d1) * carry
    gamma = pdf1 / (spot * sig_t)
    vega = spot * pdf1 * sqrt_t
    if is_call:
        return disc_s * norm_cdf(d1) - disc_k * norm_cdf(d2), carry * norm_cdf(d1), gamma, vega
    return (disc_k * norm_cdf(-d2) - disc_s * norm_cdf(-d1), carry * (norm_cdf(d1) - 1.0),
            gamma, vega)


def grid_bounds(
    spot: float,
    strike: float,
    expiry: float,
    vol: float,
    domain: int,
    smax_mult: float,
    width: float,
    price_steps: int,
) -> tuple[float, float]:
    """(S_lo, ΔS) of the uniform price grid of one option; the strike always sits on a node.

    DOMAIN_STRIKE_MULTIPLE: [0, max(smax_mult·K, 2·S0)] (the seed's S_max = 3K; the 2·S0
    keeps deep in-the-money calls of a real chain, K ≪ S0, inside the grid).
    DOMAIN_LOG_WIDTH: the strike and the spot ± h in log price, h = width·σ√T capped at
    ln(smax_mult): the grid follows the spread of the terminal price, so a one-week option
    gets as many nodes per standard deviation as a two-year one.
    """
    n = float(price_steps)
    if domain == DOMAIN_STRIKE_MULTIPLE:
        s_hi = max(smax_mult * strike, 2.0 * spot)
        ds = s_hi / n
        j_strike = max(1.0, math.floor(strike / ds + 0.5))
        return 0.0, strike / j_strike
    h = min(width * vol * math.sqrt(expiry), math.log(smax_mult))
    s_lo = min(strike, spot) * math.exp(-h)
    s_hi = max(strike, spot) * math.exp(h)
    ds = (s_hi - s_lo) / n
    j_strike = math.floor((strike - s_lo) / ds + 0.5)
    s_lo = strike - j_strike * ds
    if s_lo < 0.0:
        s_lo = strike - math.floor(strike / ds) * ds
    return s_lo, ds


def time_steps(expiry: float, dt_target: float, fixed_steps: int, min_steps: int) -> int:
    """Number of (Crank–Nicolson) time steps: `fixed_steps` if > 0, else ⌈T/Δt⌉ ≥ min_steps."""
    if fixed_steps > 0:
        return fixed_steps
    # the 1e-9 keeps 0.3/0.02 = 14.999999999999998 at 15 steps, not 16
    m = int(math.ceil(expiry / dt_target - 1e-9))
    return max(m, min_steps, 1)


def node_coefficients(
    s: float, ds: float, vol: float, rate: float, div: float, compact: bool
) -> tuple[float, float, float, float, float, float]:
    """Semi-discrete operator at node S: M·dV/dτ = L·V, both three-point stencils.

    Returns (α, β, γ) of L, per year, and (m₋, m₀, m₊) of M. Plain central differences
    have M = I and are second order in ΔS. The compact scheme (`compact=True`) is fourth
    order for smooth data on the same three points: the leading truncation error
    (ΔS²/12)·(a·V⁗ + 2b·V‴) of a·V″ + b·V′ − r·V (a = ½σ²S², b = μS, μ = r − q) is
    rewritten with the PDE itself (V‴ and V⁗ from the PDE differentiated once and twice);
    that adds κ = ((1+p)(σ²+μ) + μ − r)/12 to the diffusion, p(μ − r)/(24x) to the drift
    (x = S/ΔS) and moves the rest onto the time derivative through M, with
    p = 2(μ − 2σ²)/σ² (the high-order compact method of Spotz and Carey, applied to the
    Black–Scholes–Merton operator in S). At q = 0 the extra terms are exactly zero.
    """
    x = s / ds
    mu = rate - div
    diffusion = 0.5 * vol * vol * x * x
    drift = 0.5 * mu * x
    if compact:
        q = 2.0 * (mu - 2.0 * vol * vol) / (vol * vol)
        kappa = ((1.0 + q) * (vol * vol + mu) + (mu - rate)) / 12.0
        skew = q / (24.0 * x)
        drift = drift + q * (mu - rate) / (24.0 * x)
        # where drift dominates (tiny σ, or the first nodes above S = 0) the compact
        # stencil loses its signs and could oscillate: such nodes keep central differences
        if abs(skew) <= 1.0 / 12.0 and diffusion + kappa >= abs(drift):
            return (
                diffusion + kappa - drift,
                -2.0 * (diffusion + kappa) - rate,
                diffusion + kappa + drift,
                1.0 / 12.0 - skew,
                10.0 / 12.0,
                1.0 / 12.0 + skew,
            )
        drift = 0.5 * mu * x
    return diffusion - drift, -2.0 * diffusion - rate, diffusion + drift, 0.0, 1.0, 0.0


def step_coefficients(
    alpha: float,
    beta: float,
    gamma: float,
    m_below: float,
    m_node: float,
    m_above: float,
    theta: float,
    dt: float,
) -> tuple[float, float, float, float, float, float]:
    """Rows of the θ-scheme (M − θΔτ·L)·Vⁿ⁺¹ = (M + (1−θ)Δτ·L)·Vⁿ at one node.

    Returns the implicit row (below, diagonal, above), then the explicit row.
    """
    imp = theta * dt
    exp_ = (1.0 - theta) * dt
    return (
        m_below - imp * alpha,
        m_node - imp * beta,
        m_above - imp * gamma,
        m_below + exp_ * alpha,
        m_node + exp_ * beta,
        m_above + exp_ * gamma,
    )


def payoff_smoothing(offset: int) -> float:
    """Kreiss smoothing of the payoff kink, in units of ΔS, `offset` nodes from the strike.

    The initial values near the strike are the payoff averaged against the fourth-order
    kernel Φ₄ = (4/3)·M₄(x) − (M₄(x−1) + M₄(x+1))/6 (M₄ the cubic B-spline, so ∫Φ₄ = 1 and
    ∫x²Φ₄ = 0), which keeps the compact scheme fourth order despite the kink. With the
    strike on a node the averages are exact fractions: +17/120, −1/36, −1/720 at offsets
    0, ±1, ±2, the same for calls and puts, and 0 beyond.
    """
    d = abs(offset)
    if d == 0:
        return 17.0 / 120.0
    if d == 1:
        return -1.0 / 36.0
    if d == 2:
        return -1.0 / 720.0
    return 0.0


def rannacher_phase(
    phase: int, dt: float, n_implicit: int, m: int
) -> tuple[float, float, int, float]:
    """(theta, step length, number of steps, tau at the phase's start) of time-stepping phase
    0 (Rannacher start: each of the first `n_implicit` CN steps as two fully implicit
    halves) or phase 1 (Crank-Nicolson for the remaining `m - n_implicit` steps)."""
    if phase == 0:
        return 1.0, 0.5 * dt, 2 * n_implicit, 0.0
    return 0.5, dt, m - n_implicit, n_implicit * dt


def time_passes(richardson: bool, early: bool, m: int) -> int:
    """Marches of one option: 2 (⌊m/2⌋ steps, then m) for Richardson extrapolation in
    time of an option that can be exercised early, else 1. The projection onto the payoff
    makes the American time error first order in Δt, so V = V_m + w·(V_m − V_⌊m/2⌋)
    (`richardson_weight`) cancels it for half a march more; a European value (second
    order in Δt) keeps one march, whose error the extrapolation would amplify."""
    if richardson and early and m >= 2:
        return 2
    return 1


def pass_steps(pass_: int, passes: int, m: int) -> int:
    """Time steps of march `pass_` of `passes`: the coarse one first, then the grid's."""
    if passes == 2 and pass_ == 0:
        return m // 2
    return m


def richardson_weight(m: int) -> float:
    """w in V = V_m + w·(V_m − V_c), c = ⌊m/2⌋: errors c₁·Δt cancel (w = 1 for even m)."""
    mc = m // 2
    return mc / (m - mc)


def early_exercise(is_call: bool, is_american: bool, rate: float, div: float) -> bool:
    """Whether the American feature can matter: with no (or a negative) dividend yield and
    r ≥ 0 an American call is never exercised early, so it is priced as the European call
    (the projection would only clip the smoothed payoff and add discretisation noise);
    with q > 0 a deep in-the-money call is worth exercising to collect the yield."""
    return is_american and not (is_call and rate >= 0.0 and div <= 0.0)


def payoff(s: float, strike: float, is_call: bool) -> float:
    return max(s - strike, 0.0) if is_call else max(strike - s, 0.0)


def boundary_values(
    strike: float,
    tau: float,
    rate: float,
    div: float,
    s_lo: float,
    s_hi: float,
    is_call: bool,
    is_american: bool,
) -> tuple[float, float]:
    """Dirichlet values at S_lo and S_hi at time to expiry τ (deep OTM 0, deep ITM the
    discounted forward's intrinsic value).

    Put: V(S_lo) = K e^(−rτ) − S_lo e^(−qτ) (American: at least K − S_lo, exercised),
    V(S_hi) = 0. Call: V(S_lo) = 0, V(S_hi) = S_hi e^(−qτ) − K e^(−rτ) (American: at
    least S_hi − K).
    """
    return boundary_values_discounted(strike, math.exp(-rate * tau), math.exp(-div * tau),
                                      s_lo, s_hi, is_call, is_american)


def boundary_values_discounted(
    strike: float,
    discount: float,
    carry: float,
    s_lo: float,
    s_hi: float,
    is_call: bool,
    is_american: bool,
) -> tuple[float, float]:
    """`boundary_values` from the factors e^(−rτ) (`discount`) and e^(−qτ) (`carry`): the
    lanes kernel carries them from step to step by one multiplication each (e^(−rΔτ),
    e^(−qΔτ)) instead of two float64 exponentials per step on every lane."""
    disc_k = strike * discount
    if is_call:
        v_hi = s_hi * carry - disc_k
        if is_american:
            v_hi = max(v_hi, s_hi - strike)
        return 0.0, max(v_hi, 0.0)
    v_lo = disc_k - s_lo * carry
    if is_american:
        v_lo = max(v_lo, strike - s_lo)
    return max(v_lo, 0.0), 0.0


def interpolate_at_spot(
    v_m2: float, v_m1: float, v_0: float, v_p1: float, v_p2: float, frac: float, ds: float
) -> tuple[float, float, float]:
    """Quartic through five nodes (Stirling's formula), `frac` spacings from the middle one.

    Returns price, delta = ∂V/∂S and gamma = ∂²V/∂S², of fourth order at the node itself
    (so interpolation does not spoil the compact scheme's accuracy).
    """
    d1 = 0.5 * (v_p1 - v_m1)
    d2 = v_p1 - 2.0 * v_0 + v_m1
    d3 = 0.5 * (v_p2 - 2.0 * v_p1 + 2.0 * v_m1 - v_m2)
    d4 = v_p2 - 4.0 * v_p1 + 6.0 * v_0 - 4.0 * v_m1 + v_m2
    x = frac
    x2 = x * x
    price = v_0 + x * d1 + 0.5 * x2 * d2 + x * (x2 - 1.0) * d3 / 6.0 + x2 * (x2 - 1.0) * d4 / 24.0
    delta = d1 + x * d2 + (3.0 * x2 - 1.0) * d3 / 6.0 + (2.0 * x2 - 1.0) * x * d4 / 12.0
    gamma = d2 + x * d3 + (6.0 * x2 - 1.0) * d4 / 12.0
    return price, delta / ds, gamma / (ds * ds)


def pcr_factors(
    a_below: float,
    b_below: float,
    c_below: float,
    a: float,
    b: float,
    c: float,
    a_above: float,
    b_above: float,
    c_above: float,
) -> tuple[float, float, float, float, float]:
    """One parallel-cyclic-reduction level for one row.

    Eliminates the row's couplings to the rows `stride` below and above; returns the
    elimination factors (k_below, k_above), which the right-hand side needs
    (d' = d − k_below·d_below − k_above·d_above), and the new row (a', b', c') that couples
    to the rows 2·stride away. A missing neighbour is passed as the identity row (0, 1, 0).
    """
    k_below = a / b_below
    k_above = c / b_above
    return (
        k_below,
        k_above,
        -a_below * k_below,
        b - c_below * k_below - a_above * k_above,
        -c_above * k_above,
    )


# -- compiled forms ------------------------------------------------------------------------
_CORE = (
    norm_cdf,
    norm_pdf,
    bs_price_greeks,
    grid_bounds,
    time_steps,
    node_coefficients,
    step_coefficients,
    payoff_smoothing,
    rannacher_phase,
    time_passes,
    pass_steps,
    richardson_weight,
    early_exercise,
    payoff,
    boundary_values_discounted,
    boundary_values,
    interpolate_at_spot,
    pcr_factors,
)

# Compiled twice by gpu.twin (the drivers below live in this same file, so numba's cache,
# keyed on this file, is invalidated by any edit of the core: no flush needed).
_twin = compile_twin(
    __name__,
    _CORE,
    {
        "math": math,
        "SQRT1_2": SQRT1_2,
        "INV_SQRT_2PI": INV_SQRT_2PI,
        "DOMAIN_STRIKE_MULTIPLE": DOMAIN_STRIKE_MULTIPLE,
        "DOMAIN_LOG_WIDTH": DOMAIN_LOG_WIDTH,
    },
    # a cold `price` compiles the pricer 1 s faster (gpu.twin); bs_price_greeks has five
    # call sites (the implied vols' three, `_bs_range`, `_analytic_range`): compiled once
    cpu_inline=[f.__name__ for f in _CORE if f is not bs_price_greeks],
)
_cpu_ns = vars(_twin.cpu)
_gpu_ns = vars(_twin.cuda)


bs_price_greeks_cpu = _cpu_ns["bs_price_greeks"]
_grid_bounds_cpu = _cpu_ns["grid_bounds"]
_time_steps_cpu = _cpu_ns["time_steps"]
_node_coefficients_cpu = _cpu_ns["node_coefficients"]
_step_coefficients_cpu = _cpu_ns["step_coefficients"]
_payoff_smoothing_cpu = _cpu_ns["payoff_smoothing"]
_payoff_cpu = _cpu_ns["payoff"]
_early_exercise_cpu = _cpu_ns["early_exercise"]
_boundary_values_cpu = _cpu_ns["boundary_values"]
_interpolate_cpu = _cpu_ns["interpolate_at_spot"]
pcr_factors_cpu = _cpu_ns["pcr_factors"]

_bs_price_greeks_gpu = _gpu_ns["bs_price_greeks"]
_grid_bounds_gpu = _gpu_ns["grid_bounds"]
_time_steps_gpu = _gpu_ns["time_steps"]
_node_coefficients_gpu = _gpu_ns["node_coefficients"]
_step_coefficients_gpu = _gpu_ns["step_coefficients"]
_payoff_smoothing_gpu = _gpu_ns["payoff_smoothing"]
_payoff_gpu = _gpu_ns["payoff"]
_early_exercise_gpu = _gpu_ns["early_exercise"]
_boundary_values_gpu = _gpu_ns["boundary_values"]
_boundary_discounted_gpu = _gpu_ns["boundary_values_discounted"]
_interpolate_gpu = _gpu_ns["interpolate_at_spot"]
_pcr_factors_gpu = _gpu_ns["pcr_factors"]
_rannacher_phase_cpu = _cpu_ns["rannacher_phase"]
_time_passes_cpu = _cpu_ns["time_passes"]
_pass_steps_cpu = _cpu_ns["pass_steps"]
_richardson_weight_cpu = _cpu_ns["richardson_weight"]
_time_passes_gpu = _gpu_ns["time_passes"]
_pass_steps_gpu = _gpu_ns["pass_steps"]
_richardson_weight_gpu = _gpu_ns["richardson_weight"]
_rannacher_phase_gpu = _gpu_ns["rannacher_phase"]


# =========================================================================================
# CPU twin: float64, Thomas algorithm, one option per prange iteration.
# =========================================================================================


@njit(cache=True, inline="always")  # compiled once, in its caller
def row_fields(
    params: np.ndarray, o: int
) -> tuple[float, float, float, float, float, float, bool, bool]:
    """(spot, strike, expiry, vol, rate, dividend yield, is_call, is_american) of row `o`."""
    return (
        params[o, SPOT],
        params[o, STRIKE],
        params[o, EXPIRY],
        params[o, VOL],
        params[o, RATE],
        params[o, DIVIDEND],
        params[o, IS_CALL] > 0.5,
        params[o, IS_AMERICAN] > 0.5,
    )


def bs_price_greeks_batch(params: np.ndarray, out4: np.ndarray) -> None:
    """Analytic European values of every parameter row: out4[:, (price, delta, gamma, vega)]
    (in parallel: `gpu.threads.parallel_range`)."""
    parallel_range(_bs_range, _bs_parallel, params.shape[0], params, out4, min_chunk=256)


@njit(cache=True, parallel=True)
def _bs_parallel(chunks: int, n: int, params: np.ndarray, out4: np.ndarray) -> None:
    for k in prange(chunks):
        _bs_range(chunk_lo(k, chunks, n), chunk_lo(k + 1, chunks, n), params, out4)


@njit(cache=True, nogil=True)
def _bs_range(lo: int, hi: int, params: np.ndarray, out4: np.ndarray) -> None:
    for o in range(lo, hi):
        spot, strike, expiry, vol, rate, div, is_call, _ = row_fields(params, o)
        p, d, g, v = bs_price_greeks_cpu(spot, strike, expiry, vol, rate, div, is_call)
        out4[o, 0] = p
        out4[o, 1] = d
        out4[o, 2] = g
        out4[o, 3] = v


@njit(cache=True, inline="always")  # compiled once, in its caller
def _march_cpu(
    v: np.ndarray, op: np.ndarray, pay: np.ndarray, m: int, expiry: float, rannacher: int,
    strike: float, rate: float, div: float, s_lo: float, ds: float, n: int, is_call: bool,
    is_american: bool,
) -> None:
    """March the node values `v` (the smoothed payoff) from expiry over `m` time steps to
    τ = expiry, in place: a Rannacher start, then Crank–Nicolson, each step solved by
    Thomas's algorithm and projected onto the payoff `pay` when American."""
    s_hi = s_lo + n * ds
    dt = expiry / m
    n_implicit = min(rannacher, m)
    row = np.zeros((6, n + 1))  # implicit (lo, diag, up), explicit (lo, diag, up)
    rhs = np.empty(n + 1)
    c_mod = np.empty(n + 1)
    for phase in range(2):
        theta, step_dt, n_steps, tau0 = _rannacher_phase_cpu(phase, dt, n_implicit, m)
        if n_steps == 0:
            continue
        for j in range(1, n):
            (row[0, j], row[1, j], row[2, j], row[3, j], row[4, j], row[5, j]) = (
                _step_coefficients_cpu(
                    op[0, j], op[1, j], op[2, j], op[3, j], op[4, j], op[5, j], theta, step_dt
                )
            )
        for k in range(n_steps):
            tau = tau0 + (k + 1) * step_dt
            v_lo, v_hi = _boundary_values_cpu(strike, tau, rate, div, s_lo, s_hi, is_call,
                                               is_american)
            for j in range(1, n):
                rhs[j] = row[3, j] * v[j - 1] + row[4, j] * v[j] + row[5, j] * v[j + 1]
            # the new boundary values are known: move their columns to the right-hand side
            rhs[1] -= row[0, 1] * v_lo
            rhs[n - 1] -= row[2, n - 1] * v_hi
            # Thomas: forward elimination (modified upper diagonal in c_mod), back substitution
            c_mod[1] = row[2, 1] / row[1, 1]
            rhs[1] = rhs[1] / row[1, 1]
            for j in range(2, n):
                den = row[1, j] - row[0, j] * c_mod[j - 1]
                c_mod[j] = row[2, j] / den
                rhs[j] = (rhs[j] - row[0, j] * rhs[j - 1]) / den
            v[0] = v_lo
            v[n] = v_hi
            v[n - 1] = rhs[n - 1]
            for j in range(n - 2, 0, -1):
                v[j] = rhs[j] - c_mod[j] * v[j + 1]
            if is_american:
                for j in range(n + 1):
                    v[j] = max(v[j], pay[j])


@njit(cache=True, nogil=True)
def _analytic_range(lo: int, hi: int, params: np.ndarray, out: np.ndarray) -> None:
    """The rows of lo..hi-1 with no time or no vol left (which `_fd_price_range` skips):
    the analytic value, at least the payoff when American."""
    for o in range(lo, hi):
        spot, strike, expiry, vol, rate, div, is_call, is_american = row_fields(params, o)
        if expiry <= 0.0 or vol <= 0.0:
            p, d, g, _ = bs_price_greeks_cpu(spot, strike, expiry, vol, rate, div, is_call)
            if is_american:
                p = max(p, _payoff_cpu(spot, strike, is_call))
            out[o, PRICE] = p
            out[o, DELTA] = d
            out[o, GAMMA] = g


@njit(cache=True, nogil=True)
def fill_rows(rows: np.ndarray, first: int, last: int, columns: Any, lowest: np.ndarray,
              highest: np.ndarray, min_vol: float) -> tuple[int, bool]:
    """rows[first:last] from eight columns in row order (`SPOT` .. `DIVIDEND`), each of
    length len(rows) or 1 (one value for every row), checked in the same pass:
    (rows outside [lowest, highest] of their column, NaN included, or with a vol in
    (0, min_vol); whether a row is marched twice, as `two_marches` asks with
    Richardson). One compiled pass over the rows instead of numpy's dozen (eight column
    writes, a finiteness pass, range masks and the early-exercise mask): at 10,000
    contracts about 8x less host time on this project's 2-core VM, 2026-11-28."""
    bad = 0
    early = False
    for i in range(first, last):
        row_bad = False
        for c in range(N_PARAMS):
            col = columns[c]
            x = col[i if col.shape[0] > 1 else 0]
            if not (lowest[c] <= x <= highest[c]):  # (False for NaN)
                row_bad = True
            rows[i, c] = x
        v = rows[i, VOL]
        if v > 0.0 and v < min_vol:
            row_bad = True
        if row_bad:
            bad += 1
        if rows[i, IS_AMERICAN] > 0.5 and not (
                rows[i, IS_CALL] > 0.5 and rows[i, RATE] >= 0.0 and rows[i, DIVIDEND] <= 0.0):
            early = True
    return bad, early


def fd_price_batch_cpu(params: np.ndarray, out: np.ndarray, *grid: Any) -> None:
    """CPU twin of `fd_price_kernel`: every parameter row priced, on all cores
    (`gpu.threads.parallel_range`: chunks on threads, or numba's prange on many cores; a
    prange loop's body is compiled twice, which cost a cold `price` seconds).

    `grid` is `FdGrid.kernel_args()`: price_steps, dt_target, fixed_steps, min_steps,
    rannacher, domain, smax_mult, width, compact, smooth, richardson."""
    parallel_range(_fd_price_range, _fd_price_parallel, params.shape[0], params, out, *grid,
                   min_chunk=1)
    _analytic_range(0, params.shape[0], params, out)


@njit(cache=True, parallel=True)
def _fd_price_parallel(chunks: int, n: int, params: np.ndarray, out: np.ndarray,
                       *grid: Any) -> None:
    for k in prange(chunks):
        _fd_price_range(chunk_lo(k, chunks, n), chunk_lo(k + 1, chunks, n), params, out, *grid)


@njit(cache=True, nogil=True)
def _fd_price_range(lo: int, hi: int, params: np.ndarray, out: np.ndarray, *grid: Any) -> None:
    """Rows lo..hi-1 of `params` priced into out (price, delta, gamma) by Crank–Nicolson
    (float64, Thomas algorithm); `grid` is `FdGrid.kernel_args()`. With `richardson` an
    early-exercise option is marched twice (`time_passes`) and its node values extrapolated
    before the interpolation at the spot. One function with the row loop: a row pricer
    compiled apart (and linked, and optimised again) cost a cold `price` 0.4 s. A row
    with no time or no vol left is `_analytic_range`'s: so the compile worker of a cold
    `price` does not compile Black–Scholes, which the command's process compiles anyway
    for the implied vols' start (0.3 s)."""
    (n, dt_target, fixed_steps, min_steps, rannacher, domain, smax_mult, width, compact,
     smooth, richardson) = grid
    for o in range(lo, hi):
        spot, strike, expiry, vol, rate, div, is_call, is_american = row_fields(params, o)
        if expiry <= 0.0 or vol <= 0.0:
            continue  # `_analytic_range`'s row
        is_american = _early_exercise_cpu(is_call, is_american, rate, div)
        s_lo, ds = _grid_bounds_cpu(spot, strike, expiry, vol, domain, smax_mult, width, n)
        m = _time_steps_cpu(expiry, dt_target, fixed_steps, min_steps)
        j_strike = int(math.floor((strike - s_lo) / ds + 0.5))

        op = np.zeros((6, n + 1))  # α, β, γ, m₋, m₀, m₊ per node
        pay = np.empty(n + 1)
        v0 = np.empty(n + 1)
        for j in range(n + 1):
            s = s_lo + j * ds
            if 0 < j < n:
                a_, b_, c_, mb, mn, ma = _node_coefficients_cpu(s, ds, vol, rate, div, compact)
                op[0, j] = a_
                op[1, j] = b_
                op[2, j] = c_
                op[3, j] = mb
                op[4, j] = mn
                op[5, j] = ma
            pay[j] = _payoff_cpu(s, strike, is_call)
            v0[j] = pay[j]
            if smooth and 0 < j < n:
                v0[j] += ds * _payoff_smoothing_cpu(j - j_strike)

        passes = _time_passes_cpu(richardson, is_american, m)
        v = v0.copy()
        v_coarse = v0.copy()
        for pass_ in range(passes):
            target = v_coarse if pass_ < passes - 1 else v
            _march_cpu(target, op, pay, _pass_steps_cpu(pass_, passes, m), expiry, rannacher,
                       strike, rate, div, s_lo, ds, n, is_call, is_american)
        if passes == 2:
            w = _richardson_weight_cpu(m)
            for j in range(n + 1):
                v[j] = v[j] + w * (v[j] - v_coarse[j])
        f = (spot - s_lo) / ds
        j = min(max(int(math.floor(f + 0.5)), 2), n - 2)
        p, d, g = _interpolate_cpu(v[j - 2], v[j - 1], v[j], v[j + 1], v[j + 2], f - j, ds)
        if is_american:  # interpolating across the exercise boundary may dip below the payoff
            p = max(p, _payoff_cpu(spot, strike, is_call))
        out[o, PRICE] = p
        out[o, DELTA] = d
        out[o, GAMMA] = g


@njit(cache=True, nogil=True)
def fd_price_batch_cpu_serial(params: np.ndarray, out: np.ndarray, *grid: Any) -> None:
    """The same on one core without the GIL: the engine's background repricing. Numba's
    default threading layer must not be entered from two threads at once, and the event
    loop's thread may use it."""
    _fd_price_range(0, params.shape[0], params, out, *grid)
    _analytic_range(0, params.shape[0], params, out)


# =========================================================================================
# What both CUDA kernels do alike: an expired (or zero-vol) row, and the values at the spot.
# =========================================================================================


@cuda.jit(device=True)
def _row_in_shared(
    row: Any,
) -> tuple[float, float, float, float, float, float, bool, bool]:
    """(spot, strike, expiry, vol, rate, dividend yield, is_call, early exercise) of a
    parameter row read into shared memory; early exercise only where it can matter
    (`early_exercise`)."""
    is_call = row[IS_CALL] > 0.5
    return (row[SPOT], row[STRIKE], row[EXPIRY], row[VOL], row[RATE], row[DIVIDEND], is_call,
            _early_exercise_gpu(is_call, row[IS_AMERICAN] > 0.5, row[RATE], row[DIVIDEND]))


@cuda.jit(device=True)
def _write_closed_form(
    out: Any, opt: int, spot: float, strike: float, expiry: float, vol: float, rate: float,
    div: float, is_call: bool, is_american: bool,
) -> None:
    """Row `opt` of `out` for an expired or zero-vol option (no grid): Black–Scholes's
    limit, at least the payoff when American."""
    e_price, e_delta, e_gamma, _ = _bs_price_greeks_gpu(spot, strike, expiry, vol, rate, div,
                                                        is_call)
    if is_american:
        e_price = max(e_price, _payoff_gpu(spot, strike, is_call))
    out[opt, PRICE] = e_price
    out[opt, DELTA] = e_delta
    out[opt, GAMMA] = e_gamma


@cuda.jit(device=True)
def _edge_value_gpu(
    strike: float, discount: float, carry: float, s_lo: float, s_hi: float,
    floor_lo: float, floor_hi: float, takes_lo: bool, takes_hi: bool,
) -> np.float32:
    """`boundary_values_discounted` as the lanes kernel's step needs it, without a branch
    (branches would split the step's instructions into blocks the compiler schedules one
    after the other): the put's value at S_lo where `takes_lo` (lane 0 of a put), the
    call's at S_hi where `takes_hi` (the other lanes of a call), else 0. `floor_lo` and
    `floor_hi` are the exercise values K − S_lo and S_hi − K of an American option, −∞
    for a European one, so max() with them is the same arithmetic."""
    disc_k = strike * discount
    put_lo = max(max(disc_k - s_lo * carry, floor_lo), 0.0)
    call_hi = max(max(s_hi * carry - disc_k, floor_hi), 0.0)
    value = call_hi if takes_hi else 0.0
    value = put_lo if takes_lo else value
    return np.float32(value)


@cuda.jit(device=True)
def _write_values_at_spot(
    nodes: Any, out: Any, opt: int, spot: float, strike: float, is_call: bool,
    is_american: bool, s_lo: float, ds: float, n: int,
) -> None:
    """Row `opt` of `out` from the grid values `nodes` (shared memory): the quartic through
    the five nodes nearest the spot, at least the payoff when American."""
    f = (spot - s_lo) / ds
    j = min(max(int(math.floor(f + 0.5)), 2), n - 2)
    v_price, v_delta, v_gamma = _interpolate_gpu(
        np.float64(nodes[j - 2]),
        np.float64(nodes[j - 1]),
        np.float64(nodes[j]),
        np.float64(nodes[j + 1]),
        np.float64(nodes[j + 2]),
        f - j,
        ds,
    )
    if is_american:
        v_price = max(v_price, _payoff_gpu(spot, strike, is_call))
    out[opt, PRICE] = v_price
    out[opt, DELTA] = v_delta
    out[opt, GAMMA] = v_gamma


# =========================================================================================
# CUDA kernel: one block per option, one thread per grid node, float32, PCR.
# =========================================================================================


def _fd_price_kernel(
    params: Any,
    out: Any,
    price_steps: int,
    dt_target: float,
    fixed_steps: int,
    min_steps: int,
    rannacher: int,
    domain: int,
    smax_mult: float,
    width: float,
    compact: bool,
    smooth: bool,
    richardson: bool,
    spot_at: float,
) -> None:
    """Price row `blockIdx.x` of `params` into `out`; thread j owns grid node j.
    `spot_at` > 0 prices every row at that spot instead of its own (`launch_args`).

    `params` and `out` may be device arrays or mapped host memory (each is touched once per
    block: N_PARAMS threads read the row into shared memory, thread 0 writes the result).
    Launch with blockDim = the node count N+1 rounded up to a warp; threads past node N
    carry identity rows, which PCR leaves alone.
    """
    opt: int = cuda.blockIdx.x  # type: ignore[assignment]
    i: int = cuda.threadIdx.x  # type: ignore[assignment]
    n_threads: int = cuda.blockDim.x  # type: ignore[assignment]
    row = cuda.shared.array(N_PARAMS, np.float64)
    sh_a = cuda.shared.array(MAX_NODES, np.float32)
    sh_b = cuda.shared.array(MAX_NODES, np.float32)
    sh_c = cuda.shared.array(MAX_NODES, np.float32)
    k_below = cuda.local.array(MAX_LEVELS, np.float32)
    k_above = cuda.local.array(MAX_LEVELS, np.float32)
    if i < N_PARAMS:
        row[i] = params[opt, i]
    cuda.syncthreads()  # type: ignore[call-arg]
    spot, strike, expiry, vol, rate, div, is_call, is_american = _row_in_shared(row)
    if spot_at > 0.0:
        spot = spot_at
    if expiry <= 0.0 or vol <= 0.0:  # the same for the whole block: no barrier diverges
        if i == 0:
            _write_closed_form(out, opt, spot, strike, expiry, vol, rate, div, is_call,
                               is_american)
        return

    n = price_steps
    s_lo, ds = _grid_bounds_gpu(spot, strike, expiry, vol, domain, smax_mult, width, n)
    s_hi = s_lo + n * ds
    m_grid = _time_steps_gpu(expiry, dt_target, fixed_steps, min_steps)
    passes = _time_passes_gpu(richardson, is_american, m_grid)
    levels = 0
    while (1 << levels) < n + 1:
        levels += 1
    s = s_lo + i * ds
    interior = i >= 1 and i < n
    alpha = 0.0
    beta = 0.0
    gamma = 0.0
    m_below = 0.0
    m_node = 1.0
    m_above = 0.0
    if interior:
        alpha, beta, gamma, m_below, m_node, m_above = _node_coefficients_gpu(
            s, ds, vol, rate, div, compact
        )
    pay = _payoff_gpu(s, strike, is_call)
    v0 = pay
    if smooth and interior:
        j_strike = int(math.floor((strike - s_lo) / ds + 0.5))
        v0 += ds * _payoff_smoothing_gpu(i - j_strike)
    pay32 = np.float32(pay)
    v = np.float32(0.0)
    v_coarse = np.float32(0.0)
    for pass_ in range(passes):  # the same count for the whole block
        if pass_ == 1:
            v_coarse = v
        v = np.float32(v0)
        if i > n:
            v = np.float32(0.0)
        m = _pass_steps_gpu(pass_, passes, m_grid)
        v = _pcr_march(v, pay32, m, expiry, rannacher, interior, alpha, beta, gamma,
                       m_below, m_node, m_above, levels, i, n, n_threads, strike, rate, div,
                       s_lo, s_hi, is_call, is_american, sh_a, sh_b, sh_c, k_below,
                       k_above)
    if passes == 2:
        v = v + np.float32(_richardson_weight_gpu(m_grid)) * (v - v_coarse)
    sh_a[i] = v
    cuda.syncthreads()
    if i == 0:
        _write_values_at_spot(sh_a, out, opt, spot, strike, is_call, is_american, s_lo, ds, n)


@cuda.jit(device=True)
def _pcr_march(
    v: Any, pay32: Any, m: int, expiry: float, rannacher: int, interior: bool, alpha: float,
    beta: float, gamma: float, m_below: float, m_node: float, m_above: float, levels: int,
    i: int, n: int, n_threads: int, strike: float, rate: float, div: float, s_lo: float,
    s_hi: float, is_call: bool, is_american: bool, sh_a: Any, sh_b: Any, sh_c: Any,
    k_below: Any, k_above: Any,
) -> Any:
    """Thread i's node value after `m` time steps from `v` (the PCR kernel's march: a
    Rannacher start, then Crank–Nicolson, projected onto the payoff when American)."""
    dt = expiry / m
    n_implicit = min(rannacher, m)
    for phase in range(2):
        theta, step_dt, n_steps, tau0 = _rannacher_phase_gpu(phase, dt, n_implicit, m)
        if n_steps == 0:
            continue
        lo = 0.0
        di = 1.0
        up = 0.0
        e_lo = 0.0
        e_di = 0.0
        e_up = 0.0
        if interior:
            lo, di, up, e_lo, e_di, e_up = _step_coefficients_gpu(
                alpha, beta, gamma, m_below, m_node, m_above, theta, step_dt
            )
        # PCR elimination factors of this phase's matrix, once: only d changes per step
        a = np.float32(lo)
        b = np.float32(di)
        c = np.float32(up)
        for level in range(levels):
            sh_a[i] = a
            sh_b[i] = b
            sh_c[i] = c
            cuda.syncthreads()  # type: ignore[call-arg]
            stride = 1 << level
            a_bl = np.float32(0.0)
            b_bl = np.float32(1.0)
            c_bl = np.float32(0.0)
            a_ab = np.float32(0.0)
            b_ab = np.float32(1.0)
            c_ab = np.float32(0.0)
            if i >= stride:
                a_bl = sh_a[i - stride]
                b_bl = sh_b[i - stride]
                c_bl = sh_c[i - stride]
            if i + stride < n_threads:
                a_ab = sh_a[i + stride]
                b_ab = sh_b[i + stride]
                c_ab = sh_c[i + stride]
            kb, ka, a, b, c = _pcr_factors_gpu(a_bl, b_bl, c_bl, a, b, c, a_ab, b_ab, c_ab)
            k_below[level] = kb
            k_above[level] = ka
            cuda.syncthreads()
        inv_b = np.float32(1.0) / b
        ex_lo = np.float32(e_lo)
        ex_di = np.float32(e_di)
        ex_up = np.float32(e_up)
        for k in range(n_steps):
            sh_a[i] = v
            cuda.syncthreads()  # type: ignore[call-arg]
            d = np.float32(0.0)
            if interior:
                d = ex_lo * sh_a[i - 1] + ex_di * v + ex_up * sh_a[i + 1]
            elif i == 0 or i == n:
                tau = tau0 + (k + 1) * step_dt
                v_lo, v_hi = _boundary_values_gpu(
                    strike, tau, rate, div, s_lo, s_hi, is_call, is_american
                )
                d = np.float32(v_lo) if i == 0 else np.float32(v_hi)
            sh_b[i] = d
            cuda.syncthreads()
            # reduce the right-hand side level by level, ping-ponging between sh_b and sh_c
            for level in range(levels):
                stride = 1 << level
                d_bl = np.float32(0.0)
                d_ab = np.float32(0.0)
                if level % 2 == 0:
                    if i >= stride:
                        d_bl = sh_b[i - stride]
                    if i + stride < n_threads:
                        d_ab = sh_b[i + stride]
                    d = d - k_below[level] * d_bl - k_above[level] * d_ab
                    sh_c[i] = d
                else:
                    if i >= stride:
                        d_bl = sh_c[i - stride]
                    if i + stride < n_threads:
                        d_ab = sh_c[i + stride]
                    d = d - k_below[level] * d_bl - k_above[level] * d_ab
                    sh_b[i] = d
                cuda.syncthreads()
            v = d * inv_b
            if is_american and i <= n:
                v = max(v, pay32)
    return v


_kernel_cache: dict[str, Any] = {}


def fd_price_kernel() -> Any:
    """The compiled CUDA kernel (compiled on first use; disk-cached on a real GPU)."""
    kern = _kernel_cache.get("fd")
    if kern is None:
        simulated = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"
        kern = cuda.jit(cache=not simulated)(_fd_price_kernel)
        _kernel_cache["fd"] = kern
    return kern


# =========================================================================================
# CUDA kernel, lanes layout: one warp per option march (a block of one warp, or of two when
# the Richardson marches run side by side); lane l owns the P consecutive
# grid rows l·P .. l·P+P−1 (rows past node N are identity rows). Each step solves the
# tridiagonal system by Thomas's algorithm, its two sweeps run as scans across the lanes:
# a lane sweeps its own rows, five Hillis–Steele levels carry the sweep across lanes, and
# a lane adds the carried-in value times a product kept per phase. The boundary values'
# e^(−rτ) and e^(−qτ) are carried from step to step by one multiplication each (on the
# H100 a second sweep from the carried-in value, in place of the products, measured 0.1-1.3%
# slower and used as many registers). The LU pivots of the
# phase's matrix come once per phase from a scan of 2×2 matrix products (float64).
# Work per step is O(N) (PCR's is O(N log N)) and the 32-thread barriers are cheap, so
# large groups price several times faster; one option's latency is about PCR's.
# =========================================================================================

LANES = 32
SCAN_LEVELS = 5  # 2^5 = LANES
#: shared memory a lanes block may give its rows' operator coefficients (the default and
#: seed grids' 160 rows a march: 15,360 bytes, so eight blocks still fit an SM)
COEF_SHARED_BYTES = 16_384
FULL_MASK = 0xFFFFFFFF  # every lane of the warp takes part in each shuffle


def rows_per_lane(price_steps: int) -> int:
    """Rows each lane owns for `price_steps` (N+1 nodes over 32 lanes, rounded up)."""
    threads_per_option(price_steps)  # validates the range
    return (price_steps + 1 + LANES - 1) // LANES


@cuda.jit(device=True, inline="always")
def _sync_lanes(shuffle: bool) -> None:
    """The barrier between a warp's exchanges through shared memory: the warp's own on a
    GPU (`shuffle`), the block's in numba's simulator."""
    if shuffle:
        cuda.syncwarp()
    else:
        cuda.syncthreads()  # type: ignore[call-arg]

# The lanes kernel's parts, inlined where the kernel calls them (`inline="always"`, so
# the arrays stay the caller's registers): a march's rows for one phase, the factoring of
# its implicit matrix, and one time step. The kernel calls them once a march, or twice
# side by side (`_make_fd_lanes_kernel`: two marches interleaved in one warp).


@cuda.jit(device=True, inline="always")
def _lanes_phase_rows(
    rows_abc: Any, coef: Any, coef_shared: bool, warp: int, slot: int, first: int, rows: int,
    n: int,
    s_lo: float, ds: float, vol: float, rate: float, div: float, compact: bool,
    theta: float, step_dt: float, e_lo: Any, e_di: Any, e_up: Any,
) -> None:
    """A march's rows for one phase (θ, Δτ): the implicit ones into slot `slot` of
    `rows_abc` (identity at the boundaries and past node N), the explicit ones into this
    lane's e_lo/e_di/e_up; the operator's coefficients from warp `warp`'s."""
    for j in range(rows):
        r = first + j
        rows_abc[slot, 0, r] = np.float32(0.0)
        rows_abc[slot, 1, r] = np.float32(1.0)
        rows_abc[slot, 2, r] = np.float32(0.0)
        e_lo[j] = np.float32(0.0)
        e_di[j] = np.float32(0.0)
        e_up[j] = np.float32(0.0)
        if r >= 1 and r < n:
            if coef_shared:
                al = coef[warp, 0, r]
                be = coef[warp, 1, r]
                ga = coef[warp, 2, r]
                m_b = coef[warp, 3, r]
                m_n = coef[warp, 4, r]
                m_a = coef[warp, 5, r]
            else:
                al, be, ga, m_b, m_n, m_a = _node_coefficients_gpu(
                    s_lo + r * ds, ds, vol, rate, div, compact
                )
            lo, di, up, x_lo, x_di, x_up = _step_coefficients_gpu(
                al, be, ga, m_b, m_n, m_a, theta, step_dt
            )
            # the same float32 rows as the PCR kernel, solved in float64 here
            rows_abc[slot, 0, r] = np.float32(lo)
            rows_abc[slot, 1, r] = np.float32(di)
            rows_abc[slot, 2, r] = np.float32(up)
            e_lo[j] = np.float32(x_lo)
            e_di[j] = np.float32(x_di)
            e_up[j] = np.float32(x_up)


@cuda.jit(device=True, inline="always")
def _lanes_factor(
    rows_abc: Any, c_last: Any, mbuf: Any, buf: Any, warp: int, lane: int, first: int,
    rows: int, shuffle: bool, fwd: Any, bwd: Any, fwd_cum: Any, bwd_cum: Any, inv_u: Any,
    fwd_level: Any, bwd_level: Any,
) -> None:
    """Factor a march's implicit matrix (`rows_abc`): this lane's sweep multipliers, pivots
    and their products, and the scans' multipliers of each level."""
    P = rows
    # LU pivots u_r = p_r/p_{r−1}, p_r = b_r·p_{r−1} − a_r·c_{r−1}·p_{r−2}: each
    # lane multiplies its rows' 2×2 matrices, a scan multiplies across lanes
    c_last[warp, lane] = np.float64(rows_abc[warp, 2, first + P - 1])
    _sync_lanes(shuffle)
    c_prev = 0.0
    if lane > 0:
        c_prev = c_last[warp, lane - 1]
    q00 = 1.0
    q01 = 0.0
    q10 = 0.0
    q11 = 1.0
    cp = c_prev
    for j in range(P):
        a_j = np.float64(rows_abc[warp, 0, first + j])
        b_j = np.float64(rows_abc[warp, 1, first + j])
        t = -a_j * cp
        n00 = b_j * q00 + t * q10
        n01 = b_j * q01 + t * q11
        q10 = q00
        q11 = q01
        q00 = n00
        q01 = n01
        # one reciprocal, four products: float64 division is a long
        # subroutine on the GPU, and any common scale of the pair will do
        inv_big = 1.0 / max(abs(q00), abs(q01), abs(q10), abs(q11))
        q00 *= inv_big
        q01 *= inv_big
        q10 *= inv_big
        q11 *= inv_big
        cp = np.float64(rows_abc[warp, 2, first + j])
    for level in range(SCAN_LEVELS):
        k = level % 2
        mbuf[warp, k, 0, lane] = q00
        mbuf[warp, k, 1, lane] = q01
        mbuf[warp, k, 2, lane] = q10
        mbuf[warp, k, 3, lane] = q11
        _sync_lanes(shuffle)
        stride = 1 << level
        if lane >= stride:  # this lane's product applies after the earlier one
            r00 = mbuf[warp, k, 0, lane - stride]
            r01 = mbuf[warp, k, 1, lane - stride]
            r10 = mbuf[warp, k, 2, lane - stride]
            r11 = mbuf[warp, k, 3, lane - stride]
            n00 = q00 * r00 + q01 * r10
            n01 = q00 * r01 + q01 * r11
            n10 = q10 * r00 + q11 * r10
            n11 = q10 * r01 + q11 * r11
            inv_big = 1.0 / max(abs(n00), abs(n01), abs(n10), abs(n11))
            q00 = n00 * inv_big
            q01 = n01 * inv_big
            q10 = n10 * inv_big
            q11 = n11 * inv_big
    k = SCAN_LEVELS % 2
    mbuf[warp, k, 0, lane] = q00
    mbuf[warp, k, 2, lane] = q10
    _sync_lanes(shuffle)
    inv_prev = 1.0  # 1/u_{first−1}
    if lane > 0:  # (p_{first−1}, p_{first−2}) = the earlier lanes' product·(1, 0)
        inv_prev = mbuf[warp, k, 2, lane - 1] / mbuf[warp, k, 0, lane - 1]
    cp = c_prev
    f_all = np.float32(1.0)  # Π fwd over this lane's rows
    for j in range(P):
        # two float64 reciprocals a row (the pivot's, carried to the next row)
        # in place of four divisions
        a_j = np.float64(rows_abc[warp, 0, first + j])
        b_j = np.float64(rows_abc[warp, 1, first + j])
        c_j = np.float64(rows_abc[warp, 2, first + j])
        t = a_j * cp
        f = 0.0
        u = b_j
        if t != 0.0:
            u = b_j - t * inv_prev
        if a_j != 0.0:
            f = -a_j * inv_prev
        fwd[j] = np.float32(f)
        f_all *= np.float32(f)
        fwd_cum[j] = f_all
        inv_prev = 1.0 / u
        inv_u[j] = np.float32(inv_prev)
        bwd[j] = np.float32(-c_j * inv_prev)
        cp = c_j
    g_all = np.float32(1.0)  # Π bwd over this lane's rows
    for jj in range(P):
        j = P - 1 - jj
        g_all *= bwd[j]
        bwd_cum[j] = g_all
    # the scans' multipliers of each level (they depend on the matrix only)
    for level in range(SCAN_LEVELS):
        k = level % 2
        buf[warp, k, lane] = f_all
        mbuf[warp, k, 0, lane] = np.float64(g_all)
        _sync_lanes(shuffle)
        stride = 1 << level
        # 0 where the scan's partner lane is outside the warp
        fwd_level[level] = f_all if lane >= stride else np.float32(0.0)
        bwd_level[level] = g_all if lane + stride < LANES else np.float32(0.0)
        if lane >= stride:
            f_all *= buf[warp, k, lane - stride]
        if lane + stride < LANES:
            g_all *= np.float32(mbuf[warp, k, 0, lane + stride])
    _sync_lanes(shuffle)


@cuda.jit(device=True, inline="always")
def _lanes_factor_pair(
    rows_abc: Any, c_last: Any, mbuf: Any, buf: Any, lane: int, first: int, rows: int,
    shuffle: bool, factors: Any, factors2: Any,
) -> None:
    """`_lanes_factor` of two marches at once, their implicit rows in slots 0 and 1 of
    `rows_abc` (a one-warp block leaves slot 1, the second warp's, free), each step of
    the one beside the same step of the other: the float64 reciprocals and the scans'
    round trips through shared memory of one march overlap the other's. `factors` (slot
    0) and `factors2` (slot 1) are (fwd, bwd, fwd_cum, bwd_cum, inv_u, fwd_level,
    bwd_level); each march's arithmetic is `_lanes_factor`'s."""
    fwd, bwd, fwd_cum, bwd_cum, inv_u, fwd_level, bwd_level = factors
    fwd2, bwd2, fwd_cum2, bwd_cum2, inv_u2, fwd_level2, bwd_level2 = factors2
    P = rows
    c_last[0, lane] = np.float64(rows_abc[0, 2, first + P - 1])
    c_last[1, lane] = np.float64(rows_abc[1, 2, first + P - 1])
    _sync_lanes(shuffle)
    c_prev = 0.0
    c_prev2 = 0.0
    if lane > 0:
        c_prev = c_last[0, lane - 1]
        c_prev2 = c_last[1, lane - 1]
    q00 = 1.0
    q01 = 0.0
    q10 = 0.0
    q11 = 1.0
    s00 = 1.0
    s01 = 0.0
    s10 = 0.0
    s11 = 1.0
    cp = c_prev
    cp2 = c_prev2
    for j in range(P):
        a_j = np.float64(rows_abc[0, 0, first + j])
        b_j = np.float64(rows_abc[0, 1, first + j])
        a2 = np.float64(rows_abc[1, 0, first + j])
        b2 = np.float64(rows_abc[1, 1, first + j])
        t = -a_j * cp
        t2 = -a2 * cp2
        n00 = b_j * q00 + t * q10
        n01 = b_j * q01 + t * q11
        m00 = b2 * s00 + t2 * s10
        m01 = b2 * s01 + t2 * s11
        q10 = q00
        q11 = q01
        q00 = n00
        q01 = n01
        s10 = s00
        s11 = s01
        s00 = m00
        s01 = m01
        inv_big = 1.0 / max(abs(q00), abs(q01), abs(q10), abs(q11))
        inv_big2 = 1.0 / max(abs(s00), abs(s01), abs(s10), abs(s11))
        q00 *= inv_big
        q01 *= inv_big
        q10 *= inv_big
        q11 *= inv_big
        s00 *= inv_big2
        s01 *= inv_big2
        s10 *= inv_big2
        s11 *= inv_big2
        cp = np.float64(rows_abc[0, 2, first + j])
        cp2 = np.float64(rows_abc[1, 2, first + j])
    for level in range(SCAN_LEVELS):
        k = level % 2
        mbuf[0, k, 0, lane] = q00
        mbuf[0, k, 1, lane] = q01
        mbuf[0, k, 2, lane] = q10
        mbuf[0, k, 3, lane] = q11
        mbuf[1, k, 0, lane] = s00
        mbuf[1, k, 1, lane] = s01
        mbuf[1, k, 2, lane] = s10
        mbuf[1, k, 3, lane] = s11
        _sync_lanes(shuffle)
        stride = 1 << level
        if lane >= stride:
            r00 = mbuf[0, k, 0, lane - stride]
            r01 = mbuf[0, k, 1, lane - stride]
            r10 = mbuf[0, k, 2, lane - stride]
            r11 = mbuf[0, k, 3, lane - stride]
            u00 = mbuf[1, k, 0, lane - stride]
            u01 = mbuf[1, k, 1, lane - stride]
            u10 = mbuf[1, k, 2, lane - stride]
            u11 = mbuf[1, k, 3, lane - stride]
            n00 = q00 * r00 + q01 * r10
            n01 = q00 * r01 + q01 * r11
            n10 = q10 * r00 + q11 * r10
            n11 = q10 * r01 + q11 * r11
            m00 = s00 * u00 + s01 * u10
            m01 = s00 * u01 + s01 * u11
            m10 = s10 * u00 + s11 * u10
            m11 = s10 * u01 + s11 * u11
            inv_big = 1.0 / max(abs(n00), abs(n01), abs(n10), abs(n11))
            inv_big2 = 1.0 / max(abs(m00), abs(m01), abs(m10), abs(m11))
            q00 = n00 * inv_big
            q01 = n01 * inv_big
            q10 = n10 * inv_big
            q11 = n11 * inv_big
            s00 = m00 * inv_big2
            s01 = m01 * inv_big2
            s10 = m10 * inv_big2
            s11 = m11 * inv_big2
    k = SCAN_LEVELS % 2
    mbuf[0, k, 0, lane] = q00
    mbuf[0, k, 2, lane] = q10
    mbuf[1, k, 0, lane] = s00
    mbuf[1, k, 2, lane] = s10
    _sync_lanes(shuffle)
    inv_prev = 1.0
    inv_prev2 = 1.0
    if lane > 0:
        inv_prev = mbuf[0, k, 2, lane - 1] / mbuf[0, k, 0, lane - 1]
        inv_prev2 = mbuf[1, k, 2, lane - 1] / mbuf[1, k, 0, lane - 1]
    cp = c_prev
    cp2 = c_prev2
    f_all = np.float32(1.0)
    f_all2 = np.float32(1.0)
    for j in range(P):
        a_j = np.float64(rows_abc[0, 0, first + j])
        b_j = np.float64(rows_abc[0, 1, first + j])
        c_j = np.float64(rows_abc[0, 2, first + j])
        a2 = np.float64(rows_abc[1, 0, first + j])
        b2 = np.float64(rows_abc[1, 1, first + j])
        c2 = np.float64(rows_abc[1, 2, first + j])
        t = a_j * cp
        t2 = a2 * cp2
        f = 0.0
        f2 = 0.0
        u = b_j
        u2 = b2
        if t != 0.0:
            u = b_j - t * inv_prev
        if t2 != 0.0:
            u2 = b2 - t2 * inv_prev2
        if a_j != 0.0:
            f = -a_j * inv_prev
        if a2 != 0.0:
            f2 = -a2 * inv_prev2
        fwd[j] = np.float32(f)
        fwd2[j] = np.float32(f2)
        f_all *= np.float32(f)
        f_all2 *= np.float32(f2)
        fwd_cum[j] = f_all
        fwd_cum2[j] = f_all2
        inv_prev = 1.0 / u
        inv_prev2 = 1.0 / u2
        inv_u[j] = np.float32(inv_prev)
        inv_u2[j] = np.float32(inv_prev2)
        bwd[j] = np.float32(-c_j * inv_prev)
        bwd2[j] = np.float32(-c2 * inv_prev2)
        cp = c_j
        cp2 = c2
    g_all = np.float32(1.0)
    g_all2 = np.float32(1.0)
    for jj in range(P):
        j = P - 1 - jj
        g_all *= bwd[j]
        g_all2 *= bwd2[j]
        bwd_cum[j] = g_all
        bwd_cum2[j] = g_all2
    for level in range(SCAN_LEVELS):
        k = level % 2
        buf[0, k, lane] = f_all
        buf[1, k, lane] = f_all2
        mbuf[0, k, 0, lane] = np.float64(g_all)
        mbuf[1, k, 0, lane] = np.float64(g_all2)
        _sync_lanes(shuffle)
        stride = 1 << level
        fwd_level[level] = f_all if lane >= stride else np.float32(0.0)
        fwd_level2[level] = f_all2 if lane >= stride else np.float32(0.0)
        bwd_level[level] = g_all if lane + stride < LANES else np.float32(0.0)
        bwd_level2[level] = g_all2 if lane + stride < LANES else np.float32(0.0)
        if lane >= stride:
            f_all *= buf[0, k, lane - stride]
            f_all2 *= buf[1, k, lane - stride]
        if lane + stride < LANES:
            g_all *= np.float32(mbuf[0, k, 0, lane + stride])
            g_all2 *= np.float32(mbuf[1, k, 0, lane + stride])
    _sync_lanes(shuffle)


@cuda.jit(device=True, inline="always")
def _carry(
    acc: np.float32, level_factor: Any, has_neighbour: np.float32, down: bool, shuffle: bool,
    buf: Any, warp: int, lane: int,
) -> np.float32:
    """A march's sweep carried across the warp's lanes (`_lanes_step`): a scan whose
    level's multiplier is 0 where the partner lane is outside the warp, then the value of
    the lane before (the forward sweep, `down` False) or after; times 0 at the warp's
    edge. Through shuffles, or (the simulator) shared memory and barriers: buffer 0 at
    the first level, after the other scan's last read from buffer 1."""
    if shuffle:
        for level in range(SCAN_LEVELS):
            if down:
                other = cuda.shfl_down_sync(FULL_MASK, acc, 1 << level)
            else:
                other = cuda.shfl_up_sync(FULL_MASK, acc, 1 << level)
            acc += level_factor[level] * other
        if down:
            other = cuda.shfl_down_sync(FULL_MASK, acc, 1)
        else:
            other = cuda.shfl_up_sync(FULL_MASK, acc, 1)
        return other * has_neighbour
    step = 1 if down else -1
    for level in range(SCAN_LEVELS):
        k = level % 2
        buf[warp, k, lane] = acc
        cuda.syncthreads()  # type: ignore[call-arg]
        other = buf[warp, k, (lane + step * (1 << level)) % LANES]
        acc += level_factor[level] * other
    k = SCAN_LEVELS % 2
    buf[warp, k, lane] = acc
    cuda.syncthreads()  # type: ignore[call-arg]
    other = buf[warp, k, (lane + step) % LANES]
    return other * has_neighbour


@cuda.jit(device=True, inline="always")
def _lanes_step(
    v: Any, pay: Any, e_lo: Any, e_di: Any, e_up: Any, edge_w: Any, fwd: Any, fwd_cum: Any,
    bwd: Any, bwd_cum: Any, inv_u: Any, work: Any, fwd_level: Any, bwd_level: Any,
    has_below: np.float32, has_above: np.float32, d_edge: np.float32, edge: Any, bounds: Any,
    takes_lo: bool, takes_hi: bool, project: bool, rows: int, shuffle: bool, edge_first: Any,
    edge_last: Any, buf: Any, warp: int, lane: int,
) -> np.float32:
    """One time step of a march: this lane's rows of v advanced (projected onto `pay` when
    `project`). `edge` carries (e^(−rτ), e^(−qτ), their factors a step) and `bounds`
    (K, S_lo, S_hi, K − S_lo, S_hi − K floors); returns the next step's boundary value.
    Where the float64 work goes in the source sets where the compiler leaves it among the
    shuffles (which it keeps in order): the products first, the value last, as the
    compiler had scheduled them when this was the kernel's own loop body (benchmarks/
    results/h200-2026-11-28g)."""
    P = rows
    edge[0] *= edge[2]  # the next step's e^(−rτ) and e^(−qτ), ahead of the shuffles
    edge[1] *= edge[3]
    if shuffle:
        from_below = cuda.shfl_up_sync(FULL_MASK, v[P - 1], 1)
        from_above = cuda.shfl_down_sync(FULL_MASK, v[0], 1)
    else:
        edge_first[warp, lane] = v[0]
        edge_last[warp, lane] = v[P - 1]
        cuda.syncthreads()  # type: ignore[call-arg]
        from_below = edge_last[warp, (lane - 1) % LANES]
        from_above = edge_first[warp, (lane + 1) % LANES]
    v_before = from_below * has_below
    v_after = from_above * has_above
    # right-hand side, then the forward sweep over this lane's rows from 0
    y = np.float32(0.0)
    for j in range(P):
        below = v_before
        if j > 0:
            below = v[j - 1]
        above = v_after
        if j < P - 1:
            above = v[j + 1]
        d = e_lo[j] * below + e_di[j] * v[j] + e_up[j] * above + edge_w[j] * d_edge
        y = d + fwd[j] * y
        work[j] = y
    # carry the forward sweep across the lanes
    carry = _carry(y, fwd_level, has_below, False, shuffle, buf, warp, lane)
    # backward sweep over this lane's rows (with the carried-in forward value)
    x = np.float32(0.0)
    for jj in range(P):
        j = P - 1 - jj
        yj = work[j] + fwd_cum[j] * carry
        x = yj * inv_u[j] + bwd[j] * x
        work[j] = x
    carry = _carry(x, bwd_level, has_above, True, shuffle, buf, warp, lane)
    for j in range(P):
        x = work[j] + bwd_cum[j] * carry
        # rows past node N stay 0 (their payoff is 0, their rows identity)
        if project:
            x = max(x, pay[j])
        v[j] = x
    return _edge_value_gpu(bounds[0], edge[0], edge[1], bounds[1], bounds[2], bounds[3],
                           bounds[4], takes_lo, takes_hi)


@cuda.jit(device=True, inline="always")
def _carry_pair(
    acc: np.float32, acc2: np.float32, level_factor: Any, level_factor2: Any,
    has_neighbour: np.float32, down: bool,
) -> tuple[np.float32, np.float32]:
    """Two marches' sweeps carried across the lanes together (`_lanes_step_pair`): the
    scan's levels, each level's two shuffles side by side, then the value of the lane
    before (from below, `down` False) or after; times 0 at the warp's edge."""
    for level in range(SCAN_LEVELS):
        if down:
            other = cuda.shfl_down_sync(FULL_MASK, acc, 1 << level)
            other2 = cuda.shfl_down_sync(FULL_MASK, acc2, 1 << level)
        else:
            other = cuda.shfl_up_sync(FULL_MASK, acc, 1 << level)
            other2 = cuda.shfl_up_sync(FULL_MASK, acc2, 1 << level)
        acc += level_factor[level] * other
        acc2 += level_factor2[level] * other2
    if down:
        other = cuda.shfl_down_sync(FULL_MASK, acc, 1)
        other2 = cuda.shfl_down_sync(FULL_MASK, acc2, 1)
    else:
        other = cuda.shfl_up_sync(FULL_MASK, acc, 1)
        other2 = cuda.shfl_up_sync(FULL_MASK, acc2, 1)
    return other * has_neighbour, other2 * has_neighbour


@cuda.jit(device=True, inline="always")
def _lanes_step_pair(
    march: Any, d_edge: np.float32, edge: Any, march2: Any, d_edge2: np.float32, edge2: Any,
    pay: Any, edge_w: Any, has_below: np.float32, has_above: np.float32, bounds: Any,
    takes_lo: bool, takes_hi: bool, rows: int, shuffle: bool, edge_first: Any,
    edge_last: Any, buf: Any, warp: int, lane: int,
) -> tuple[np.float32, np.float32]:
    """One time step of two marches of an American option (projected), each the same
    arithmetic as `_lanes_step`, their shuffles issued in pairs: the compiler keeps
    shuffles in the order written, so one march's shuffle latency is spent on the
    other's. A march is its arrays (v, e_lo, e_di, e_up, fwd, fwd_cum, bwd, bwd_cum, inv_u,
    work, fwd_level, bwd_level) as a tuple: Python passes at most 30 arguments one by one.
    Returns both next boundary values. (The simulator: one after the other.)"""
    (v, e_lo, e_di, e_up, fwd, fwd_cum, bwd, bwd_cum, inv_u, work, fwd_level,
     bwd_level) = march
    (v2, e_lo2, e_di2, e_up2, fwd2, fwd_cum2, bwd2, bwd_cum2, inv_u2, work2, fwd_level2,
     bwd_level2) = march2
    if not shuffle:
        d_next = _lanes_step(v, pay, e_lo, e_di, e_up, edge_w, fwd, fwd_cum, bwd, bwd_cum,
                             inv_u, work, fwd_level, bwd_level, has_below, has_above, d_edge,
                             edge, bounds, takes_lo, takes_hi, True, rows, shuffle,
                             edge_first, edge_last, buf, warp, lane)
        d_next2 = _lanes_step(v2, pay, e_lo2, e_di2, e_up2, edge_w, fwd2, fwd_cum2, bwd2,
                              bwd_cum2, inv_u2, work2, fwd_level2, bwd_level2, has_below,
                              has_above, d_edge2, edge2, bounds, takes_lo, takes_hi, True, rows,
                              shuffle, edge_first, edge_last, buf, warp, lane)
        return d_next, d_next2
    P = rows
    from_below = cuda.shfl_up_sync(FULL_MASK, v[P - 1], 1)
    from_below2 = cuda.shfl_up_sync(FULL_MASK, v2[P - 1], 1)
    from_above = cuda.shfl_down_sync(FULL_MASK, v[0], 1)
    from_above2 = cuda.shfl_down_sync(FULL_MASK, v2[0], 1)
    v_before = from_below * has_below
    v_before2 = from_below2 * has_below
    v_after = from_above * has_above
    v_after2 = from_above2 * has_above
    y = np.float32(0.0)
    y2 = np.float32(0.0)
    for j in range(P):
        below = v_before
        below2 = v_before2
        if j > 0:
            below = v[j - 1]
            below2 = v2[j - 1]
        above = v_after
        above2 = v_after2
        if j < P - 1:
            above = v[j + 1]
            above2 = v2[j + 1]
        d = e_lo[j] * below + e_di[j] * v[j] + e_up[j] * above + edge_w[j] * d_edge
        d2 = e_lo2[j] * below2 + e_di2[j] * v2[j] + e_up2[j] * above2 + edge_w[j] * d_edge2
        y = d + fwd[j] * y
        y2 = d2 + fwd2[j] * y2
        work[j] = y
        work2[j] = y2
    carry, carry2 = _carry_pair(y, y2, fwd_level, fwd_level2, has_below, False)
    edge[0] *= edge[2]
    edge[1] *= edge[3]
    edge2[0] *= edge2[2]
    edge2[1] *= edge2[3]
    d_next = _edge_value_gpu(bounds[0], edge[0], edge[1], bounds[1], bounds[2], bounds[3],
                             bounds[4], takes_lo, takes_hi)
    d_next2 = _edge_value_gpu(bounds[0], edge2[0], edge2[1], bounds[1], bounds[2], bounds[3],
                              bounds[4], takes_lo, takes_hi)
    x = np.float32(0.0)
    x2 = np.float32(0.0)
    for jj in range(P):
        j = P - 1 - jj
        yj = work[j] + fwd_cum[j] * carry
        yj2 = work2[j] + fwd_cum2[j] * carry2
        x = yj * inv_u[j] + bwd[j] * x
        x2 = yj2 * inv_u2[j] + bwd2[j] * x2
        work[j] = x
        work2[j] = x2
    carry, carry2 = _carry_pair(x, x2, bwd_level, bwd_level2, has_above, True)
    for j in range(P):
        v[j] = max(work[j] + bwd_cum[j] * carry, pay[j])
        v2[j] = max(work2[j] + bwd_cum2[j] * carry2, pay[j])
    return d_next, d_next2


@cuda.jit(device=True, inline="always")
def _lanes_edge_start(
    edge: Any, bounds: Any, rate: float, div: float, tau0: float, step_dt: float,
    takes_lo: bool, takes_hi: bool,
) -> np.float32:
    """A phase's boundary-value state (`_lanes_step`'s `edge`) and its first step's value:
    every lane computes it (no divergence in the loop), one step ahead."""
    edge[0] = math.exp(-rate * tau0)
    edge[1] = math.exp(-div * tau0)
    edge[2] = math.exp(-rate * step_dt)
    edge[3] = math.exp(-div * step_dt)
    edge[0] *= edge[2]
    edge[1] *= edge[3]
    return _edge_value_gpu(bounds[0], edge[0], edge[1], bounds[1], bounds[2], bounds[3],
                           bounds[4], takes_lo, takes_hi)


@cuda.jit(device=True, inline="always")
def _lanes_start_values(
    v: Any, pay: Any, first: int, rows: int, n: int, s_lo: float, ds: float, strike: float,
    is_call: bool, smooth: bool, j_strike: int,
) -> None:
    """A march's start: this lane's rows of the payoff (`pay`, the exercise values) and of
    the (smoothed) payoff as the values at expiry (`v`); 0 past node N."""
    for j in range(rows):
        r = first + j
        v[j] = np.float32(0.0)
        pay[j] = np.float32(0.0)
        if r <= n:
            s = s_lo + r * ds
            p = _payoff_gpu(s, strike, is_call)
            v0 = p
            if smooth and r >= 1 and r < n:
                v0 += ds * _payoff_smoothing_gpu(r - j_strike)
            v[j] = np.float32(v0)
            pay[j] = np.float32(p)


def _make_fd_lanes_kernel(rows: int, shuffle: bool, interleave: bool = True) -> Any:
    """The lanes kernel for P = `rows` rows per lane (P fixes the per-lane arrays). Each
    step's exchanges between lanes go through warp shuffles (`shuffle`, a real GPU) or
    through shared memory and barriers (numba's CUDA simulator has no shuffles; the
    arithmetic is the same).

    Launched with one warp per option, the warp runs an option's two marches side by side
    (`interleave`, rows of at most five a lane: their factoring and each of the coarse
    march's steps paired with the fine march's, `_lanes_factor_pair`, `_lanes_step_pair`),
    or one after the other (without `interleave`, or an option with one march); with two
    warps (`fd_kernel(..., split_passes=True)`), an option extrapolated in time
    (`time_passes` = 2) has its coarse march on the second warp while the first runs the
    grid's, so the option is done after one march's time instead of one and a half; the
    second warp of any other option returns at once. Each warp's exchanges stay within
    the warp (`cuda.syncwarp`; the simulator's block-wide barriers wait only for live
    threads, and each warp has its own shared buffers), and one block barrier hands the
    coarse values over."""
    P = rows
    SHUFFLE = shuffle
    # two marches' registers side by side only where a lane's rows are few (the default
    # and seed grids' five): more would spill
    INTERLEAVE = interleave and P <= 5
    ROWS = P * LANES  # grid rows of a march, node N's and the padding past it included
    # the rows' operator coefficients kept in shared memory (float64, one copy a warp) where
    # they fit beside eight blocks an SM; a larger grid computes them again each phase
    COEF_SHARED = 2 * 6 * ROWS * 8 <= COEF_SHARED_BYTES
    COEF_ROWS = ROWS if COEF_SHARED else 1

    def kernel(
        params: Any,
        out: Any,
        price_steps: int,
        dt_target: float,
        fixed_steps: int,
        min_steps: int,
        rannacher: int,
        domain: int,
        smax_mult: float,
        width: float,
        compact: bool,
        smooth: bool,
        richardson: bool,
        spot_at: float,
    ) -> None:
        opt: int = cuda.blockIdx.x  # type: ignore[assignment]
        tid: int = cuda.threadIdx.x  # type: ignore[assignment]
        n_warps: int = cuda.blockDim.x // LANES  # type: ignore[operator]
        lane = tid % LANES
        warp = tid // LANES
        row = cuda.shared.array(N_PARAMS, np.float64)
        sh_v = cuda.shared.array(ROWS, np.float32)
        sh_vc = cuda.shared.array(ROWS, np.float32)  # the coarse march's values
        # each row's operator coefficients (α, β, γ of L; m₋, m₀, m₊ of M), the same for
        # every march and phase of the option: computed once, not once a phase
        coef = cuda.shared.array((2, 6, COEF_ROWS), np.float64)
        edge_first = cuda.shared.array((2, LANES), np.float32)
        edge_last = cuda.shared.array((2, LANES), np.float32)
        buf = cuda.shared.array((2, 2, LANES), np.float32)
        mbuf = cuda.shared.array((2, 2, 4, LANES), np.float64)
        c_last = cuda.shared.array((2, LANES), np.float64)
        v = cuda.local.array(P, np.float32)
        pay = cuda.local.array(P, np.float32)
        e_lo = cuda.local.array(P, np.float32)
        e_di = cuda.local.array(P, np.float32)
        e_up = cuda.local.array(P, np.float32)
        fwd = cuda.local.array(P, np.float32)  # −l_r: y_r = d_r + fwd_r·y_{r−1}
        bwd = cuda.local.array(P, np.float32)  # −c_r/u_r: x_r = y_r/u_r + bwd_r·x_{r+1}
        fwd_cum = cuda.local.array(P, np.float32)  # Π fwd from the lane's first row to r
        bwd_cum = cuda.local.array(P, np.float32)  # Π bwd from r to the lane's last row
        inv_u = cuda.local.array(P, np.float32)
        work = cuda.local.array(P, np.float32)
        edge_w = cuda.local.array(P, np.float32)  # 1 on a boundary row (S_lo or S_hi), else 0
        # the implicit rows (float32 values) in shared memory, each lane its own: read only
        # while the march factors them, so they take no registers from the steps
        rows_abc = cuda.shared.array((2, 3, ROWS), np.float32)
        fwd_level = cuda.local.array(SCAN_LEVELS, np.float32)
        bwd_level = cuda.local.array(SCAN_LEVELS, np.float32)
        # the coarse march's own, where both marches run side by side (`interleaved`)
        v_c = cuda.local.array(P, np.float32)
        e_lo_c = cuda.local.array(P, np.float32)
        e_di_c = cuda.local.array(P, np.float32)
        e_up_c = cuda.local.array(P, np.float32)
        fwd_c = cuda.local.array(P, np.float32)
        bwd_c = cuda.local.array(P, np.float32)
        fwd_cum_c = cuda.local.array(P, np.float32)
        bwd_cum_c = cuda.local.array(P, np.float32)
        inv_u_c = cuda.local.array(P, np.float32)
        work_c = cuda.local.array(P, np.float32)
        fwd_level_c = cuda.local.array(SCAN_LEVELS, np.float32)
        bwd_level_c = cuda.local.array(SCAN_LEVELS, np.float32)
        if tid < N_PARAMS:
            row[tid] = params[opt, tid]
        cuda.syncthreads()  # type: ignore[call-arg]
        spot, strike, expiry, vol, rate, div, is_call, is_american = _row_in_shared(row)
        if spot_at > 0.0:  # a group's spot, a parameter of its launch (`launch_args`)
            spot = spot_at
        if expiry <= 0.0 or vol <= 0.0:  # the same for the whole block
            if tid == 0:
                _write_closed_form(out, opt, spot, strike, expiry, vol, rate, div, is_call,
                                   is_american)
            return

        n = price_steps
        s_lo, ds = _grid_bounds_gpu(spot, strike, expiry, vol, domain, smax_mult, width, n)
        s_hi = s_lo + n * ds
        m_grid = _time_steps_gpu(expiry, dt_target, fixed_steps, min_steps)
        passes = _time_passes_gpu(richardson, is_american, m_grid)
        split = n_warps == 2 and passes == 2  # the same for the whole block
        if warp > 0 and not split:
            return
        first_pass = 0
        end_pass = passes
        if split:  # warp 0: the grid's march (pass 1); warp 1: the coarse one (pass 0)
            first_pass = 1 - warp
            end_pass = first_pass + 1
        # one warp an option extrapolated in time: its two marches side by side, each time
        # step of the coarse one paired with one of the fine one's (two independent chains
        # of shuffles, where one after the other the warp waits on each in turn), when
        # their Rannacher starts line up
        interleaved = (INTERLEAVE and passes == 2 and not split
                       and min(rannacher, _pass_steps_gpu(0, passes, m_grid))
                       == min(rannacher, m_grid))
        if interleaved:
            end_pass = first_pass  # (no march is left for the loop one after the other)
        first = lane * P
        j_strike = int(math.floor((strike - s_lo) / ds + 0.5))
        # The step's branches on the lane and the row, as multipliers fixed for the kernel:
        # a lane's neighbours' values and carries are taken times 1 or 0, and a boundary
        # row's value is added to its right-hand side (its explicit row is all zeros):
        # fewer instructions a step, whose chain of them is the option's latency.
        has_below = np.float32(1.0 if lane > 0 else 0.0)
        has_above = np.float32(1.0 if lane < LANES - 1 else 0.0)
        for j in range(P):
            edge_w[j] = np.float32(1.0 if first + j == 0 or first + j == n else 0.0)
        takes_lo = lane == 0 and not is_call
        takes_hi = lane > 0 and is_call
        # a lane's own rows only (no exchange, so no barrier)
        if COEF_SHARED:
            for j in range(P):
                r = first + j
                if r < 1 or r >= n:
                    continue
                al, be, ga, m_b, m_n, m_a = _node_coefficients_gpu(
                    s_lo + r * ds, ds, vol, rate, div, compact
                )
                coef[warp, 0, r] = al
                coef[warp, 1, r] = be
                coef[warp, 2, r] = ga
                coef[warp, 3, r] = m_b
                coef[warp, 4, r] = m_n
                coef[warp, 5, r] = m_a
        # the boundary values' constants and, a march each, (e^(−rτ), e^(−qτ)) with their
        # factors a step (float64, carried step to step by one multiplication each)
        bounds = cuda.local.array(5, np.float64)
        bounds[0] = strike
        bounds[1] = s_lo
        bounds[2] = s_hi
        bounds[3] = strike - s_lo if is_american else -math.inf  # the exercise floors
        bounds[4] = s_hi - strike if is_american else -math.inf
        edge = cuda.local.array(4, np.float64)
        edge_c = cuda.local.array(4, np.float64)
        if interleaved:
            _lanes_start_values(v, pay, first, P, n, s_lo, ds, strike, is_call, smooth,
                                j_strike)
            for j in range(P):
                v_c[j] = v[j]
            # both marches' phases line up: the same Rannacher half steps, then the coarse
            # march's Crank–Nicolson steps beside the fine one's first, then the fine alone
            m_c = _pass_steps_gpu(0, passes, m_grid)
            dt_c = expiry / m_c
            dt = expiry / m_grid
            n_implicit = min(rannacher, m_grid)
            factored = False  # the same for the whole warp
            for phase in range(2):
                theta_c, step_c, n_c, tau_c = _rannacher_phase_gpu(phase, dt_c, n_implicit, m_c)
                theta, step_dt, n_steps, tau0 = _rannacher_phase_gpu(phase, dt, n_implicit,
                                                                     m_grid)
                if n_steps == 0:
                    continue
                # the coarse march's rows in the free second slot, the fine one's in the
                # first, both factored at once
                _lanes_phase_rows(rows_abc, coef, COEF_SHARED, warp, 1, first, P, n, s_lo, ds,
                                  vol, rate, div, compact, theta_c, step_c, e_lo_c, e_di_c,
                                  e_up_c)
                _lanes_phase_rows(rows_abc, coef, COEF_SHARED, warp, 0, first, P, n, s_lo, ds,
                                  vol, rate, div, compact, theta, step_dt, e_lo, e_di, e_up)
                if not factored:
                    _lanes_factor_pair(rows_abc, c_last, mbuf, buf, lane, first, P, SHUFFLE,
                                       (fwd, bwd, fwd_cum, bwd_cum, inv_u, fwd_level,
                                        bwd_level),
                                       (fwd_c, bwd_c, fwd_cum_c, bwd_cum_c, inv_u_c,
                                        fwd_level_c, bwd_level_c))
                    factored = True
                coarse = (v_c, e_lo_c, e_di_c, e_up_c, fwd_c, fwd_cum_c, bwd_c, bwd_cum_c,
                          inv_u_c, work_c, fwd_level_c, bwd_level_c)
                fine = (v, e_lo, e_di, e_up, fwd, fwd_cum, bwd, bwd_cum, inv_u, work,
                        fwd_level, bwd_level)
                d_edge_c = _lanes_edge_start(edge_c, bounds, rate, div, tau_c, step_c,
                                             takes_lo, takes_hi)
                d_edge = _lanes_edge_start(edge, bounds, rate, div, tau0, step_dt, takes_lo,
                                           takes_hi)
                for _step in range(n_c):
                    d_edge_c, d_edge = _lanes_step_pair(
                        coarse, d_edge_c, edge_c, fine, d_edge, edge, pay, edge_w, has_below,
                        has_above, bounds, takes_lo, takes_hi, P, SHUFFLE, edge_first,
                        edge_last, buf, warp, lane)
                for _step in range(n_c, n_steps):
                    d_edge = _lanes_step(v, pay, e_lo, e_di, e_up, edge_w, fwd, fwd_cum, bwd,
                                         bwd_cum, inv_u, work, fwd_level, bwd_level, has_below,
                                         has_above, d_edge, edge, bounds, takes_lo, takes_hi,
                                         True, P, SHUFFLE, edge_first, edge_last, buf, warp,
                                         lane)
            for j in range(P):
                sh_vc[first + j] = v_c[j]
        for pass_ in range(first_pass, end_pass):  # the same count for the whole warp
            m = _pass_steps_gpu(pass_, passes, m_grid)
            dt = expiry / m
            n_implicit = min(rannacher, m)
            _lanes_start_values(v, pay, first, P, n, s_lo, ds, strike, is_call, smooth,
                                j_strike)
            factored = False  # the same for the whole warp
            for phase in range(2):
                theta, step_dt, n_steps, tau0 = _rannacher_phase_gpu(phase, dt, n_implicit, m)
                if n_steps == 0:
                    continue
                _lanes_phase_rows(rows_abc, coef, COEF_SHARED, warp, warp, first, P, n, s_lo,
                                  ds, vol, rate, div, compact, theta, step_dt, e_lo, e_di,
                                  e_up)
                # The implicit matrix M − ½Δτ·L is the same in both phases (the Rannacher
                # halves take θ = 1 over ½Δτ, Crank–Nicolson θ = ½ over Δτ: θ·step is ½Δτ
                # bit for bit), so a march factors it once: its pivots, the sweeps'
                # multipliers and the scans' products carry over to the second phase.
                if not factored:
                    _lanes_factor(rows_abc, c_last, mbuf, buf, warp, lane, first, P, SHUFFLE,
                                  fwd, bwd, fwd_cum, bwd_cum, inv_u, fwd_level, bwd_level)
                    factored = True
                d_edge = _lanes_edge_start(edge, bounds, rate, div, tau0, step_dt, takes_lo,
                                           takes_hi)
                for _step in range(n_steps):
                    d_edge = _lanes_step(v, pay, e_lo, e_di, e_up, edge_w, fwd, fwd_cum, bwd,
                                         bwd_cum, inv_u, work, fwd_level, bwd_level, has_below,
                                         has_above, d_edge, edge, bounds, takes_lo, takes_hi,
                                         is_american, P, SHUFFLE, edge_first, edge_last, buf,
                                         warp, lane)
            if pass_ < passes - 1:  # the coarse march, kept for the extrapolation
                for j in range(P):
                    sh_vc[first + j] = v[j]
        if split:  # the coarse warp's values are in shared memory; it is done
            cuda.syncthreads()
            if warp > 0:
                return
        if passes == 2:  # a lane reads back its own rows, or the coarse warp's after the barrier
            w = np.float32(_richardson_weight_gpu(m_grid))
            for j in range(P):
                v[j] = v[j] + w * (v[j] - sh_vc[first + j])
        for j in range(P):
            sh_v[first + j] = v[j]
        if SHUFFLE:
            cuda.syncwarp()
        else:
            cuda.syncthreads()
        if lane == 0:
            _write_values_at_spot(sh_v, out, opt, spot, strike, is_call, is_american, s_lo,
                                  ds, n)

    return kernel


def fd_lanes_kernel(
    price_steps: int, shuffle: bool | None = None, interleave: bool = True
) -> Any:
    """The compiled lanes kernel for `price_steps` (one per rows-per-lane count; launch
    with blockDim = LANES, one block per option). `shuffle`: None = warp shuffles on a
    real GPU, shared memory in the simulator. `interleave`: the kernel runs an option's
    two marches side by side in one warp (`_make_fd_lanes_kernel`); its registers slow
    the single march of other rows (a launch of 1,000 one-march rows 31.5 -> 34.0 µs on
    the H200, 2026-11-28), so launches without two-march rows take the kernel without it
    (`two_marches`)."""
    simulated = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"
    if shuffle is None:
        shuffle = not simulated
    rows = rows_per_lane(price_steps)
    cap = 0 if simulated else fd_max_registers()  # (the simulator's jit takes no cap)
    # GPU_FD_INTERLEAVE=0: one warp runs an option's two marches one after the other
    # (the kernel before 2026-11-28 evening; for comparisons)
    interleave = interleave and os.environ.get("GPU_FD_INTERLEAVE", "1") != "0"
    key = f"lanes{rows}{'s' if shuffle else 'm'}{cap or ''}{'' if interleave else 'q'}"
    kern = _kernel_cache.get(key)
    if kern is None:
        source = _make_fd_lanes_kernel(rows, shuffle, interleave)
        # a capped kernel is compiled in the process, never taken from (or put in) the
        # on-disk cache, whose index does not tell a capped build from an uncapped one
        jit: Any = cuda.jit  # (typed from the simulator's stub, which has no max_registers)
        kern = jit(max_registers=cap)(source) if cap else jit(cache=not simulated)(source)
        _kernel_cache[key] = kern
    return kern


def fd_kernel(
    price_steps: int, solver: str | None = None, split_passes: bool = False,
    interleave: bool = True,
) -> tuple[Any, int]:
    """(compiled FD kernel, threads per block) for `price_steps`; launch one block per
    option row. Both solvers take the same arguments and fill the same outputs.
    `split_passes` (lanes only): two warps per option, the Richardson marches side by side
    (lower latency for a grid with `richardson`; see `split_passes`)."""
    if fd_solver(solver) == "pcr":
        return fd_price_kernel(), threads_per_option(price_steps)
    return fd_lanes_kernel(price_steps, interleave=interleave), LANES * (2 if split_passes else 1)


def two_marches(params: np.ndarray, richardson: bool) -> bool:
    """Whether any of these parameter rows is marched twice on a grid with `richardson`
    (`time_passes`: an option that can be exercised early; every grid's time steps are
    at least 2 here), i.e. whether the interleaving kernel pays for its registers."""
    if not richardson or params.shape[0] == 0:
        return False
    is_call = params[:, IS_CALL] > 0.5
    early = (params[:, IS_AMERICAN] > 0.5) & ~(
        is_call & (params[:, RATE] >= 0.0) & (params[:, DIVIDEND] <= 0.0))
    return bool(early.any())

def launch_args(grid_args: tuple[Any, ...], spot_at: float = 0.0) -> tuple[Any, ...]:
    """The FD kernels' arguments after `params` and `out`: the grid's
    (`FdGrid.kernel_args()`) and `spot_at`. A spot > 0 prices every row at it instead of
    the row's own: a group's new spot is then one value, not a write into each of its
    rows (`OptionGroupPricer.set_spot`); 0 keeps each row's."""
    return (*grid_args, float(spot_at))


#: None (the default): a lanes launch on a Richardson grid gives each option two warps (its
#: two marches side by side: one march's chain of steps instead of one and a half) when
#: the device holds every option's two warps at once (`resident_split_options`); a larger
#: launch keeps one warp per option, whose registers are then never idle while the coarse
#: march runs. On the H200 (2026-11-28, default grid, about 254 registers a thread: four
#: two-warp blocks an SM, 528 options) the kernel took 28-31 µs split against 39-40 µs not
#: for 1 to 500 options, and 53 against 42.5 µs at 1,000 (two waves). An integer overrides
#: the bound (0: never split; tests and benchmarks).
SPLIT_PASSES_MAX_OPTIONS: int | None = None


def resident_split_options(kernel: Any) -> int:
    """How many options launched with two warps each the device runs at once with the
    compiled lanes `kernel` (the driver's occupancy for a 2-warp block times the SMs);
    0 where it cannot be asked (the kernel not compiled yet, the simulator)."""
    overloads = getattr(kernel, "overloads", None) or {}
    if len(overloads) != 1:
        return 0
    compiled = next(iter(overloads.values()))
    known = _resident_split.get(compiled)
    if known is not None:  # asked once per compiled kernel (price_params asks every call)
        return known
    try:
        resident = int(compiled.max_cooperative_grid_blocks(2 * LANES))
    except Exception:  # noqa: BLE001 - no occupancy to ask (simulator): never split
        return 0
    _resident_split[compiled] = resident
    return resident


#: `resident_split_options` per compiled kernel, forgotten with it
_resident_split: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def split_passes(richardson: bool, options: int, kernel: Any = None) -> bool:
    """Whether a lanes launch of `options` rows on a grid with `richardson` uses two warps
    per option: at most SPLIT_PASSES_MAX_OPTIONS rows where that is set, else as many as
    the device holds at once with the compiled `kernel` (`resident_split_options`)."""
    if not richardson:
        return False
    limit = SPLIT_PASSES_MAX_OPTIONS
    if limit is None:
        limit = resident_split_options(kernel)
    return options <= limit


def lanes_threads(kernel: Any, threads: int, richardson: bool, options: int,
                  compile_once: Any) -> int:
    """The block size for a launch of `options` rows of `kernel` (`fd_kernel`'s one-warp
    `threads`): two warps where `split_passes` allows. The occupancy is the compiled
    code's, so an uncompiled lanes kernel is compiled (or loaded from the disk cache)
    first by `compile_once()`, one ordinary launch of the caller's."""
    if threads != LANES or not richardson or os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return threads  # the pcr kernel, a grid without Richardson, the simulator
    if not getattr(kernel, "overloads", None):
        compile_once()
    return 2 * LANES if split_passes(richardson, options, kernel) else threads
