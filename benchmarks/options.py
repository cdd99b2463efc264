"""Benchmark: option groups by Crank–Nicolson on the GPU, the CPU twin, and QuantLib.

    python benchmarks/options.py [--device auto|cpu|cuda] [--json PATH] [--accuracy-only]
        [--tile N]

Accuracy per named grid first: the American reference portfolio
(benchmarks/reference/american_reference.csv, 1,000 calls and puts with dividend yields,
QuantLib's QdFpAmericanEngine) priced through the engine's path, `FdPricingEngine.price`:
RMSE over all contracts, RRMSE and the worst relative error over contracts worth ≥ 0.5
(spot 100), the worst absolute error, each worst contract named; the same contracts as
European against the analytic Black–Scholes–Merton price; and options/s of that same call
on the portfolio tiled to `--tile` contracts (default 10,000; on the CPU 2,000), wall time
including the transfers, plus on CUDA the kernel alone (CUDA events). An options/s figure
is only quoted with its grid's accuracy.

The GPU kernel is the engine's: the lanes solver unless GPU_FD_SOLVER=pcr (results before
2026-11-23's fifth session were measured with PCR). Measures, after warm-up (JIT), medians
over repeats:
- options per second for group sizes 1, 10, 100, 1,000, 10,000 at the seed grid
  (150 price steps, Δt = 0.02, T = 0.3 → 15 steps) and the fine grid (512 × 200);
  GPU times are CUDA events around the one kernel launch of the group (data on the
  device), plus the host wall time of launch + synchronize;
- end-to-end latency of a 1,000-option group on the GPU: a new spot written into mapped
  host memory → kernel on the group's stream → results in mapped host memory, observed by
  polling the recorded event (p50, p99 over many repetitions);
- the CPU twin (float64, Thomas, all cores) and QuantLib's FdBlackScholesVanillaEngine
  (Crank–Nicolson, one core, same grid sizes) in the same table;
- the GPU's float32 results against the CPU twin's float64 on the same grid.
Goals (issue): ≥ 1e7 options/s at the seed grid; ≤ 200 µs p50 for the 1,000-option group.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import gpu_name, write_json  # noqa: E402
from gpu.device import resolve_device  # noqa: E402
from gpu.launch import bind  # noqa: E402
from gpu.options import core  # noqa: E402
from gpu.options.engines import (  # noqa: E402
    GRIDS,
    FdGrid,
    FdPricingEngine,
    OptionGroupPricer,
    contract_rows,
    make_grid,
    option_params,
)

SEED_T = 0.3


def make_group(n: int, seed: int = 7) -> np.ndarray:
    """n European calls and puts at the seed setting (K=100, σ=0.25, r=0.05, T=0.3)."""
    rng = np.random.default_rng(seed)
    return option_params(
        rng.uniform(50.0, 150.0, n), 100.0, SEED_T, 0.25, 0.05, rng.random(n) < 0.5, False
    )


def time_gpu(params: np.ndarray, grid: FdGrid, repeats: int) -> dict[str, float]:
    from numba import cuda

    n = params.shape[0]
    # GPU_FD_SOLVER's (default lanes), as the engine launches it for n options
    kernel, threads = core.fd_kernel(grid.price_steps)
    args = core.launch_args(grid.kernel_args())
    stream = cuda.stream()
    d_params = cuda.to_device(params, stream=stream)
    d_out = cuda.device_array((n, core.N_OUT), dtype=np.float64, stream=stream)

    def compile_once() -> None:
        kernel[n, threads, stream](d_params, d_out, *args)
        stream.synchronize()

    threads = core.lanes_threads(kernel, threads, grid.richardson, n, compile_once)
    start, stop = cuda.event(), cuda.event()
    for _ in range(3):  # warm-up
        kernel[n, threads, stream](d_params, d_out, *args)
    stream.synchronize()
    # pre-bound: the events then hold the kernel, not numba's host-side dispatch (about
    # 50 µs a launch, which the GPU would spend idle between the events)
    bound = bind(kernel, (d_params, d_out, *args), stream, threads)
    event_ms: list[float] = []
    wall_s: list[float] = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        start.record(stream)
        if bound is not None:
            bound(n)
        else:
            kernel[n, threads, stream](d_params, d_out, *args)
        stop.record(stream)
        stop.synchronize()
        wall_s.append(time.perf_counter() - t0)
        event_ms.append(cuda.event_elapsed_time(start, stop))
    kernel_s = statistics.median(event_ms) / 1e3
    wall = statistics.median(wall_s)
    return {
        "prebound": bound is not None,
        "seconds": kernel_s,
        "options_per_second": n / kernel_s,
        "wall_seconds": wall,
        "wall_options_per_second": n / wall,
    }


def time_cpu(params: np.ndarray, grid: FdGrid, repeats: int) -> dict[str, float]:
    n = params.shape[0]
    out = np.empty((n, core.N_OUT))
    args = grid.kernel_args()
    core.fd_price_batch_cpu(params[:1], out[:1], *args)  # JIT
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        core.fd_price_batch_cpu(params, out, *args)
        times.append(time.perf_counter() - t0)
    s = statistics.median(times)
    return {"seconds": s, "options_per_second": n / s}


def time_quantlib(params: np.ndarray, grid: FdGrid) -> dict[str, float] | None:
    try:
        import QuantLib as ql
    except ImportError:
        return None
    today = ql.Date(2, 1, 2024)
    ql.Settings.instance().evaluationDate = today
    dc = ql.Actual365Fixed()
    spot = ql.SimpleQuote(100.0)
    process = ql.BlackScholesMertonProcess(
        ql.QuoteHandle(spot),
        ql.YieldTermStructureHandle(ql.FlatForward(today, 0.0, dc)),
        ql.YieldTermStructureHandle(ql.FlatForward(today, 0.05, dc)),
        ql.BlackVolTermStructureHandle(ql.BlackConstantVol(today, ql.NullCalendar(), 0.25, dc)),
    )
    t_steps = grid.time_steps or int(np.ceil(SEED_T / grid.dt_target - 1e-9))
    engine = ql.FdBlackScholesVanillaEngine(
        process, t_steps, grid.price_steps + 1, grid.rannacher, ql.FdmSchemeDesc.CrankNicolson()
    )
    exercise = ql.EuropeanExercise(today + int(round(SEED_T * 365)))
    options = []
    for row in params:
        kind = ql.Option.Call if row[core.IS_CALL] > 0.5 else ql.Option.Put
        opt = ql.VanillaOption(ql.PlainVanillaPayoff(kind, row[core.STRIKE]), exercise)
        opt.setPricingEngine(engine)
        options.append((row[core.SPOT], opt))
    t0 = time.perf_counter()
    for s, opt in options:
        spot.setValue(s)
        opt.NPV()
    sec = time.perf_counter() - t0
    return {"seconds": sec, "options_per_second": len(options) / sec, "count": len(options)}


def reference_rows(n: int) -> np.ndarray:
    """Parameter rows of the American reference portfolio (dividend yields, calls and
    puts), tiled to `n`: the workload the grids' accuracy is stated on."""
    from benchmarks.reference.american import load_reference

    big = load_reference().tiled(n)
    return contract_rows(big.contracts, big.market)


def latency_gpu(n: int, grid: FdGrid, repeats: int,
                params: np.ndarray | None = None) -> dict[str, float]:
    pricer = OptionGroupPricer(make_group(n) if params is None else params, grid, "cuda")
    rng = np.random.default_rng(3)
    spots = rng.uniform(90.0, 110.0, repeats + 20)
    lat_us: list[float] = []
    for i, s in enumerate(spots):
        t0 = time.perf_counter_ns()
        pricer.set_spot(float(s))
        pricer.launch()
        while not pricer.done():
            pass
        values = pricer.results()
        t1 = time.perf_counter_ns()
        if i >= 20:  # the first launches warm up
            lat_us.append((t1 - t0) / 1e3)
        assert np.isfinite(values.price).all()
    arr = np.array(lat_us)
    return {
        "options": n,
        "p50_us": float(np.percentile(arr, 50)),
        "p99_us": float(np.percentile(arr, 99)),
        "mean_us": float(arr.mean()),
        "repeats": len(lat_us),
    }


def ten_groups_round(grid: FdGrid, repeats: int, size: int = 1000) -> dict[str, float]:
    """Goal 3's unit of work: ten groups of 1,000 American options (the reference rows,
    each group with its own spot) repriced in one launch (`BatchPricer`, as the GPU worker
    does with OPTION_WORKER_BATCH=1), from the launch until the host sees it done. A
    replay can reprice every group every 10 ms of data time only if this round (p99)
    takes less than 10 ms divided by the replay's speed-up over real time."""
    from gpu.options.batch import BatchPricer

    groups = [reference_rows(size) for _ in range(10)]
    for i, g in enumerate(groups):
        g[:, core.SPOT] *= 0.9 + 0.02 * i
    batch = BatchPricer([size] * 10, grid, "cuda", slots=1)
    us: list[float] = []
    for k in range(repeats + 10):
        t0 = time.perf_counter_ns()
        batch.launch(0, groups, ("ten",))
        while not batch.done(0):
            pass
        batch.results(0)
        if k >= 10:  # warm-up
            us.append((time.perf_counter_ns() - t0) / 1e3)
    arr = np.array(us)
    return {"options": 10 * size, "p50_us": float(np.percentile(arr, 50)),
            "p99_us": float(np.percentile(arr, 99)), "prebound": float(batch.prebound)}


def gpu_vs_cpu(grid: FdGrid, n: int = 1000) -> dict[str, float]:
    from gpu.options.engines import price_params

    params = make_group(n, seed=11)
    gpu = price_params(params, grid, "cuda").price
    cpu = price_params(params, grid, "cpu").price
    m = np.abs(cpu) > 0.01
    return {
        "options": n,
        "max_rel_diff_price_gt_0.01": float(np.max(np.abs(gpu[m] - cpu[m]) / np.abs(cpu[m]))),
        "max_abs_diff": float(np.max(np.abs(gpu - cpu))),
    }


def chain_implied_vols(backends: list[str]) -> dict[str, Any] | None:
    """Implied vols of the real GOOG chain (default grid) on each backend."""
    from feeds.datadir import data_dir
    from feeds.option_chain import read_chain
    from gpu.options.implied_vol import IVStatus, implied_vols, quote_mids

    path = data_dir() / "lean_goog_option_chain_2015-12-24" / (
        "goog_option_chain_2015-12-24T1300ET.csv"
    )
    if not path.is_file():
        return None
    chain = read_chain(path)
    asof = chain.asof_date()
    assert asof is not None
    mid, status = quote_mids(chain.bid, chain.ask)
    params = option_params(chain.spot, chain.strike, chain.years_to_expiry(asof), 0.3, 0.0,
                           chain.is_call, chain.is_american)
    out: dict[str, Any] = {"contracts": len(chain)}
    ivs = {}
    for b in backends:
        # warm-up: a whole solve, since a few quotes may not reach every compiled path
        t0 = time.perf_counter()
        implied_vols(mid, params, device=b, status=status.copy())
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        res = implied_vols(mid, params, device=b, status=status.copy())
        sec = time.perf_counter() - t0
        ivs[b] = res.iv
        out[b] = {"seconds": sec, "first_call_seconds": first, "iterations": res.iterations,
                  "solved": int((res.status == IVStatus.OK).sum()), "rejected": res.rejected()}
    if len(ivs) == 2:
        both = np.isfinite(ivs["cpu"]) & np.isfinite(ivs["cuda"])
        out["max_abs_iv_diff_cuda_vs_cpu"] = float(np.abs(ivs["cpu"] - ivs["cuda"])[both].max())
    return out


def grid_accuracy(backend: str, tile: int, repeats: int) -> list[dict[str, Any]]:
    """Per named grid: accuracy on the American reference (and its European twin) and
    options/s of `FdPricingEngine.price` on the portfolio tiled to `tile` contracts."""
    from benchmarks.reference.american import accuracy, load_reference

    ref = load_reference()
    euro = load_reference(american=False)
    big = ref.tiled(tile)
    rows: list[dict[str, Any]] = []
    for name in GRIDS:
        engine = FdPricingEngine(name, backend)
        engine.price(ref.contracts.select(np.arange(4)), ref.subset(np.arange(4)).market)
        am = accuracy(engine.price(ref.contracts, ref.market).price, ref.price)
        eu = accuracy(engine.price(euro.contracts, euro.market).price, euro.european)
        if backend == "cuda":
            engine.price(big.contracts, big.market)  # grows the engine's workspace
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            engine.price(big.contracts, big.market)
            times.append(time.perf_counter() - t0)
        row: dict[str, Any] = {
            "grid": name, "device": backend, "settings": engine.grid._asdict(),
            **am, "max_abs_contract": ref.describe(am["max_abs_index"]),
            "max_rel_contract": ref.describe(am["max_rel_index"]),
            "european_rrmse": eu["rrmse"], "european_max_rel_error": eu["max_rel_error"],
            "tiled_contracts": tile, "options_per_second": tile / statistics.median(times),
        }
        if backend == "cuda":  # the kernel alone, rows already on the device
            k = time_gpu(contract_rows(big.contracts, big.market), engine.grid, repeats)
            row["kernel_options_per_second"] = k["options_per_second"]
            # a launch of 10 x the tile: the kernel's rate once its waves keep the GPU full
            huge = ref.tiled(10 * tile)
            engine.price(huge.contracts, huge.market)  # grows the engine's workspace
            huge_s = []
            for _ in range(5):
                t0 = time.perf_counter()
                engine.price(huge.contracts, huge.market)
                huge_s.append(time.perf_counter() - t0)
            row["options_per_second_10x"] = 10 * tile / statistics.median(huge_s)
            k = time_gpu(contract_rows(huge.contracts, huge.market), engine.grid,
                         max(3, repeats // 4))
            row["kernel_options_per_second_10x"] = k["options_per_second"]
        rows.append(row)
        print(f"  {name:7s} RRMSE {am['rrmse']:.2e} worst rel {am['max_rel_error']:.2e} "
              f"{row['options_per_second']:.3e} options/s", file=sys.stderr)
    return rows


def print_accuracy(rows: list[dict[str, Any]]) -> None:
    print("\nAmerican reference (1,000 calls and puts, q in [0, 4%], QuantLib QdFp), "
          "through FdPricingEngine.price")
    print(f"{'grid':8s} {'RMSE':>9s} {'RRMSE':>9s} {'worst abs':>10s} {'worst rel':>10s} "
          f"{'Euro RRMSE':>10s} {'options/s':>10s} {'kernel/s':>10s} {'10x: /s':>10s} "
          f"{'kernel/s':>10s}")
    for r in rows:
        nan = float("nan")
        tens = (r.get("options_per_second_10x", nan), r.get("kernel_options_per_second_10x", nan))
        print(f"{r['grid']:8s} {r['rmse']:9.2e} {r['rrmse']:9.2e} {r['max_abs_error']:10.2e} "
              f"{r['max_rel_error']:10.2e} {r['european_rrmse']:10.2e} "
              f"{r['options_per_second']:10.3e} {r.get('kernel_options_per_second', nan):10.3e} "
              f"{tens[0]:10.3e} {tens[1]:10.3e}")
    for r in rows:
        print(f"  {r['grid']}: worst abs {r['max_abs_contract']}; "
              f"worst rel {r['max_rel_contract']}")


def throughput_rows(backend: str, grids: dict[str, FdGrid], repeats: int,
                    quantlib_count: int) -> list[dict[str, Any]]:
    """Options repriced per second by group size: CUDA, the CPU twin and QuantLib."""
    gpu_sizes = [1, 10, 100, 1000, 10000]
    cpu_sizes = [1, 10, 100, 1000] if backend == "cuda" else [1, 10, 100]
    rows: list[dict[str, Any]] = []
    for gname, grid in grids.items():
        if backend == "cuda":
            for n in gpu_sizes:
                r = time_gpu(make_group(n), grid, repeats)
                rows.append({"backend": "cuda float32", "grid": gname, "options": n, **r})
                print(f"  cuda {gname:7s} {n:6d}: {r['options_per_second']:.3e} options/s",
                      file=sys.stderr)
        for n in cpu_sizes:
            reps = max(3, repeats // (4 if gname == "fine" else 1)) if n >= 1000 else 5
            r = time_cpu(make_group(n), grid, reps)
            rows.append({"backend": f"cpu float64 x{os.cpu_count()}", "grid": gname,
                         "options": n, **r})
            print(f"  cpu  {gname:7s} {n:6d}: {r['options_per_second']:.3e} options/s",
                  file=sys.stderr)
        q = time_quantlib(make_group(quantlib_count), grid)
        if q is not None:
            rows.append({"backend": "QuantLib CN x1", "grid": gname, "options": q.pop("count"),
                         **q})
    return rows


def gpu_results(result: dict[str, Any], rows: list[dict[str, Any]], grids: dict[str, FdGrid],
                latency_repeats: int) -> None:
    """Latency of a 1,000-option group, float32 against float64, and the goals."""
    result["latency_1000_seed"] = latency_gpu(1000, grids["seed"], latency_repeats)
    # the default grid on its reference workload: American options with dividend yields
    result["latency_1000_default"] = latency_gpu(1000, grids["default"], latency_repeats,
                                                 reference_rows(1000))
    # the path's own floor: the same group with expired rows, whose kernel only writes
    # closed-form values (launch, mapped memory, event, copies)
    expired = reference_rows(1000)
    expired[:, core.EXPIRY] = 0.0
    result["latency_1000_floor"] = latency_gpu(1000, grids["default"], latency_repeats, expired)
    result["ten_groups_round_default"] = ten_groups_round(grids["default"], latency_repeats)
    for g in ("seed", "default", "fine"):
        result[f"gpu_vs_cpu_{g}"] = gpu_vs_cpu(grids[g])
    seed_rate = max(
        r["options_per_second"] for r in rows
        if r["backend"].startswith("cuda") and r["grid"] == "seed"
    )
    result["goals"] = {
        "seed_options_per_second": seed_rate,
        "seed_options_per_second_goal": 1e7,
        "latency_p50_us": result["latency_1000_seed"]["p50_us"],
        "latency_p50_us_goal": 200.0,
        "default_latency_p50_us": result["latency_1000_default"]["p50_us"],
        "default_latency_p50_us_goal": 50.0,
        "seed_paper_1000_options_ms": 1.87,
    }


def print_report(result: dict[str, Any], backend: str) -> None:
    """The result as tables on stdout."""
    print(f"\noption repricing on {result.get('gpu', backend)} "
          f"({os.cpu_count()} CPU cores); medians after warm-up")
    print(f"{'backend':22s} {'grid':7s} {'options':>8s} {'seconds':>11s} {'options/s':>11s}")
    for r in result["rows"]:
        print(f"{r['backend']:22s} {r['grid']:7s} {r['options']:8d} {r['seconds']:11.3e} "
              f"{r['options_per_second']:11.3e}")
    if "latency_1000_seed" in result:
        lat = result["latency_1000_seed"]
        print(f"\nspot → 1,000-option group repriced → results on host: p50 {lat['p50_us']:.1f} µs,"
              f" p99 {lat['p99_us']:.1f} µs (goal p50 ≤ 200 µs; seed paper 1.87 ms)")
        lat = result["latency_1000_default"]
        print(f"the same at the default grid (American, with dividends): p50 "
              f"{lat['p50_us']:.1f} µs, p99 {lat['p99_us']:.1f} µs (goal p50 ≤ 50 µs)")
        floor = result["latency_1000_floor"]
        print(f"the same path with expired rows (its floor, no PDE): p50 "
              f"{floor['p50_us']:.1f} µs, p99 {floor['p99_us']:.1f} µs")
        ten = result["ten_groups_round_default"]
        print(f"ten groups of 1,000 (default grid) in one launch: p50 {ten['p50_us']:.1f} µs, "
              f"p99 {ten['p99_us']:.1f} µs (every 10 ms of data time needs p99 < 10 ms / "
              f"the replay's speed-up)")
        for g in ("seed", "default", "fine"):
            d = result[f"gpu_vs_cpu_{g}"]
            print(f"float32 GPU vs float64 CPU, {g} grid: max relative difference "
                  f"{d['max_rel_diff_price_gt_0.01']:.2e} (prices > 0.01)")
    iv = result.get("goog_chain_implied_vols")
    if iv is not None:
        for b in ("cuda", "cpu"):
            if b in iv:
                print(f"GOOG chain implied vols ({iv['contracts']} contracts) on {b}: "
                      f"{iv[b]['solved']} solved in {iv[b]['iterations']} batched repricings, "
                      f"{iv[b]['seconds']:.3f} s (first call, with compilation, "
                      f"{iv[b]['first_call_seconds']:.3f} s)")
        if "max_abs_iv_diff_cuda_vs_cpu" in iv:
            print(f"  max |IV(cuda) − IV(cpu)| = {iv['max_abs_iv_diff_cuda_vs_cpu']:.2e}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    ap.add_argument(
        "--json",
        type=Path,
        default=Path(__file__).resolve().parent / "out" / "options.json",
    )
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--latency-repeats", type=int, default=500)
    ap.add_argument("--quantlib-count", type=int, default=50)
    ap.add_argument("--tile", type=int, default=None,
                    help="contracts of the tiled reference for options/s "
                         "(default 10,000; 2,000 on the CPU)")
    ap.add_argument("--accuracy-only", action="store_true",
                    help="only the per-grid accuracy and options/s on the reference")
    args = ap.parse_args(argv)
    backend = resolve_device(args.device, "options benchmark")
    tile = args.tile or (10_000 if backend == "cuda" else 2_000)
    # (a CUDA call takes a millisecond or less: every repeat; the CPU twin's seconds: fewer)
    accuracy_rows = grid_accuracy(backend, tile,
                                  args.repeats if backend == "cuda" else max(3, args.repeats // 4))
    print_accuracy(accuracy_rows)
    result: dict[str, Any] = {"device": backend, "cpu_cores": os.cpu_count(),
                              "accuracy": accuracy_rows}
    if backend == "cuda":
        result["gpu"] = gpu_name()
    if args.accuracy_only:
        write_json(args.json, result, indent=1)
        return 0
    grids = {name: make_grid(name) for name in GRIDS}
    rows = throughput_rows(backend, grids, args.repeats, args.quantlib_count)
    result.update({"grids": {k: g._asdict() for k, g in grids.items()}, "rows": rows})
    if backend == "cuda":
        gpu_results(result, rows, grids, args.latency_repeats)
    iv = chain_implied_vols(["cuda", "cpu"] if backend == "cuda" else ["cpu"])
    if iv is not None:
        result["goog_chain_implied_vols"] = iv
    print_report(result, backend)
    write_json(args.json, result, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
