"""How training size affects out-of-sample profit (the GP trading paper's experiment).

Grid: stocks {32, 128} x training days {256, 768} x seeds {1, 2, 3}, population 5,000,
`--generations` (default 30), then the best rule of each run traded over the same 256 test
days. All runs share one test period: a run with fewer training days starts later, so its
training window ends where the longest one ends (its indicator panel starts at its own
first training day, as in `evolve`). All runs of one stock count use the same symbols: the
first N tickers complete over the longest window.

Prints a table of train and test ROI against buy-and-hold per run and the mean per grid
cell, and writes JSON (per run: the symbols and first/last dates of train and test, so any
run can be replayed). `--quick` is a CPU smoke run at toy sizes.

    python benchmarks/gp_experiment.py                 # on the GPU machine (~minutes)
    python benchmarks/gp_experiment.py --quick --device cpu
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.commands.evolve import evaluate_period  # noqa: E402
from feeds.daily import load_daily  # noqa: E402
from feeds.datadir import data_dir  # noqa: E402
from feeds.sources import resolve_data_file  # noqa: E402
from gpu.gp.evaluate import PopulationEvaluator  # noqa: E402
from strategies.gp.evolution import EvolutionConfig, evolve  # noqa: E402
from strategies.gp.window import GPWindow, load_window  # noqa: E402


def parse_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(data_dir() / "sp500_5yr_daily"))
    ap.add_argument("--stocks", type=parse_ints, default=[32, 128])
    ap.add_argument("--train-days", type=parse_ints, default=[256, 768])
    ap.add_argument("--seeds", type=parse_ints, default=[1, 2, 3])
    ap.add_argument("--test-days", type=int, default=256)
    ap.add_argument("--population", type=int, default=5000)
    ap.add_argument("--generations", type=int, default=30)
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    ap.add_argument("--quick", action="store_true",
                    help="toy sizes for a CPU smoke run (stocks 4,8; days 64,128; test 64; "
                         "population 200; 4 generations; seeds 1,2)")
    ap.add_argument("--json", type=Path, default=Path("gp_experiment.json"))
    args = ap.parse_args()
    if args.quick:
        args.stocks, args.train_days, args.seeds = [4, 8], [64, 128], [1, 2]
        args.test_days, args.population, args.generations = 64, 200, 4
    return args


def one_run(args: argparse.Namespace, window: GPWindow, n_stocks: int, train_days: int,
            seed: int) -> dict[str, Any]:
    """Evolve on the window's training days, then trade the best rule over its test days."""
    t0 = time.perf_counter()
    cfg = EvolutionConfig(population=args.population, generations=args.generations, seed=seed,
                          elite=max(1, args.population // 500))
    ev = PopulationEvaluator(window.panel, window.close, window.train.day0, window.train.day1,
                             args.device)
    result = evolve(ev, cfg)
    train = evaluate_period(window, window.train, result, ev.device)
    test = evaluate_period(window, window.test, result, ev.device)
    run = {"stocks": n_stocks, "train_days": train_days, "seed": seed, "device": ev.device,
           "best_buy": result.best.rule.buy_infix, "best_sell": result.best.rule.sell_infix,
           "gp_ops_per_second": result.gp_ops_per_second, "seconds": time.perf_counter() - t0,
           "train": {k: v for k, v in train.items() if k != "hall_of_fame_fitness"},
           "test": {k: v for k, v in test.items() if k != "hall_of_fame_fitness"}}
    print(f"{n_stocks:>4} stocks {train_days:>4} days seed {seed}: "
          f"train {train['roi']:+.2%} (b&h {train['roi_buy_hold']:+.2%})  "
          f"test {test['roi']:+.2%} (b&h {test['roi_buy_hold']:+.2%})  "
          f"{run['gp_ops_per_second']:.3g} GP ops/s  {run['seconds']:.1f} s",
          file=sys.stderr, flush=True)
    return run


def grid_runs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every (stocks, training days, seed) run; all share the test period (module doc)."""
    table = load_daily(resolve_data_file(args.data))
    calendar = np.unique(table.dates)
    longest = max(args.train_days)
    if longest + args.test_days > len(calendar):
        sys.exit(f"error: {longest} + {args.test_days} days asked, the data has {len(calendar)}")
    runs: list[dict[str, Any]] = []
    for n_stocks in args.stocks:
        symbols = load_window(table, n_stocks, longest, args.test_days).symbols
        for train_days in args.train_days:
            start = str(calendar[longest - train_days])
            window = load_window(table, None, train_days, args.test_days, start=start,
                                 symbols=symbols)
            runs += [one_run(args, window, n_stocks, train_days, seed) for seed in args.seeds]
    return runs


def print_runs(args: argparse.Namespace, runs: list[dict[str, Any]]) -> None:
    print(f"\nGP rules, population {args.population}, {args.generations} generations, "
          f"test {args.test_days} days {runs[0]['test']['first_date']} .. "
          f"{runs[0]['test']['last_date']}")
    print(f"{'stocks':>6} {'train d':>7} {'seed':>4} {'train ROI':>10} {'b&h':>8} "
          f"{'test ROI':>9} {'b&h':>8} {'test excess':>11}")
    for r in runs:
        print(f"{r['stocks']:>6} {r['train_days']:>7} {r['seed']:>4} {r['train']['roi']:>+10.2%} "
              f"{r['train']['roi_buy_hold']:>+8.2%} {r['test']['roi']:>+9.2%} "
              f"{r['test']['roi_buy_hold']:>+8.2%} {r['test']['fitness']:>+11.2%}")


def grid_cells(args: argparse.Namespace, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean train and test excess per (stocks, training days) cell, printed as a table."""
    cells = []
    print(f"\n{'stocks':>6} {'train d':>7} {'mean train excess':>18} {'mean test excess':>17} "
          f"{'test beats b&h':>15}")
    for n_stocks in args.stocks:
        for train_days in args.train_days:
            rs = [r for r in runs if r["stocks"] == n_stocks and r["train_days"] == train_days]
            cell = {"stocks": n_stocks, "train_days": train_days,
                    "mean_train_excess": statistics.fmean(r["train"]["fitness"] for r in rs),
                    "mean_test_excess": statistics.fmean(r["test"]["fitness"] for r in rs),
                    "test_runs_beating_buy_hold": sum(r["test"]["fitness"] > 0 for r in rs),
                    "runs": len(rs)}
            cells.append(cell)
            print(f"{n_stocks:>6} {train_days:>7} {cell['mean_train_excess']:>+18.2%} "
                  f"{cell['mean_test_excess']:>+17.2%} "
                  f"{cell['test_runs_beating_buy_hold']:>11}/{len(rs)}")
    return cells


def main() -> None:
    args = parse_args()
    t_all = time.perf_counter()
    runs = grid_runs(args)
    print_runs(args, runs)
    cells = grid_cells(args, runs)
    total = time.perf_counter() - t_all
    print(f"\n{len(runs)} runs in {total:.0f} s")
    args.json.write_text(json.dumps({
        "population": args.population, "generations": args.generations,
        "test_days": args.test_days, "cells": cells, "runs": runs, "seconds": total,
    }, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
