"""Backtest report: metrics, per-symbol figures, fills CSV and an equity/drawdown PNG."""

from __future__ import annotations

import csv
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from engine.reporting.plots import plot_equity
from engine.reporting.tearsheet import DEFINITIONS, Curve, write_tearsheet
from engine.trading.replay import ReplayResult
from engine.trading.stats import buy_hold_cash

NS = 1_000_000_000
TRADING_DAYS = 252


def _iso(ts: int) -> str:
    return datetime.fromtimestamp(ts / NS, UTC).isoformat().replace("+00:00", "Z")


def max_drawdown(equity: np.ndarray) -> float:
    """Largest peak-to-trough fall as a fraction of the peak (0.25 = -25%)."""
    if equity.size == 0:
        return 0.0
    peak = np.maximum.accumulate(equity)
    return float(np.max((peak - equity) / peak))


def daily_returns(ts: np.ndarray, equity: np.ndarray, initial: float, tz: Any) -> np.ndarray:
    """Simple returns of the equity at each exchange day's last bar, the first against the
    initial capital. Daily returns on the exchange's calendar make the annualised figures
    independent of the bar length and of the hours a market trades."""
    if equity.size == 0:
        return np.zeros(0)
    days = [datetime.fromtimestamp(int(t) // NS, UTC).astimezone(tz).date() for t in ts]
    last_of_day = [i for i in range(len(days)) if i + 1 == len(days) or days[i + 1] != days[i]]
    closes = np.concatenate([[initial], equity[last_of_day]])
    return np.diff(closes) / closes[:-1]


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


#: fewer daily returns than this give no annualised ratio: Sharpe from two days of a
#: synthetic replay came out near 40, which says nothing about a year
MIN_RATIO_DAYS = 20


def sharpe_ratio(rets: np.ndarray) -> float | None:
    """Annualised Sharpe ratio of daily returns (risk-free rate 0); None under MIN_RATIO_DAYS."""
    if rets.size < MIN_RATIO_DAYS:
        return None
    sd = rets.std(ddof=1)
    return _finite(rets.mean() / sd * math.sqrt(TRADING_DAYS)) if sd > 0 else None


def sortino_ratio(rets: np.ndarray) -> float | None:
    """Annualised Sortino ratio: mean daily return over the downside deviation (target 0)."""
    if rets.size < MIN_RATIO_DAYS:
        return None
    dd = math.sqrt(float(np.mean(np.minimum(rets, 0.0) ** 2)))
    return _finite(rets.mean() / dd * math.sqrt(TRADING_DAYS)) if dd > 0 else None


def annual_volatility(rets: np.ndarray) -> float | None:
    if rets.size < MIN_RATIO_DAYS:
        return None
    return _finite(rets.std(ddof=1) * math.sqrt(TRADING_DAYS))


MIN_CAGR_DAYS = 30  # compounding a few days' return over a year means nothing


def cagr(initial: float, final: float, first_ts: int, last_ts: int) -> float | None:
    """Compound annual growth rate over the calendar span of the data (None under 30 days)."""
    days = (last_ts - first_ts) / (86_400 * NS)
    if days < MIN_CAGR_DAYS or initial <= 0:
        return None
    if final <= 0:
        return -1.0
    return _finite((final / initial) ** (365.25 / days) - 1.0)


def traded_notional(fills: list[Any], multipliers: dict[str, float]) -> float:
    """Sum of quantity x price x multiplier over the fills (both sides): a contract's
    notional counts its multiplier ([instruments.SYM] multiplier; 1 for shares), so 2 gold
    futures of 100 oz at 2,000 trade 400,000, not 4,000."""
    return float(sum(f.quantity * f.price * multipliers.get(f.symbol, 1.0) for f in fills))


def round_trips(fills: list[Any], multipliers: dict[str, float] | None = None
                ) -> list[dict[str, Any]]:
    """Round trips per symbol from the fills: a position opened from flat until flat again.

    Entry and exit prices are quantity-weighted averages; P&L is after every commission of
    the trip and counts the contract multiplier (`multipliers`, 1 for shares), as the
    account's equity does; holding time runs from the first entry fill to the closing fill.
    """
    mult = multipliers or {}
    open_trips: dict[str, dict[str, Any]] = {}
    pos: dict[str, float] = {}
    trips: list[dict[str, Any]] = []
    for f in fills:
        q0 = pos.get(f.symbol, 0.0)
        remaining = f.quantity
        while remaining > 1e-12:
            t = open_trips.get(f.symbol)
            if t is None:  # opens a trip
                t = open_trips[f.symbol] = {
                    "symbol": f.symbol, "side": "long" if f.side > 0 else "short",
                    "entry_ts": f.ts, "qty_in": 0.0, "cost_in": 0.0, "qty_out": 0.0,
                    "cost_out": 0.0, "commission": 0.0, "sign": f.side}
            if f.side == t["sign"]:  # adds
                q = remaining
                t["qty_in"] += q
                t["cost_in"] += q * f.price
            else:  # reduces (a fill larger than the position closes it and opens another)
                q = min(remaining, abs(q0))
                t["qty_out"] += q
                t["cost_out"] += q * f.price
            t["commission"] += f.commission * q / f.quantity
            q0 += f.side * q
            remaining -= q
            if abs(q0) < 1e-9 and t["qty_out"] > 0:
                q0 = 0.0
                del open_trips[f.symbol]
                qty = t["qty_in"]
                entry, exit_ = t["cost_in"] / qty, t["cost_out"] / t["qty_out"]
                m = mult.get(f.symbol, 1.0)
                pnl = m * t["sign"] * (t["cost_out"] - t["cost_in"]) - t["commission"]
                trips.append({
                    "symbol": f.symbol, "side": t["side"], "quantity": qty,
                    "entry_time": _iso(t["entry_ts"]), "entry_price": entry,
                    "exit_time": _iso(f.ts), "exit_price": exit_,
                    "pnl": pnl, "return": pnl / (m * t["cost_in"]),
                    "holding_seconds": (f.ts - t["entry_ts"]) / NS,
                    "commission": t["commission"],
                })
        pos[f.symbol] = q0
    return trips


def trade_stats(trips: list[dict[str, Any]]) -> dict[str, Any]:
    pnl = np.asarray([t["pnl"] for t in trips], np.float64)
    wins, losses = pnl[pnl > 0], pnl[pnl < 0]
    return {
        "round_trips": int(pnl.size),
        "win_rate": float(wins.size / pnl.size) if pnl.size else None,
        "profit_factor": (float(wins.sum() / -losses.sum()) if losses.size
                          else None),
        "average_win": float(wins.mean()) if wins.size else None,
        "average_loss": float(losses.mean()) if losses.size else None,
        "average_holding_seconds": (float(np.mean([t["holding_seconds"] for t in trips]))
                                    if trips else None),
    }


def vs_buy_hold(result: ReplayResult, trials: int = 1) -> dict[str, Any] | None:
    """The strategy's daily returns against buy-and-hold's (the equity curve's two lines,
    each day's last point, the first day against the initial capital), through the shared
    `strategies.relative_stats`: excess return, beta, alpha, correlation, information
    ratio, the seeded bootstrap interval of the mean daily excess and the deflated Sharpe
    ratio for `trials` rules tried. None without an equity curve."""
    from strategies.relative_stats import relative_stats

    eng = result.engine
    if not eng.equity_curve:
        return None
    initial = eng.broker.initial_capital()
    ts = np.asarray([p.ts for p in eng.equity_curve], np.int64)
    strategy = daily_returns(ts, np.asarray([p.equity for p in eng.equity_curve]), initial,
                             eng.tz)
    bench = daily_returns(ts, np.asarray([p.buy_hold for p in eng.equity_curve]), initial,
                          eng.tz)
    return relative_stats(strategy, bench, trials=max(1, int(trials))).as_dict()


def _per_symbol(result: ReplayResult) -> tuple[dict[str, Any], float]:
    """Each symbol's figures, and buy-and-hold's final equity over all symbols (bought at
    each symbol's first price, sold at its last, paying the broker's costs both ways)."""
    eng = result.engine
    broker = eng.broker
    firsts, lasts = eng.first_prices(), eng.last_prices()
    per_symbol: dict[str, Any] = {}
    bh_total = broker.unallocated
    for i, sym in enumerate(eng.symbols):
        acct = broker.accounts[i]
        f, last = firsts[i], lasts[i]
        traded = f == f and last == last
        # the symbol's part of the capital (one account: its share at the start, its
        # equity the part plus its P&L; a symbol seen later has none, so no ROI)
        part = broker.sleeves[i]
        bh = (buy_hold_cash(f, last, part, broker.commission, broker.slippage_bps)
              if traded else part)
        bh_total += bh
        per_symbol[sym] = {
            "final_equity": acct.equity(),
            "roi": acct.equity() / part - 1.0 if part else None,
            "roi_buy_hold": bh / part - 1.0 if part else None,
            "trades": acct.trades,
            "commission": acct.commission_paid,
            "position": acct.position,
            "first_price": f if traded else None,
            "last_price": last if traded else None,
        }
    return per_symbol, bh_total


def build_report(result: ReplayResult, strategy_name: str, trials: int = 1) -> dict[str, Any]:
    """The replay's report; `trials`: rules tried to find the strategy (an evolved file's
    `rules_tried`), which deflates its Sharpe ratio in `vs_buy_hold`."""
    eng = result.engine
    broker = eng.broker
    curve = np.asarray([p.equity for p in eng.equity_curve], np.float64)
    initial = broker.initial_capital()
    final = broker.equity()
    per_symbol, bh_total = _per_symbol(result)
    bar_data = eng.clock.group_ts >= 0
    ts = np.asarray([p.ts for p in eng.equity_curve], np.int64)
    rets = daily_returns(ts, curve, initial, eng.tz)
    gross = np.asarray([p.gross for p in eng.equity_curve], np.float64)
    mdd = max_drawdown(curve)
    growth = cagr(initial, final, int(ts[0]), int(ts[-1])) if ts.size else None
    trips = round_trips(broker.fills, broker.multipliers)
    notional = traded_notional(broker.fills, broker.multipliers)
    ticks = eng.stats.market_data + (eng.stats.bars if bar_data else 0)
    report: dict[str, Any] = {
        "strategy": strategy_name,
        "source": result.source_name,
        "transport": result.transport,
        "fill": eng.fill_model,
        "ticks": ticks,
        # round trips (trades.csv's rows); the market data's trade messages are
        # `market_trades` (issue 25: `trades` used to count those)
        "trades": len(trips),
        "market_trades": eng.stats.trades,
        "quotes": eng.stats.quotes,
        # quantity x half the spread over fills that crossed a quote (engine/trading/broker.py)
        "spread_paid": broker.spread_paid,
        # the one account (engine/trading/broker.py): capital set once, its sizing model, and what
        # accrued on its cash and its shorts
        "capital": broker.initial_capital(),
        "sizing": broker.sizing,
        "interest_paid": broker.interest_paid,
        "borrow_fees": broker.borrow_fees,
        "bars": eng.stats.bars,
        "bar_events": eng.stats.bar_events,
        "overlapped_bar_events": eng.stats.overlapped_bar_events,
        "orders": eng.stats.orders,
        "fills": eng.stats.fills,
        "wall_seconds": result.wall_seconds,
        "ticks_per_second": ticks / result.wall_seconds if result.wall_seconds > 0 else 0.0,
        "initial_equity": initial,
        "final_equity": final,
        "roi": final / initial - 1.0 if initial > 0 else 0.0,
        "roi_buy_hold": bh_total / initial - 1.0 if initial > 0 else 0.0,
        "sharpe": sharpe_ratio(rets),
        "sortino": sortino_ratio(rets),
        "annual_volatility": annual_volatility(rets),
        "cagr": growth,
        "calmar": (growth / mdd if growth is not None and mdd > 0 else None),
        "max_drawdown": mdd,
        "trading_days": int(rets.size),
        #: mean over bars of gross exposure / equity; the share of bars holding anything
        "exposure": float(np.mean(gross / curve)) if curve.size else 0.0,
        "time_in_market": float(np.mean(gross > 0)) if curve.size else 0.0,
        #: traded notional over mean equity (2.0 = the account's size bought and sold once)
        "turnover": float(notional / np.mean(curve)) if curve.size else 0.0,
        #: one-way (half the two-way notional) over mean equity, per 252 trading days
        "turnover_annual_one_way": (
            float(notional / 2 / np.mean(curve) * TRADING_DAYS / rets.size)
            if curve.size and rets.size else 0.0),
        **trade_stats(trips),
        "orders_refused": dict(broker.refused),
        "first_time": _iso(eng.equity_curve[0].ts) if eng.equity_curve else None,
        "last_time": _iso(eng.equity_curve[-1].ts) if eng.equity_curve else None,
        "skipped": result.skipped,
        "source_skipped": result.source_skipped,
        "messages_received": result.received,
        "per_symbol": per_symbol,
        "vs_buy_hold": vs_buy_hold(result, trials),
        "timezone": str(eng.tz),
        "definitions": dict(DEFINITIONS),
    }
    if eng.option_book is not None:
        report["options"] = eng.option_book.summary()
        report["options"]["values_published"] = eng.stats.option_values
    return report


TIMING_KEYS = ("wall_seconds", "ticks_per_second")


def write_outputs(report: dict[str, Any], result: ReplayResult, out_dir: Path,
                  plots: bool = True) -> dict[str, str]:
    """report.json, fills.csv, trades.csv, equity.csv, equity.png and the tearsheet
    report.html (engine/reporting/tearsheet.py) in `out_dir`; `plots=False` (replay
    --no-plots): not the last two, drawn with matplotlib (0.7 of a one-day replay's 1.4 s)."""
    import json

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "report": str(out_dir / "report.json"),
        "fills": str(out_dir / "fills.csv"),
        "plot": str(out_dir / "equity.png"),
        "trades": str(out_dir / "trades.csv"),
        "equity": str(out_dir / "equity.csv"),
        "tearsheet": str(out_dir / "report.html"),
    }
    if not plots:
        del paths["plot"], paths["tearsheet"]
    Path(paths["report"]).write_text(json.dumps(report, indent=2, sort_keys=True))
    with open(paths["fills"], "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["time", "ts", "symbol", "order_id", "side", "quantity", "price", "commission"])
        for f in result.engine.broker.fills:
            w.writerow([_iso(f.ts), f.ts, f.symbol, f.order_id, "buy" if f.side > 0 else "sell",
                        f.quantity, repr(f.price), f.commission])
    trips = round_trips(result.engine.broker.fills, result.engine.broker.multipliers)
    cols = ["symbol", "side", "quantity", "entry_time", "entry_price", "exit_time",
            "exit_price", "pnl", "return", "holding_seconds", "commission"]
    with open(paths["trades"], "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for t in trips:
            w.writerow([repr(v) if isinstance(v, float) else v for v in (t[c] for c in cols)])
    with open(paths["equity"], "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["time", "ts", "equity", "gross_exposure", "buy_hold_equity"])
        for p in result.engine.equity_curve:
            w.writerow([_iso(p.ts), p.ts, repr(p.equity), repr(p.gross), repr(p.buy_hold)])
    if plots:
        plot_equity(result, Path(paths["plot"]), str(report.get("strategy", "")))
        write_tearsheet(Path(paths["tearsheet"]), report, equity_curve(result), trips)
    return paths


def equity_curve(result: ReplayResult) -> Curve:
    """The run's equity curve for the tearsheet (the points equity.csv holds)."""
    eng = result.engine
    pts = eng.equity_curve
    return Curve(ts=np.asarray([p.ts for p in pts], np.int64),
                 equity=np.asarray([p.equity for p in pts], np.float64),
                 buy_hold=np.asarray([p.buy_hold for p in pts], np.float64),
                 initial=eng.broker.initial_capital(), tz=eng.tz)


