"""`price`: reprice an option chain (or a generated group) and solve implied vols.

    python run_engine.py price --chain CHAIN.csv [--iv] [--vol V] [--interest-rate R]
        [--dividend-yield Q] [--asof DATE]
        [--grid seed|default|fine] [--price-steps N] [--time-steps M]
        [--style european|american] [--device auto|cpu|cuda] [--plot PATH] [--json PATH]
    python run_engine.py price --generate N [--spot S] [--vol V] ...

The volatility to price each contract at is `--vol` if given, else the chain's `iv`
column, else (with `--iv`) the implied vol solved from its bid/ask mid. With `--iv` the
smile per expiry is plotted (PNG). Time to expiry is calendar days / 365 from `--asof`
(default: the chain's snapshot date). `--interest-rate` defaults to 0 (the chain ships no rate).
`--dividend-yield` is the underlying's continuous dividend yield per year (0.02 for 2%):
given, it applies to every row; else a chain's `dividend_yield` column where filled, else 0.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import UserError
from engine.options.chain_pricing import ChainValuation, atm_vols, generated_chain, value_chain
from engine.reporting.plots import plot_smile
from engine.settings.flags import deprecated_alias
from feeds.option_chain import OptionChain, read_chain
from gpu.device import DeviceUnavailable
from gpu.options.engines import GRIDS, FdPricingEngine, make_grid
from gpu.options.instruments import check_dividend_yield

DEFAULT_RATE = 0.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--chain", type=Path, help="option chain CSV (one row per contract)")
    src.add_argument(
        "--generate",
        type=int,
        metavar="N",
        help="price a generated group of N options (strikes ±2σ√T, 1 week to 2 years)",
    )
    parser.add_argument("--iv", action="store_true", help="solve implied vols from bid/ask mids")
    parser.add_argument("--vol", type=float, help="volatility per year to price at (all rows)")
    parser.add_argument(
        "--interest-rate",
        type=float,
        default=DEFAULT_RATE,
        metavar="R",
        help="risk-free interest rate per year, continuously compounded (default 0)",
    )
    deprecated_alias(parser, "--rate", dest="interest_rate", new="--interest-rate", type=float,
                     why="--rate is messages per second in feed")
    parser.add_argument(
        "--dividend-yield",
        type=float,
        help="continuous dividend yield per year, e.g. 0.02 for 2%% (default: the chain's "
             "dividend_yield column, else 0)",
    )
    parser.add_argument("--asof", help="valuation date YYYY-MM-DD (default: chain snapshot)")
    parser.add_argument("--spot", type=float, help="underlying price (default: from the chain)")
    parser.add_argument("--grid", choices=sorted(GRIDS), default="default",
                        help="Crank-Nicolson grid size")
    parser.add_argument("--price-steps", type=int, help="override the grid's price steps")
    parser.add_argument("--time-steps", type=int, help="override the grid's time steps")
    parser.add_argument("--style", choices=("european", "american"), help="override the style")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where to price: cuda if there is a GPU under auto")
    parser.add_argument("--plot", type=Path,
                        help="smile PNG with --iv (default: next to --json if given, else none)")


def first_run_work(args: argparse.Namespace) -> Callable[[], None] | None:
    """With empty caches, where this process compiles a part of the pricer (few cores,
    run_engine's `_first_run_compiles`): matplotlib's import and a first drawing (font,
    Agg canvas, PNG writer), done while a compile worker compiles the pricer, which the
    implied vols wait for; the smile plot then finds them done. None where no smile plot
    is drawn."""
    js = getattr(args, "json", None)
    if not args.iv or (args.plot is None and (not js or str(js) == "-")):
        return None
    return _warm_plotting


def _warm_plotting() -> None:
    import io

    from engine.reporting.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([0.0, 1.0], [0.0, 1.0], marker="o", label="x")
    ax.legend(fontsize=7)
    ax.set_title("x")
    fig.savefig(io.BytesIO(), format="png", dpi=20)
    plt.close(fig)


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _load_chain(args: argparse.Namespace) -> tuple[OptionChain, str]:
    if args.chain is None:
        n = args.generate if args.generate is not None else 1000
        chain, _ = generated_chain(n, args.spot or 100.0, args.vol or 0.25)
        return chain, f"generated group of {n}"
    try:
        return read_chain(args.chain), str(args.chain)
    except UnicodeDecodeError as e:  # a binary file: the message must name it
        raise UserError(f"--chain {args.chain}: not a text CSV file ({e.reason} at byte "
                        f"{e.start})") from None
    except (ValueError, OSError) as e:
        text = str(e)
        raise UserError(text if str(args.chain) in text else f"--chain {args.chain}: {text}"
                        ) from None


def _valuation_date(args: argparse.Namespace, chain: OptionChain) -> dt.date:
    if args.asof is not None:
        try:
            return dt.date.fromisoformat(args.asof)
        except ValueError:
            raise UserError(f"--asof must be YYYY-MM-DD, got {args.asof!r}") from None
    snap = chain.asof_date()
    if snap is None:
        raise UserError("the chain has no snapshot_time column: give --asof YYYY-MM-DD")
    return snap


def run(args: argparse.Namespace) -> dict[str, Any]:
    from engine.reporting.outputs import check_writable_file

    t_start = time.perf_counter()
    if args.plot is not None:
        from engine.reporting.outputs import check_own_kind

        check_writable_file(args.plot, "--plot")
        check_own_kind(args.plot, "png", "--plot")
    try:
        engine = FdPricingEngine(
            make_grid(args.grid, price_steps=args.price_steps, time_steps=args.time_steps),
            args.device)
    except (ValueError, DeviceUnavailable) as e:
        raise UserError(str(e)) from None
    if args.vol is not None and not (args.vol > 0 and math.isfinite(args.vol)):
        raise UserError(f"--vol must be a positive number, got {args.vol}")
    if not math.isfinite(args.interest_rate):
        raise UserError("--interest-rate must be a finite number")
    if args.dividend_yield is not None:
        try:
            check_dividend_yield(args.dividend_yield, "--dividend-yield")
        except ValueError as e:
            raise UserError(str(e)) from None
    if args.spot is not None and not (args.spot > 0 and math.isfinite(args.spot)):
        raise UserError(f"--spot must be a positive number, got {args.spot}")

    generated = args.chain is None
    chain, source = _load_chain(args)
    n = len(chain)
    asof = _valuation_date(args, chain)
    spot = np.full(n, args.spot) if args.spot is not None else chain.spot
    if not np.all(spot > 0):
        raise UserError("the chain gives no underlying price for some rows: give --spot")
    american = (
        np.full(n, args.style == "american") if args.style is not None else chain.is_american
    )
    q = (np.full(n, args.dividend_yield) if args.dividend_yield is not None
         else chain.dividend_yields(0.0))
    val = value_chain(chain, asof, spot, american, args.interest_rate, engine, dividend_yield=q,
                      vol=args.vol,
                      solve_iv=args.iv, generated=generated,
                      progress=(lambda _msg: None) if args.quiet else _progress)
    result = val.report(source, engine)
    if args.iv:
        plot = args.plot
        if plot is None:  # never a file the user did not ask for
            js = getattr(args, "json", None)
            # beside a --json file (not stdout's "-"), and never over a file of another kind
            plot = (Path(js).with_name(Path(js).stem + "_smile.png")
                    if js and str(js) != "-" else None)
            if plot is not None:
                from engine.reporting.outputs import check_own_kind

                check_own_kind(plot, "png", "--json's smile plot")
        if plot is not None:
            plot_smile(chain, val.iv, val.iv_ok, spot, plot, asof)
            result["plot"] = str(plot)
    result["seconds"] = time.perf_counter() - t_start
    _print_summary(result, val, source, engine.device, engine.grid.name)
    return result


def _print_summary(result: dict[str, Any], val: ChainValuation, source: str, device: str,
                   grid_name: str) -> None:
    chain = val.chain
    # a chain without an underlying column has no names: "(1 expiries)", not "(, 1 ...)"
    what = ", ".join([*sorted(set(chain.underlying) - {""}), f"{len(chain.expiries)} expiries"])
    print(
        f"price: {len(chain)} options ({what}) from "
        f"{source}; {result['priced']} priced on {device} with the {grid_name} grid in "
        f"{val.price_seconds:.3f} s (vol: {val.vol_source})"
    )
    if result["expired"]:
        print(f"  expired on {val.asof} and not priced: {result['expired']} contract(s)")
    if result["rows_skipped"]:
        bad = ", ".join(f"{k} {v}" for k, v in sorted(result["rows_skipped"].items()))
        print(f"  chain rows skipped as malformed: {sum(result['rows_skipped'].values())} "
              f"({bad})")
    if "analytic_max_rel_error" in result:
        print(f"  European prices vs analytic: max relative error "
              f"{result['analytic_max_rel_error']:.2e}")
    if val.solved_iv:
        rej = ", ".join(f"{k} {v}" for k, v in sorted(result["iv_rejected"].items()))
        print(
            f"  implied vols: {result['iv_solved']} solved in {val.iterations} batched "
            f"repricings ({val.iv_seconds:.2f} s); rejected: {rej or 'none'}"
        )
        for exp, atm in atm_vols(chain, val.iv, val.iv_ok, val.spot):
            print(f"    {exp}: ATM implied vol {atm:.3f}")
        print(f"  smile plot: {result.get('plot', 'none (give --plot PATH)')}")
