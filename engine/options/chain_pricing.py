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
from gpu.options.engines import AnalyticEuropeanEngine, FdPricingEngine
from gpu.options.implied_vol import IVStatus, quote_mids, solve_implied_vols
from gpu.options.instruments import MarketInputs, OptionContracts


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
    dividend_yield: np.ndarray  # continuous dividend yield per contract
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

    def report(self, source: str, engine: FdPricingEngine) -> dict[str, Any]:
        """The JSON-able result: settings, counts, checks, implied-vol outcome, contracts."""
        result: dict[str, Any] = {
            "source": source, "device": engine.device, "grid": engine.grid._asdict(),
            "asof": self.asof.isoformat(), "rate": self.rate,
            "dividend_yield": _yield_summary(self.dividend_yield),
            "vol_source": self.vol_source,
            "count": len(self.chain), "priced": int(self.priced.sum()),
            "expired": int(self.checks["expired"]), "price_seconds": self.price_seconds,
        }
        if "analytic_max_rel_error" in self.checks:
            result["analytic_max_rel_error"] = self.checks["analytic_max_rel_error"]
        if self.solved_iv:
            result.update({"iv_solved": int(self.iv_ok.sum()),
                           "iv_rejected": self.iv_rejected(),
                           "iv_iterations": self.iterations, "iv_seconds": self.iv_seconds})
            if "iv_roundtrip_max_abs_error" in self.checks:
                result["iv_roundtrip_max_abs_error"] = self.checks["iv_roundtrip_max_abs_error"]
        result["options"] = self.options()
        result["rows_skipped"] = dict(self.chain.skipped)
        return result

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
                "dividend_yield": float(self.dividend_yield[i]),
                "vol": _clean(self.vol[i]), "price": _clean(self.price[i]),
                "delta": _clean(self.delta[i]), "gamma": _clean(self.gamma[i]),
                "bid": _clean(c.bid[i]), "ask": _clean(c.ask[i]),
            }
            if self.solved_iv:
                rec.update({"mid": _clean(self.mid[i]), "iv": _clean(self.iv[i]),
                            "iv_status": IVStatus(int(self.status[i])).reason})
            out.append(rec)
        return out


def _yield_summary(q: np.ndarray) -> float | list[float]:
    """The chain's dividend yield for the report: one number if all agree, else the range."""
    if q.size == 0 or np.all(q == q[0]):
        return float(q[0]) if q.size else 0.0
    return [float(q.min()), float(q.max())]


def value_chain(
    chain: OptionChain,
    asof: dt.date,
    spot: np.ndarray,
    american: np.ndarray,
    rate: float,
    engine: FdPricingEngine,
    *,
    dividend_yield: np.ndarray | float = 0.0,
    vol: float | None = None,
    solve_iv: bool = False,
    generated: bool = False,
    progress: Callable[[str], None] = lambda _msg: None,
) -> ChainValuation:
    """Solve implied vols (with `solve_iv`), choose each contract's vol, and price (with a
    continuous `dividend_yield`, one or one per contract)."""
    years = chain.years_to_expiry(asof)
    contracts = OptionContracts.of(chain.strike, years, chain.is_call, american)
    q = np.broadcast_to(np.asarray(dividend_yield, dtype=np.float64), (len(chain),)).copy()
    market = MarketInputs(spot, 0.2, rate, q)  # the vol is chosen per contract below
    ivs = _solve_ivs(chain, contracts, market, engine, vol, generated, progress) \
        if solve_iv else _IVSolution.none(len(chain))
    vols, vol_source = _choose_vols(chain, ivs, spot, vol, solve_iv, generated)
    # a contract that expired before the valuation date has nothing left to price: it would
    # come back as its intrinsic value and pass for a priced option; it is left unpriced and
    # counted instead (one expiring on the valuation date is worth its intrinsic value)
    expired = ~(years >= 0)
    if expired.all():
        raise UserError(f"every contract has expired on {asof} (give --asof before the "
                        f"expiries)")
    vols = np.where(expired, np.nan, vols)
    t0 = time.perf_counter()
    price, delta, gamma = _price_at(contracts, market.with_vol(vols), engine, progress)
    val = ChainValuation(
        chain=chain, asof=asof, rate=rate, dividend_yield=q, spot=spot, years=years,
        american=american,
        vol=vols, vol_source=vol_source, price=price, delta=delta, gamma=gamma,
        price_seconds=time.perf_counter() - t0, solved_iv=solve_iv, mid=ivs.mid, iv=ivs.iv,
        status=ivs.status, iterations=ivs.iterations, iv_seconds=ivs.seconds,
    )
    val.checks["expired"] = float(expired.sum())
    if generated:
        _check_generated(val, contracts, market)
    return val


@dataclass
class _IVSolution:
    """Implied vols of a chain: quote mids, vols, IVStatus codes, repricings and time."""

    mid: np.ndarray
    iv: np.ndarray
    status: np.ndarray
    iterations: int = 0
    seconds: float = 0.0

    @classmethod
    def none(cls, n: int) -> _IVSolution:
        return cls(np.full(n, np.nan), np.full(n, np.nan),
                   np.full(n, IVStatus.PENDING, dtype=np.int8))


def _solve_ivs(chain: OptionChain, contracts: OptionContracts, market: MarketInputs,
               engine: FdPricingEngine, vol: float | None, generated: bool,
               progress: Callable[[str], None]) -> _IVSolution:
    """Implied vols from the quotes' mids, or for a generated group (no quotes) from its
    own model prices at `vol` (so the round trip can be checked)."""
    t0 = time.perf_counter()
    if generated:
        mid = engine.price(contracts, market.with_vol(vol or 0.25)).price
        status = np.full(len(chain), IVStatus.PENDING, dtype=np.int8)
    else:
        mid, status = quote_mids(chain.bid, chain.ask)
    quoted = int((status == 0).sum() + (status == 1).sum())
    progress(f"price: solving implied vols of {quoted} quotes on {engine.device} "
             f"({engine.grid.name} grid)")
    res = solve_implied_vols(engine, contracts, market, mid, status=status,
                             progress=lambda it, left: progress(
                                 f"  iteration {it}: {left} unconverged"))
    return _IVSolution(mid, res.iv, res.status, res.iterations, time.perf_counter() - t0)


def _choose_vols(chain: OptionChain, ivs: _IVSolution, spot: np.ndarray, vol: float | None,
                 solve_iv: bool, generated: bool) -> tuple[np.ndarray, str]:
    """Each contract's vol to price at (NaN: unpriced) and where the vols came from."""
    n = len(chain)
    if vol is not None:
        return np.full(n, vol), "--vol"
    if np.isfinite(chain.iv).any() and not generated:
        # rows without either: unpriced
        return (np.where(np.isfinite(chain.iv), chain.iv, ivs.iv),
                "iv column" + (" then implied vol" if solve_iv else ""))
    if solve_iv:
        return (fill_from_smile(chain, ivs.iv, ivs.status == IVStatus.OK, spot),
                "implied vol (unsolved: the expiry's smile)")
    if generated:
        return np.full(n, 0.25), "default 0.25"
    raise UserError("no volatility to price at: give --vol, --iv, or an iv column")


def _price_at(contracts: OptionContracts, market: MarketInputs, engine: FdPricingEngine,
              progress: Callable[[str], None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Price, delta, gamma of the contracts whose vol is positive (NaN elsewhere)."""
    n = len(contracts)
    vols = np.asarray(market.vol)
    priced = np.isfinite(vols) & (vols > 0)
    price, delta, gamma = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    if priced.any():
        progress(f"price: pricing {int(priced.sum())} options on {engine.device} "
                 f"({engine.grid.name} grid)")
        values = engine.price(contracts.select(priced), market.select(priced, n))
        price[priced], delta[priced], gamma[priced] = values.price, values.delta, values.gamma
    return price, delta, gamma


def _check_generated(val: ChainValuation, contracts: OptionContracts,
                     market: MarketInputs) -> None:
    """A generated group's checks: European prices against the analytic formula, and the
    implied vols against the vols priced at."""
    euro = ~val.american & val.priced
    if euro.any():
        at_vol = market.with_vol(val.vol).select(euro, len(contracts))
        ref = AnalyticEuropeanEngine().price(contracts.select(euro), at_vol).price
        val.checks["analytic_max_rel_error"] = float(
            (np.abs(val.price[euro] - ref) / ref).max())
    ok = val.iv_ok
    if val.solved_iv and ok.any():
        val.checks["iv_roundtrip_max_abs_error"] = float(np.abs(val.iv[ok] - val.vol[ok]).max())
