"""gpu.ising.stats against analytic results: AR(1) τ_int, iid errors, scipy's K(k), crossings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpu.ising.stats import (
    TC_2D,
    _ellipk,
    autocorrelation,
    binder_crossing,
    estimate_tc,
    integrated_autocorrelation_time,
    jackknife,
    lattice_observables,
    onsager_energy,
    onsager_magnetization,
)


def ar1(phi: float, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    noise = rng.normal(size=n)
    x = np.empty(n)
    x[0] = noise[0] / math.sqrt(1 - phi * phi)
    for t in range(1, n):
        x[t] = phi * x[t - 1] + noise[t]
    return x


@pytest.mark.parametrize("phi", [0.0, 0.5, 0.8, 0.95])
def test_tau_int_of_ar1_matches_its_closed_form(phi: float) -> None:
    """AR(1): ρ(t) = φ^t, so τ_int = 1/2 + φ/(1−φ) = (1+φ)/(2(1−φ))."""
    exact = (1 + phi) / (2 * (1 - phi))
    est = np.mean([integrated_autocorrelation_time(ar1(phi, 40000, s)) for s in range(3)])
    assert est == pytest.approx(exact, rel=0.1)


def test_autocorrelation_matches_numpy_correlate() -> None:
    x = ar1(0.7, 500, 1)
    d = x - x.mean()
    direct = np.correlate(d, d, mode="full")[d.size - 1 :] / np.arange(d.size, 0, -1)
    np.testing.assert_allclose(autocorrelation(x), direct / direct[0], atol=1e-12)
    assert autocorrelation(np.ones(10))[1:].tolist() == [0.0] * 9


def test_binned_jackknife_error_of_correlated_mean_matches_theory() -> None:
    """σ(mean) = sqrt(2 τ_int var / n) for an AR(1) series; binning must recover it."""
    phi, n = 0.9, 2**16
    tau = (1 + phi) / (2 * (1 - phi))
    var = 1 / (1 - phi * phi)
    errs = [jackknife(lambda m: m, [ar1(phi, n, s)], 32)[1] for s in range(6)]
    assert np.mean(errs) == pytest.approx(math.sqrt(2 * tau * var / n), rel=0.2)
    # and the naive iid error would be far too small: the check can tell them apart
    assert math.sqrt(var / n) < 0.4 * np.mean(errs)


def test_jackknife_of_a_ratio_covers_the_truth() -> None:
    rng = np.random.default_rng(4)
    hits = 0
    for _ in range(200):
        a = rng.normal(2.0, 1.0, 640)
        b = rng.normal(4.0, 1.0, 640)
        est, err = jackknife(lambda x, y: x / y, [a, b], 32)
        hits += abs(est - 0.5) < err
    assert 0.6 < hits / 200 < 0.77  # ≈ 68% coverage for a 1σ interval


def test_binder_cumulant_limits() -> None:
    rng = np.random.default_rng(0)
    ordered = 0.8 * rng.choice([-1.0, 1.0], 64000)  # two sharp peaks: U4 = 2/3
    gauss = rng.normal(size=64000)  # disordered: U4 = 0
    e = rng.normal(size=64000)
    assert lattice_observables(ordered, e)["binder"] == pytest.approx(2 / 3, abs=1e-9)
    assert lattice_observables(gauss, e)["binder"] == pytest.approx(0.0, abs=0.03)


def test_crossing_of_two_straight_lines_is_found_with_a_sensible_error() -> None:
    t = np.linspace(2.2, 2.34, 15)
    tc = 2.2712
    u_small = 0.61 - 1.0 * (t - tc)
    u_large = 0.61 - 2.5 * (t - tc)
    err = np.full(t.size, 0.002)
    rng = np.random.default_rng(7)
    found = binder_crossing(
        t, u_small + rng.normal(0, 0.002, t.size), err, u_large + rng.normal(0, 0.002, t.size), err
    )
    assert found is not None
    root, root_err = found
    assert abs(root - tc) < 3 * root_err
    assert 0.0002 < root_err < 0.005
    assert binder_crossing(t, u_small, err, u_small + 0.1, err) is None  # parallel: none


def test_estimate_tc_combines_pairs() -> None:
    t = np.linspace(2.2, 2.34, 15)
    slopes = {16: 1.0, 32: 2.0, 64: 4.0}
    by_size = {L: (0.61 - s * (t - TC_2D), np.full(t.size, 0.001)) for L, s in slopes.items()}
    tc, tc_err, crossings = estimate_tc(t, by_size)
    assert tc is not None and tc_err is not None
    assert len(crossings) == 2
    assert abs(tc - TC_2D) < 1e-3


def test_onsager_results() -> None:
    scipy_special = pytest.importorskip("scipy.special")
    assert onsager_magnetization(2.0) == pytest.approx(0.911319, abs=1e-6)
    assert onsager_magnetization(2.3) == 0.0
    for k in (0.1, 0.5, 0.9, 0.999):
        assert _ellipk(k) == pytest.approx(scipy_special.ellipk(k * k), rel=1e-13)
    # at Tc the energy is −√2; far below it −2 (ground state), far above → 0
    assert onsager_energy(TC_2D) == pytest.approx(-math.sqrt(2), rel=1e-6)
    assert onsager_energy(0.5) == pytest.approx(-2.0, abs=1e-6)
    assert onsager_energy(50.0) == pytest.approx(-math.tanh(1 / 50) * 2, rel=0.01)


def test_bins_grow_until_they_span_several_autocorrelation_times() -> None:
    phi = 0.98  # τ_int = 49.5 sweeps
    x = ar1(phi, 2**15, 5)
    e = np.random.default_rng(1).normal(size=x.size)
    obs = lattice_observables(e, x, n_bins=256)  # the energy series is the slow one
    assert obs["tau_energy"] == pytest.approx(49.5, rel=0.3)
    assert x.size / obs["bins"] >= 6 * obs["tau_energy"]
    assert obs["bins"] >= 8
    iid = lattice_observables(e, e, n_bins=256)  # uncorrelated: all bins kept
    assert iid["bins"] == 256
