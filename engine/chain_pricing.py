"""Valuing an option chain: implied vols from quote mids, prices and greeks at chosen vols.

The library behind the `price` command (engine/commands/price.py parses and prints). The
volatility to price each contract at is the caller's `vol` if given, else the chain's `iv`
column, else (with `solve_iv`) the implied vol solved from its bid/ask mid, with unsolved
contracts taking their expiry's smile. Generated groups (no quotes) solve back from their
own model prices and are checked against the analytic price where European.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.errors import UserError
from feeds.option_chain import OptionChain
from gpu import options_core as core
from gpu.implied_vol import IVStatus, implied_vols, quote_mids
from gpu.options import FdGrid, black_scholes, option_params, price_params


def _clean(x: float) -> float | None:
    return None if not math.isfinite(x) else float(x)


def generated_chain(n: int, spot: float, vol: float) -> tuple[OptionChain, np.ndarray]:
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


def fill_from_smile(
    chain: OptionChain, iv: np.ndarray, ok: np.ndarray, spot: np.ndarray
) -> np.ndarray:
    """Solved implied vols, and for unsolved contracts the smile of their expiry at their
    strike (linear in strike through the out-of-the-money solved quotes, flat beyond), or
    the nearest expiry's at-the-money vol where an expiry has no solved quote at all."""
    vol = np.where(ok, iv, np.nan)
    otm = np.where(chain.is_call, chain.strike >= spot, chain.strike <= spot)
    expiries = np.unique(chain.expiry)
    atm = {e: v for e, v in ((np.datetime64(e), v) for e, v in atm_vols(chain, iv, ok, spot))}
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


def atm_vols(
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


@dataclass
class ChainValuation:
    """Every contract of a chain valued at one date: inputs, implied vols and results."""

    chain: OptionChain
    asof: dt.date
    rate: float
    spot: np.ndarray          # underlying price per contract
    years: np.ndarray         # time to expiry in years (calendar days / 365)
    american: np.ndarray      # bool per contract
    vol: np.ndarray           # volatility priced at (NaN: not priced)
    vol_source: str
    price: np.ndarray
    delta: np.ndarray
    gamma: np.ndarray
    price_seconds: float
    solved_iv: bool = False
    mid: np.ndarray = field(default_factory=lambda: np.empty(0))
    iv: np.ndarray = field(default_factory=lambda: np.empty(0))
    status: np.ndarray = field(default_factory=lambda: np.empty(0, np.int8))
    iterations: int = 0
    iv_seconds: float = 0.0
    checks: dict[str, float] = field(default_factory=dict)

    @property
    def priced(self) -> np.ndarray:
        return np.isfinite(self.vol) & (self.vol > 0)

    @property
    def iv_ok(self) -> np.ndarray:
        return self.status == IVStatus.OK

    def iv_rejected(self) -> dict[str, int]:
        """Contracts whose implied vol was not solved, by reason."""
        ok = self.iv_ok
        return {IVStatus(int(code)).reason: int((self.status == code).sum())
                for code in np.unique(self.status[~ok])}

    def options(self) -> list[dict[str, Any]]:
        """One JSON-able record per contract."""
        c = self.chain
        out = []
        for i in range(len(c)):
            rec: dict[str, Any] = {
                "symbol": c.symbol[i], "underlying": c.underlying[i],
                "expiry": str(c.expiry[i]), "strike": float(c.strike[i]), "right": c.right[i],
                "style": "american" if self.american[i] else "european",
                "years": float(self.years[i]), "spot": float(self.spot[i]),
                "vol": _clean(self.vol[i]), "price": _clean(self.price[i]),
                "delta": _clean(self.delta[i]), "gamma": _clean(self.gamma[i]),
                "bid": _clean(c.bid[i]), "ask": _clean(c.ask[i]),
            }
            if self.solved_iv:
                rec.update({"mid": _clean(self.mid[i]), "iv": _clean(self.iv[i]),
                            "iv_status": IVStatus(int(self.status[i])).reason})
            out.append(rec)
        return out


def value_chain(
    chain: OptionChain,
    asof: dt.date,
    spot: np.ndarray,
    american: np.ndarray,
    rate: float,
    grid: FdGrid,
    device: str,
    *,
    vol: float | None = None,
    solve_iv: bool = False,
    generated: bool = False,
    progress: Callable[[str], None] = lambda _msg: None,
) -> ChainValuation:
    """Solve implied vols (with `solve_iv`), choose each contract's vol, and price."""
    n = len(chain)
    years = chain.years_to_expiry(asof)
    base = option_params(spot, chain.strike, years, 0.2, rate, chain.is_call, american)

    iv = np.full(n, np.nan)
    mid = np.full(n, np.nan)
    status = np.full(n, IVStatus.PENDING, dtype=np.int8)
    iv_seconds = 0.0
    iterations = 0
    if solve_iv:
        t0 = time.perf_counter()
        if generated:  # no quotes: solve back from the group's own model prices
            p = base.copy()
            p[:, core.VOL] = vol or 0.25
            mid = price_params(p, grid, device).price
        else:
            mid, status = quote_mids(chain.bid, chain.ask)
        progress(f"price: solving implied vols of {int((status == 0).sum() + (status == 1).sum())}"
                 f" quotes on {device} ({grid.name} grid)")
        res = implied_vols(mid, base, grid=grid, device=device, status=status,
                           progress=lambda it, left: progress(
                               f"  iteration {it}: {left} unconverged"))
        iv, status, iterations = res.iv, res.status, res.iterations
        iv_seconds = time.perf_counter() - t0

    if vol is not None:
        vols = np.full(n, vol)
        vol_source = "--vol"
    elif np.isfinite(chain.iv).any() and not generated:
        vols = np.where(np.isfinite(chain.iv), chain.iv, iv)  # rows without either: unpriced
        vol_source = "iv column" + (" then implied vol" if solve_iv else "")
    elif solve_iv:
        vols = fill_from_smile(chain, iv, status == IVStatus.OK, spot)
        vol_source = "implied vol (unsolved: the expiry's smile)"
    elif generated:
        vols = np.full(n, 0.25)
        vol_source = "default 0.25"
    else:
        raise UserError("no volatility to price at: give --vol, --iv, or an iv column")
    # a contract that expired before the valuation date has nothing left to price: it would
    # come back as its intrinsic value and pass for a priced option; it is left unpriced and
    # counted instead (one expiring on the valuation date is worth its intrinsic value)
    expired = ~(years >= 0)
    if expired.all():
        raise UserError(f"every contract has expired on {asof} (give --asof before the "
                        f"expiries)")
    vols = np.where(expired, np.nan, vols)
    priced = np.isfinite(vols) & (vols > 0)
    price, delta, gamma = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    t0 = time.perf_counter()
    if priced.any():
        p = base[priced].copy()
        p[:, core.VOL] = vols[priced]
        progress(f"price: pricing {int(priced.sum())} options on {device} ({grid.name} grid)")
        values = price_params(p, grid, device)
        price[priced], delta[priced], gamma[priced] = values.price, values.delta, values.gamma
    val = ChainValuation(
        chain=chain, asof=asof, rate=rate, spot=spot, years=years, american=american,
        vol=vols, vol_source=vol_source, price=price, delta=delta, gamma=gamma,
        price_seconds=time.perf_counter() - t0, solved_iv=solve_iv, mid=mid, iv=iv,
        status=status, iterations=iterations, iv_seconds=iv_seconds,
    )
    val.checks["expired"] = float(expired.sum())
    if generated:
        euro = ~american & priced
        if euro.any():
            ref = black_scholes(spot[euro], chain.strike[euro], years[euro], vols[euro], rate,
                                chain.is_call[euro]).price
            val.checks["analytic_max_rel_error"] = float((np.abs(price[euro] - ref) / ref).max())
        ok = val.iv_ok
        if solve_iv and ok.any():
            val.checks["iv_roundtrip_max_abs_error"] = float(np.abs(iv[ok] - vols[ok]).max())
    return val
