"""`evolve`: evolve GP trading rules over many stocks and days, report train and test ROI.

Writes the strategy file (`--out`, best rule and hall of fame, strategies.gp.strategy_file)
and a PNG of fitness over generations next to it; prints one progress line per generation
on stderr. Semantics of the simulation and of the data window: strategies/gp/__init__.py.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import UserError
from engine.extras import require
from engine.progress import eta
from engine.reporting import plot_worker
from engine.reporting.plot_worker import PlotWorker
from feeds.datadir import data_dir
from gpu import warm_start
from gpu.device import DeviceUnavailable
from gpu.gp.core import COMMISSION, DEFAULT_COSTS, SLIPPAGE_BPS, cost_tuple
from gpu.gp.evaluate import PopulationEvaluator, buy_hold_cash, roi
from strategies.gp.evolution import EvolutionConfig, EvolutionResult, GenerationStats, evolve
from strategies.gp.representation import rules_programs
from strategies.gp.returns import trade_period
from strategies.gp.strategy import simulate_money, simulate_money_next_open
from strategies.gp.strategy_file import PeriodRecord, StrategyFile, rule_record, save_strategy
from strategies.gp.window import GPWindow, Period, load_window, window_from_matrix
from strategies.relative_stats import relative_stats, summary_lines

Costs = tuple[float, float, float]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", default=str(data_dir() / "sp500_5yr_daily"), metavar="PATH",
                   help="daily OHLCV CSV(.gz) or a folder holding one (default: the shared "
                        "S&P 500 file)")
    p.add_argument("--stocks", type=int, default=32, help="stocks (complete in the window)")
    p.add_argument("--symbols", help="comma-separated tickers instead of the first --stocks")
    p.add_argument("--start", help="first training day (YYYY-MM-DD; default: the data's first)")
    p.add_argument("--train-days", type=int, default=768, help="training window, trading days")
    p.add_argument("--test-days", type=int, default=256,
                   help="test window after training, trading days (0: none)")
    p.add_argument("--population", type=int, default=5000, help="individuals per generation")
    p.add_argument("--generations", type=int, default=30,
                   help="evaluated populations, the random initial one included")
    p.add_argument("--seed", type=int, default=1, help="random seed (same seed, same run)")
    p.add_argument("--tournament", type=int, default=7, help="tournament selection size")
    p.add_argument("--elite", type=int, help="individuals kept unchanged (default 0.2%%, >= 1)")
    p.add_argument("--p-crossover", type=float, default=0.9, help="crossover probability")
    p.add_argument("--p-subtree-mutation", type=float, default=0.1,
                   help="subtree mutation probability")
    p.add_argument("--p-point-mutation", type=float, default=0.1,
                   help="point mutation probability")
    p.add_argument("--max-depth", type=int, default=8, help="deepest tree")
    p.add_argument("--max-nodes", type=int, default=64, help="per tree")
    p.add_argument("--hall-of-fame", type=int, default=10,
                   help="best distinct rules kept (the ensemble)")
    p.add_argument("--out", type=Path, required=True,
                   help="strategy file to write (required: an earlier run's file is never "
                        "overwritten unasked); an existing file that is not a strategy "
                        "file is never overwritten")
    p.add_argument("--png", type=Path, help="fitness plot (default: OUT with _fitness.png)")
    p.add_argument("--returns-out", type=Path, metavar="CSV",
                   help="daily training returns of the hall of fame (columns hof0..), for select")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where to evaluate: cuda if there is a GPU under auto")
    # -q/--quiet (no per-generation progress lines) is every command's (run_engine.py)
    p.add_argument("--commission", type=float, default=COMMISSION,
                   help="per trade, $, in the fitness and buy-and-hold alike (the paper "
                        "broker's model; default %(default)g)")
    p.add_argument("--slippage-bps", type=float, default=SLIPPAGE_BPS,
                   help="fill price moved against each trade, basis points (default "
                        "%(default)g)")
    wf = p.add_argument_group("walk-forward (strategies/gp/walk_forward.py)")
    wf.add_argument("--walk-forward", metavar="TRAIN,TEST[,STEP]",
                    help="evolve on TRAIN trading days, trade the result on the next TEST "
                         "out of sample, move on by STEP (default TEST) over the whole data "
                         "from --start; fold k uses seed --seed + k")
    wf.add_argument("--anchored", action="store_true",
                    help="walk-forward training windows grow from the first day instead of "
                         "rolling")
    wf.add_argument("--ensemble", type=int, default=1, metavar="K",
                    help="walk-forward: trade the majority vote of the hall of fame's top K "
                         "instead of the best rule (default 1)")
    # island model on Dask (strategies/gp/islands.py): --population is per island
    isl = p.add_argument_group("islands on Dask (--population individuals each)")
    isl.add_argument("--islands", type=int, help="island populations evolved on a Dask "
                     "cluster with ring migration (default: one population, no Dask)")
    isl.add_argument("--migrate-every", type=int, help="generations between "
                     "migrations (default 5)")
    isl.add_argument("--migrants", type=int, help="fittest individuals each island "
                     "sends to the next per migration (default 50)")
    isl.add_argument("--scheduler", metavar="ADDRESS", help="existing Dask scheduler, e.g. "
                     "tcp://HOST:8786 (default: a local cluster, one worker per GPU or CPU "
                     "workers)")
    isl.add_argument("--workers", type=int, help="workers of the local cluster (default: one "
                     "per GPU, else min(islands, cores))")


def _config(args: argparse.Namespace) -> EvolutionConfig:
    elite = args.elite if args.elite is not None else max(1, args.population // 500)
    if args.population < 2 or not 0 <= elite < args.population:
        raise UserError(f"--elite must be at least 0 and less than --population "
                        f"({args.population}), got {elite}")
    try:
        return EvolutionConfig(
            population=args.population, generations=args.generations, seed=args.seed,
            tournament=args.tournament, elite=min(elite, max(0, args.population - 1)),
            p_crossover=args.p_crossover, p_subtree_mutation=args.p_subtree_mutation,
            p_point_mutation=args.p_point_mutation, max_depth=args.max_depth,
            max_nodes=args.max_nodes, init_max_depth=min(5, args.max_depth),
            init_min_depth=min(2, args.max_depth), hall_of_fame=args.hall_of_fame)
    except ValueError as e:
        raise UserError(str(e)) from None


def progress_line(s: GenerationStats, total: int, device: str, elapsed: float = 0.0) -> str:
    """One generation's line; `elapsed` (seconds since the first generation started) adds
    the estimated time left."""
    left = eta(s.generation + 1, total, elapsed)
    return (f"gen {s.generation + 1:>3}/{total}  best {s.best:+.4f}  mean {s.mean:+.4f}  "
            f"size {s.mean_size:5.1f}  {s.evals_per_second:9.3g} evals/s  "
            f"{s.gp_ops_per_second:9.3g} GP ops/s  {device}  {s.seconds:.2f} s"
            + (f"  {left}" if left else ""))


def period_report(window: GPWindow, period: Period, cash: np.ndarray,
                  costs: Costs = DEFAULT_COSTS) -> dict[str, Any]:
    """Mean ROI of one rule's final cash (n_stocks,) against buy-and-hold over `period`."""
    bh = buy_hold_cash(window.close, period.day0, period.day1, costs)
    excess = roi(cash) - roi(bh)
    return {
        "roi": float(np.mean(roi(cash))),
        "roi_buy_hold": float(np.mean(roi(bh))),
        "fitness": float(np.mean(excess)),
        "beats_buy_hold": int(np.count_nonzero(excess > 0)),
        **window.describe(period),
    }


def evaluate_period(window: GPWindow, period: Period, result: EvolutionResult,
                    device: str, costs: Costs = DEFAULT_COSTS, trials: int = 1
                    ) -> dict[str, Any]:
    """Best rule and hall of fame over one period (the best's per-stock money included),
    and the best rule's statistics against buy-and-hold (`stats`, for `trials` rules
    tried)."""
    ev = PopulationEvaluator(window.panel, window.close, period.day0, period.day1, device,
                             costs=costs)
    rules = [c.rule for c in result.hall_of_fame]
    programs, lengths = rules_programs(rules)
    fitness, cash = ev.fitness(programs, lengths)
    stopped = window.stopped(period)
    if stopped:  # survivorship: a stock that stops trading is closed at its last price
        cash = np.stack([simulate_money(r, window.panel, window.close, period.day0,
                                        period.day1, window.last_day, costs) for r in rules])
        bh = buy_hold_cash(window.close, period.day0, period.day1, costs)
        fitness = np.mean(roi(cash) - roi(bh)[None, :], axis=1)
    report = period_report(window, period, cash[0], costs)
    report["stopped_trading"] = stopped
    report["hall_of_fame_fitness"] = [float(f) for f in fitness]
    ens = simulate_money(rules, window.panel, window.close, period.day0, period.day1,
                         window.last_day, costs)
    report["ensemble_roi"] = float(np.mean(roi(ens)))
    # fitness uses the paper's fill model (signal-close); the same best rule filled at the
    # next day's open shows how much of its edge was the same-close assumption
    report["fill_model"] = "signal-close"
    if window.open is not None:
        # on the CPU the evolution's own evaluator (bitwise): a cold run compiles one
        nxt = simulate_money_next_open(rules[0], window.panel, window.open, window.close,
                                       period.day0, period.day1, window.last_day, costs,
                                       method="bitwise" if device == "cpu" else "stack")
        report["roi_next_open"] = float(np.mean(roi(nxt)))
    trading = trade_period(rules[:1], window.panel, window.close, period.day0, period.day1,
                           costs, window.last_day)
    stats = relative_stats(trading.returns, trading.buy_hold_returns, trials=max(1, trials))
    report["stats"] = stats.as_dict()
    report["stats_summary"] = summary_lines(stats)
    return report


def write_hall_of_fame_returns(path: Path, window: GPWindow, result: EvolutionResult,
                               device: str, costs: Costs = DEFAULT_COSTS) -> None:
    """Daily training-period returns of each hall-of-fame rule (strategies.gp.returns)."""
    from strategies.gp.returns import column_names, daily_returns
    from strategies.selection import write_returns

    rules = [c.rule for c in result.hall_of_fame]
    returns = daily_returns(rules, window, window.train, device, costs)
    dates = [str(d) for d in window.dates[window.train.day0:window.train.day1]]
    write_returns(path, column_names(len(rules)), returns, dates)


def _check_options(args: argparse.Namespace) -> list[str] | None:
    """Refuse inconsistent options before any work; the --symbols list (None: --stocks)."""
    from engine.reporting.outputs import check_writable_file

    island_only = {"--migrate-every": args.migrate_every, "--migrants": args.migrants,
                   "--workers": args.workers}
    given = [k for k, v in island_only.items() if v is not None]
    if args.walk_forward is not None:  # folds side by side: a cluster, but no islands
        given = [k for k in given if k != "--workers"]
    if given and args.islands is None and not args.scheduler:
        raise UserError(f"{', '.join(given)} only apply to an island run: add --islands N")
    check_writable_file(args.out, "--out")
    _check_kinds(args)
    if args.test_days < 0 or args.test_days == 1:
        raise UserError("--test-days must be 0 or at least 2")
    return _symbols(args)


def _symbols(args: argparse.Namespace) -> list[str] | None:
    return [s.strip() for s in args.symbols.split(",") if s.strip()] if args.symbols else None


def _check_kinds(args: argparse.Namespace) -> None:
    """No output overwrites a file of another kind (engine/reporting/outputs.py): --out only a
    strategy file, the PNG only a PNG, --returns-out only a returns CSV of evolve."""
    from engine.reporting.outputs import check_own_kind, check_writable_file

    check_own_kind(args.out, "strategy", "--out")
    suffix = "_walk_forward.png" if args.walk_forward is not None else "_fitness.png"
    png = args.png or args.out.with_name(args.out.stem + suffix)
    # refused before the evolution, not after it (a PNG path that is a folder, or under a
    # file, ended a finished run with an internal error)
    check_writable_file(png, "--png")
    check_own_kind(png, "png", "--png")
    if args.returns_out:
        check_writable_file(args.returns_out, "--returns-out")
        check_own_kind(args.returns_out, "returns-csv", "--returns-out")


def _costs(args: argparse.Namespace) -> Costs:
    try:
        return cost_tuple(args.commission, args.slippage_bps)
    except ValueError as e:
        raise UserError(f"--commission/--slippage-bps: {e}") from None


def _load(args: argparse.Namespace, symbols: list[str] | None, costs: Costs
          ) -> tuple[GPWindow, PopulationEvaluator]:
    try:
        window = load_window(args.data, None if symbols else args.stocks, args.train_days,
                             args.test_days, start=args.start, symbols=symbols)
        train_eval = PopulationEvaluator(window.panel, window.close, window.train.day0,
                                         window.train.day1, args.device, costs=costs)
    except (ValueError, OSError, DeviceUnavailable) as e:
        raise UserError(str(e)) from None
    return window, train_eval


def _on_islands(args: argparse.Namespace, config: EvolutionConfig, window: GPWindow,
               costs: Costs) -> Any:
    """The island model on Dask (strategies.gp.islands): its IslandsResult."""
    require("distributed", "islands", "the island model (Dask)")
    from strategies.gp import islands as isl

    plan = isl.IslandPlan(1 if args.islands is None else args.islands,
                          5 if args.migrate_every is None else args.migrate_every,
                          50 if args.migrants is None else args.migrants)
    try:
        plan.check(config.population)
        data = isl.PanelData.training(window, costs)
        return isl.evolve_on_dask(data, config, plan, args.scheduler, args.workers,
                                  args.device, args.quiet)
    except (ValueError, OSError, DeviceUnavailable) as e:
        raise UserError(str(e)) from None


def _record(rep: dict[str, Any] | None) -> PeriodRecord | None:
    if rep is None:
        return None
    return PeriodRecord(symbols=rep["symbols"], first_date=rep["first_date"],
                        last_date=rep["last_date"], days=rep["days"], roi=rep["roi"],
                        roi_buy_hold=rep["roi_buy_hold"])


def _start_png(args: argparse.Namespace, window: GPWindow, result: EvolutionResult,
               test: dict[str, Any] | None, islands: Any, plots: PlotWorker
               ) -> tuple[Path, Callable[[], None]]:
    """The fitness PNG (or the islands' plot), started: its path and the wait for it."""
    config = result.config
    out: Path = args.out
    png: Path = args.png or out.with_name(out.stem + "_fitness.png")
    test_txt = (f", test ROI {test['roi']:+.2%} vs buy-and-hold {test['roi_buy_hold']:+.2%}"
                if test else "")
    title = (f"{window.n_stocks} stocks, {window.train.days} training days, "
             f"seed {config.seed}{test_txt}")
    out.parent.mkdir(parents=True, exist_ok=True)  # (the PNG's default folder)
    if islands is not None:
        from engine.reporting.plots import plot_islands

        plot_islands(png, islands, f"{islands.plan.islands} islands x {config.population}, "
                                   f"{title}")
        return png, lambda: None
    return png, plots.start_fitness(png, result.history, title)


def _write_outputs(args: argparse.Namespace, window: GPWindow, result: EvolutionResult,
                   train: dict[str, Any], test: dict[str, Any] | None, islands: Any,
                   device: str) -> Path:
    """The strategy file and (--returns-out) the daily returns."""
    best, config = result.best, result.config
    sf = StrategyFile(
        data=window.source, train=_record(train), test=_record(test), seed=config.seed,
        best=rule_record(best.rule, best.fitness, best.generation),
        hall_of_fame=[rule_record(c.rule, c.fitness, c.generation) for c in result.hall_of_fame],
        commission=args.commission, slippage_bps=args.slippage_bps,
        rules_tried=rules_tried(config, islands),
    )
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    save_strategy(out, sf)
    if args.returns_out:
        write_hall_of_fame_returns(args.returns_out, window, result, device,
                                   _costs(args))
    return out


def rules_tried(config: EvolutionConfig, islands: Any = None) -> int:
    """Individuals evaluated (population x generations, over all islands): the trials of
    the deflated Sharpe ratio."""
    n_islands = islands.plan.islands if islands is not None else 1
    return n_islands * config.population * config.generations


def _print_summary(result: EvolutionResult, train: dict[str, Any], test: dict[str, Any] | None,
                   device: str, out: Path, png: Path, args: argparse.Namespace) -> None:
    best = result.best
    print(f"best: buy {best.rule.buy_infix}\n      sell {best.rule.sell_infix}")
    print("fills: signal-close (the GP paper's model: each trade at the close that produced "
          "its signal); next-open: the same rule filled at the next day's open")
    print(f"costs: ${args.commission:g} a trade, {args.slippage_bps:g} bp slippage, "
          f"buy-and-hold included")
    print(f"train ROI {train['roi']:+.2%} vs buy-and-hold {train['roi_buy_hold']:+.2%} "
          f"(fitness {train['fitness']:+.4f}); next-open ROI "
          f"{train.get('roi_next_open', float('nan')):+.2%}")
    if test:
        print(f"test  ROI {test['roi']:+.2%} vs buy-and-hold {test['roi_buy_hold']:+.2%} "
              f"(fitness {test['fitness']:+.4f}); next-open ROI "
              f"{test.get('roi_next_open', float('nan')):+.2%}")
        for sym, last in test["stopped_trading"].items():
            print(f"  {sym} stopped trading on {last}: closed at its last price")
    for name, rep in (("train", train), ("test", test)):
        if rep is not None:
            print(f"{name}, best rule, daily returns:")
            for line in rep["stats_summary"]:
                print(f"  {line}")
    print(f"{result.gp_ops_per_second:.3g} GP ops/s on {device}; wrote {out} and {png}")


def _report(args: argparse.Namespace, window: GPWindow, result: EvolutionResult,
            train: dict[str, Any], test: dict[str, Any] | None, islands: Any, device: str,
            out: Path, png: Path) -> dict[str, Any]:
    best, config = result.best, result.config
    return {
        "generations": [s.as_dict() for s in result.history],
        "best": {"buy": best.rule.buy_infix, "sell": best.rule.sell_infix,
                 "fitness": best.fitness, "generation": best.generation,
                 "size": best.rule.size},
        "hall_of_fame": [{"buy": c.rule.buy_infix, "sell": c.rule.sell_infix,
                          "fitness": c.fitness, "generation": c.generation}
                         for c in result.hall_of_fame],
        "train": train,
        "test": test,
        "gp_ops_per_second": result.gp_ops_per_second,
        "gp_ops": result.gp_ops,
        "evals_per_second": (sum(s.evaluated for s in result.history) / result.eval_seconds
                             if result.eval_seconds > 0 else 0.0),
        "device": device,
        "fill_model": "signal-close",
        "commission": args.commission,
        "slippage_bps": args.slippage_bps,
        "rules_tried": rules_tried(config, islands),
        "seed": config.seed,
        "config": {k: getattr(config, k) for k in config.__struct_fields__},
        "data": window.source,
        "out": str(out),
        "png": str(png),
        "returns_out": str(args.returns_out) if args.returns_out else None,
        **(islands.report() if islands is not None else {}),
    }


def compile_profile(args: argparse.Namespace) -> str | None:
    """The compile manifest (gpu/compile_manifest.json) of this run: the CPU or the CUDA
    path of one evolution; walk-forward and islands compile in their own processes."""
    if args.walk_forward is not None or args.islands is not None or args.scheduler:
        return None
    from gpu.device import cuda_present

    if args.device == "cpu":
        return "evolve-cpu"
    if cuda_present():
        return "evolve-cuda"
    return "evolve-cpu" if args.device == "auto" else None  # --device cuda: an error soon


def first_run_work(args: argparse.Namespace) -> Callable[[], None] | None:
    """With empty caches, where this process compiles a part of the kernels (few cores,
    run_engine's `_first_run_compiles`): the work of a run that needs no kernel, done
    first while the compile workers take the first kernels, so that they compile more.
    It reads the window (parsing the data file; a small window's indicator panel needs no
    kernel, gpu.small) into the parse cache and, where the PNG is drawn in this process,
    imports matplotlib; the run then finds both done. A walk-forward or island run
    compiles elsewhere and has none."""
    if compile_profile(args) is None:
        return None

    def work() -> None:
        symbols = _symbols(args)  # the window, as `_load` reads it (kept in the parse cache)
        load_window(args.data, None if symbols else args.stocks, args.train_days,
                    args.test_days, start=args.start, symbols=symbols)
        if not plot_worker.in_background():
            plot_worker.warm()

    return work


def run(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    config = _config(args)
    symbols = _check_options(args)
    costs = _costs(args)
    if args.walk_forward is not None:
        return {**run_walk_forward(args, config, symbols, costs),
                "seconds": time.perf_counter() - t0}
    # the CUDA context is made while the window loads; numba's BLAS probe is skipped
    warm_start.start_context(args.device)
    warm_start.skip_blas_probe(cuda=args.device == "cuda")
    on_islands = args.islands is not None or bool(args.scheduler)
    # the PNG's process starts now: matplotlib's import overlaps the evolution
    with PlotWorker(background=None if not on_islands else False) as plots:
        window, train_eval = _load(args, symbols, costs)
        device = train_eval.device
        train_desc = window.describe(window.train)
        print(f"evolving {config.population} individuals x {config.generations} generations "
              f"on {window.n_stocks} stocks x {window.train.days} training days "
              f"({train_desc['first_date']} .. {train_desc['last_date']}), device {device}",
              file=sys.stderr)

        started = time.perf_counter()

        def progress(s: GenerationStats) -> None:
            if not args.quiet:
                print(progress_line(s, config.generations, device,
                                    time.perf_counter() - started), file=sys.stderr, flush=True)

        islands = _on_islands(args, config, window, costs) if on_islands else None
        result = islands.evolution_result() if islands is not None else evolve(
            train_eval, config, progress)
        trials = rules_tried(config, islands)
        # the test period first: the PNG's title needs it, and the PNG is then drawn while
        # the training period's report runs (each period's report depends on it alone)
        test = (evaluate_period(window, window.test, result, device, costs, trials)
                if window.test.days else None)
        png, plotted = _start_png(args, window, result, test, islands, plots)
        train = evaluate_period(window, window.train, result, device, costs, trials)
        out = _write_outputs(args, window, result, train, test, islands, device)
        plotted()
    _print_summary(result, train, test, device, out, png, args)
    return {**_report(args, window, result, train, test, islands, device, out, png),
            "seconds": time.perf_counter() - t0}


# --------------------------------------------------------------------------- walk-forward
def _walk_forward_plan(args: argparse.Namespace, config: EvolutionConfig) -> Any:
    from strategies.gp.walk_forward import WalkForwardPlan

    if args.islands is not None:
        raise UserError("--walk-forward runs its folds side by side on Dask instead of "
                        "islands: drop --islands")
    if not 1 <= args.ensemble <= config.hall_of_fame:
        raise UserError(f"--ensemble must be in [1, --hall-of-fame = {config.hall_of_fame}], "
                        f"got {args.ensemble}")
    try:
        return WalkForwardPlan.parse(args.walk_forward, args.anchored)
    except ValueError as e:
        raise UserError(str(e)) from None


def _fold_client(args: argparse.Namespace, n_folds: int) -> tuple[Any, Any]:
    """(client, local cluster or None): Dask when --scheduler or --workers asks for it."""
    if not args.scheduler and args.workers is None:
        return None, None
    require("distributed", "islands", "--workers/--scheduler (Dask)")
    import logging

    from distributed import Client

    from strategies.gp.islands import local_cluster

    logging.getLogger("distributed").setLevel(logging.WARNING)
    try:
        if args.scheduler:
            return Client(args.scheduler, timeout="10s"), None
        cluster = local_cluster(n_folds, args.device, args.workers, dashboard_address=None)
        return Client(cluster), cluster
    except (ValueError, OSError) as e:
        raise UserError(f"Dask cluster: {e}") from None


def fold_window(m: Any, fold: Any, source: str) -> GPWindow:
    """The GPWindow `evolve` would build for a fold: its training and test days, the
    indicator panel starting with its training window."""
    from feeds.daily import DailyMatrix

    sl = slice(fold.train0, fold.test1)
    part = DailyMatrix(dates=m.dates[sl], symbols=list(m.symbols),
                       **{k: getattr(m, k)[sl] for k in ("open", "high", "low", "close",
                                                         "volume")})
    return window_from_matrix(part, fold.train1 - fold.train0, fold.test1 - fold.test0,
                              source=source)


def _walk_forward_file(args: argparse.Namespace, m: Any, source: str, wf: Any) -> None:
    """The last fold's strategy file: the rule one would trade next, with its windows, as
    `evolve` over that fold's days with its seed writes it."""
    from strategies.gp.walk_forward import FoldOutcome

    last: FoldOutcome = wf.outcomes[-1]
    best = last.hall_of_fame[0]
    window = fold_window(m, last.fold, source)
    records = []
    for period in (window.train, window.test):
        t = trade_period([best.rule], window.panel, window.close, period.day0, period.day1,
                         wf.costs)
        records.append(PeriodRecord(symbols=list(window.symbols),
                                    first_date=str(window.dates[period.day0]),
                                    last_date=str(window.dates[period.day1 - 1]),
                                    days=period.days, roi=t.roi, roi_buy_hold=t.roi_buy_hold))
    sf = StrategyFile(
        data=source, train=records[0], test=records[1], seed=last.seed,
        best=rule_record(best.rule, best.fitness, best.generation),
        hall_of_fame=[rule_record(c.rule, c.fitness, c.generation) for c in last.hall_of_fame],
        commission=args.commission, slippage_bps=args.slippage_bps,
        rules_tried=wf.rules_tried)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_strategy(args.out, sf)
    if args.returns_out:  # the last fold's hall of fame over its training days, for select
        from strategies.gp.returns import column_names, daily_returns
        from strategies.selection import write_returns

        rules = [c.rule for c in last.hall_of_fame]
        write_returns(args.returns_out, column_names(len(rules)),
                      daily_returns(rules, window, window.train, "cpu", wf.costs),
                      [str(d) for d in window.dates[window.train.day0:window.train.day1]])


def run_walk_forward(args: argparse.Namespace, config: EvolutionConfig,
                     symbols: list[str] | None, costs: Costs) -> dict[str, Any]:
    """`evolve --walk-forward`: folds evolved and traded out of sample, stitched
    (strategies.gp.walk_forward); the report under `walk_forward`."""
    from engine.reporting.plots import plot_walk_forward
    from feeds.sources import resolve_data_file
    from gpu.device import resolve_device
    from strategies.gp import walk_forward as wfm
    from strategies.gp.window import history_matrix

    plan = _walk_forward_plan(args, config)
    try:
        device = resolve_device(args.device, "GP evaluation")
        source = str(resolve_data_file(args.data))
        m = history_matrix(source, None if symbols else args.stocks, args.start, symbols)
        folds = plan.folds(m.n_days)
    except (ValueError, OSError, DeviceUnavailable) as e:
        raise UserError(str(e)) from None
    history = wfm.History.of(m, costs)
    dates = [str(d)[:10] for d in m.dates]
    print(f"walk-forward: {len(folds)} folds of {plan.describe()} over {len(m.symbols)} "
          f"stocks x {len(dates)} days ({dates[0]} .. {dates[-1]}); {config.population} "
          f"individuals x {config.generations} generations per fold, device {device}",
          file=sys.stderr, flush=True)

    def progress(o: Any, done: int, total: int, elapsed: float) -> None:
        print(wfm.eta_line(o, done, total, elapsed), file=sys.stderr, flush=True)

    client, cluster = _fold_client(args, len(folds))
    try:
        outcomes = wfm.run_folds(history, config, folds, args.ensemble, args.device, client,
                                 progress)
    except (ValueError, OSError, DeviceUnavailable) as e:
        raise UserError(str(e)) from None
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    wf = wfm.stitch(plan, history, outcomes, dates, args.ensemble, args.commission,
                    args.slippage_bps)
    stats = wf.stats()
    png = args.png or args.out.with_name(args.out.stem + "_walk_forward.png")
    plot_walk_forward(png, wf, f"{len(m.symbols)} stocks, {len(folds)} folds "
                               f"{plan.train_days}/{plan.test_days}/{plan.step}"
                               f"{' anchored' if plan.anchored else ''}, out of sample: "
                               f"{wf.oos_roi:+.2%} vs buy-and-hold {wf.oos_roi_buy_hold:+.2%}")
    _walk_forward_file(args, m, source, wf)
    _print_walk_forward(wf, stats, png, args.out)
    return {"walk_forward": wf.report(stats), "device": device, "data": source,
            "symbols": list(m.symbols), "seed": config.seed,
            "config": {k: getattr(config, k) for k in config.__struct_fields__},
            "commission": args.commission, "slippage_bps": args.slippage_bps,
            "rules_tried": wf.rules_tried, "out": str(args.out), "png": str(png),
            "fold_seconds": [o.seconds for o in outcomes],
            "fold_devices": [o.device for o in outcomes]}


def _print_walk_forward(wf: Any, stats: Any, png: Path, out: Path) -> None:
    from strategies.gp.walk_forward import fold_table

    for line in fold_table(wf):
        print(line)
    print(wf.description())
    print(f"out of sample, stitched: {wf.oos_roi:+.2%}; buy-and-hold {wf.oos_roi_buy_hold:+.2%}; "
          f"first fold's rule held {wf.oos_roi_static:+.2%}")
    for line in summary_lines(stats):
        print(line)
    print(f"wrote {out} (the last fold's rules) and {png}")
