"""Black–Scholes PDE by Crank–Nicolson: the arithmetic once, a CUDA kernel and a CPU twin.

The option value V(S, τ) (τ = time to expiry in years, S = spot in price units) solves
V_τ = ½σ²S²V_SS + rSV_S − rV on a uniform grid S_j = S_lo + j·ΔS, j = 0..N, with Dirichlet
boundary values. Each time step solves (I − θΔτ L)Vⁿ⁺¹ = (I + (1−θ)Δτ L)Vⁿ, θ = ½
(Crank–Nicolson); an optional Rannacher start replaces the first CN steps by two fully
implicit half steps each, which damps the payoff kink so greeks do not oscillate and the
scheme keeps second order. American options are projected onto the payoff after each step.

Two backends over the same per-node functions (DESIGN.md §3):
- CUDA: one block per option, one thread per grid node, float32; the tridiagonal system is
  solved by parallel cyclic reduction (PCR) in shared memory. The matrix is the same for
  every step of a phase, so the PCR elimination factors of each level are computed once
  per phase and kept in registers; each step then reduces only the right-hand side
  (one shared-memory read pair and one barrier per level).
- CPU: float64, Thomas algorithm, one option per `prange` iteration.

Parameter rows (`params[option, column]`, float64) use the column indices below; results
(`out[option, :]`) are price, delta (∂V/∂S) and gamma (∂²V/∂S²) at the row's spot.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import cuda, float32, njit, prange

# -- parameter-row layout -----------------------------------------------------------------
SPOT, STRIKE, EXPIRY, VOL, RATE, IS_CALL, IS_AMERICAN = range(7)
N_PARAMS = 8  # one spare column keeps rows 64-byte aligned
PRICE, DELTA, GAMMA = range(3)
N_OUT = 3

# -- grid domains ---------------------------------------------------------------------------
#: S_lo = 0, S_hi = max(smax_mult·K, 2·S0), strike on a node (the seed's S_max = 3K).
DOMAIN_STRIKE_MULTIPLE = 0
#: S in [min(K,S0)·e^(−h), max(K,S0)·e^(h)], h = min(width·σ√T, ln smax_mult), strike on a node.
DOMAIN_LOG_WIDTH = 1

#: most PCR levels a block can need: 2^10 = 1024 nodes = the largest CUDA block.
MAX_LEVELS = 10
MAX_NODES = 1 << MAX_LEVELS

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
    spot: float, strike: float, expiry: float, vol: float, rate: float, is_call: bool
) -> tuple[float, float, float, float]:
    """Analytic European Black–Scholes (no dividends): price, delta, gamma, vega (per unit σ).

    At expiry ≤ 0 or σ ≤ 0 the value is the discounted-forward intrinsic value.
    """
    if expiry <= 0.0 or vol <= 0.0:
        tau = max(expiry, 0.0)
        fwd_k = strike * math.exp(-rate * tau)
        if is_call:
            if spot > fwd_k:
                return spot - fwd_k, 1.0, 0.0, 0.0
            return 0.0, 0.0, 0.0, 0.0
        if spot < fwd_k:
            return fwd_k - spot, -1.0, 0.0, 0.0
        return 0.0, 0.0, 0.0, 0.0
    sqrt_t = math.sqrt(expiry)
    sig_t = vol * sqrt_t
    d1 = (math.log(spot / strike) + (rate + 0.5 * vol * vol) * expiry) / sig_t
    d2 = d1 - sig_t
    disc_k = strike * math.exp(-rate * expiry)
    pdf1 = norm_pdf(d1)
    gamma = pdf1 / (spot * sig_t)
    vega = spot * pdf1 * sqrt_t
    if is_call:
        return spot * norm_cdf(d1) - disc_k * norm_cdf(d2), norm_cdf(d1), gamma, vega
    return disc_k * norm_cdf(-d2) - spot * norm_cdf(-d1), norm_cdf(d1) - 1.0, gamma, vega


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


def node_coefficients(s: float, ds: float, vol: float, rate: float) -> tuple[float, float, float]:
    """Central-difference operator L at node S: (LV)_j = α V_{j−1} + β V_j + γ V_{j+1}, per year."""
    x = s / ds
    diffusion = vol * vol * x * x
    drift = rate * x
    return 0.5 * (diffusion - drift), -diffusion - rate, 0.5 * (diffusion + drift)


def payoff(s: float, strike: float, is_call: bool) -> float:
    return max(s - strike, 0.0) if is_call else max(strike - s, 0.0)


def boundary_values(
    strike: float,
    tau: float,
    rate: float,
    s_lo: float,
    s_hi: float,
    is_call: bool,
    is_american: bool,
) -> tuple[float, float]:
    """Dirichlet values at S_lo and S_hi at time to expiry τ (deep OTM 0, deep ITM linear).

    Put: V(S_lo) = K e^(−rτ) − S_lo (American: at least K − S_lo, exercised), V(S_hi) = 0.
    Call: V(S_lo) = 0, V(S_hi) = S_hi − K e^(−rτ) (American: at least S_hi − K).
    """
    disc_k = strike * math.exp(-rate * tau)
    if is_call:
        v_hi = s_hi - disc_k
        if is_american:
            v_hi = max(v_hi, s_hi - strike)
        return 0.0, max(v_hi, 0.0)
    v_lo = disc_k - s_lo
    if is_american:
        v_lo = max(v_lo, strike - s_lo)
    return max(v_lo, 0.0), 0.0


def interpolate_at_spot(
    v_below: float, v_node: float, v_above: float, frac: float, ds: float
) -> tuple[float, float, float]:
    """Quadratic through three nodes, evaluated `frac` node spacings from the middle one.

    Returns price, delta = ∂V/∂S and gamma = ∂²V/∂S² (the grid's second difference).
    """
    first = 0.5 * (v_above - v_below)
    second = v_above - 2.0 * v_node + v_below
    price = v_node + frac * first + 0.5 * frac * frac * second
    return price, (first + frac * second) / ds, second / (ds * ds)


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
    payoff,
    boundary_values,
    interpolate_at_spot,
    pcr_factors,
)

# The compiled functions resolve callees through the module globals, so each backend gets a
# namespace copy in which the helper names point at that backend's compiled helpers.
def _compile_for(decorate: Any) -> dict[str, Any]:
    ns: dict[str, Any] = {}
    for f in _CORE:
        g = type(f)(f.__code__, ns, f.__name__, f.__defaults__, f.__closure__)
        ns[f.__name__] = decorate(g)
    ns.update({"math": math, "SQRT1_2": SQRT1_2, "INV_SQRT_2PI": INV_SQRT_2PI})
    ns.update(
        {"DOMAIN_STRIKE_MULTIPLE": DOMAIN_STRIKE_MULTIPLE, "DOMAIN_LOG_WIDTH": DOMAIN_LOG_WIDTH}
    )
    return ns


_cpu_ns = _compile_for(lambda f: njit(cache=True)(f))
_gpu_ns = _compile_for(lambda f: cuda.jit(device=True)(f))

bs_price_greeks_cpu = _cpu_ns["bs_price_greeks"]
_grid_bounds_cpu = _cpu_ns["grid_bounds"]
_time_steps_cpu = _cpu_ns["time_steps"]
_node_coefficients_cpu = _cpu_ns["node_coefficients"]
_payoff_cpu = _cpu_ns["payoff"]
_boundary_values_cpu = _cpu_ns["boundary_values"]
_interpolate_cpu = _cpu_ns["interpolate_at_spot"]
pcr_factors_cpu = _cpu_ns["pcr_factors"]

_bs_price_greeks_gpu = _gpu_ns["bs_price_greeks"]
_grid_bounds_gpu = _gpu_ns["grid_bounds"]
_time_steps_gpu = _gpu_ns["time_steps"]
_node_coefficients_gpu = _gpu_ns["node_coefficients"]
_payoff_gpu = _gpu_ns["payoff"]
_boundary_values_gpu = _gpu_ns["boundary_values"]
_interpolate_gpu = _gpu_ns["interpolate_at_spot"]
_pcr_factors_gpu = _gpu_ns["pcr_factors"]


# =========================================================================================
# CPU twin: float64, Thomas algorithm.
# =========================================================================================


@njit(cache=True, parallel=True)
def bs_price_greeks_batch(params: np.ndarray, out4: np.ndarray) -> None:
    """Analytic European values of every parameter row into out4[:, (price, delta, gamma, vega)]."""
    for o in prange(params.shape[0]):
        p, d, g, v = bs_price_greeks_cpu(
            params[o, SPOT],
            params[o, STRIKE],
            params[o, EXPIRY],
            params[o, VOL],
            params[o, RATE],
            params[o, IS_CALL] > 0.5,
        )
        out4[o, 0] = p
        out4[o, 1] = d
        out4[o, 2] = g
        out4[o, 3] = v


@njit(cache=True)
def fd_price_one_cpu(
    spot: float,
    strike: float,
    expiry: float,
    vol: float,
    rate: float,
    is_call: bool,
    is_american: bool,
    price_steps: int,
    dt_target: float,
    fixed_steps: int,
    min_steps: int,
    rannacher: int,
    domain: int,
    smax_mult: float,
    width: float,
) -> tuple[float, float, float]:
    """Price, delta, gamma of one option by Crank–Nicolson (float64, Thomas algorithm)."""
    if expiry <= 0.0 or vol <= 0.0:
        p, d, g, _ = bs_price_greeks_cpu(spot, strike, expiry, vol, rate, is_call)
        if is_american:
            p = max(p, _payoff_cpu(spot, strike, is_call))
        return p, d, g
    n = price_steps
    s_lo, ds = _grid_bounds_cpu(spot, strike, expiry, vol, domain, smax_mult, width, n)
    s_hi = s_lo + n * ds
    m = _time_steps_cpu(expiry, dt_target, fixed_steps, min_steps)
    dt = expiry / m
    n_implicit = min(rannacher, m)

    alpha = np.empty(n + 1)
    beta = np.empty(n + 1)
    gamma = np.empty(n + 1)
    pay = np.empty(n + 1)
    v = np.empty(n + 1)
    lo = np.empty(n + 1)
    diag = np.empty(n + 1)
    up = np.empty(n + 1)
    rhs = np.empty(n + 1)
    c_mod = np.empty(n + 1)
    for j in range(n + 1):
        s = s_lo + j * ds
        alpha[j], beta[j], gamma[j] = _node_coefficients_cpu(s, ds, vol, rate)
        pay[j] = _payoff_cpu(s, strike, is_call)
        v[j] = pay[j]

    for phase in range(2):
        if phase == 0:
            theta = 1.0
            step_dt = 0.5 * dt
            n_steps = 2 * n_implicit
            tau0 = 0.0
        else:
            theta = 0.5
            step_dt = dt
            n_steps = m - n_implicit
            tau0 = n_implicit * dt
        if n_steps == 0:
            continue
        imp = theta * step_dt
        exp_ = (1.0 - theta) * step_dt
        for j in range(1, n):
            lo[j] = -imp * alpha[j]
            diag[j] = 1.0 - imp * beta[j]
            up[j] = -imp * gamma[j]
        for k in range(n_steps):
            tau = tau0 + (k + 1) * step_dt
            v_lo, v_hi = _boundary_values_cpu(
                strike, tau, rate, s_lo, s_hi, is_call, is_american
            )
            for j in range(1, n):
                rhs[j] = v[j] + exp_ * (alpha[j] * v[j - 1] + beta[j] * v[j] + gamma[j] * v[j + 1])
            rhs[1] -= lo[1] * v_lo
            rhs[n - 1] -= up[n - 1] * v_hi
            # Thomas: forward elimination (upper diagonal into c_mod), back substitution
            c_mod[1] = up[1] / diag[1]
            rhs[1] = rhs[1] / diag[1]
            for j in range(2, n):
                den = diag[j] - lo[j] * c_mod[j - 1]
                c_mod[j] = up[j] / den
                rhs[j] = (rhs[j] - lo[j] * rhs[j - 1]) / den
            v[0] = v_lo
            v[n] = v_hi
            v[n - 1] = rhs[n - 1]
            for j in range(n - 2, 0, -1):
                v[j] = rhs[j] - c_mod[j] * v[j + 1]
            if is_american:
                for j in range(n + 1):
                    v[j] = max(v[j], pay[j])
    f = (spot - s_lo) / ds
    j = min(max(int(math.floor(f + 0.5)), 1), n - 1)
    return _interpolate_cpu(v[j - 1], v[j], v[j + 1], f - j, ds)


@njit(cache=True, parallel=True)
def fd_price_batch_cpu(
    params: np.ndarray,
    out: np.ndarray,
    price_steps: int,
    dt_target: float,
    fixed_steps: int,
    min_steps: int,
    rannacher: int,
    domain: int,
    smax_mult: float,
    width: float,
) -> None:
    """CPU twin of the CUDA kernel: every parameter row priced on all cores."""
    for o in prange(params.shape[0]):
        p, d, g = fd_price_one_cpu(
            params[o, SPOT],
            params[o, STRIKE],
            params[o, EXPIRY],
            params[o, VOL],
            params[o, RATE],
            params[o, IS_CALL] > 0.5,
            params[o, IS_AMERICAN] > 0.5,
            price_steps,
            dt_target,
            fixed_steps,
            min_steps,
            rannacher,
            domain,
            smax_mult,
            width,
        )
        out[o, PRICE] = p
        out[o, DELTA] = d
        out[o, GAMMA] = g
