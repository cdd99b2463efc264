"""`replay`: backtest from files or the built-in synthetic market through the live engine."""

from __future__ import annotations

import argparse
import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from engine.errors import UserError
from engine.phases import MARKET_HOURS, SessionSchedule
from engine.reporting.outputs import check_writable_dir
from engine.reporting.report import MIN_RATIO_DAYS, build_report, write_outputs
from engine.settings.resolve import config_option, data_kind, resolve_device, resolve_fill, settings
from engine.trading.replay import replay
from engine.trading.warmup import (
    find_warmup_start,
    first_look_back_ns,
    parse_warmup,
    strategy_lookback,
)
from strategies.registry import strategy_from_spec

#: the GP evaluator's default costs (gpu/gp/core.py): a file that records none used these
COMMISSION, SLIPPAGE_BPS = 1.0, 0.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", action="append", default=[], metavar="PATH",
                   help="tick CSV, daily OHLCV CSV(.gz) or LEAN zip/folder; repeatable "
                        "(default: the built-in synthetic market)")
    p.add_argument("--strategy", default="sma-cross",
                   help="built-in name (sma-cross[:FAST,SLOW[,long-only]]) or a strategy file "
                        "(*.py defining make_strategy(), or a GP *.json)")
    p.add_argument("--out", type=Path,
                   help="folder for report.json, fills.csv, trades.csv, equity.csv, "
                        "equity.png and the report.html tearsheet (default: no files, only "
                        "the summary)")
    p.add_argument("--no-plots", action="store_true",
                   help="with --out: leave out equity.png and report.html (the numbers "
                        "files only; drawing them takes most of a short replay)")
    p.add_argument("--symbols", help="comma-separated symbols to keep from --data "
                                     "(default: all)")
    p.add_argument("--start", help="first date (YYYY-MM-DD, New York) of --data to use "
                                   "(default: the data's first)")
    p.add_argument("--end", help="last date (YYYY-MM-DD, inclusive) of --data to use "
                                 "(default: the data's last)")
    p.add_argument("--quotes", action="store_true", help="also replay quote ticks of LEAN data")
    p.add_argument("--ts-unit", choices=("s", "ms", "us", "ns"),
                   help="unit of epoch-number tick times in --data (default: detected from "
                        "each file's first time by its magnitude)")
    p.add_argument("--tz", help="time zone of --data times written without a UTC offset, "
                                "e.g. America/New_York (default: none; such times are an "
                                "error)")
    p.add_argument("--strict", action="store_true",
                   help="a row of --data that would be skipped (bad time, price, size...) "
                        "is an error (default: counted and skipped)")
    p.add_argument("--ticks", type=int, default=200_000, help="synthetic market: ticks")
    p.add_argument("--n-symbols", type=int, default=10, help="synthetic market: symbols")
    p.add_argument("--seed", type=int, default=1, help="synthetic market: random seed")
    config_option(p, "--transport", key="transport", choices=("auto", "inproc", "ipc", "tcp"),
                  help="how the feed reaches the engine: inproc, a thread of the engine's "
                       "process; ipc/tcp, a process of its own; auto, ipc when the "
                       "strategy's bar closes run on the GPU, else inproc")
    config_option(p, "--frame-ticks", key="replay_frame_ticks", type=int,
                  help="trades per frame from the feed (columns; default 4096); 0: one "
                       "message per tick, as a live feed sends them")
    p.add_argument("--config", help="engine TOML config (default: built-in defaults)")
    config_option(p, "--bar-seconds", key="bar_seconds", type=float,
                  help="time-bar length for tick data, seconds")
    config_option(p, "--session", key="session",
                   help="regular (LEAN US-equity ticks 09:30-16:00 New York only, the "
                        "default), extended (pre- and post-market ticks too), or t1,t2,t3 as "
                        "HH:MM exchange time: WAIT before t1, TRADE until t2, LIQUIDATE until "
                        "t3, STOP after (reads extended hours when it reaches outside "
                        "09:30-16:00); \"\": regular, always trading")
    config_option(p, "--fill", key="broker.fill",
                  choices=("auto", "signal-close", "next-open", "next-tick"),
                   help="when orders fill: signal-close (at the close that produced the "
                        "signal, the GP paper's model), next-open (the next bar's open), "
                        "next-tick (the next trade); auto = next-open for bar data, "
                        "next-tick for ticks; one the data cannot give is an error")
    config_option(p, "--commission", key="broker.commission", type=float,
                  help="per trade, $")
    config_option(p, "--slippage-bps", key="broker.slippage_bps", type=float,
                  help="fill price moved against the order, basis points")
    add_money_arguments(p)
    config_option(p, "--device", key="device", choices=("auto", "cpu", "cuda"),
                  help="device of GPU-capable work (strategies, option groups)")
    p.add_argument("--window", choices=("train", "test"),
                   help="with a GP strategy file: replay its training or test window (its "
                        "symbols and dates, and its data file unless --data is given), "
                        "warmed as the evaluator's panel is (test: on the training days); "
                        "the summary compares the ROI with the one evolve stored")
    p.add_argument("--warmup", metavar="BARS",
                   help="bars before --start that only warm the indicators (default: the "
                        "strategy's longest lookback: sma-cross its slow window, GP rules "
                        "their longest indicator, else 255)")
    from engine.commands import replay_walk_forward

    replay_walk_forward.add_arguments(p)


def add_money_arguments(p: argparse.ArgumentParser) -> None:
    """The account, its sizing model and the exits attached to entries (engine/trading/broker.py,
    engine/trading/sizing.py, engine/trading/order_types.py)."""
    config_option(p, "--cash", key="broker.cash", type=float,
                  help="the account's capital, $, shared by all symbols (0: $10,000 per "
                       "symbol known at the start)")
    config_option(p, "--sizing", key="broker.sizing",
                  choices=("per-symbol", "equal-weight", "fixed-fraction",
                           "volatility-target", "fixed"),
                  help="how much an entry takes: per-symbol (the GP paper's isolated part "
                       "per symbol, all-in), equal-weight (of the symbols with an active "
                       "signal), fixed-fraction, volatility-target, fixed (units); a GP "
                       "strategy file defaults to per-symbol")
    for flag, key, what in (("--stop-loss", "stop_loss", "a stop-loss"),
                            ("--take-profit", "take_profit", "a take-profit"),
                            ("--trailing-stop", "trailing_stop", "a trailing stop")):
        config_option(p, flag, key=f"broker.{key}", type=float, metavar="F",
                      help=f"{what} attached to every entry, a fraction of the entry price "
                           "(0: none; one exit cancels the others)")


def source_factory(args: argparse.Namespace, regular_hours: bool = False,
                   data_from: int | None = None) -> Any:
    """A picklable zero-argument factory of the replay's Source (the feed may be a process).

    `data_from` (ns): read from there instead of `--start` (the warm-up's first bar);
    `regular_hours`: LEAN US-equity ticks of the regular session only."""
    if args.data:
        from feeds.sources import open_sources

        start, end = _bounds(args)
        symbols = [s.strip() for s in args.symbols.split(",")] if args.symbols else None
        kinds = ("trade", "quote") if args.quotes else ("trade",)
        factory: Any = functools.partial(
            open_sources, list(args.data), symbols=symbols,
            start=start if data_from is None else data_from, end=end, kinds=kinds,
            regular_hours=regular_hours, **reading_options(args))
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


def reading_options(args: argparse.Namespace) -> dict[str, Any]:
    """--ts-unit, --tz and --strict for the file readers (feeds/sources.py); a bad --tz is
    one line now."""
    tz = getattr(args, "tz", None)
    if tz is not None:
        from feeds.timestamps import zone

        try:
            zone(tz)
        except ValueError as exc:
            raise UserError(str(exc)) from None
    return {"ts_unit": getattr(args, "ts_unit", None), "tz": tz,
            "strict": bool(getattr(args, "strict", False))}


def _bounds(args: argparse.Namespace) -> tuple[int | None, int | None]:
    """--start and --end as ns (end inclusive of its day); one-line errors."""
    from feeds.sources import parse_date

    for d in args.data:
        if not Path(d).exists():
            raise UserError(f"--data {d}: no such file or folder")
    try:
        start = parse_date(args.start) if args.start else None
        end = parse_date(args.end, end_of_day=True) if args.end else None
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if start is not None and end is not None and start > end:
        raise UserError(f"--start {args.start} is after --end {args.end}")
    return start, end


def _gp_file(spec: str) -> Any:
    """The GP strategy file of a --strategy spec (`best.json#ensemble` too), else None."""
    from strategies.gp.strategy_file import read_strategy_file as load_gp_file

    path = spec.partition("#")[0]
    if not path.endswith(".json"):
        return None
    try:
        return load_gp_file(path)
    except ValueError as exc:
        raise UserError(str(exc)) from None


@dataclass(frozen=True)
class WindowPlan:
    """A `--window` replay: the file's record of the window (evolve's ROI) and where the
    evaluator's indicator panel started (the training window's first day)."""

    name: str
    record: Any  # strategies.gp.strategy_file.PeriodRecord
    panel_start: str
    #: bars the evaluator's panel had before the window (test: the training days)
    bars_before: int


def apply_window(args: argparse.Namespace) -> WindowPlan:
    """Fill --symbols/--start/--end (and --data, --fill) from a GP strategy file's window."""
    path = args.strategy.partition("#")[0]
    sf = _gp_file(args.strategy)
    if sf is None:
        raise UserError("--window needs a GP strategy file (*.json) as --strategy")
    period = sf.train if args.window == "train" else sf.test
    if period is None or sf.train is None:
        what = "training" if args.window == "train" else "test"
        raise UserError(f"{path} records no {what} window")
    if not args.data:
        # a relative path is where evolve ran; beside the strategy file serves too
        found = [p for p in (Path(sf.data), Path(path).parent / sf.data)
                 if sf.data and p.exists()]
        if not found:
            raise UserError(f"{path} was evolved on {sf.data!r}, which is not here: give --data")
        args.data = [str(found[0])]
    args.symbols = args.symbols or ",".join(period.symbols)
    args.start = args.start or period.first_date
    args.end = args.end or period.last_date
    args.fill = args.fill or "signal-close"  # the evaluator trades at the close
    return WindowPlan(args.window, period, sf.train.first_date,
                      0 if args.window == "train" else sf.train.days)


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
    if args.out is not None:
        check_writable_dir(args.out, "--out")
    if args.walk_forward is not None:
        return _run_walk_forward(args)
    try:
        warmup_bars = parse_warmup(args.warmup)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    plan = apply_window(args) if args.window else None
    gp_file = _gp_file(args.strategy)
    cfg = _config(args, gp_file)
    strategy = _load_strategy(args.strategy, cfg.device)
    hours = market_hours(cfg.session)
    warm = _plan_warmup(args, cfg, strategy, plan, warmup_bars, hours == "regular")
    factory = source_factory(args, hours == "regular", warm.data_from)

    option_book = None
    if cfg.options:
        from engine.options.book import open_option_book

        option_book = open_option_book(list(cfg.options), device=cfg.device,
                                       timezone=cfg.timezone, every_ms=cfg.options_every_ms)

    def progress(n: int) -> None:
        if not args.quiet:  # -q: no progress lines
            print(f"  ... {n:,} ticks", file=sys.stderr, flush=True)

    result = replay(factory, strategy, cfg, option_book=option_book, progress=progress,
                    trade_from=warm.trade_from if warm.data_from is not None else None)
    stats = result.engine.stats
    if stats.market_data + stats.bars == 0 or (warm.data_from is not None
                                                and stats.bar_events == 0):
        window = f" between {args.start or 'the start'} and {args.end or 'the end'}" if (
            args.start or args.end) else ""
        raise UserError(f"no market data to replay{window} "
                        f"(messages received {result.received:,}, skipped "
                        f"{sum(result.skipped.values()):,})")
    trials = getattr(gp_file, "rules_tried", None) or 1
    report = build_report(result, strategy.name, trials=int(trials))
    # where the strategy's bar closes ran (a GP strategy under --device auto: measured)
    report["strategy_device"] = getattr(strategy, "device", "cpu")
    report["warmup"] = warm.report(stats.warmup_bar_events, stats.warmup_bars)
    report["session"] = session_report(cfg.session, hours, args.data)
    report["costs"] = {"commission": cfg.broker.commission,
                       "slippage_bps": cfg.broker.slippage_bps}
    if plan is not None:
        report["evolve_comparison"] = window_comparison(plan, report, gp_file, args.strategy)
    if args.out:
        try:
            report["files"] = write_outputs(report, result, args.out,
                                            plots=not args.no_plots)
        except OSError as exc:
            raise UserError(f"--out {args.out}: cannot write: {exc}") from None
    print(summary(report))
    return report


def _run_walk_forward(args: argparse.Namespace) -> dict[str, Any]:
    """`--walk-forward`: engine/commands/replay_walk_forward.py; the report and summary."""
    from engine.commands import replay_walk_forward

    # the GP evaluator's money model, as for a GP strategy file (no costs recorded: the
    # command line's or the config's, else the paper broker's)
    gp_model = argparse.Namespace(commission=None, slippage_bps=None)
    report, result = replay_walk_forward.run(args, lambda a: _config(a, gp_model),
                                             source_factory)
    if args.out:
        try:
            report["files"] = write_outputs(report, result, args.out,
                                            plots=not args.no_plots)
        except OSError as exc:
            raise UserError(f"--out {args.out}: cannot write: {exc}") from None
    print(summary(report))
    print("\n".join(replay_walk_forward.summary_lines(report)))
    return report


def _config(args: argparse.Namespace, gp_file: Any) -> Any:
    """The settings of this replay (engine/settings/resolve.py: default < file < flag). A GP
    strategy file that records its costs (`commission`, `slippage_bps`: evolve's) ranks
    above the config file and below a flag. The device is checked and the fill model
    resolved against the data here, once: an impossible one is a one-line error."""
    recorded: dict[str, Any] = {
        f"broker.{key}": float(getattr(gp_file, key)) for key in
        ("commission", "slippage_bps") if getattr(gp_file, key, None) is not None}
    if gp_file is not None:
        recorded.update(_gp_money_model(args))
    cfg = settings(args, over_file=recorded)
    resolve_device(cfg.device, "engine", args)  # cuda without a GPU: one line, now
    fill = resolve_fill(cfg.broker.fill, data_kind(args.data),
                        "--fill" if args.fill else "broker.fill")
    return msgspec.structs.replace(cfg, broker=msgspec.structs.replace(cfg.broker, fill=fill))


def _gp_money_model(args: argparse.Namespace) -> dict[str, Any]:
    """A GP strategy file's default money model, the evaluator's: an isolated part of
    `cash_per_symbol` per stock, all-in at the signal's close (so the replay equals the
    evaluator to the cent). Below the config file: a key the file sets is left to it."""
    import tomllib

    model = {"broker.sizing": "per-symbol", "broker.fill": "signal-close"}
    path = getattr(args, "config", None)
    if path and Path(path).is_file():
        try:
            broker = tomllib.loads(Path(path).read_text()).get("broker", {})
        except (tomllib.TOMLDecodeError, OSError):
            broker = {}  # settings() reports the bad file in one line
        model = {k: v for k, v in model.items() if k.partition(".")[2] not in broker}
    return model


@dataclass(frozen=True)
class WarmupPlan:
    """The warm-up of one replay: bars asked for (and why), the bars found in the data
    before `trade_from`, and where the data is read from (None: from --start, no warm-up)."""

    requested: int
    why: str
    trade_from: int | None
    data_from: int | None
    found: int

    def report(self, bar_events: int, bars: int) -> dict[str, Any]:
        """report.json's `warmup`: what was asked and what the engine used."""
        return {
            "requested": self.requested, "bars": bar_events, "symbol_bars": bars,
            "complete": bar_events >= self.requested, "why": self.why,
            "from": _iso_ns(self.data_from) if self.data_from is not None else None,
        }


def _iso_ns(ts: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts / 1e9, UTC).isoformat().replace("+00:00", "Z")


def _plan_warmup(args: argparse.Namespace, cfg: Any, strategy: Any, plan: WindowPlan | None,
                 asked: int | None, regular_hours: bool) -> WarmupPlan:
    """How many bars before --start warm the indicators, and from where the data is read
    (engine/trading/warmup.py). A --window replay warms as the evaluator's panel did (train: not
    at all; test: on the training days) unless --warmup says otherwise."""
    from feeds.sources import detect_format, open_sources, parse_date

    trade_from, _end = _bounds(args) if args.data else (None, None)
    if plan is not None and asked is None:
        why = ("the evaluator's panel starts with the training window" if plan.name == "train"
               else f"the evaluator's panel: the {plan.bars_before} training days")
        data_from = parse_date(plan.panel_start) if plan.bars_before else None
        return WarmupPlan(plan.bars_before, why, trade_from, data_from, plan.bars_before)
    if asked is not None:
        requested, why = asked, "--warmup"
    else:
        requested, why = strategy_lookback(strategy)
    if trade_from is None:  # nothing comes before the data's first bar
        return WarmupPlan(asked or 0, "no --start: the replay starts with its data", None,
                          None, 0)
    if requested == 0:
        return WarmupPlan(0, why, trade_from, None, 0)
    symbols = [s.strip() for s in args.symbols.split(",")] if args.symbols else None
    kinds = ("trade", "quote") if args.quotes else ("trade",)

    def open_before(lo: int | None) -> Any:
        return open_sources(list(args.data), symbols=symbols, start=lo, end=trade_from,
                            kinds=kinds, regular_hours=regular_hours, **reading_options(args))

    daily = all(detect_format(d) == "daily" for d in args.data)
    span = None if daily else first_look_back_ns(requested, cfg.bar_seconds)
    try:
        data_from, found = find_warmup_start(open_before, trade_from, requested,
                                             cfg.bar_seconds, cfg.timezone, span)
    except ValueError:  # no data at all before --start: a cold start, reported
        data_from, found = None, 0
    return WarmupPlan(requested, why, trade_from, data_from, found)


def market_hours(session: str) -> str:
    """"regular" or "extended": the hours of LEAN US-equity ticks a replay reads. Regular
    (09:30-16:00 New York) unless asked: `extended`, or a phase schedule that reaches
    outside the regular session."""
    text = session.strip().lower()
    if text in MARKET_HOURS:
        return text
    if not text:
        return "regular"
    sched = SessionSchedule.parse(session)
    assert sched.t1 is not None and sched.t3 is not None
    inside = sched.t1 >= REGULAR_OPEN_S and sched.t3 <= REGULAR_CLOSE_S
    return "regular" if inside else "extended"


REGULAR_OPEN_S, REGULAR_CLOSE_S = 9 * 3600 + 30 * 60, 16 * 3600


def session_report(session: str, hours: str, data: list[str]) -> dict[str, Any]:
    """report.json's `session`: the hours read and the phase schedule in force."""
    from feeds.sources import detect_format

    lean = any(detect_format(d) == "lean" for d in data)
    text = session.strip()
    return {
        "hours": hours if lean else "all",
        "regular_hours": "09:30-16:00 America/New_York" if lean and hours == "regular"
        else None,
        "schedule": text if text and text.lower() not in MARKET_HOURS else None,
    }


def window_comparison(plan: WindowPlan, report: dict[str, Any], gp_file: Any, spec: str
                      ) -> dict[str, Any]:
    """This replay's money against the ROI evolve stored for the same window: equal to the
    cent when the fill model, the costs and the warm-up are the evaluator's."""
    rec = plan.record
    want = report["initial_equity"] * (1.0 + rec.roi) if rec.roi is not None else None
    diff = report["final_equity"] - want if want is not None else None
    recorded = (getattr(gp_file, "commission", None), getattr(gp_file, "slippage_bps", None))
    costs = (COMMISSION if recorded[0] is None else float(recorded[0]),
             SLIPPAGE_BPS if recorded[1] is None else float(recorded[1]))
    same = {
        # evolve stored the best rule's ROI: an ensemble (`best.json#ensemble`) is another
        "strategy": "#" not in spec,
        "fill": report["fill"] == "signal-close",
        "costs": (report["costs"]["commission"], report["costs"]["slippage_bps"]) == costs,
        "warmup": report["warmup"]["bars"] == plan.bars_before,
    }
    return {
        "window": plan.name, "evolve_roi": rec.roi, "evolve_roi_buy_hold": rec.roi_buy_hold,
        "replay_roi": report["roi"], "replay_roi_buy_hold": report["roi_buy_hold"],
        "difference": diff,
        "equal_to_the_cent": diff is not None and abs(diff) < 0.005,
        "like_for_like": all(same.values()),
        "differs_in": [k for k, v in same.items() if not v],
    }


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
    lines += _research_lines(r)
    if r.get("spread_paid"):
        lines.append(f"  spread paid {r['spread_paid']:,.2f}: market orders crossed the "
                     f"quoted spread (buys at the ask, sells at the bid; half the spread "
                     f"each, from the mid; {r['quotes']:,} quotes)")
    if r.get("options"):
        lines.append(_options_line(r["options"]))
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


def _options_line(o: dict[str, Any]) -> str:
    """The option groups in words: repricings, spots coalesced, latency (report.json's
    `options`, `engine/options/book.py`)."""
    def us(x: float | None) -> str:
        return "n/a" if x is None else f"{x:,.0f} µs"

    never = (f"; never priced (no tick of the underlying): {', '.join(o['never_priced'])}"
             if o.get("never_priced") else "")
    clock = (f", on the data's clock every {o['every_ms']:g} ms ({o['boundaries']:,} "
             f"boundaries, values stamped at each)" if o.get("every_ms") else "")
    return (f"  options: {o['groups']:,} group(s), {o['options']:,} contracts on "
            f"{o['device']}{clock}: {o['repricings']:,} repricings of {o['ticks']:,} underlying "
            f"spots ({o['coalesced_ticks']:,} coalesced into a newer spot), latency p50 "
            f"{us(o.get('latency_us_p50'))}, p99 {us(o.get('latency_us_p99'))}, "
            f"{o.get('values_published', 0):,} value messages{never}")


def _research_lines(r: dict[str, Any]) -> list[str]:
    """The session, the warm-up, the comparison with evolve and the statistics against
    buy-and-hold, in words."""
    lines = []
    sess = r.get("session")
    if sess:
        hours = {"regular": "regular hours 09:30-16:00 New York (--session extended adds "
                            "pre- and post-market ticks)",
                 "extended": "extended hours (pre- and post-market ticks included)",
                 "all": "every bar of the data"}[sess["hours"]]
        sched = f", phases {sess['schedule']}" if sess.get("schedule") else ""
        lines.append(f"  session: {hours}{sched}")
    w = r.get("warmup")
    if w:
        if w["bars"] or w["requested"]:
            enough = ("" if w["complete"] else
                      f"; the data had only {w['bars']:,} of the {w['requested']:,} asked")
            lines.append(f"  warm-up: {w['bars']:,} bars before the first traded bar "
                         f"({w['requested']:,} asked: {w['why']}){enough}")
        else:
            lines.append(f"  warm-up: none ({w['why']})")
    c = r.get("evolve_comparison")
    if c and c["evolve_roi"] is not None:
        verdict = ("equal to the cent" if c["equal_to_the_cent"]
                   else f"differs by ${c['difference']:,.2f}")
        unlike = ("" if c["like_for_like"] else
                  f" (not like for like: its {', '.join(c['differs_in'])} unlike evolve's)")
        lines.append(f"  evolve's {c['window']} ROI {c['evolve_roi'] * 100:+.2f}% (buy & hold "
                     f"{c['evolve_roi_buy_hold'] * 100:+.2f}%); this replay "
                     f"{c['replay_roi'] * 100:+.2f}% (buy & hold "
                     f"{c['replay_roi_buy_hold'] * 100:+.2f}%): {verdict}{unlike}")
    vs = r.get("vs_buy_hold")
    if vs:
        from strategies.relative_stats import RelativeStats, summary_lines

        fields = {k: vs[k] for k in RelativeStats.__dataclass_fields__}
        fields["excess_ci95"] = tuple(vs["excess_ci95"])
        lines += ["  " + line for line in summary_lines(RelativeStats(**fields))]
    return lines


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.2f}%"


def _share(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.2f}%"


def _money(x: float | None) -> str:
    return "n/a" if x is None else f"${x:,.2f}"
