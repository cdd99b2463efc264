"""Benchmark: Ising spin flips per ns on the GPU (bit-plane, multi-spin, int8), CPU peers, Tc.

    python benchmarks/ising.py [--device auto|cpu|cuda] [--quick] [--json PATH]
        [--skip-validation]

Measures, after warm-up (JIT), with CUDA events around whole sweeps:
- attempted spin flips per ns (every site once per sweep) for one 2D lattice of
  L = 16,384 … 65,536 with the bit-plane kernel (`bitplane`, one bit per spin, the
  default) and the nibble multi-spin kernel it replaces (`multispin`, 4 bits per spin),
  the int8 reference at 16,384; one 3D lattice of L = 512 and 1,024 with `bitplane` and
  int8 (the only 3D kernel before), and 2,048 with `bitplane`;
- the random-number share of each multi-spin kernel: the same launch shape drawing only
  its Philox numbers (bitplane: the 4 plane draws per 64 spins; the rare refining draws
  on ties, about 1 in 256 spins whose acceptance is below 1, stay in the sweep time);
- where the time of the nibble kernel goes: Philox only, the same kernel with a cheap
  hash instead of Philox (memory traffic + arithmetic), and the bytes it must move
  against the GPU's measured copy bandwidth (a device-to-device copy of 4 GiB);
- peers on the CPU: the CPU twin (all cores) and a plain numpy checkerboard (numpy's own
  generator) at a small size;
- validation on the GPU: 2D U4 crossings of L = 32…128 around Tc = 2.269185 (goal ±0.005),
  3D crossings of L = 8…32 around 4.5115 (goal ±0.01), and |m|, energy at T = 2.0 and
  2.2 at L = 512 against Onsager–Yang within 2σ.
Goals (issue 30): ≥ 1,400 flips/ns for the 2D bit-plane kernel at 65,536² on one H100
(cuIsingModel publishes 1,277–1,288 per H100) and ≥ 400 for 3D (int8: 72); the table's
last lines say whether this run met them. `--skip-validation` prints the table alone (a
few minutes on an H100).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from numba import cuda

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import gpu_name, write_json  # noqa: E402
from gpu.device import resolve_device  # noqa: E402
from gpu.ising import lattice as ising_mod  # noqa: E402
from gpu.ising.lattice import IsingEnsemble, run_ensemble  # noqa: E402
from gpu.ising.stats import (  # noqa: E402
    TC_2D,
    TC_3D,
    estimate_tc,
    lattice_observables,
    onsager_energy,
    onsager_magnetization,
)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def gpu_bandwidth(n_bytes: int) -> float:
    """Device-to-device copy bandwidth, GB/s counting read + write."""
    from numba import cuda

    a = cuda.device_array(n_bytes // 8, dtype=np.uint64)
    b = cuda.device_array(n_bytes // 8, dtype=np.uint64)
    b.copy_to_device(a)
    start, stop = cuda.event(), cuda.event()
    times = []
    for _ in range(5):
        start.record()
        b.copy_to_device(a)
        stop.record()
        stop.synchronize()
        times.append(cuda.event_elapsed_time(start, stop) / 1e3)
    del a, b
    return 2 * n_bytes / float(np.median(times)) / 1e9


def time_sweeps(ens: IsingEnsemble, target_s: float, device: str) -> tuple[float, int]:
    """Seconds per sweep (median of 3 timed batches) after two warm-up sweeps."""
    ens.run(2)
    if device == "cuda":
        from numba import cuda

        cuda.synchronize()
        start, stop = cuda.event(), cuda.event()
        start.record()
        ens.run(1)
        stop.record()
        stop.synchronize()
        one = max(cuda.event_elapsed_time(start, stop) / 1e3, 1e-6)
        n = max(1, min(200, int(target_s / one)))
        times = []
        for _ in range(3):
            start.record()
            ens.run(n)
            stop.record()
            stop.synchronize()
            times.append(cuda.event_elapsed_time(start, stop) / 1e3 / n)
        return float(np.median(times)), n
    t0 = time.perf_counter()
    ens.run(1)
    one = max(time.perf_counter() - t0, 1e-6)
    n = max(1, min(200, int(target_s / one)))
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        ens.run(n)
        times.append((time.perf_counter() - t0) / n)
    return float(np.median(times)), n


def numpy_peer(L: int, sweeps: int, T: float = 2.269) -> float:
    """Flips per ns of a vectorised numpy checkerboard (numpy's PCG64 uniforms)."""
    rng = np.random.default_rng(0)
    s = np.ones((L, L), dtype=np.int8)
    colour = np.indices((L, L)).sum(axis=0) % 2 == 1
    masks = (~colour, colour)
    boltz = {de: math.exp(-de / T) for de in (4, 8)}
    t0 = time.perf_counter()
    for _ in range(sweeps):
        for mask in masks:
            nb = np.roll(s, 1, 0) + np.roll(s, -1, 0) + np.roll(s, 1, 1) + np.roll(s, -1, 1)
            de = 2 * s.astype(np.int16) * nb
            p = np.where(de == 4, boltz[4], np.where(de == 8, boltz[8], 1.0))
            flip = mask & (rng.random((L, L)) < p)
            s[flip] = -s[flip]
    return L * L * sweeps / (time.perf_counter() - t0) / 1e9


def _profile_kernels() -> tuple[Any, Any]:
    """Two cut-down kernels of the multi-spin launch shape: Philox only; no Philox."""
    from numba import cuda

    draws = ising_mod.TWIN.cuda.site_draws
    neighbours = ising_mod.TWIN.cuda.neighbour_nibbles

    @cuda.jit
    def rng_only(out, n_words, L, sweep, key0, key1):
        w = cuda.grid(1)  # type: ignore[call-arg,var-annotated]
        if w < n_words:
            W = L // 32
            i = w // W
            first = i * (L // 16) + 2 * (w - i * W)
            acc = np.uint32(0)
            for g in range(2):
                r0, r1, r2, r3 = draws(first + g, 0, sweep, 0, key0, key1, 0)
                acc ^= r0 ^ r1 ^ r2 ^ r3
            if acc == np.uint32(12345):  # never true in practice: keeps the work alive
                out[0] = acc

    decisions = ising_mod.TWIN.cuda.octet_decisions

    @cuda.jit
    def no_rng(own, other, n_words, L, colour, thr):
        # the multi-spin kernel with a cheap hash where Philox was: memory + arithmetic
        table = cuda.shared.array((1, 14), dtype=np.uint32)
        if cuda.threadIdx.x < thr.shape[1]:
            table[0, cuda.threadIdx.x] = thr[0, cuda.threadIdx.x]
        cuda.syncthreads()  # type: ignore[call-arg]
        w = cuda.grid(1)
        if w < n_words:
            up = neighbours(other, 0, L, colour, w)
            word = own[w]
            rows = word + (word << np.uint64(2)) + up
            h = word ^ (up * np.uint64(0x9E3779B97F4A7C15))
            r0, r1 = np.uint32(h >> np.uint64(32)), np.uint32(h & np.uint64(0xFFFFFFFF))
            lo32 = np.uint32(rows & np.uint64(0xFFFFFFFF))
            f_lo, t_lo = decisions(lo32, r0, r1, r1, r0, table, 0)
            f_hi, t_hi = decisions(np.uint32(rows >> np.uint64(32)), r1, r0, r0, r1, table, 0)
            own[w] = word ^ (np.uint64(f_lo) | (np.uint64(f_hi) << np.uint64(32)))

    return rng_only, no_rng


def _bp_rng_kernel() -> Any:
    """The bit-plane launch shape drawing only the 4 plane Philox calls per word (`cuda`
    a module global, so that numba's simulator can run it too)."""
    draws = ising_mod.TWIN.cuda.plane_draws
    threads, per_thread = ising_mod.THREADS, ising_mod.BP_WORDS

    @cuda.jit
    def rng_only(out, n_words, sweep, key0, key1):
        w = cuda.blockIdx.x * threads * per_thread + cuda.threadIdx.x  # type: ignore[operator]
        acc = np.uint32(0)
        for _ in range(per_thread):
            if w < n_words:
                for q in range(4):
                    r0, r1, r2, r3 = draws(w, q, 0, sweep, 0, key0, key1)
                    acc ^= r0 ^ r1 ^ r2 ^ r3
            w += threads
        if acc == np.uint32(12345):  # never true in practice: keeps the work alive
            out[0] = acc

    return rng_only


def bitplane_profile(
    dim: int, L: int, per_sweep: float, bandwidth: float | None
) -> dict[str, Any]:
    """Random-number share and memory bound of one bit-plane sweep."""
    from numba import cuda

    rng_only = _bp_rng_kernel()
    n_words = L**dim // 128  # per colour
    threads = ising_mod.THREADS * ising_mod.BP_WORDS
    blocks = (n_words + threads - 1) // threads
    out = cuda.device_array(1, dtype=np.uint64)
    key0, key1 = np.uint64(1), np.uint64(0)
    rng_only[blocks, ising_mod.THREADS](out, n_words, 3, key0, key1)
    start, stop = cuda.event(), cuda.event()
    start.record()
    for _ in range(10):  # 5 sweeps = 10 half-sweeps
        rng_only[blocks, ising_mod.THREADS](out, n_words, 3, key0, key1)
    stop.record()
    stop.synchronize()
    rng_s = cuda.event_elapsed_time(start, stop) / 1e3 / 5
    # per half-sweep each word is read and written once and its neighbour words read
    # (from DRAM once if the rows/lines around it stay in L2): ≥ 3 × 8 bytes per 64 spins
    bytes_min = 2 * n_words * 3 * 8
    prof = {"dim": dim, "L": L, "sweep_ms": per_sweep * 1e3, "philox_main_ms": rng_s * 1e3,
            "random_share": rng_s / per_sweep, "bytes_per_sweep_min": bytes_min}
    if bandwidth:
        prof["memory_bound_ms"] = bytes_min / (bandwidth * 1e9) * 1e3
    return prof


def where_time_goes(L: int, bandwidth: float, per_sweep: float) -> dict[str, Any]:
    from numba import cuda

    rng_only, no_rng = _profile_kernels()
    n_words = L * L // 32
    threads = ising_mod.THREADS
    blocks = (n_words + threads - 1) // threads
    out = cuda.device_array(1, dtype=np.uint64)
    a = cuda.to_device(np.full(n_words, np.uint64(0x1111111111111111)))
    b = cuda.to_device(np.full(n_words, np.uint64(0x1111111111111111)))
    thr = cuda.to_device(
        (ising_mod.acceptance_table(2, [TC_2D]) >> np.uint64(16)).astype(np.uint32)
    )
    key0, key1 = np.uint64(1), np.uint64(0)

    def timed(fn: Any) -> float:
        fn()
        start, stop = cuda.event(), cuda.event()
        start.record()
        for _ in range(5):
            fn()
        stop.record()
        stop.synchronize()
        return cuda.event_elapsed_time(start, stop) / 1e3 / 5

    rng_s = timed(lambda: [rng_only[blocks, threads](out, n_words, L, 3, key0, key1)
                           for _ in range(2)])
    mem_s = timed(lambda: [no_rng[blocks, threads](x, y, n_words, L, c, thr)
                           for c, x, y in ((0, a, b), (1, b, a))])
    # per half-sweep each word is read (own), its 3 neighbour words read (up, down, centre;
    # the side word comes from cache) and written: ≥ 5 × 8 bytes per 16 spins
    bytes_per_sweep = 2 * n_words * 5 * 8
    return {
        "L": L,
        "sweep_ms": per_sweep * 1e3,
        "philox_only_ms": rng_s * 1e3,
        "no_philox_ms": mem_s * 1e3,
        "bytes_per_sweep_min": bytes_per_sweep,
        "memory_bound_ms": bytes_per_sweep / (bandwidth * 1e9) * 1e3,
        "bandwidth_gbs": bandwidth,
    }


def throughput(device: str, quick: bool) -> list[dict[str, Any]]:
    rows = []
    if device == "cuda":
        if quick:
            cases = [(2, 4096, k) for k in ("bitplane", "multispin", "int8")]
            cases += [(3, 256, k) for k in ("bitplane", "int8")]
        else:
            cases = [(2, L, k) for L in (16384, 32768, 65536) for k in ("bitplane", "multispin")]
            cases += [(2, 16384, "int8")]
            cases += [(3, L, k) for L in (512, 1024) for k in ("bitplane", "int8")]
            cases += [(3, 2048, "bitplane")]
    else:
        cases = [(2, 256 if quick else 1024, k) for k in ("bitplane", "multispin", "int8")]
        cases += [(3, 128, k) for k in ("bitplane", "int8")]
    for dim, L, kernel in cases:
        ens = IsingEnsemble(dim, [L], [TC_2D if dim == 2 else TC_3D], seed=1, kernel=kernel,
                            device=device)
        per_sweep, n = time_sweeps(ens, 0.05 if quick else 0.4, device)
        rate = L**dim / per_sweep / 1e9
        rows.append({"dim": dim, "L": L, "kernel": kernel, "device": device,
                     "sweep_ms": per_sweep * 1e3, "sweeps_timed": n, "flips_per_ns": rate})
        log(f"  {dim}D L={L:>6} {kernel:>9} {device}: {rate:9.2f} flips/ns, "
            f"{per_sweep * 1e3:.3f} ms/sweep")
        del ens
    return rows


def validation(device: str, quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    specs = {
        2: ([8, 16] if quick else [32, 64, 128],
            np.round(np.arange(2.25, 2.2901, 0.01 if quick else 0.005), 4), TC_2D, 0.005),
        3: ([4, 8] if quick else [8, 16, 32],
            np.round(np.arange(4.48, 4.5401, 0.02 if quick else 0.01), 4), TC_3D, 0.01),
    }
    sweeps = {2: 200 if quick else 20000, 3: 200 if quick else 10000}
    # replicas are nearly free on the GPU (small lattices leave it launch-bound)
    replicas = {2: 1 if quick else 32, 3: 1 if quick else 16}
    for dim, (sizes, temps, exact, goal) in specs.items():
        t0 = time.perf_counter()
        lat = [(L, T) for L in sizes for T in temps for _ in range(replicas[dim])]
        series: dict[tuple[int, float], list[Any]] = {}
        for kernel in ("bitplane", "bitplane-int8"):  # what `ising --kernel auto` runs
            members = [n for n, (L, _) in enumerate(lat)
                       if (kernel == "bitplane") == (L % 128 == 0)]
            if not members:
                continue
            ens = IsingEnsemble(dim, [lat[n][0] for n in members], [lat[n][1] for n in members],
                                seed=7, streams=members, kernel=kernel, device=device)
            m, e, _ = run_ensemble(ens, sweeps[dim], sweeps[dim] // 5)
            for col, n in enumerate(members):
                series.setdefault(lat[n], []).append((m[:, col], e[:, col]))
        by_size = {}
        table = []
        for L in sizes:
            u, du = [], []
            for T in temps:
                runs = series[(L, T)]
                obs = lattice_observables(np.concatenate([r[0] for r in runs]),
                                          np.concatenate([r[1] for r in runs]), 32 * len(runs))
                u.append(obs["binder"])
                du.append(obs["binder_err"])
                table.append({"L": L, "T": float(T), **obs})
            by_size[L] = (np.array(u), np.array(du))
        tc, tc_err, crossings = estimate_tc(temps, by_size)
        ok = tc is not None and abs(tc - exact) <= goal
        out[f"tc_{dim}d"] = {"tc": tc, "tc_err": tc_err, "exact": exact, "goal": goal,
                             "within_goal": ok, "crossings": crossings,
                             "seconds": time.perf_counter() - t0, "sizes": sizes,
                             "sweeps": sweeps[dim], "replicas": replicas[dim]}
        log(f"  {dim}D Tc = {tc} ± {tc_err} (exact {exact}, goal ±{goal}): "
            f"{'ok' if ok else 'MISSED'} in {time.perf_counter() - t0:.1f}s")
    # Onsager–Yang at large L, where finite-size effects are far below the errors
    # L ≫ ξ (≈ 18 at T = 2.2), so finite-size effects are far below the errors; τ_int of
    # |m| at T = 2.2 is hundreds of sweeps, hence long runs and long bins
    L, reps = (128, 4) if quick else (256, 16)
    ens = IsingEnsemble(2, [L] * (2 * reps), [2.0] * reps + [2.2] * reps, seed=3,
                        kernel="bitplane", device=device)
    m, e, _ = run_ensemble(ens, 512 if quick else 20000, 200 if quick else 4000)
    checks = []
    for T, cols in ((2.0, slice(0, reps)), (2.2, slice(reps, 2 * reps))):
        obs = lattice_observables(
            m[:, cols].T.reshape(-1), e[:, cols].T.reshape(-1), 8 * reps, min_bins=reps
        )
        mx, ex = onsager_magnetization(T), onsager_energy(T)
        checks.append({
            "T": T, "L": L, "magnetization": obs["magnetization"],
            "magnetization_err": obs["magnetization_err"], "exact_magnetization": mx,
            "energy": obs["energy"], "energy_err": obs["energy_err"], "exact_energy": ex,
            "m_within_2sigma": abs(obs["magnetization"] - mx) <= 2 * obs["magnetization_err"],
            "e_within_2sigma": abs(obs["energy"] - ex) <= 2 * obs["energy_err"],
        })
        log(f"  T={T} L={L}: |m| {obs['magnetization']:.5f}±{obs['magnetization_err']:.5f} "
            f"(exact {mx:.5f}), e {obs['energy']:.5f}±{obs['energy_err']:.5f} (exact {ex:.5f})")
    out["onsager"] = checks
    return out


def comparisons(rows: list[dict[str, Any]], device: str) -> list[dict[str, Any]]:
    """New against old at the largest size both ran: 2D bitplane vs multispin, 3D vs int8."""
    out = []
    for dim, old in ((2, "multispin"), (3, "int8")):
        rate = {(r["kernel"], r["L"]): r["flips_per_ns"] for r in rows
                if r["dim"] == dim and r["device"] == device}
        common = [L for (k, L) in rate if k == "bitplane" and (old, L) in rate]
        if not common:
            continue
        L = max(common)
        c: dict[str, Any] = {"dim": dim, "L": L, "new": rate[("bitplane", L)],
                             "old_kernel": old, "old": rate[(old, L)]}
        c["speedup"] = c["new"] / c["old"]
        if device == "cuda":
            best = max(v for (k, _), v in rate.items() if k == "bitplane")
            c["goal"] = 1400.0 if dim == 2 else 400.0
            c["met"] = (rate.get(("bitplane", 65536), 0.0) if dim == 2 else best) >= c["goal"]
        out.append(c)
    return out


def print_summary(result: dict[str, Any], device: str, quick: bool) -> None:
    """The run's table, profiles, comparisons with the goals and the validation verdicts;
    fills `result["comparisons"]`."""
    rows = result["throughput"]
    if device == "cuda":
        print(f"GPU: {result['gpu']}, copy bandwidth {result['bandwidth_gbs']:.0f} GB/s")
    print(f"{'dim':>3} {'L':>6} {'kernel':>10} {'device':>6} {'flips/ns':>10} {'ms/sweep':>10}")
    for r in rows:
        ms = f"{r['sweep_ms']:>10.3f}" if "sweep_ms" in r else f"{'':>10}"
        print(f"{r['dim']:>3} {r['L']:>6} {r['kernel']:>10} {r['device']:>6}"
              f" {r['flips_per_ns']:>10.3f} {ms}")
    if "profile" in result:
        p = result["profile"]
        print(f"multispin L={p['L']}: sweep {p['sweep_ms']:.2f} ms; Philox alone "
              f"{p['philox_only_ms']:.2f} ms ({100 * p['random_share']:.0f}%); without Philox "
              f"{p['no_philox_ms']:.2f} ms; memory bound {p['memory_bound_ms']:.2f} ms at "
              f"{p['bandwidth_gbs']:.0f} GB/s")
    for p in result.get("bitplane_profile", []):
        print(f"bitplane {p['dim']}D L={p['L']}: sweep {p['sweep_ms']:.3f} ms; plane Philox "
              f"alone {p['philox_main_ms']:.3f} ms ({100 * p['random_share']:.0f}%); memory "
              f"bound {p.get('memory_bound_ms', float('nan')):.3f} ms")
    result["comparisons"] = comparisons(rows, device)
    for c in result["comparisons"]:
        goal = ""
        if "goal" in c:
            goal = f", goal ≥ {c['goal']:.0f}: {'met' if c['met'] else 'NOT met'}"
        print(f"{c['dim']}D L={c['L']}: bitplane {c['new']:.4g} vs {c['old_kernel']} "
              f"{c['old']:.4g} flips/ns (×{c['speedup']:.2f}){goal}")
    if quick:
        print("--quick: tiny sizes and runs, a smoke test; the goals apply to the full run")
    if "validation" in result:
        v = result["validation"]
        for dim in (2, 3):
            t = v[f"tc_{dim}d"]
            print(f"{dim}D Tc {t['tc']} ± {t['tc_err']} (exact {t['exact']}, goal ±{t['goal']}):"
                  f" {'ok' if t['within_goal'] else 'MISSED'}")
        for c in v["onsager"]:
            print(f"T={c['T']} L={c['L']}: |m| within 2σ: {c['m_within_2sigma']}, "
                  f"energy within 2σ: {c['e_within_2sigma']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    ap.add_argument("--skip-validation", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    device = resolve_device(args.device, "Ising benchmark")
    result: dict[str, Any] = {"device": device, "host": platform.node(),
                              "cpus": os.cpu_count(), "quick": args.quick}
    if device == "cuda":
        result["gpu"] = gpu_name()
        result["bandwidth_gbs"] = gpu_bandwidth(1 << 26 if args.quick else 1 << 32)
        log(f"device copy bandwidth: {result['bandwidth_gbs']:.0f} GB/s")
    log("throughput:")
    rows = throughput(device, args.quick)
    if device == "cuda":
        cpu_L = 256 if args.quick else 2048
        for kernel in ("bitplane", "multispin", "int8"):
            ens = IsingEnsemble(2, [cpu_L], [TC_2D], seed=1, kernel=kernel, device="cpu")
            per_sweep, n = time_sweeps(ens, 0.5, "cpu")
            rows.append({"dim": 2, "L": cpu_L, "kernel": kernel, "device": "cpu",
                         "sweep_ms": per_sweep * 1e3, "sweeps_timed": n,
                         "flips_per_ns": cpu_L**2 / per_sweep / 1e9})
    peer_L = 128 if args.quick else 512
    rows.append({"dim": 2, "L": peer_L, "kernel": "numpy", "device": "cpu",
                 "flips_per_ns": numpy_peer(peer_L, 5 if args.quick else 20)})
    result["throughput"] = rows
    if device == "cuda":
        big = [r for r in rows if r["kernel"] == "multispin" and r["device"] == "cuda"]
        best = max(big, key=lambda r: r["flips_per_ns"])
        result["profile"] = where_time_goes(best["L"] if not args.quick else 1024,
                                            result["bandwidth_gbs"], best["sweep_ms"] / 1e3)
        result["profile"]["random_share"] = (
            result["profile"]["philox_only_ms"] / result["profile"]["sweep_ms"]
        )
        result["bitplane_profile"] = [
            bitplane_profile(r["dim"], r["L"], r["sweep_ms"] / 1e3, result["bandwidth_gbs"])
            for r in rows
            if r["kernel"] == "bitplane" and r["device"] == "cuda"
            and r["L"] == max(q["L"] for q in rows
                              if q["kernel"] == "bitplane" and q["dim"] == r["dim"])
        ]
    if not args.skip_validation:
        log("validation:")
        result["validation"] = validation(device, args.quick)

    print_summary(result, device, args.quick)
    if args.json:
        write_json(args.json, result, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
