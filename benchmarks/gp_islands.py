"""Island-model GP on Dask: throughput of 1 against 2 GPUs (one island per GPU), and whether
islands change out-of-sample results.

Mode `scaling` (default): a local Dask cluster with one worker per GPU (CUDA_VISIBLE_DEVICES
pinning, strategies/gp/islands.py), one island of `--population` per worker, 128 stocks x
768 training days of the S&P 500 file, `--generations` with a migration every
`--migrate-every`. Every worker gets the same numba thread count (cores / most workers) so
the runs differ only in GPUs. A short warm-up run first builds each worker's evaluator (panel
on the device, kernel compiled), then the timed run. Reports per worker count: wall GP ops/s
(all islands' GP operations over the run's wall time: breeding, transfers, waiting
included), evaluation GP ops/s per evaluator, bytes moved per epoch, overhead per epoch, and
the speed-up of 2 workers over 1 (target >= 1.8 with 2 GPUs). With one GPU the 2-worker run
shares it (said in the note); with none, CPU workers.

Mode `overhead`: `--islands` (default 64) islands of `--population` on the local cluster:
bytes moved and wall time outside the island tasks per epoch (what grows with islands).

Mode `oos`: 1 island x 25,000 against 8 islands x 25,000 and 8 x 3,125 (same total as the
single population), seeds 1,2,3, on 128 stocks, 768 training then 256 test days; prints the
train and test excess ROI over buy-and-hold of each run's best rule and the mean per setup.

    python benchmarks/gp_islands.py --json benchmarks/results/gp_islands_scaling.json
    python benchmarks/gp_islands.py --mode oos --json benchmarks/results/gp_islands_oos.json
    python benchmarks/gp_islands.py --mode overhead --islands 64 --population 200 --device cpu
    python benchmarks/gp_islands.py --quick --device cpu            # CPU smoke run
    python benchmarks/gp_islands.py --mode oos --quick --device cpu
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from distributed import Client  # noqa: E402

from engine.commands.evolve import evaluate_period  # noqa: E402
from feeds.datadir import data_dir  # noqa: E402
from strategies.gp import islands as isl  # noqa: E402
from strategies.gp.evolution import EvolutionConfig  # noqa: E402
from strategies.gp.window import GPWindow, load_window  # noqa: E402


def parse_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def config(population: int, generations: int, seed: int) -> EvolutionConfig:
    return EvolutionConfig(population=population, generations=generations, seed=seed,
                           elite=max(1, population // 500))


def panel_data(window: GPWindow) -> isl.PanelData:
    return isl.PanelData.training(window)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- scaling
def scaling(args: argparse.Namespace, window: GPWindow) -> dict[str, Any]:
    gpus = 0 if args.device == "cpu" else isl.gpu_count()
    usable = min(gpus, args.gpus) if args.gpus else gpus
    counts = [1, 2] if usable <= 2 else [1, 2, usable]
    cores = os.cpu_count() or 1
    threads = max(1, cores // max(counts))
    data = panel_data(window)
    plan_every = args.migrate_every
    runs = []
    for n in counts:
        log(f"-- {n} worker(s), {n} island(s) of {args.population} on "
            f"{'GPU ' + ','.join(str(k % usable) for k in range(n)) if usable else 'CPU'}")
        cluster = isl.local_cluster(n, args.device, workers=n, dashboard_address=None,
                                    threads=threads, gpus=usable)
        with Client(cluster) as client:
            client.wait_for_workers(n, timeout=120)
            t_w = time.perf_counter()
            isl.evolve_islands(client, data, config(min(args.population, 500), 2, 99),
                               isl.IslandPlan(n, 1, 0), args.device)
            warm = time.perf_counter() - t_w
            plan = isl.IslandPlan(n, plan_every, min(args.migrants, args.population // 2))
            r = isl.evolve_islands(client, data, config(args.population, args.generations, 1),
                                   plan, args.device)
        cluster.close()
        rep = r.report()["islands"]
        eval_s = sum(s.eval_seconds for h in r.histories for s in h)
        run = {"workers": n, "islands": n, "devices": r.devices,
               "gpus": sorted({k % usable for k in range(n)}) if usable else [],
               "population_per_island": args.population, "generations": args.generations,
               "gp_ops": r.gp_ops, "seconds": r.seconds, "warmup_seconds": warm,
               "wall_gp_ops_per_second": r.wall_gp_ops_per_second,
               "eval_gp_ops_per_second_per_evaluator": r.gp_ops / eval_s if eval_s else 0.0,
               "bytes_per_epoch": rep["bytes_per_epoch"],
               "overhead_seconds_per_epoch": rep["overhead_seconds_per_epoch"],
               "panel_bytes_per_worker": rep["panel_bytes_per_worker"],
               "epochs": rep["epochs"], "best": r.best.fitness}
        runs.append(run)
        log(f"   {run['wall_gp_ops_per_second']:.3g} GP ops/s wall, "
            f"{run['eval_gp_ops_per_second_per_evaluator']:.3g} per evaluator, "
            f"{run['bytes_per_epoch'] / 1e6:.2f} MB/epoch, "
            f"overhead {run['overhead_seconds_per_epoch']:.3f} s/epoch, {r.seconds:.1f} s")
    base = runs[0]["wall_gp_ops_per_second"]
    two = next(x for x in runs if x["workers"] == 2)
    speedup = two["wall_gp_ops_per_second"] / base if base else 0.0
    if usable >= 2:
        note = "one island per GPU, each worker pinned to its own GPU"
    elif usable == 1:
        note = ("only one GPU on this host: the 2-worker run shares it, so its speed-up says "
                "nothing about 2 GPUs (needs a two-GPU host)")
    else:
        note = (f"no GPU: CPU workers with {threads} numba threads each; the 2-worker run "
                "uses twice the cores")
    print(f"\nGP islands, {window.n_stocks} stocks x {window.train.days} days, "
          f"{args.population} per island, {args.generations} generations, migrate every "
          f"{plan_every}")
    print(f"{'workers':>7} {'device':>10} {'wall GP ops/s':>14} {'per evaluator':>14} "
          f"{'MB/epoch':>9} {'overhead s/ep':>13} {'seconds':>8}")
    for x in runs:
        print(f"{x['workers']:>7} {','.join(sorted(set(x['devices']))):>10} "
              f"{x['wall_gp_ops_per_second']:>14.3g} "
              f"{x['eval_gp_ops_per_second_per_evaluator']:>14.3g} "
              f"{x['bytes_per_epoch'] / 1e6:>9.2f} {x['overhead_seconds_per_epoch']:>13.3f} "
              f"{x['seconds']:>8.1f}")
    print(f"speed-up 2 workers / 1: {speedup:.2f}x (target >= 1.8 with 2 GPUs); {note}")
    return {"mode": "scaling", "gpus_detected": gpus, "gpus_used": usable, "cores": cores,
            "numba_threads_per_worker": threads, "stocks": window.n_stocks,
            "train_days": window.train.days, "runs": runs, "speedup_2_over_1": speedup,
            "target": 1.8, "meets_target": bool(usable >= 2 and speedup >= 1.8), "note": note}


# --------------------------------------------------------------------------- overhead
def overhead(args: argparse.Namespace, window: GPWindow) -> dict[str, Any]:
    """Bytes moved and time outside the island tasks per epoch, for many islands."""
    data = panel_data(window)
    cluster = isl.local_cluster(args.islands, args.device, workers=args.workers,
                                dashboard_address=None)
    with Client(cluster) as client:
        n_workers = len(client.scheduler_info(n_workers=-1)["workers"])
        isl.evolve_islands(client, data, config(200, 2, 99), isl.IslandPlan(n_workers, 1, 0),
                           args.device)
        plan = isl.IslandPlan(args.islands, args.migrate_every,
                              min(args.migrants, args.population // 2))
        r = isl.evolve_islands(client, data, config(args.population, args.generations, 1),
                               plan, args.device)
    cluster.close()
    rep = r.report()["islands"]
    state = [len(pickle.dumps(p, protocol=5)) for p in r.final]
    nodes = [float(p.population.lengths.sum(axis=1).mean()) for p in r.final if p.population]
    print(f"\n{args.islands} islands x {args.population} on {n_workers} workers "
          f"({','.join(sorted(set(r.devices)))}), {window.n_stocks} stocks x "
          f"{window.train.days} days, migrate {plan.migrants} every {plan.migrate_every}")
    print(f"{'epoch':>5} {'seconds':>8} {'busiest worker s':>16} {'overhead s':>10} "
          f"{'MB sent':>8} {'MB back':>8}")
    for e in r.epochs:
        print(f"{e.epoch:>5} {e.seconds:>8.3f} {e.busiest_worker_seconds:>16.3f} "
              f"{e.overhead_seconds:>10.3f} {e.bytes_sent / 1e6:>8.3f} "
              f"{e.bytes_received / 1e6:>8.3f}")
    print(f"island state {statistics.fmean(state) / 1e6:.3f} MB packed (mean "
          f"{statistics.fmean(nodes):.1f} nodes per individual); panel "
          f"{data.nbytes / 1e6:.2f} MB per worker, once")
    return {"mode": "overhead", "islands": args.islands, "workers": n_workers,
            "population_per_island": args.population, "generations": args.generations,
            "stocks": window.n_stocks, "train_days": window.train.days,
            "mean_state_bytes": statistics.fmean(state),
            "mean_nodes_per_individual": statistics.fmean(nodes),
            "panel_bytes_per_worker": data.nbytes, "bytes_per_epoch": rep["bytes_per_epoch"],
            "overhead_seconds_per_epoch": rep["overhead_seconds_per_epoch"],
            "epochs": rep["epochs"], "devices": r.devices}


# --------------------------------------------------------------------------- out of sample
def out_of_sample(args: argparse.Namespace, window: GPWindow) -> dict[str, Any]:
    big, islands = args.population, 8
    setups = [(1, big), (islands, big), (islands, big // islands)]
    data = panel_data(window)
    cluster = isl.local_cluster(islands, args.device, dashboard_address=None)
    runs: list[dict[str, Any]] = []
    with Client(cluster) as client:
        n_workers = len(client.scheduler_info(n_workers=-1)["workers"])
        log(f"local cluster: {n_workers} workers")
        # warm-up: every worker builds its evaluator before the timed runs
        isl.evolve_islands(client, data, config(200, 2, 99), isl.IslandPlan(n_workers, 1, 0),
                           args.device)
        for n, pop in setups:
            for seed in args.seeds:
                t0 = time.perf_counter()
                plan = isl.IslandPlan(n, args.migrate_every, min(args.migrants, pop // 2))
                r = isl.evolve_islands(client, data, config(pop, args.generations, seed), plan,
                                       args.device)
                res = r.evolution_result()
                device = "cpu" if args.device == "cpu" else "auto"
                train = evaluate_period(window, window.train, res, device)
                test = evaluate_period(window, window.test, res, device)
                run = {"islands": n, "population_per_island": pop, "seed": seed,
                       "train_excess": train["fitness"], "test_excess": test["fitness"],
                       "train_roi": train["roi"], "test_roi": test["roi"],
                       "train_roi_buy_hold": train["roi_buy_hold"],
                       "test_roi_buy_hold": test["roi_buy_hold"],
                       "best_buy": res.best.rule.buy_infix, "best_sell": res.best.rule.sell_infix,
                       "wall_gp_ops_per_second": r.wall_gp_ops_per_second,
                       "bytes_per_epoch": r.report()["islands"]["bytes_per_epoch"],
                       "seconds": time.perf_counter() - t0}
                runs.append(run)
                log(f"{n} x {pop:>6} seed {seed}: train excess {run['train_excess']:+.2%}  "
                    f"test excess {run['test_excess']:+.2%}  {run['seconds']:.1f} s")
    cluster.close()
    print(f"\nBest rule's excess ROI over buy-and-hold, {window.n_stocks} stocks, "
          f"{window.train.days} train / {window.test.days} test days "
          f"({window.describe(window.test)['first_date']} .. "
          f"{window.describe(window.test)['last_date']}), {args.generations} generations, "
          f"migrate {args.migrants} every {args.migrate_every}")
    print(f"{'setup':>12} {'seeds':>5} {'train excess':>13} {'test excess':>12} "
          f"{'test > 0':>8}")
    cells = []
    for n, pop in setups:
        rs = [r for r in runs if r["islands"] == n and r["population_per_island"] == pop]
        cell = {"islands": n, "population_per_island": pop, "runs": len(rs),
                "mean_train_excess": statistics.fmean(r["train_excess"] for r in rs),
                "mean_test_excess": statistics.fmean(r["test_excess"] for r in rs),
                "test_runs_beating_buy_hold": sum(r["test_excess"] > 0 for r in rs)}
        cells.append(cell)
        print(f"{f'{n} x {pop}':>12} {len(rs):>5} {cell['mean_train_excess']:>+13.2%} "
              f"{cell['mean_test_excess']:>+12.2%} {cell['test_runs_beating_buy_hold']:>6}"
              f"/{len(rs)}")
    return {"mode": "oos", "stocks": window.n_stocks, "train_days": window.train.days,
            "test_days": window.test.days, "generations": args.generations,
            "migrate_every": args.migrate_every, "migrants": args.migrants,
            "workers": n_workers, "cells": cells, "runs": runs}


def plot(path: Path, out: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    if out["mode"] == "overhead":
        ep = out["epochs"]
        ax.bar([str(e["epoch"]) for e in ep], [e["busiest_worker_seconds"] for e in ep],
               label="busiest worker in island tasks")
        ax.bar([str(e["epoch"]) for e in ep], [e["overhead_seconds"] for e in ep],
               bottom=[e["busiest_worker_seconds"] for e in ep], label="overhead")
        ax.set_xlabel("epoch")
        ax.set_ylabel("seconds")
        ax.set_title(f"{out['islands']} islands x {out['population_per_island']} on "
                     f"{out['workers']} workers", fontsize=9)
        ax.legend()
    elif out["mode"] == "scaling":
        xs = [str(r["workers"]) for r in out["runs"]]
        ax.bar(xs, [r["wall_gp_ops_per_second"] for r in out["runs"]])
        ax.set_xlabel("workers (one island each)")
        ax.set_ylabel("GP ops/s (wall)")
        ax.set_title(f"speed-up 2/1 = {out['speedup_2_over_1']:.2f}x; {out['note'][:60]}",
                     fontsize=8)
    else:
        labels = [f"{c['islands']}x{c['population_per_island']}" for c in out["cells"]]
        for k, (key, name) in enumerate([("train_excess", "train"), ("test_excess", "test")]):
            for i, c in enumerate(out["cells"]):
                ys = [r[key] for r in out["runs"] if r["islands"] == c["islands"]
                      and r["population_per_island"] == c["population_per_island"]]
                ax.scatter([i + 0.15 * (2 * k - 1)] * len(ys), ys, color=f"C{k}",
                           label=name if i == 0 else None)
        ax.set_xticks(range(len(labels)), labels)
        ax.axhline(0.0, color="grey", lw=0.8, ls=":")
        ax.set_ylabel("excess ROI over buy-and-hold")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=("scaling", "oos", "overhead"), default="scaling")
    ap.add_argument("--data", default=str(data_dir() / "sp500_5yr_daily"))
    ap.add_argument("--stocks", type=int, default=128)
    ap.add_argument("--train-days", type=int, default=768)
    ap.add_argument("--test-days", type=int, default=256)
    ap.add_argument("--population", type=int, default=25_000, help="per island")
    ap.add_argument("--generations", type=int,
                    help="default: 20 (scaling), 25 (oos: 9 runs in about 8 minutes)")
    ap.add_argument("--migrate-every", type=int, default=5)
    ap.add_argument("--migrants", type=int, default=50)
    ap.add_argument("--seeds", type=parse_ints, default=[1, 2, 3])
    ap.add_argument("--gpus", type=int, help="use at most this many GPUs (scaling)")
    ap.add_argument("--islands", type=int, default=64, help="islands (overhead)")
    ap.add_argument("--workers", type=int, help="local workers (overhead; default: one per "
                    "GPU, else min(islands, cores))")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    ap.add_argument("--quick", action="store_true",
                    help="toy sizes for a CPU smoke run (6 stocks, 100 + 40 days, population "
                         "240, 4 generations, seeds 1,2)")
    ap.add_argument("--json", type=Path, default=Path("gp_islands.json"))
    args = ap.parse_args()
    if args.generations is None:
        args.generations = {"scaling": 20, "oos": 25, "overhead": 6}[args.mode]
    if args.quick:
        args.stocks, args.train_days, args.test_days = 6, 100, 40
        args.population, args.generations, args.seeds = 240, 4, [1, 2]
        args.migrate_every, args.migrants = 2, 10
    t0 = time.perf_counter()
    window = load_window(args.data, args.stocks, args.train_days,
                         args.test_days if args.mode == "oos" else 0)
    run = {"scaling": scaling, "oos": out_of_sample, "overhead": overhead}[args.mode]
    out = run(args, window)
    out.update({"seconds": time.perf_counter() - t0, "data": window.source,
                "symbols": window.symbols, "first_date": str(window.dates[0]),
                "quick": args.quick})
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2))
    png = args.json.with_suffix(".png")
    plot(png, out)
    print(f"wrote {args.json} and {png} ({out['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
