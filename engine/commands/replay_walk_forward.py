"""`replay --walk-forward TRAIN,TEST`: walk-forward evolution traded through the engine.

The daily bars of the folds' whole history go through the real engine (feed, ZeroMQ,
validation, bars, indicator bank, GP decider, phase table, paper broker); each fold's rule
is evolved in a background process and swapped in at the session boundary before the
fold's first test day (engine/live/reevolution.py, which also says why each fold ends flat).
The folds are `evolve --walk-forward`'s (strategies/gp/walk_forward.py): the same stocks,
days, seeds (seed + k), evolution settings and costs, so under evolve's fill model
(signal-close, the default here) `walk_forward.oos_roi` and each fold's `test_roi` equal
evolve's to the cent.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from engine.errors import UserError
from feeds.datadir import data_dir


def add_arguments(p: argparse.ArgumentParser) -> None:
    wf = p.add_argument_group("walk-forward (re-evolution inside the engine, "
                              "engine/live/reevolution.py)")
    wf.add_argument("--walk-forward", metavar="TRAIN,TEST[,STEP]",
                    help="evolve GP rules on TRAIN trading days in a background process, "
                         "trade them through the engine on the next TEST, swap at each fold "
                         "boundary (STEP, if given, must equal TEST); fold k uses seed "
                         "--seed + k; --data is a daily file (default: the shared S&P file)")
    wf.add_argument("--stocks", type=int, default=32,
                    help="walk-forward: stocks complete over the history (default 32; "
                         "--symbols picks them by name)")
    wf.add_argument("--population", type=int, default=5000,
                    help="walk-forward: individuals per generation (default 5000)")
    wf.add_argument("--generations", type=int, default=30,
                    help="walk-forward: evaluated populations per fold (default 30)")
    wf.add_argument("--anchored", action="store_true",
                    help="walk-forward: training windows grow from the first day")
    wf.add_argument("--ensemble", type=int, default=1, metavar="K",
                    help="walk-forward: trade the vote of each fold's top K rules (default 1)")


def _evolution_config(args: argparse.Namespace) -> Any:
    """evolve's EvolutionConfig for these options (evolve's defaults for the rest)."""
    from engine.commands import evolve

    p = argparse.ArgumentParser()
    evolve.add_arguments(p)
    ns = p.parse_args(["--out", "unused.json", "--population", str(args.population),
                       "--generations", str(args.generations), "--seed", str(args.seed)])
    config = evolve._config(ns)
    if not 1 <= args.ensemble <= config.hall_of_fame:
        raise UserError(f"--ensemble must be in [1, {config.hall_of_fame}], got "
                        f"{args.ensemble}")
    return config


def _plan(args: argparse.Namespace) -> Any:
    from strategies.gp.walk_forward import WalkForwardPlan

    try:
        plan = WalkForwardPlan.parse(args.walk_forward, args.anchored)
    except ValueError as e:
        raise UserError(str(e)) from None
    if plan.step != plan.test_days:
        raise UserError(f"replay --walk-forward trades its test windows one after another: "
                        f"STEP must equal TEST ({plan.test_days}), got {plan.step}")
    if args.window or args.strategy != "sma-cross":
        raise UserError("--walk-forward evolves its own rules: drop --strategy and --window")
    return plan


def _history(args: argparse.Namespace, plan: Any) -> tuple[Any, Any, str]:
    """(daily matrix of the history, folds, data file) as evolve --walk-forward cuts them;
    --symbols/--start/--end/--data become the engine's window over the same days."""
    from feeds.sources import resolve_data_file
    from strategies.gp.window import history_matrix

    if len(args.data) > 1:
        raise UserError("--walk-forward reads one daily file: give --data once")
    if args.end:
        raise UserError("--walk-forward runs to the last fold's end: drop --end")
    symbols = [s.strip() for s in args.symbols.split(",") if s.strip()] if args.symbols else None
    try:
        source = str(resolve_data_file(args.data[0] if args.data
                                       else data_dir() / "sp500_5yr_daily"))
        m = history_matrix(source, None if symbols else args.stocks, args.start, symbols)
        folds = plan.folds(m.n_days)
    except (ValueError, OSError) as e:
        raise UserError(str(e)) from None
    dates = [str(d)[:10] for d in m.dates]
    args.data = [source]
    args.symbols = ",".join(m.symbols)
    args.start, args.end = dates[0], dates[folds[-1].test1 - 1]
    return m, folds, source


def run(args: argparse.Namespace, config_of: Any, source_factory: Any
        ) -> tuple[dict[str, Any], Any]:
    """The walk-forward replay's report (and its ReplayResult): the engine's (its equity
    stitched over the folds), `walk_forward` (evolve's keys) and `rule_versions[]`.
    `config_of(args)`: the replay command's EngineConfig for these options;
    `source_factory(args)`: its feed's factory (both passed in by the replay command,
    which imports this module, so this one does not import it back)."""
    from engine.live.reevolution import WalkForwardSessions
    from engine.reporting.report import build_report
    from engine.trading.replay import replay
    from feeds.sources import parse_date
    from gpu.gp.core import cost_tuple
    from strategies.gp.reevolve import Reevolver
    from strategies.gp.strategy import SwappableGP

    plan = _plan(args)
    config = _evolution_config(args)
    m, folds, source = _history(args, plan)
    cfg = config_of(args)
    costs = cost_tuple(cfg.broker.commission, cfg.broker.slippage_bps)
    device = "cpu" if cfg.device == "auto" else cfg.device  # default < file < --device
    print(f"walk-forward replay: {len(folds)} folds of {plan.describe()} over "
          f"{len(m.symbols)} stocks ({args.start} .. {args.end}); {config.population} x "
          f"{config.generations} per fold in a background process", file=sys.stderr)
    strategy = SwappableGP([], device=cfg.device)
    with Reevolver() as rv:
        sessions = WalkForwardSessions(m, folds, config, strategy, rv, ensemble=args.ensemble,
                                       costs=costs, device=device)
        trade_from = parse_date(sessions.dates[folds[0].test0])
        result = replay(source_factory(args), strategy, cfg, trade_from=trade_from,
                        session_hook=sessions)
    sessions.finish(result.engine)
    sessions.stitch(result.engine)
    report = build_report(result, "gp walk-forward", trials=len(folds) * config.population
                          * config.generations)
    report["strategy_device"] = strategy.device  # the last fold's rules' (measured: auto)
    return _with_walk_forward(report, sessions, plan, args, cfg, source), result


def _with_walk_forward(report: dict[str, Any], s: Any, plan: Any, args: argparse.Namespace,
                       cfg: Any, source: str) -> dict[str, Any]:
    initial = report["initial_equity"]
    report.update({
        "final_equity": initial * (1.0 + s.oos_roi), "roi": s.oos_roi,
        "roi_buy_hold": s.oos_roi_buy_hold,
        "costs": {"commission": cfg.broker.commission,
                  "slippage_bps": cfg.broker.slippage_bps},
        "rule_versions": [v.as_dict() for v in s.versions],
        "walk_forward": {
            "train_days": plan.train_days, "test_days": plan.test_days, "step": plan.step,
            "anchored": plan.anchored, "ensemble": args.ensemble, "data": source,
            "symbols": args.symbols.split(","), "seed": args.seed,
            "population": args.population, "generations": args.generations,
            "commission": cfg.broker.commission, "slippage_bps": cfg.broker.slippage_bps,
            "fill_model": report["fill"], "like_evolve": report["fill"] == "signal-close",
            "folds": s.fold_rows(), "oos_roi": s.oos_roi,
            "oos_roi_buy_hold": s.oos_roi_buy_hold,
            "waited_for_rules_seconds": s.waited,
            "per_symbol": "the last fold's accounts",
        },
    })
    return report


def summary_lines(r: dict[str, Any]) -> list[str]:
    wf = r["walk_forward"]
    lines = [f"  walk-forward through the engine: {len(wf['folds'])} folds, rule swapped at "
             f"each fold's first session; out of sample {wf['oos_roi'] * 100:+.2f}% "
             f"(buy & hold {wf['oos_roi_buy_hold'] * 100:+.2f}%); waited "
             f"{wf['waited_for_rules_seconds']:.1f} s for evolutions"]
    for f in wf["folds"]:
        rule = f["rules"][0]
        lines.append(f"    fold {f['fold'] + 1} (v{f['rule_version']}, seed {f['seed']}): "
                     f"train {f['train_start']}..{f['train_end']}, test {f['test_start']}.."
                     f"{f['test_end']}: {f['test_roi'] * 100:+.2f}% vs "
                     f"{f['test_roi_buy_hold'] * 100:+.2f}%; buy {rule['buy']} | sell "
                     f"{rule['sell']}")
    if not wf["like_evolve"]:
        lines.append(f"  fills {wf['fill_model']}: evolve's folds fill at the signal's close, "
                     f"so these ROIs are not evolve's")
    return lines
