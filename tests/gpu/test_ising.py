"""gpu.ising.lattice: Philox against Random123's answers, kernels against plain numpy, exact
enumeration.

References nobody here wrote: Random123's known-answer vectors, a vectorised numpy
checkerboard Metropolis written here independently of the core (it shares only the
definition of which random number a site draws), exact partition functions by
enumerating every state of tiny lattices, and Onsager–Yang's exact 2D results.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from gpu.ising import core
from gpu.ising.lattice import TWIN, IsingEnsemble, acceptance_table, run_ensemble
from gpu.ising.stats import jackknife, onsager_energy, onsager_magnetization

U = np.uint64

# Random123 tests/kat_vectors, the three "philox4x32 10" lines: counter[4], key[2], result[4]
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


@pytest.mark.parametrize("ctr,key,expected", KAT)
def test_philox_matches_random123_known_answers(ctr, key, expected) -> None:
    args = [U(x) for x in (*ctr, *key)]
    assert tuple(int(x) for x in core.philox4x32_10(*args)) == expected
    assert tuple(int(x) for x in TWIN.cpu.philox4x32_10(*args)) == expected


def np_philox(c: list[np.ndarray], k0: int, k1: int) -> list[np.ndarray]:
    """Philox-4x32-10 over arrays, written from the Random123 paper's round function."""
    m0, m1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    mask = np.uint64(0xFFFFFFFF)
    x = [np.asarray(v, dtype=np.uint64) & mask for v in c]
    key = [np.uint64(k0), np.uint64(k1)]
    for r in range(10):
        if r:
            key = [(key[0] + np.uint64(0x9E3779B9)) & mask, (key[1] + np.uint64(0xBB67AE85)) & mask]
        p0, p1 = x[0] * m0, x[2] * m1
        x = [
            (p1 >> np.uint64(32)) ^ x[1] ^ key[0], p1 & mask,
            (p0 >> np.uint64(32)) ^ x[3] ^ key[1], p0 & mask,
        ]
    return x


def site_uniform(k: np.ndarray, stream: int, sweep: int, colour: int, seed: int) -> np.ndarray:
    """The documented 32-bit uniform of site k (see gpu.ising.core): hi·2^16 + lo, hi and lo
    the 16-bit half k&1 of word (k>>1)&3 of Philox((k>>3, stream, 2·sweep+c, k>>35 | f<<31))
    with f = 0 (hi) and f = 1 (lo)."""
    k = k.astype(np.uint64)
    o = k >> np.uint64(3)
    halves = []
    for flag in (0, 1):
        words = np_philox(
            [o, np.full_like(o, stream), np.full_like(o, 2 * sweep + colour),
             (o >> np.uint64(32)) | np.uint64(flag << 31)],
            seed & 0xFFFFFFFF, seed >> 32,
        )
        word = np.choose(((k >> np.uint64(1)) & np.uint64(3)).astype(np.int64), words)
        halves.append((word >> (np.uint64(16) * (k & np.uint64(1)))) & np.uint64(0xFFFF))
    return (halves[0] << np.uint64(16)) | halves[1]


def test_numpy_philox_agrees_with_core_on_random_counters() -> None:
    rng = np.random.default_rng(11)
    c = [rng.integers(0, 2**32, 50, dtype=np.uint64) for _ in range(4)]
    k0, k1 = 0x12345678, 0x9ABCDEF0
    ref = np_philox(c, k0, k1)
    for i in range(50):
        got = TWIN.cpu.philox4x32_10(*(U(v[i]) for v in c), U(k0), U(k1))
        assert tuple(int(x) for x in got) == tuple(int(r[i]) for r in ref)


def numpy_checkerboard(
    spins: np.ndarray, T: float, h: float, sweeps: int, stream: int, seed: int, sweep0: int = 0
) -> np.ndarray:
    """Plain numpy checkerboard Metropolis (any dimension), periodic, J = 1."""
    s = spins.astype(np.int64).copy()
    dim, L = s.ndim, s.shape[0]
    idx = np.indices(s.shape)
    colour_of = idx.sum(axis=0) % 2
    flat = np.zeros(s.shape, dtype=np.int64)  # site index within its colour
    for d in range(dim - 1):
        flat = flat * L + idx[d]
    k_all = flat * (L // 2) + idx[-1] // 2
    for sweep in range(sweep0, sweep0 + sweeps):
        for colour in (0, 1):
            nb = sum(np.roll(s, sh, axis=a) for a in range(dim) for sh in (1, -1))
            d_e = 2.0 * s * (nb + h)
            sel = colour_of == colour
            u = site_uniform(k_all[sel], stream, sweep, colour, seed).astype(np.float64)
            accept = (d_e[sel] <= 0) | (u * 2.0**-32 < np.exp(-d_e[sel] / T))
            new = s[sel]
            new[accept] = -new[accept]
            s[sel] = new
    return s.astype(np.int8)


def random_spins(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.choice(np.array([-1, 1], dtype=np.int8), size=shape)


@pytest.mark.parametrize("case", range(6))
def test_int8_twin_reproduces_numpy_checkerboard_exactly(case: int) -> None:
    rng = np.random.default_rng(100 + case)
    dim = 2 if case < 4 else 3
    sizes = [int(x) for x in rng.choice([2, 4, 6, 10] if dim == 2 else [2, 4, 6], size=2)]
    temps = [float(x) for x in rng.uniform(0.8, 6.0, size=2)]
    h = float(rng.choice([0.0, rng.uniform(-1.5, 1.5)]))
    seed = int(rng.integers(0, 2**63))
    streams = [int(x) for x in rng.integers(0, 2**32, size=2)]
    ens = IsingEnsemble(dim, sizes, temps, field=h, seed=seed, streams=streams, device="cpu")
    starts = [random_spins(rng, (L,) * dim) for L in sizes]
    for n, s in enumerate(starts):
        ens.set_spins(n, s)
    ens.run(7)
    for n, s in enumerate(starts):
        ref = numpy_checkerboard(s, temps[n], h, 7, streams[n], seed)
        np.testing.assert_array_equal(ens.spins(n), ref)


@pytest.mark.parametrize("L,T,h", [(32, 2.269, 0.0), (64, 1.7, 0.4), (32, 3.5, -0.25)])
def test_multispin_and_int8_give_identical_lattices(L: int, T: float, h: float) -> None:
    rng = np.random.default_rng(L)
    start = random_spins(rng, (L, L))
    runs = []
    for kernel in ("int8", "multispin"):
        ens = IsingEnsemble(2, [L], [T], field=h, seed=77, streams=[5], kernel=kernel, device="cpu")
        ens.set_spins(0, start)
        obs = ens.run(25, measure=True)
        runs.append((ens.spins(0), obs))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    assert not np.array_equal(runs[0][0], start)  # the lattice did move


def _numpy_observables(s: np.ndarray) -> tuple[int, int]:
    bonds = sum(int((s.astype(np.int64) * np.roll(s, 1, axis=a)).sum()) for a in range(s.ndim))
    return int(s.astype(np.int64).sum()), bonds


@pytest.mark.parametrize("dim,L,kernel", [(2, 6, "int8"), (3, 4, "int8"), (2, 32, "multispin")])
def test_measured_sums_match_numpy_on_the_lattice(dim: int, L: int, kernel: str) -> None:
    ens = IsingEnsemble(dim, [L, L], [2.5, 6.0], seed=3, kernel=kernel, device="cpu")
    rng = np.random.default_rng(dim * L)
    ens.set_spins(1, random_spins(rng, (L,) * dim))
    for _ in range(3):
        obs = ens.run(2, measure=True)
        assert obs is not None
        for n in range(2):
            assert tuple(obs[-1, n]) == _numpy_observables(ens.spins(n))


def test_launch_shape_does_not_change_a_lattice() -> None:
    """A lattice's history depends on (seed, stream), not on its batch companions."""
    together = IsingEnsemble(2, [8, 6, 4], [2.0, 2.5, 3.0], seed=9, streams=[4, 5, 6], device="cpu")
    together.run(5)
    alone = IsingEnsemble(2, [6], [2.5], seed=9, streams=[5], device="cpu")
    alone.run(5)
    np.testing.assert_array_equal(together.spins(1), alone.spins(0))
    other_seed = IsingEnsemble(2, [6], [2.5], seed=10, streams=[5], device="cpu")
    other_seed.run(5)
    assert not np.array_equal(other_seed.spins(0), alone.spins(0))


@pytest.mark.parametrize("dim,L,kernel", [(2, 6, "int8"), (3, 4, "int8"), (2, 64, "multispin")])
def test_cuda_kernels_match_cpu_twin(dim: int, L: int, kernel: str) -> None:
    """The CUDA kernels (simulator in CI) give the CPU twin's lattices and sums."""
    pytest.importorskip("numba.cuda")
    from gpu.device import cuda_present

    if not cuda_present():
        pytest.skip("no CUDA device nor simulator")
    runs = []
    for device in ("cpu", "cuda"):
        ens = IsingEnsemble(
            dim, [L, L], [2.3, 4.0], field=0.2, seed=21, kernel=kernel, device=device
        )
        ens.set_spins(1, random_spins(np.random.default_rng(1), (L,) * dim))
        obs = ens.run(2, measure=True)
        runs.append(([ens.spins(0), ens.spins(1)], obs))
    for a, b in zip(runs[0][0], runs[1][0], strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(runs[0][1], runs[1][1])


@pytest.mark.gpu
@pytest.mark.parametrize("L", [256, 1024])
def test_real_gpu_multispin_matches_int8_twin_at_larger_sizes(L: int) -> None:
    """On the GPU: 4 words a thread (L/32 divisible by 4), many lattices in one launch."""
    sizes, temps = [L, 64, L], [2.269, 2.5, 1.8]
    gpu = IsingEnsemble(2, sizes, temps, field=0.1, seed=8, kernel="multispin", device="cuda")
    cpu = IsingEnsemble(2, sizes, temps, field=0.1, seed=8, kernel="int8", device="cpu")
    start = random_spins(np.random.default_rng(2), (L, L))
    gpu.set_spins(0, start)
    cpu.set_spins(0, start)
    og, oc = gpu.run(6, measure=True), cpu.run(6, measure=True)
    for n in range(3):
        np.testing.assert_array_equal(gpu.spins(n), cpu.spins(n))
    np.testing.assert_array_equal(og, oc)


def exact_enumeration(dim: int, L: int, T: float, h: float) -> dict[str, float]:
    """⟨e⟩, ⟨|m|⟩, ⟨m²⟩, ⟨m⁴⟩ per spin from all 2^N states (Boltzmann weights, J = 1)."""
    n = L**dim
    states = np.array(list(itertools.product((-1, 1), repeat=n)), dtype=np.int64)
    s = states.reshape((-1,) + (L,) * dim)
    axes = tuple(range(1, dim + 1))
    bonds = sum((s * np.roll(s, 1, axis=a + 1)).sum(axis=axes) for a in range(dim))
    mag = states.sum(axis=1)
    energy = -(bonds + h * mag)
    w = np.exp(-(energy - energy.min()) / T)
    w /= w.sum()
    m = mag / n
    return {
        "e": float((w * energy).sum() / n),
        "abs_m": float((w * np.abs(m)).sum()),
        "m2": float((w * m**2).sum()),
        "m4": float((w * m**4).sum()),
    }


@pytest.mark.parametrize(
    "dim,L,T,h",
    [(2, 4, 2.0, 0.0), (2, 4, 2.6, 0.0), (2, 4, 3.5, 0.5), (3, 2, 4.5, 0.0), (3, 2, 3.0, -0.3)],
)
def test_sampler_averages_match_exact_enumeration(dim: int, L: int, T: float, h: float) -> None:
    exact = exact_enumeration(dim, L, T, h)
    ens = IsingEnsemble(dim, [L] * 8, [T] * 8, field=h, seed=2024, device="cpu")
    m, e, _ = run_ensemble(ens, 20000, 500)
    n_bins = 32
    for name, series in (("e", e), ("abs_m", np.abs(m)), ("m2", m**2), ("m4", m**4)):
        # eight independent lattices: bins of each, then one jackknife over all bins
        est, err = jackknife(lambda x: x, [series.T.reshape(-1)], n_bins * 8)
        assert abs(est - exact[name]) < 4 * err, (name, est, err, exact[name])
        assert err < 0.02  # the check has teeth: errors are small against the values


def test_2d_magnetisation_and_energy_match_onsager_at_t2() -> None:
    """L = 32 at T = 2.0 (ξ ≈ 1, so finite-size effects are far below the errors).

    Within 3σ here (a fixed seed at 2σ fails one seed in twenty by design); the issue's 2σ
    criterion at T = 2.0 and 2.2 is checked at L = 512 by benchmarks/ising.py on the GPU.
    """
    T = 2.0
    ens = IsingEnsemble(2, [32] * 4, [T] * 4, seed=1, kernel="multispin", device="cpu")
    m, e, _ = run_ensemble(ens, 4000, 500)
    m_est, m_err = jackknife(lambda x: x, [np.abs(m).T.reshape(-1)], 128)
    e_est, e_err = jackknife(lambda x: x, [e.T.reshape(-1)], 128)
    assert onsager_magnetization(T) == pytest.approx(0.91132, abs=1e-5)
    assert abs(m_est - onsager_magnetization(T)) < 3 * m_err, (m_est, m_err)
    assert abs(e_est - onsager_energy(T)) < 3 * e_err, (e_est, e_err, onsager_energy(T))
    assert m_err < 1e-3 and e_err < 2e-3


def test_acceptance_table_is_exact_threshold_of_boltzmann_factor() -> None:
    rng = np.random.default_rng(5)
    for _ in range(20):
        dim = int(rng.choice([2, 3]))
        T, h = float(rng.uniform(0.3, 8)), float(rng.uniform(-2, 2))
        thr = acceptance_table(dim, [T], h)[0]
        z = 2 * dim
        for sigma, n_up in itertools.product((0, 1), range(z + 1)):
            d_e = 2 * (2 * sigma - 1) * ((2 * n_up - z) + h)
            p = min(1.0, math.exp(-d_e / T))
            t = int(thr[sigma * (z + 1) + n_up])
            # u < t  ⟺  u / 2^32 < p for every 32-bit integer u
            assert (t - 1) / 2.0**32 < p or t == 0
            assert t / 2.0**32 >= p


@pytest.mark.parametrize(
    "kwargs",
    [
        {"dim": 4}, {"sizes": [7], "temperatures": [2.0]}, {"sizes": [0], "temperatures": [2.0]},
        {"temperatures": [-1.0]}, {"temperatures": [float("nan")]}, {"kernel": "fast"},
        {"kernel": "multispin", "sizes": [48]}, {"kernel": "multispin", "dim": 3},
        {"field": float("inf")}, {"seed": -1}, {"streams": [-3]},
    ],
)
def test_bad_ensemble_parameters_are_rejected(kwargs: dict) -> None:
    args = {"dim": 2, "sizes": [32], "temperatures": [2.0], "device": "cpu", **kwargs}
    with pytest.raises(ValueError):
        IsingEnsemble(args.pop("dim"), args.pop("sizes"), args.pop("temperatures"), **args)
