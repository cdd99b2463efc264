"""Statistics of Ising time series: binned jackknife errors, τ_int, Binder crossings, exact 2D.

- `jackknife`: mean and error of any function of means, over bins of a time series (bins
  longer than the autocorrelation time make the bins independent);
- `integrated_autocorrelation_time`: τ_int = 1/2 + Σ_t ρ(t), summed up to Sokal's
  self-consistent window W ≥ c·τ_int(W);
- `lattice_observables`: energy per spin, |m|, the Binder cumulant U4 = 1 − ⟨m⁴⟩/(3⟨m²⟩²)
  with errors and τ_int, from the per-sweep series of one lattice;
- `binder_crossing` / `estimate_tc`: where U4(T) of two sizes cross, from a weighted
  straight-line fit of their difference, with a parametric-bootstrap error;
- `onsager_magnetization`, `onsager_energy`: the exact infinite-lattice 2D results
  (Onsager 1944, Yang 1952), J = 1, k_B = 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

TC_2D = 2.0 / math.log(1.0 + math.sqrt(2.0))  # 2.269185314…
TC_3D = 4.5115  # Ferrenberg, Xu & Landau 2018: 1/0.221654626(5) = 4.511524


def bin_means(x: npt.ArrayLike, n_bins: int) -> F64:
    """Means of n_bins consecutive equal bins (the tail that does not fill a bin is dropped)."""
    a = np.asarray(x, dtype=np.float64)
    size = a.shape[0] // n_bins
    if size < 1:
        raise ValueError(f"need at least {n_bins} samples for {n_bins} bins, got {a.shape[0]}")
    return a[: size * n_bins].reshape(n_bins, size, *a.shape[1:]).mean(axis=1)


def jackknife(
    f: Callable[..., Any], series: Sequence[npt.ArrayLike], n_bins: int = 32
) -> tuple[float, float]:
    """f(⟨x1⟩, ⟨x2⟩, …) and its jackknife error over n_bins bins of the series."""
    bins = [bin_means(s, n_bins) for s in series]
    sums = [b.sum() for b in bins]
    full = float(f(*[s / n_bins for s in sums]))
    leave_out = np.array(
        [f(*[(s - b[i]) / (n_bins - 1) for s, b in zip(sums, bins, strict=True)])
         for i in range(n_bins)],
        dtype=np.float64,
    )
    err = math.sqrt((n_bins - 1) / n_bins * float(((leave_out - leave_out.mean()) ** 2).sum()))
    return full, err


def autocorrelation(x: npt.ArrayLike) -> F64:
    """Normalised autocorrelation ρ(t), t = 0 … n−1, by FFT (ρ(0) = 1; 0 for a constant)."""
    a = np.asarray(x, dtype=np.float64)
    n = a.shape[0]
    d = a - a.mean()
    size = 1 << (2 * n - 1).bit_length()
    f = np.fft.rfft(d, size)
    acf = np.fft.irfft(f * np.conj(f), size)[:n] / np.arange(n, 0, -1)
    if acf[0] <= 0:
        out = np.zeros(n)
        out[0] = 1.0
        return out
    return acf / acf[0]


def integrated_autocorrelation_time(x: npt.ArrayLike, c: float = 6.0) -> float:
    """τ_int in sweeps (1/2 for uncorrelated data), Sokal's automatic window (W ≥ c·τ)."""
    rho = autocorrelation(x)
    tau = 0.5
    for w in range(1, rho.shape[0]):
        tau += rho[w]
        if w >= c * tau:
            return float(max(tau, 0.5))
    return float(max(tau, 0.5))


def binder(m2: float, m4: float) -> float:
    return 1.0 - m4 / (3.0 * m2 * m2) if m2 > 0 else float("nan")


def lattice_observables(
    m: npt.ArrayLike, e: npt.ArrayLike, n_bins: int = 32, *, min_bins: int = 8,
    bin_taus: float = 6.0,
) -> dict[str, float]:
    """Observables of one lattice from per-sweep magnetisation and energy per spin.

    Errors come from a jackknife over bins; the number of bins is halved from `n_bins`
    (down to `min_bins`) until a bin spans `bin_taus` integrated autocorrelation times of
    the slowest observable, so that bins are nearly independent and errors are not
    underestimated near Tc.
    """
    m = np.asarray(m, dtype=np.float64)
    e = np.asarray(e, dtype=np.float64)
    am = np.abs(m)
    m2 = m * m
    taus = {
        "tau_energy": integrated_autocorrelation_time(e),
        "tau_magnetization": integrated_autocorrelation_time(am),
        "tau_m2": integrated_autocorrelation_time(m2),
    }
    slowest = max(taus.values())
    while n_bins // 2 >= min_bins and m.shape[0] / n_bins < bin_taus * slowest:
        n_bins //= 2
    energy, energy_err = jackknife(lambda x: x, [e], n_bins)
    mag, mag_err = jackknife(lambda x: x, [am], n_bins)
    u4, u4_err = jackknife(binder, [m2, m2 * m2], n_bins)
    return {
        "energy": energy,
        "energy_err": energy_err,
        "magnetization": mag,
        "magnetization_err": mag_err,
        "binder": u4,
        "binder_err": u4_err,
        "bins": float(n_bins),
        **taus,
    }


def _fit_root(t: F64, d: F64, w: F64) -> float | None:
    """Root of the weighted least-squares line through d(t), if it lies within t's range."""
    tm = float((w * t).sum() / w.sum())
    dm = float((w * d).sum() / w.sum())
    sxx = float((w * (t - tm) ** 2).sum())
    if sxx <= 0:
        return None
    slope = float((w * (t - tm) * (d - dm)).sum()) / sxx
    if slope == 0:
        return None
    root = tm - dm / slope
    return root if t.min() <= root <= t.max() else None


def binder_crossing(
    temps: npt.ArrayLike,
    u_small: npt.ArrayLike,
    err_small: npt.ArrayLike,
    u_large: npt.ArrayLike,
    err_large: npt.ArrayLike,
    *,
    window: int = 3,
    resamples: int = 400,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Temperature where U4 of two sizes cross, and its error; None if they do not cross.

    The difference d(T) = U_large − U_small falls through zero at the crossing (ordered
    side: larger lattices are nearer 2/3; disordered: nearer 0). A weighted straight line
    is fitted to d over `window` points either side of the sign change nearest the
    middle of the scan; the error is the spread of the root when the U4 values are
    redrawn within their errors (parametric bootstrap).
    """
    t = np.asarray(temps, dtype=np.float64)
    d = np.asarray(u_large, dtype=np.float64) - np.asarray(u_small, dtype=np.float64)
    sd = np.hypot(np.asarray(err_small, dtype=np.float64), np.asarray(err_large, dtype=np.float64))
    order = np.argsort(t)
    t, d, sd = t[order], d[order], sd[order]
    if t.shape[0] < 2 or not np.isfinite(d).all():
        return None
    changes = np.nonzero(np.sign(d[:-1]) != np.sign(d[1:]))[0]
    if changes.size == 0:
        return None
    mid = (t.shape[0] - 2) / 2
    at = int(changes[np.argmin(np.abs(changes - mid))])
    lo, hi = max(0, at - window + 1), min(t.shape[0], at + window + 1)
    w = 1.0 / np.maximum(sd[lo:hi], 1e-12) ** 2
    root = _fit_root(t[lo:hi], d[lo:hi], w)
    if root is None:
        return None
    rng = np.random.default_rng(seed)
    roots = []
    for _ in range(resamples):
        r = _fit_root(t[lo:hi], d[lo:hi] + rng.normal(size=hi - lo) * sd[lo:hi], w)
        if r is not None:
            roots.append(r)
    err = float(np.std(roots)) if len(roots) > 1 else float("nan")
    return float(root), err


def estimate_tc(
    temps: npt.ArrayLike, by_size: dict[int, tuple[F64, F64]]
) -> tuple[float | None, float | None, list[dict[str, Any]]]:
    """Tc from the U4 crossings of consecutive sizes: (tc, tc_err, crossings).

    `by_size[L] = (U4(T), err(T))` on the common temperatures. tc is the inverse-variance
    mean of the pair crossings; its error is inflated by √(χ²/dof) when the pairs disagree
    by more than their errors (finite-size drift of the crossing).
    """
    sizes = sorted(by_size)
    crossings: list[dict[str, Any]] = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        c = binder_crossing(temps, by_size[a][0], by_size[a][1], by_size[b][0], by_size[b][1])
        if c is not None and math.isfinite(c[1]) and c[1] > 0:
            crossings.append({"L1": a, "L2": b, "tc": c[0], "tc_err": c[1]})
    if not crossings:
        return None, None, crossings
    x = np.array([c["tc"] for c in crossings])
    w = 1.0 / np.array([c["tc_err"] for c in crossings]) ** 2
    tc = float((w * x).sum() / w.sum())
    err = math.sqrt(1.0 / float(w.sum()))
    if x.size > 1:
        chi2 = float((w * (x - tc) ** 2).sum()) / (x.size - 1)
        err *= math.sqrt(max(chi2, 1.0))
    return tc, err, crossings


def onsager_magnetization(T: float | npt.ArrayLike) -> Any:
    """Spontaneous magnetisation per spin of the infinite 2D lattice, (1 − sinh⁻⁴(2/T))^(1/8)."""
    t = np.asarray(T, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = 1.0 - np.sinh(2.0 / t) ** -4.0
        out = np.where(t < TC_2D, np.power(np.clip(x, 0.0, None), 0.125), 0.0)
    return float(out) if out.ndim == 0 else out


def _ellipk(k: float) -> float:
    """Complete elliptic integral of the first kind K(k) (modulus k) by the AGM."""
    a, b = 1.0, math.sqrt(max(0.0, 1.0 - k * k))
    if b == 0.0:
        return float("inf")
    for _ in range(60):
        a, b = (a + b) / 2.0, math.sqrt(a * b)
        if abs(a - b) <= 1e-16 * a:
            break
    return math.pi / (2.0 * a)


def onsager_energy(T: float) -> float:
    """Energy per spin of the infinite 2D lattice (Onsager), J = 1, h = 0.

    u = −coth(2K)·[1 + (2/π)(2·tanh²(2K) − 1)·K(k)], K = 1/T, k = 2·sinh(2K)/cosh²(2K).
    """
    K = 1.0 / T
    k = 2.0 * math.sinh(2.0 * K) / math.cosh(2.0 * K) ** 2
    t2 = math.tanh(2.0 * K) ** 2
    if abs(k - 1.0) < 1e-15:  # at Tc the (2 tanh² − 1) factor vanishes: u = −√2
        return -1.0 / math.tanh(2.0 * K)
    return -1.0 / math.tanh(2.0 * K) * (1.0 + 2.0 / math.pi * (2.0 * t2 - 1.0) * _ellipk(k))
