"""`price`: reprice an option chain (or a generated group) and solve implied vols.

    python run_engine.py price --chain CHAIN.csv [--iv] [--vol V] [--rate R] [--asof DATE]
        [--grid seed|default|fine] [--price-steps N] [--time-steps M]
        [--style european|american] [--device auto|cpu|cuda] [--plot PATH] [--json PATH]
    python run_engine.py price --generate N [--spot S] [--vol V] ...

The volatility to price each contract at is `--vol` if given, else the chain's `iv`
column, else (with `--iv`) the implied vol solved from its bid/ask mid. With `--iv` the
smile per expiry is plotted (PNG). Time to expiry is calendar days / 365 from `--asof`
(default: the chain's snapshot date). `--rate` defaults to 0 (the chain ships no rate).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import UserError
from feeds.option_chain import OptionChain, read_chain
from gpu import options_core as core
from gpu.device import DeviceUnavailable, resolve_device
from gpu.implied_vol import IVStatus, implied_vols, quote_mids
from gpu.options import GRIDS, black_scholes, make_grid, option_params, price_params

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
        "--rate",
        type=float,
        default=DEFAULT_RATE,
        help="risk-free rate per year, continuously compounded (default 0)",
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


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _clean(x: float) -> float | None:
    return None if not math.isfinite(x) else float(x)


def _generated_chain(n: int, spot: float, vol: float) -> tuple[OptionChain, np.ndarray]:
    """N options: expiries from 1 week to 2 years, strikes across ±2σ√T, calls and puts."""
    if n < 1:
        raise UserError("--generate needs N ≥ 1")
    days = np.array([7, 14, 30, 61, 91, 182, 365, 730])
    idx = np.arange(n)
    d = days[idx % days.size]
    t = d / 365.0
    z = np.linspace(-2.0, 2.0, max(n // (2 * days.size), 1) + 1)
    zz = z[(idx // (2 * days.size)) % z.size] if z.size > 1 else np.zeros(n)
    strike = np.round(spot * np.exp(zz * vol * np.sqrt(t)), 2)
    is_call = (idx // days.size) % 2 == 0
    asof = dt.date(2000, 1, 3)
    expiry = np.datetime64(asof, "D") + d.astype("timedelta64[D]")
    chain = OptionChain(
        underlying=["GEN"] * n,
        symbol=[
            f"GEN{np.datetime_as_string(e).replace('-', '')[2:]}{'C' if c else 'P'}"
            f"{int(round(k * 1000)):08d}"
            for e, c, k in zip(expiry, is_call, strike, strict=True)
        ],
        expiry=expiry,
        strike=strike,
        is_call=is_call,
        is_american=np.zeros(n, dtype=bool),
        bid=np.full(n, np.nan),
        ask=np.full(n, np.nan),
        iv=np.full(n, np.nan),
        spot=np.full(n, spot),
        snapshot_time=dt.datetime(2000, 1, 3, 16, 0),
    )
    return chain, t


def run(args: argparse.Namespace) -> dict[str, Any]:
    from engine.outputs import check_writable_file

    t_start = time.perf_counter()
    if args.plot is not None:
        check_writable_file(args.plot, "--plot")
    try:
        device = resolve_device(args.device, "option pricing")
        grid = make_grid(args.grid, price_steps=args.price_steps, time_steps=args.time_steps)
    except (ValueError, DeviceUnavailable) as e:
        raise UserError(str(e)) from None
    if args.vol is not None and not (args.vol > 0 and math.isfinite(args.vol)):
        raise UserError(f"--vol must be a positive number, got {args.vol}")
    if not math.isfinite(args.rate):
        raise UserError("--rate must be a finite number")
    if args.spot is not None and not (args.spot > 0 and math.isfinite(args.spot)):
        raise UserError(f"--spot must be a positive number, got {args.spot}")

    generated = args.chain is None
    if generated:
        n = args.generate if args.generate is not None else 1000
        chain, _ = _generated_chain(n, args.spot or 100.0, args.vol or 0.25)
        source = f"generated group of {n}"
    else:
        try:
            chain = read_chain(args.chain)
        except UnicodeDecodeError as e:  # a binary file: the message must name it
            raise UserError(f"--chain {args.chain}: not a text CSV file ({e.reason} at byte "
                            f"{e.start})") from None
        except (ValueError, OSError) as e:
            text = str(e)
            raise UserError(text if str(args.chain) in text else f"--chain {args.chain}: {text}"
                            ) from None
        source = str(args.chain)
    n = len(chain)

    if args.asof is not None:
        try:
            asof = dt.date.fromisoformat(args.asof)
        except ValueError:
            raise UserError(f"--asof must be YYYY-MM-DD, got {args.asof!r}") from None
    else:
        snap = chain.asof_date()
        if snap is None:
            raise UserError("the chain has no snapshot_time column: give --asof YYYY-MM-DD")
        asof = snap
    expiry = chain.years_to_expiry(asof)
    spot = np.full(n, args.spot) if args.spot is not None else chain.spot
    if not np.all(spot > 0):
        raise UserError("the chain gives no underlying price for some rows: give --spot")
    american = (
        np.full(n, args.style == "american") if args.style is not None else chain.is_american
    )
    base = option_params(spot, chain.strike, expiry, 0.2, args.rate, chain.is_call, american)

    # -- implied vols ----------------------------------------------------------------------
    iv = np.full(n, np.nan)
    mid = np.full(n, np.nan)
    status = np.full(n, IVStatus.PENDING, dtype=np.int8)
    iv_seconds = 0.0
    iterations = 0
    if args.iv:
        t0 = time.perf_counter()
        if generated:  # no quotes: solve back from the group's own model prices
            vol0 = args.vol or 0.25
            p = base.copy()
            p[:, core.VOL] = vol0
            mid = price_params(p, grid, device).price
            status[:] = IVStatus.PENDING
        else:
            mid, status = quote_mids(chain.bid, chain.ask)
        _progress(f"price: solving implied vols of {int((status == 0).sum() + (status == 1).sum())}"
                  f" quotes on {device} ({grid.name} grid)")
        res = implied_vols(
            mid,
            base,
            grid=grid,
            device=device,
            status=status,
            progress=lambda it, left: _progress(f"  iteration {it}: {left} unconverged"),
        )
        iv, status, iterations = res.iv, res.status, res.iterations
        iv_seconds = time.perf_counter() - t0

    # -- prices at the chosen vols ----------------------------------------------------------
    if args.vol is not None:
        vol = np.full(n, args.vol)
        vol_source = "--vol"
    elif np.isfinite(chain.iv).any() and not generated:
        vol = np.where(np.isfinite(chain.iv), chain.iv, iv)  # rows without either: unpriced
        vol_source = "iv column" + (" then implied vol" if args.iv else "")
    elif args.iv:
        vol = _fill_from_smile(chain, iv, status == IVStatus.OK, spot)
        vol_source = "implied vol (unsolved: the expiry's smile)"
    elif generated:
        vol = np.full(n, 0.25)
        vol_source = "default 0.25"
    else:
        raise UserError("no volatility to price at: give --vol, --iv, or an iv column")
    priced = np.isfinite(vol) & (vol > 0)
    price = np.full(n, np.nan)
    delta = np.full(n, np.nan)
    gamma = np.full(n, np.nan)
    t0 = time.perf_counter()
    if priced.any():
        p = base[priced].copy()
        p[:, core.VOL] = vol[priced]
        _progress(f"price: pricing {int(priced.sum())} options on {device} ({grid.name} grid)")
        values = price_params(p, grid, device)
        price[priced], delta[priced], gamma[priced] = values.price, values.delta, values.gamma
    price_seconds = time.perf_counter() - t0

    result: dict[str, Any] = {
        "source": source,
        "device": device,
        "grid": grid._asdict(),
        "asof": asof.isoformat(),
        "rate": args.rate,
        "vol_source": vol_source,
        "count": n,
        "priced": int(priced.sum()),
        "price_seconds": price_seconds,
    }
    if generated:
        euro = ~american & priced
        if euro.any():
            ref = black_scholes(spot[euro], chain.strike[euro], expiry[euro], vol[euro], args.rate,
                                chain.is_call[euro]).price
            rel = np.abs(price[euro] - ref) / ref
            result["analytic_max_rel_error"] = float(rel.max())
    if args.iv:
        ok = status == IVStatus.OK
        rejected: dict[str, int] = {}
        for code in np.unique(status[~ok]):
            rejected[IVStatus(int(code)).reason] = int((status == code).sum())
        result.update(
            {
                "iv_solved": int(ok.sum()),
                "iv_rejected": rejected,
                "iv_iterations": iterations,
                "iv_seconds": iv_seconds,
            }
        )
        if generated and ok.any():
            result["iv_roundtrip_max_abs_error"] = float(np.abs(iv[ok] - vol[ok]).max())

    rights = chain.right
    result["options"] = [
        {
            "symbol": chain.symbol[i],
            "underlying": chain.underlying[i],
            "expiry": str(chain.expiry[i]),
            "strike": float(chain.strike[i]),
            "right": rights[i],
            "style": "american" if american[i] else "european",
            "years": float(expiry[i]),
            "spot": float(spot[i]),
            "vol": _clean(vol[i]),
            "price": _clean(price[i]),
            "delta": _clean(delta[i]),
            "gamma": _clean(gamma[i]),
            "bid": _clean(chain.bid[i]),
            "ask": _clean(chain.ask[i]),
            **(
                {
                    "mid": _clean(mid[i]),
                    "iv": _clean(iv[i]),
                    "iv_status": IVStatus(int(status[i])).reason,
                }
                if args.iv
                else {}
            ),
        }
        for i in range(n)
    ]
    result["rows_skipped"] = dict(chain.skipped) if not generated else {}
    if args.iv:
        plot = args.plot
        if plot is None:  # never a file the user did not ask for
            js = getattr(args, "json", None)
            plot = Path(js).with_name(Path(js).stem + "_smile.png") if js else None
        if plot is not None:
            _plot_smile(chain, iv, status == IVStatus.OK, spot, plot, asof)
            result["plot"] = str(plot)
    result["seconds"] = time.perf_counter() - t_start

    # -- human summary ----------------------------------------------------------------------
    names = sorted(set(chain.underlying))
    print(
        f"price: {n} options ({', '.join(names)}, {len(chain.expiries)} expiries) from {source}; "
        f"{int(priced.sum())} priced on {device} with the {grid.name} grid in "
        f"{price_seconds:.3f} s (vol: {vol_source})"
    )
    if result["rows_skipped"]:
        bad = ", ".join(f"{k} {v}" for k, v in sorted(result["rows_skipped"].items()))
        print(f"  chain rows skipped as malformed: {sum(result['rows_skipped'].values())} "
              f"({bad})")
    if "analytic_max_rel_error" in result:
        print(f"  European prices vs analytic: max relative error "
              f"{result['analytic_max_rel_error']:.2e}")
    if args.iv:
        rej = ", ".join(f"{k} {v}" for k, v in sorted(result["iv_rejected"].items()))
        print(
            f"  implied vols: {result['iv_solved']} solved in {iterations} batched repricings "
            f"({iv_seconds:.2f} s); rejected: {rej or 'none'}"
        )
        for exp, atm in _atm_vols(chain, iv, status == IVStatus.OK, spot):
            print(f"    {exp}: ATM implied vol {atm:.3f}")
        print(f"  smile plot: {result.get('plot', 'none (give --plot PATH)')}")
    return result


def _fill_from_smile(
    chain: OptionChain, iv: np.ndarray, ok: np.ndarray, spot: np.ndarray
) -> np.ndarray:
    """Solved implied vols, and for unsolved contracts the smile of their expiry at their
    strike (linear in strike through the out-of-the-money solved quotes, flat beyond), or
    the nearest expiry's at-the-money vol where an expiry has no solved quote at all."""
    vol = np.where(ok, iv, np.nan)
    otm = np.where(chain.is_call, chain.strike >= spot, chain.strike <= spot)
    expiries = np.unique(chain.expiry)
    atm = {e: v for e, v in ((np.datetime64(e), v) for e, v in _atm_vols(chain, iv, ok, spot))}
    for e in expiries:
        rows = (chain.expiry == e) & ~ok
        if not rows.any():
            continue
        src = (chain.expiry == e) & ok & otm
        if not src.any():
            src = (chain.expiry == e) & ok
        if src.any():
            order = np.argsort(chain.strike[src])
            vol[rows] = np.interp(chain.strike[rows], chain.strike[src][order], iv[src][order])
        elif atm:
            nearest = min(atm, key=lambda d: abs(int((d - e).astype(np.int64))))
            vol[rows] = atm[nearest]
    return vol


def _atm_vols(
    chain: OptionChain, iv: np.ndarray, ok: np.ndarray, spot: np.ndarray
) -> list[tuple[str, float]]:
    """Per expiry, the mean implied vol of the solved contracts at the strike nearest spot."""
    out = []
    for e in np.unique(chain.expiry):
        m = (chain.expiry == e) & ok
        if not m.any():
            continue
        dist = np.abs(chain.strike[m] - spot[m])
        near = dist == dist.min()
        out.append((str(e), float(iv[m][near].mean())))
    return out


def _plot_smile(
    chain: OptionChain,
    iv: np.ndarray,
    ok: np.ndarray,
    spot: np.ndarray,
    path: Path,
    asof: dt.date,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    expiries = [e for e in np.unique(chain.expiry) if ((chain.expiry == e) & ok).any()]
    cmap = plt.get_cmap("viridis", max(len(expiries), 2))
    # the smile is read off the out-of-the-money side (puts below spot, calls above), whose
    # quotes carry the time value; in-the-money contracts are shown faintly
    otm = np.where(chain.is_call, chain.strike >= spot, chain.strike <= spot)
    for j, e in enumerate(expiries):
        m = (chain.expiry == e) & ok
        line = m & otm
        order = np.argsort(chain.strike[line])
        ax.plot(chain.strike[line][order], iv[line][order], marker="o", ms=2.5, lw=1.0,
                color=cmap(j), label=str(e))
        ax.plot(chain.strike[m & ~otm], iv[m & ~otm], ls="none", marker="x", ms=2.5,
                color=cmap(j), alpha=0.35)
    if ok.any():
        top = float(np.nanpercentile(iv[ok & otm], 98)) if (ok & otm).any() else 1.0
        ax.set_ylim(0.0, max(top * 1.1, 0.1))
    if ok.any():
        ax.axvline(float(np.median(spot)), color="grey", lw=0.6, ls="--")
    names = ", ".join(sorted(set(chain.underlying)))
    ax.set_title(f"{names} implied volatility by expiry, as of {asof} (x: in the money)")
    ax.set_xlabel("strike")
    ax.set_ylabel("implied volatility (per year)")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
