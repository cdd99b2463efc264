"""GP evaluator throughput: CUDA kernel vs the numba CPU twin (all cores and one core).

Evaluates a bred population (random ramped half-and-half, then a few rounds of breeding so
tree shapes are realistic) over real S&P 500 data and reports GP operations per second
(interpreted program nodes x stocks x days) and evaluations per second (individuals, each
over every stock and day). CUDA is timed with CUDA events after a warm-up launch, kernel
alone and end to end (program upload + kernel + result download); the CPU with
perf_counter after warm-up, on a smaller population (its rate does not depend on the
population size) and reported per second like the GPU. Also the strategy path: one bar
close of the engine (AsyncDecider: features up, one launch, codes down).

    python benchmarks/gp_evaluator.py                       # 25,000 x 32 x 768 on CUDA
    python benchmarks/gp_evaluator.py --cpu-population 200 --no-cuda   # CPU only
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from feeds.datadir import data_dir  # noqa: E402
from gpu.device import cuda_present  # noqa: E402
from gpu.gp import decider as gp_decider  # noqa: E402
from gpu.gp import evaluate as gp_eval
from gpu.threads import run_chunks  # noqa: E402
from strategies.gp.init import ramped_half_and_half  # noqa: E402
from strategies.gp.operators import breed  # noqa: E402
from strategies.gp.representation import Population  # noqa: E402
from strategies.gp.window import load_window  # noqa: E402


def bred_population(n: int, seed: int, rounds: int = 5) -> Population:
    rng = np.random.default_rng(seed)
    pop = ramped_half_and_half(n, rng, 2, 5)
    for _ in range(rounds):
        pop = breed(pop, rng.integers(0, n, n), rng.integers(0, n, n), rng)
    return pop


def time_cpu(programs: np.ndarray, lengths: np.ndarray, panel: np.ndarray, close: np.ndarray,
             repeats: int, threads: int) -> float:
    """Median seconds of the CPU evaluator with `threads` numba threads."""
    old = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        out = np.empty((programs.shape[0], close.shape[1]))
        n_days = close.shape[0]
        run_chunks(gp_eval._final_cash_cpu, 2, programs[:2], lengths[:2], panel, close, 0,
                   n_days, gp_eval.DEFAULT_COSTS, out[:2])
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            run_chunks(gp_eval._final_cash_cpu, programs.shape[0], programs, lengths, panel,
                       close, 0, n_days, gp_eval.DEFAULT_COSTS, out, min_chunk=16)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    finally:
        numba.set_num_threads(old)


def time_cuda(programs: np.ndarray, lengths: np.ndarray, panel: np.ndarray, close: np.ndarray,
              repeats: int) -> tuple[float, float, np.ndarray]:
    """Median seconds (kernel alone, end to end) and the final cash of the last run."""
    from numba import cuda

    n, n_stocks = programs.shape[0], close.shape[1]
    n_days = close.shape[0]
    d_panel, d_close = cuda.to_device(panel), cuda.to_device(close)
    d_prog, d_len = cuda.to_device(programs), cuda.to_device(lengths)
    d_out = cuda.device_array((n, n_stocks), np.float64)
    blocks = gp_eval._blocks(n * n_stocks)
    kernel = gp_eval._final_cash_kernel[blocks, gp_eval.THREADS_PER_BLOCK]
    kernel(d_prog, d_len, d_panel, d_close, 0, n_days, d_out)  # JIT + warm-up
    cuda.synchronize()
    k_times, e_times = [], []
    host_out = cuda.pinned_array((n, n_stocks), np.float64)
    for _ in range(repeats):
        start, mid, end = cuda.event(), cuda.event(), cuda.event()
        start.record()
        d_prog.copy_to_device(programs)
        d_len.copy_to_device(lengths)
        mid.record()
        kernel(d_prog, d_len, d_panel, d_close, 0, n_days, d_out)
        k_end = cuda.event()
        k_end.record()
        d_out.copy_to_host(host_out)
        end.record()
        end.synchronize()
        k_times.append(cuda.event_elapsed_time(mid, k_end) / 1e3)
        e_times.append(cuda.event_elapsed_time(start, end) / 1e3)
    return statistics.median(k_times), statistics.median(e_times), np.array(host_out)


def time_decider(n_rules: int, n_symbols: int, device: str, repeats: int) -> float:
    """Median seconds of one engine bar close: start + poll until ready + result."""
    pop = bred_population(n_rules, 3, rounds=2)
    programs, lengths = pop.compile()
    dec = gp_decider.AsyncDecider(programs, lengths, device)
    feats = np.random.default_rng(0).normal(100, 10, (n_symbols, 31)).astype(np.float32)
    dec.start(feats)
    dec.result()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        dec.start(feats)
        while not dec.ready():
            pass
        dec.result()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(data_dir() / "sp500_5yr_daily"))
    ap.add_argument("--population", type=int, default=25_000, help="CUDA population")
    ap.add_argument("--cpu-population", type=int, default=1_000)
    ap.add_argument("--stocks", type=int, default=32)
    ap.add_argument("--days", type=int, default=768)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-cuda", action="store_true")
    ap.add_argument("--json", type=Path, default=Path("gp_evaluator.json"))
    args = ap.parse_args()

    w = load_window(args.data, args.stocks, args.days, 0)
    panel, close = w.panel, w.close
    rows: list[dict[str, Any]] = []

    def row(device: str, n: int, seconds: float, lengths: np.ndarray, note: str) -> None:
        ops = gp_eval.gp_ops(lengths, args.stocks, args.days)
        rows.append({"device": device, "population": n, "stocks": args.stocks,
                     "days": args.days, "mean_nodes": float(np.mean(lengths)),
                     "seconds": seconds, "gp_ops_per_second": ops / seconds,
                     "evals_per_second": n / seconds, "note": note})

    cpu_pop = bred_population(args.cpu_population, args.seed)
    cpu_prog, cpu_len = cpu_pop.compile()
    threads = numba.get_num_threads()
    row("cpu", args.cpu_population,
        time_cpu(cpu_prog, cpu_len, panel, close, args.repeats, threads), cpu_len,
        f"numba prange, {threads} threads")
    row("cpu", args.cpu_population,
        time_cpu(cpu_prog, cpu_len, panel, close, max(1, args.repeats // 2), 1), cpu_len,
        "numba, 1 thread")

    use_cuda = cuda_present() and not args.no_cuda
    if use_cuda:
        pop = bred_population(args.population, args.seed)
        prog, lens = pop.compile()
        k, e, cash = time_cuda(prog, lens, panel, close, args.repeats)
        row("cuda", args.population, k, lens, "kernel (CUDA events)")
        row("cuda", args.population, e, lens, "programs up + kernel + cash down")
        # the first CPU individuals evaluated on the CPU must match the GPU's money exactly
        m = min(200, args.population)
        out = np.empty((m, args.stocks))
        run_chunks(gp_eval._final_cash_cpu, m, prog[:m], lens[:m], panel, close, 0, args.days,
                   gp_eval.DEFAULT_COSTS, out, min_chunk=16)
        if not np.array_equal(out, cash[:m]):
            print("WARNING: CUDA and CPU final cash differ", file=sys.stderr)

    print(f"GP evaluator, {args.stocks} stocks x {args.days} days (real S&P 500 closes)")
    print(f"{'device':6} {'population':>10} {'nodes':>6} {'seconds':>9} {'GP ops/s':>10} "
          f"{'evals/s':>10}  note")
    for r in rows:
        print(f"{r['device']:6} {r['population']:>10} {r['mean_nodes']:>6.1f} "
              f"{r['seconds']:>9.4f} {r['gp_ops_per_second']:>10.3g} "
              f"{r['evals_per_second']:>10.3g}  {r['note']}")
    one_core = rows[1]["gp_ops_per_second"]
    all_cores = rows[0]["gp_ops_per_second"]
    ratios: dict[str, float] = {}
    if use_cuda:
        ratios = {"cuda_kernel_vs_cpu_all_cores": rows[2]["gp_ops_per_second"] / all_cores,
                  "cuda_kernel_vs_cpu_one_core": rows[2]["gp_ops_per_second"] / one_core,
                  "cuda_end_to_end_vs_cpu_one_core": rows[3]["gp_ops_per_second"] / one_core}
        for name, v in ratios.items():
            print(f"{name}: {v:.0f}x")

    latency = {"cpu": time_decider(10, 500, "cpu", 50)}
    if use_cuda:
        latency["cuda"] = time_decider(10, 500, "cuda", 50)
    for dev, sec in latency.items():
        print(f"strategy bar close (10 rules x 500 symbols) on {dev}: {sec * 1e6:.0f} us")
    args.json.write_text(json.dumps({"rows": rows, "ratios": ratios,
                                     "decide_latency_seconds": latency}, indent=2,
                                    default=float))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
