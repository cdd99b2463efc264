"""`ising`: 2D/3D Ising Metropolis over sizes × temperatures × replicas, Tc from U4 crossings.

    python run_engine.py ising [--dim 2|3] [--size L ...] [--temps A:B:STEP | T,T,...]
        [--sweeps N] [--therm N] [--replicas R] [--field h] [--seed S]
        [--kernel auto|bitplane|bitplane-int8|multispin|int8] [--device auto|cpu|cuda]
        [--out DIR] [--json PATH]

Every (L, T, replica) lattice runs in the same launches (see `gpu.ising.lattice`). Under
`--kernel auto`, sizes that are multiples of 128 take the bit-plane kernel (one bit per
spin, 2D and 3D), the others its int8 reference, which draws the same random numbers (both
give identical lattices); `--kernel multispin` (2D, multiples of 32) and `int8` pick the
earlier pair, which share other random numbers. Per (L, T): energy per spin, |m| and the
Binder cumulant U4 with jackknife errors over bins, and the integrated autocorrelation times.
Tc is the weighted mean of the U4(T) crossings of consecutive sizes.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import UserError
from engine.progress import eta
from engine.reporting.plots import plot_ising
from gpu.device import DeviceUnavailable, resolve_device
from gpu.ising.lattice import IsingEnsemble, run_ensemble
from gpu.ising.stats import (
    TC_2D,
    TC_3D,
    estimate_tc,
    integrated_autocorrelation_time,
    lattice_observables,
    onsager_energy,
    onsager_magnetization,
)

DEFAULT_TEMPS = {2: "2.20:2.34:0.01", 3: "4.46:4.56:0.01"}
N_BINS = 32
MAX_LATTICES = 100_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dim", type=int, choices=(2, 3), default=2, help="dimension (default 2)")
    parser.add_argument(
        "--size", type=int, nargs="+", default=[16, 32, 64], metavar="L",
        help="linear sizes, even (default 16 32 64)",
    )
    parser.add_argument(
        "--temps", metavar="A:B:STEP",
        help="temperatures A, A+STEP, …, B or a list T1,T2,… "
        f"(default {DEFAULT_TEMPS[2]} in 2D, {DEFAULT_TEMPS[3]} in 3D)",
    )
    parser.add_argument(
        "--sweeps", type=int, default=20000, help="measuring sweeps (default 20000)"
    )
    parser.add_argument("--therm", type=int, help="thermalisation sweeps (default sweeps/5)")
    parser.add_argument(
        "--replicas", type=int, default=1, help="independent lattices per (L, T) (default 1)"
    )
    parser.add_argument("--field", type=float, default=0.0, help="magnetic field h (default 0)")
    parser.add_argument("--seed", type=int, default=1, help="Philox key (default 1)")
    parser.add_argument(
        "--kernel", choices=("auto", "bitplane", "bitplane-int8", "multispin", "int8"),
        default="auto",
        help="auto: bitplane for sizes that are multiples of 128, bitplane-int8 (the same "
        "random numbers) otherwise; multispin/int8: the earlier kernels",
    )
    parser.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto",
        help="auto: CUDA when numba sees a GPU, else the CPU twin (default auto)",
    )
    parser.add_argument("--out", type=Path, help="directory for the U4(T) and |M|(T) PNG plots")


def parse_temps(text: str) -> list[float]:
    """'A:B:STEP' (B included) or 'T1,T2,…'; every temperature positive and finite."""
    try:
        if ":" in text:
            a, b, step = (float(x) for x in text.split(":"))
            if not (step > 0 and math.isfinite(step) and b >= a):
                raise UserError(f"--temps {text}: need A ≤ B and STEP > 0")
            n = int(math.floor((b - a) / step + 1e-9)) + 1
            if n > 10_000:
                raise UserError(f"--temps {text}: {n} temperatures is too many")
            temps = [round(a + i * step, 12) for i in range(n)]
        else:
            temps = [float(x) for x in text.split(",")]
    except ValueError:
        raise UserError(f"--temps {text!r}: expected A:B:STEP or T1,T2,…") from None
    if not temps or not all(t > 0 and math.isfinite(t) for t in temps):
        raise UserError(f"--temps {text!r}: temperatures must be positive and finite")
    return temps


class Progress:
    """A one-line progress bar on stderr, redrawn at most twice a second."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.start = time.perf_counter()
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if now - self.last < 0.5 and done < total:
            return
        self.last = now
        width = 30
        filled = int(width * done / max(total, 1))
        bar = "#" * filled + "-" * (width - filled)
        left = eta(done, total, now - self.start)
        print(
            f"\r{self.label} [{bar}] {done}/{total} sweeps {now - self.start:6.1f}s"
            + (f" {left:<16}" if left else " " * 17),
            end="\n" if done >= total else "", file=sys.stderr, flush=True,
        )


def _validate(args: argparse.Namespace) -> tuple[list[float], int]:
    if args.sweeps < N_BINS:
        raise UserError(f"--sweeps must be at least {N_BINS} (the jackknife bins)")
    therm = args.sweeps // 5 if args.therm is None else args.therm
    if therm < 0:
        raise UserError("--therm must be ≥ 0")
    if args.replicas < 1:
        raise UserError("--replicas must be ≥ 1")
    if len(set(args.size)) != len(args.size):
        raise UserError("--size values must be distinct")
    for L in args.size:
        if L < 2 or L % 2:
            raise UserError(f"--size {L}: sizes must be even and ≥ 2")
        if args.kernel == "multispin" and (args.dim != 2 or L % 32):
            raise UserError(
                f"--kernel multispin needs --dim 2 and sizes that are multiples of 32 (got {L})"
            )
        if args.kernel == "bitplane" and L % 128:
            raise UserError(f"--kernel bitplane needs sizes that are multiples of 128 (got {L})")
    if not math.isfinite(args.field):
        raise UserError("--field must be finite")
    if not 0 <= args.seed < 2**64:
        raise UserError("--seed must be in [0, 2^64)")
    temps = parse_temps(DEFAULT_TEMPS[args.dim] if args.temps is None else args.temps)
    if len(args.size) * len(temps) * args.replicas > MAX_LATTICES:
        raise UserError(
            f"more than {MAX_LATTICES} lattices: reduce sizes, temperatures or replicas"
        )
    if therm + args.sweeps >= 2**31:
        raise UserError("--sweeps + --therm must stay below 2^31")
    return temps, therm


def _kernel_for(dim: int, L: int, choice: str) -> str:
    if choice != "auto":
        return choice
    return "bitplane" if L % 128 == 0 else "bitplane-int8"


def run(args: argparse.Namespace) -> dict[str, Any]:
    temps, therm = _validate(args)
    if args.out is not None:  # refused now, not after the simulation
        from engine.reporting.outputs import check_writable_dir

        check_writable_dir(args.out, "--out")
    try:
        device = resolve_device(args.device, "Ising Metropolis")
    except (ValueError, DeviceUnavailable) as exc:
        raise UserError(str(exc)) from None
    # lattice n = (size index, temperature index, replica), in that order: its Philox stream
    lattices = [
        (L, t, r) for L in args.size for t in range(len(temps)) for r in range(args.replicas)
    ]
    groups: dict[str, list[int]] = {}
    for n, (L, _, _) in enumerate(lattices):
        groups.setdefault(_kernel_for(args.dim, L, args.kernel), []).append(n)

    m_series, e_series, flips, seconds = _simulate(args, temps, therm, device, lattices,
                                                   groups)
    results = _observables(args.size, temps, args.sweeps, lattices, m_series, e_series)

    tc = tc_err = None
    crossings: list[dict[str, Any]] = []
    if len(args.size) > 1 and len(temps) >= 2:
        by_size = {
            L: (
                np.array([r["binder"] for r in results if r["L"] == L]),
                np.array([r["binder_err"] for r in results if r["L"] == L]),
            )
            for L in args.size
        }
        tc, tc_err, crossings = tc_from_crossings(np.array(temps), by_size)
    exact_tc = TC_2D if args.dim == 2 else TC_3D
    out: dict[str, Any] = {
        "dim": args.dim,
        "field": args.field,
        "sweeps": args.sweeps,
        "therm": therm,
        "replicas": args.replicas,
        "seed": args.seed,
        "device": device,
        "kernels": {k: sorted({lattices[n][0] for n in v}) for k, v in groups.items()},
        "results": results,
        "tc": tc,
        "tc_err": tc_err,
        "tc_exact": exact_tc,
        "crossings": crossings,
        "seconds": seconds,
        "flips_per_ns": flips / seconds / 1e9 if seconds > 0 else None,
    }
    _print_summary(out)
    if args.out is not None:
        out["plots"] = [str(p) for p in plot_ising(out, args.out)]
    return out


Lattice = tuple[int, int, int]  # (size, temperature index, replica)


def tc_from_crossings(temps: np.ndarray, by_size: dict[int, tuple[np.ndarray, np.ndarray]]
                      ) -> tuple[float | None, float | None, list[dict[str, Any]]]:
    """Tc from the U4 crossings of consecutive sizes (`gpu.ising.stats.estimate_tc`), with
    a pair that finds no crossing there interpolated over the whole scan.

    estimate_tc fits a line near a sign change of U_large - U_small on the grid; at small
    sizes with short runs the noise makes that difference change sign several times, and the
    line through the middle change may root outside its window: "no crossing" while the plot
    shows the curves crossing. `interpolated_crossing` fits the difference over every
    temperature instead, so a crossing anywhere inside the scan is found."""
    sizes = sorted(by_size)
    crossings: list[dict[str, Any]] = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        _, _, found = estimate_tc(temps, {a: by_size[a], b: by_size[b]})
        if found:
            crossings += [{**c, "method": "local fit at a sign change"} for c in found]
            continue
        c = interpolated_crossing(temps, *by_size[a], *by_size[b])
        if c is not None:
            crossings.append({"L1": a, "L2": b, "tc": c[0], "tc_err": c[1],
                              "method": "line through every temperature"})
    if not crossings:
        return None, None, crossings
    x = np.array([c["tc"] for c in crossings])
    w = 1.0 / np.array([c["tc_err"] for c in crossings]) ** 2
    tc = float((w * x).sum() / w.sum())
    err = math.sqrt(1.0 / float(w.sum()))
    if x.size > 1:  # the pairs disagree by more than their errors: finite-size drift
        err *= math.sqrt(max(float((w * (x - tc) ** 2).sum()) / (x.size - 1), 1.0))
    return tc, err, crossings


def interpolated_crossing(temps: np.ndarray, u_small: np.ndarray, err_small: np.ndarray,
                          u_large: np.ndarray, err_large: np.ndarray, resamples: int = 400,
                          seed: int = 0) -> tuple[float, float] | None:
    """Where U4 of two sizes cross: the root of a weighted straight line through their
    difference at every temperature, if it lies inside the scan, and its spread when the
    U4 values are redrawn within their errors. None when the line does not cross zero
    inside the scan (the curves do not cross there)."""
    t = np.asarray(temps, np.float64)
    d = np.asarray(u_large, np.float64) - np.asarray(u_small, np.float64)
    sd = np.maximum(np.hypot(err_small, err_large), 1e-12)
    if t.size < 2 or not np.isfinite(d).all() or np.ptp(t) == 0:
        return None
    w = 1.0 / sd**2

    def root(dd: np.ndarray) -> float | None:
        slope, icept = np.polyfit(t, dd, 1, w=np.sqrt(w))
        r = -icept / slope if slope != 0 else math.nan
        return float(r) if t.min() <= r <= t.max() else None

    best = root(d)
    if best is None:
        return None
    rng = np.random.default_rng(seed)
    roots = [r for r in (root(d + rng.normal(size=t.size) * sd) for _ in range(resamples))
             if r is not None]
    err = float(np.std(roots)) if len(roots) > 1 else float(np.ptp(t)) / 2
    return best, max(err, 1e-12)


def _simulate(args: argparse.Namespace, temps: list[float], therm: int, device: str,
              lattices: list[Lattice], groups: dict[str, list[int]],
              ) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray], float, float]:
    """Run every kernel's ensemble: each lattice's magnetization and energy series, the
    spin flips done and the seconds they took."""
    m_series: dict[int, np.ndarray] = {}
    e_series: dict[int, np.ndarray] = {}
    flips = 0.0
    seconds = 0.0
    for kernel, members in groups.items():
        ens = IsingEnsemble(
            args.dim, [lattices[n][0] for n in members], [temps[lattices[n][1]] for n in members],
            field=args.field, seed=args.seed, streams=members, kernel=kernel, device=device,
        )
        m, e, secs = run_ensemble(
            ens, args.sweeps, therm,
            progress=None if args.quiet else Progress(f"ising {kernel} {device}"),
        )
        for col, n in enumerate(members):
            m_series[n], e_series[n] = m[:, col], e[:, col]
        flips += float(ens.n_spins.sum()) * (args.sweeps + therm)
        seconds += secs
    return m_series, e_series, flips, seconds


def _observables(sizes: list[int], temps: list[float], sweeps: int, lattices: list[Lattice],
                 m_series: dict[int, np.ndarray],
                 e_series: dict[int, np.ndarray]) -> list[dict[str, Any]]:
    """Binned observables per (size, temperature) over its replicas."""
    results = []
    per_bin = sweeps // N_BINS
    for L in sizes:
        for ti, T in enumerate(temps):
            ns = [n for n, (LL, tt, _) in enumerate(lattices) if LL == L and tt == ti]
            # replicas are independent chains: whole bins of each, so no bin straddles two
            m = np.concatenate([m_series[n][: per_bin * N_BINS] for n in ns])
            e = np.concatenate([e_series[n][: per_bin * N_BINS] for n in ns])
            obs = lattice_observables(m, e, N_BINS * len(ns))
            # τ_int of each replica's own chain, averaged (a concatenation has seams)
            for key, f in (
                ("tau_energy", lambda n: e_series[n]),
                ("tau_magnetization", lambda n: np.abs(m_series[n])),
                ("tau_m2", lambda n: m_series[n] ** 2),
            ):
                obs[key] = float(np.mean([integrated_autocorrelation_time(f(n)) for n in ns]))
            results.append({"L": L, "T": T, **obs})
    return results


def _print_summary(out: dict[str, Any]) -> None:
    exact = out["dim"] == 2 and out["field"] == 0.0
    head = f"{'L':>6} {'T':>7} {'energy':>18} {'|m|':>18} {'U4':>18} {'tau_|m|':>8}"
    if exact:
        head += f" {'e_exact':>9} {'m_exact':>8}"
    print(head)
    for r in out["results"]:
        line = (
            f"{r['L']:>6} {r['T']:>7.4f} {r['energy']:>10.5f}±{r['energy_err']:<7.5f}"
            f" {r['magnetization']:>10.5f}±{r['magnetization_err']:<7.5f}"
            f" {r['binder']:>10.5f}±{r['binder_err']:<7.5f} {r['tau_magnetization']:>8.1f}"
        )
        if exact:
            line += f" {onsager_energy(r['T']):>9.5f} {onsager_magnetization(r['T']):>8.5f}"
        print(line)
    for c in out["crossings"]:
        print(f"U4 crossing L={c['L1']},{c['L2']}: T = {c['tc']:.5f} ± {c['tc_err']:.5f}")
    if out["tc"] is not None:
        print(
            f"Tc = {out['tc']:.5f} ± {out['tc_err']:.5f}  (exact/reference {out['tc_exact']:.6f},"
            f" off by {out['tc'] - out['tc_exact']:+.5f})"
        )
    else:
        print("Tc: no U4 crossing inside the temperature range")
    if out["flips_per_ns"] is not None:
        print(f"{out['flips_per_ns']:.3f} spin flips/ns (attempted) on {out['device']}")


