"""`replay`: backtest from files or the built-in synthetic market through the live engine."""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any

import msgspec

from engine.config import load_config
from engine.errors import UserError
from engine.outputs import check_writable_dir
from engine.replay import replay
from engine.report import MIN_RATIO_DAYS, build_report, write_outputs
from gpu.device import resolve_device
from strategies.registry import strategy_from_spec


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", action="append", default=[], metavar="PATH",
                   help="tick CSV, daily OHLCV CSV(.gz) or LEAN zip/folder; repeatable "
                        "(default: the built-in synthetic market)")
    p.add_argument("--strategy", default="sma-cross",
                   help="built-in name (sma-cross[:FAST,SLOW[,long-only]]) or a strategy file "
                        "(*.py defining make_strategy(), or a GP *.json)")
    p.add_argument("--out", type=Path,
                   help="folder for report.json, fills.csv, trades.csv, equity.csv and "
                        "equity.png (default: no files, only the summary)")
    p.add_argument("--symbols", help="comma-separated symbols to keep from --data "
                                     "(default: all)")
    p.add_argument("--start", help="first date (YYYY-MM-DD, New York) of --data to use "
                                   "(default: the data's first)")
    p.add_argument("--end", help="last date (YYYY-MM-DD, inclusive) of --data to use "
                                 "(default: the data's last)")
    p.add_argument("--quotes", action="store_true", help="also replay quote ticks of LEAN data")
    p.add_argument("--ticks", type=int, default=200_000, help="synthetic market: ticks")
    p.add_argument("--n-symbols", type=int, default=10, help="synthetic market: symbols")
    p.add_argument("--seed", type=int, default=1, help="synthetic market: random seed")
    p.add_argument("--transport", choices=("inproc", "ipc", "tcp"),
                   help="how the feed reaches the engine (default: inproc, or the config's)")
    p.add_argument("--config", help="engine TOML config (default: built-in defaults)")
    p.add_argument("--bar-seconds", type=float,
                   help="time-bar length for tick data, seconds (default 60)")
    p.add_argument("--session",
                   help="t1,t2,t3 as HH:MM exchange time: WAIT before t1, TRADE until t2, "
                        "LIQUIDATE until t3, STOP after (default: always trade)")
    p.add_argument("--fill", choices=("auto", "signal-close", "next-open", "next-tick"),
                   help="when orders fill: signal-close (at the close that produced the "
                        "signal, the GP paper's model), next-open (the next bar's open), "
                        "next-tick (the next trade); auto = next-open for bar data, "
                        "next-tick for ticks (default auto, or the config's)")
    p.add_argument("--commission", type=float, help="per trade, $ (default 1)")
    p.add_argument("--slippage-bps", type=float,
                   help="fill price moved against the order, basis points (default 0)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="device of GPU-capable work (strategies, option groups)")
    p.add_argument("--window", choices=("train",),
                   help="with a GP strategy file: replay its training window (its symbols and "
                        "dates, and its data file unless --data is given), where the engine "
                        "must end with the evaluator's money per stock")


def source_factory(args: argparse.Namespace) -> Any:
    """A picklable zero-argument factory of the replay's Source (the feed may be a process)."""
    if args.data:
        from feeds.sources import open_sources, parse_date

        for d in args.data:
            if not Path(d).exists():
                raise UserError(f"--data {d}: no such file or folder")
        symbols = [s.strip() for s in args.symbols.split(",")] if args.symbols else None
        try:
            start = parse_date(args.start) if args.start else None
            end = parse_date(args.end, end_of_day=True) if args.end else None
        except ValueError as exc:
            raise UserError(str(exc)) from None
        if start is not None and end is not None and start > end:
            raise UserError(f"--start {args.start} is after --end {args.end}")
        kinds = ("trade", "quote") if args.quotes else ("trade",)
        factory: Any = functools.partial(open_sources, list(args.data), symbols=symbols,
                                    start=start, end=end, kinds=kinds)
    else:
        from feeds.synthetic import SyntheticMarket

        given = [f"--{k}" for k in ("symbols", "start", "end") if getattr(args, k)]
        given += ["--quotes"] if args.quotes else []
        if given:
            raise UserError(f"{', '.join(given)} select from --data; the synthetic market "
                            "(no --data) has none: use --n-symbols, --ticks, --seed")
        if args.ticks <= 0 or args.n_symbols <= 0:
            raise UserError("--ticks and --n-symbols must be positive")
        factory = functools.partial(SyntheticMarket, n_symbols=args.n_symbols,
                                    n_ticks=args.ticks, seed=args.seed)
    return factory


def apply_window(args: argparse.Namespace) -> None:
    """Fill --symbols/--start/--end (and --data, --fill) from a GP strategy file's window."""
    from strategies.gp.strategy_file import read_strategy_file as load_gp_file

    path = args.strategy.partition("#")[0]
    if not path.endswith(".json"):
        raise UserError("--window needs a GP strategy file (*.json) as --strategy")
    try:
        sf = load_gp_file(path)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    period = sf.train
    if period is None:
        raise UserError(f"{path} records no training window")
    if not args.data:
        if not sf.data or not Path(sf.data).exists():
            raise UserError(f"{path} was evolved on {sf.data!r}, which is not here: give --data")
        args.data = [sf.data]
    args.symbols = args.symbols or ",".join(period.symbols)
    args.start = args.start or period.first_date
    args.end = args.end or period.last_date
    args.fill = args.fill or "signal-close"  # the evaluator trades at the close


def _load_strategy(spec: str, device: str) -> Any:
    """The user's strategy; whatever its file raises (a syntax error, an exception in
    make_strategy) is one line naming the file."""
    try:
        return strategy_from_spec(spec, device=device)
    except (ValueError, OSError) as exc:
        raise UserError(str(exc)) from None
    except SyntaxError as exc:
        raise UserError(f"strategy file {spec}: syntax error at line {exc.lineno}: "
                        f"{exc.msg}") from None
    except Exception as exc:
        raise UserError(f"strategy {spec}: loading it raised {type(exc).__name__}: "
                        f"{exc}") from None


def run(args: argparse.Namespace) -> dict[str, Any]:
    resolve_device(args.device, "engine")  # --device cuda without a GPU: a clear error now
    if args.out is not None:
        check_writable_dir(args.out, "--out")
    if args.window:
        apply_window(args)
    cfg = load_config(args.config)
    overrides = _given(args, ("transport", "bar_seconds", "session"))
    overrides["device"] = args.device
    broker_over = _given(args, ("fill", "commission", "slippage_bps"))
    try:
        if broker_over:
            overrides["broker"] = msgspec.structs.replace(cfg.broker, **broker_over)
        cfg = msgspec.structs.replace(cfg, **overrides)
        msgspec.convert(msgspec.to_builtins(cfg), type(cfg))  # re-validate overrides
    except (ValueError, msgspec.ValidationError) as exc:
        raise UserError(_option_error(str(exc))) from None
    strategy = _load_strategy(args.strategy, args.device)
    factory = source_factory(args)

    option_book = None
    if cfg.options:
        from engine.option_book import OptionBook

        option_book = OptionBook(list(cfg.options), device=cfg.device, timezone=cfg.timezone)

    def progress(n: int) -> None:
        print(f"  ... {n:,} ticks", file=sys.stderr, flush=True)

    result = replay(factory, strategy, cfg, option_book=option_book, progress=progress)
    if result.engine.stats.market_data + result.engine.stats.bars == 0:
        window = f" between {args.start or 'the start'} and {args.end or 'the end'}" if (
            args.start or args.end) else ""
        raise UserError(f"no market data to replay{window} "
                        f"(messages received {result.received:,}, skipped "
                        f"{sum(result.skipped.values()):,})")
    report = build_report(result, strategy.name)
    if args.out:
        try:
            report["files"] = write_outputs(report, result, args.out)
        except OSError as exc:
            raise UserError(f"--out {args.out}: cannot write: {exc}") from None
    print(summary(report))
    return report


def _given(args: argparse.Namespace, names: tuple[str, ...]) -> dict[str, Any]:
    """The options of `names` given on the command line (the config's values stand for
    the rest)."""
    return {n: getattr(args, n) for n in names if getattr(args, n) is not None}


_CONFIG_OPTION = {"bar_seconds": "--bar-seconds", "session": "--session",
                  "commission": "--commission", "slippage_bps": "--slippage-bps"}


def _option_error(text: str) -> str:
    """msgspec's message (`... - at `$.broker.commission``) with the option's name."""
    for key, opt in _CONFIG_OPTION.items():
        if f"`$.{key}`" in text or f".{key}`" in text or f"{key} must" in text:
            return f"{opt}: {text}"
    return text


def summary(r: dict[str, Any]) -> str:
    skipped = sum(r["skipped"].values()) if r["skipped"] else 0
    bad_rows = ", ".join(f"{k} {v:,}" for k, v in sorted(r.get("source_skipped", {}).items()))
    lines = [
        f"replay of {r['source']} with {r['strategy']} ({r['transport']}, fills: {r['fill']})",
        f"  {r['ticks']:,} ticks, {r['bars']:,} bars, {r['orders']:,} orders, "
        f"{r['fills']:,} fills, {skipped:,} messages skipped",
        f"  {r['wall_seconds']:.2f} s wall, {r['ticks_per_second']:,.0f} ticks/s",
        f"  equity {r['initial_equity']:,.2f} -> {r['final_equity']:,.2f}: "
        f"ROI {r['roi'] * 100:+.2f}% (buy & hold {r['roi_buy_hold'] * 100:+.2f}%), "
        f"CAGR {_pct(r['cagr'])}, max drawdown {r['max_drawdown'] * 100:.2f}%",
        f"  Sharpe {_num(r['sharpe'])}, Sortino {_num(r['sortino'])}, Calmar "
        f"{_num(r['calmar'])}, volatility {_share(r['annual_volatility'])} a year "
        f"(from {r['trading_days']} daily returns"
        + (f"; ratios need at least {MIN_RATIO_DAYS})" if r["trading_days"] < MIN_RATIO_DAYS
           else ")"),
        f"  {r['round_trips']:,} round trips: win rate {_share(r['win_rate'])}, profit factor "
        f"{_num(r['profit_factor'])}, average win {_money(r['average_win'])}, average loss "
        f"{_money(r['average_loss'])}; exposure {r['exposure'] * 100:.1f}%, turnover "
        f"{r['turnover']:.1f}x",
    ]
    if r.get("spread_paid"):
        lines.append(f"  spread paid {r['spread_paid']:,.2f}: market orders crossed the "
                     f"quoted spread (buys at the ask, sells at the bid; half the spread "
                     f"each, from the mid; {r['quotes']:,} quotes)")
    if r.get("orders_refused"):
        lines.append("  orders refused: " + ", ".join(
            f"{k} {v:,}" for k, v in sorted(r["orders_refused"].items())))
    if bad_rows:
        lines.insert(2, f"  input rows skipped by the readers: {bad_rows}")
    if skipped:
        lines.insert(2, "  messages skipped: " + ", ".join(
            f"{k} {v:,}" for k, v in sorted(r["skipped"].items())))
    if "files" in r:
        lines.append("  wrote " + ", ".join(r["files"].values()))
    return "\n".join(lines)


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.2f}%"


def _share(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.2f}%"


def _money(x: float | None) -> str:
    return "n/a" if x is None else f"${x:,.2f}"
