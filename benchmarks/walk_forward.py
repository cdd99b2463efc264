"""Walk-forward evolution timed: `evolve --walk-forward 768,63` in-process.

128 stocks (the first complete over the whole S&P file) over every day of it, 768-day rolling
training windows and 63-day test windows, each fold evolving `--population` x
`--generations` (default 25,000 x 50: the GP paper's size, the README's headline evolve) on
`--device`, folds one after the other on the one device. Warm: the whole walk-forward runs
once (kernels compiled, caches filled), then a second run is timed (`--warmup small` warms
on one fold of a tiny population instead, to save device time).

Prints the timing table (folds, wall seconds, seconds per fold), the per-fold out-of-sample
table and the stitched result against buy-and-hold; writes JSON to `--json`.

    python benchmarks/walk_forward.py --json out.json                       # GPU machine
    python benchmarks/walk_forward.py --device cpu --stocks 8 --population 200 --generations 3
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import device_or_none, gpu_name, log, write_json  # noqa: E402
from feeds.datadir import data_dir  # noqa: E402
from gpu.gp.core import cost_tuple  # noqa: E402
from strategies.gp import walk_forward as wfm  # noqa: E402
from strategies.gp.evolution import EvolutionConfig  # noqa: E402
from strategies.gp.window import history_matrix  # noqa: E402
from strategies.relative_stats import summary_lines  # noqa: E402


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(data_dir() / "sp500_5yr_daily"))
    ap.add_argument("--stocks", type=int, default=128)
    ap.add_argument("--walk-forward", default="768,63", metavar="TRAIN,TEST[,STEP]")
    ap.add_argument("--anchored", action="store_true")
    ap.add_argument("--ensemble", type=int, default=1)
    ap.add_argument("--population", type=int, default=25_000)
    ap.add_argument("--generations", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--commission", type=float, default=1.0)
    ap.add_argument("--slippage-bps", type=float, default=0.0)
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="cuda")
    ap.add_argument("--warmup", choices=("full", "small"), default="full",
                    help="full: the same walk-forward once before the timed run; small: one "
                         "fold of 200 x 2 (compiles the same kernels)")
    ap.add_argument("--json", type=Path)
    return ap.parse_args()


def config(args: argparse.Namespace, population: int, generations: int) -> EvolutionConfig:
    # evolve's defaults: 0.2% elites (at least one), the rest as `evolve` sets them
    return EvolutionConfig(population=population, generations=generations, seed=args.seed,
                           elite=max(1, population // 500), hall_of_fame=max(10, args.ensemble))


def main() -> int:
    args = parse_args()
    device = device_or_none(args.device, "walk-forward benchmark")
    if device is None:
        return 1
    plan = wfm.WalkForwardPlan.parse(args.walk_forward, args.anchored)
    t0 = time.perf_counter()
    m = history_matrix(args.data, args.stocks)
    folds = plan.folds(m.n_days)
    history = wfm.History.of(m, cost_tuple(args.commission, args.slippage_bps))
    log(f"{len(m.symbols)} stocks x {m.n_days} days loaded in "
        f"{time.perf_counter() - t0:.1f} s; {len(folds)} folds of {plan.describe()}; "
        f"{args.population} x {args.generations} per fold on {device}")
    cfg = config(args, args.population, args.generations)

    def progress(o: wfm.FoldOutcome, done: int, total: int, elapsed: float) -> None:
        log(wfm.eta_line(o, done, total, elapsed))

    t_warm = time.perf_counter()
    if args.warmup == "full":
        wfm.run_folds(history, cfg, folds, args.ensemble, device, progress=progress)
    else:
        wfm.run_folds(history, config(args, 200, 2), folds[:1], args.ensemble, device)
    warm_s = time.perf_counter() - t_warm
    log(f"warm-up ({args.warmup}) {warm_s:.1f} s; timing the walk-forward")
    t_run = time.perf_counter()
    outcomes = wfm.run_folds(history, cfg, folds, args.ensemble, device, progress=progress)
    wall = time.perf_counter() - t_run
    dates = [str(d)[:10] for d in m.dates]
    wf = wfm.stitch(plan, history, outcomes, dates, args.ensemble, args.commission,
                    args.slippage_bps)
    stats = wf.stats()
    print(f"{'folds':>5}  {'wall s':>8}  {'s/fold':>7}  device")
    print(f"{len(folds):>5}  {wall:>8.2f}  {wall / len(folds):>7.2f}  "
          f"{gpu_name() if device == 'cuda' else 'cpu'}")
    for line in wfm.fold_table(wf):
        print(line)
    print(wf.description())
    print(f"out of sample, stitched: {wf.oos_roi:+.2%}; buy-and-hold {wf.oos_roi_buy_hold:+.2%}; "
          f"first fold's rule held {wf.oos_roi_static:+.2%}")
    for line in summary_lines(stats):
        print(line)
    if args.json:
        result: dict[str, Any] = {
            "benchmark": "walk_forward", "device": device,
            "gpu": gpu_name() if device == "cuda" else None,
            "stocks": len(m.symbols), "days": len(dates), "folds": len(folds),
            "population": args.population, "generations": args.generations,
            "warmup": args.warmup, "warmup_seconds": warm_s,
            "wall_seconds": wall, "seconds_per_fold": wall / len(folds),
            "fold_seconds": [o.seconds for o in outcomes],
            "config": msgspec.to_builtins(cfg),
            "walk_forward": wf.report(stats),
        }
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
