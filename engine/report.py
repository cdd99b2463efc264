"""Backtest report: metrics, per-symbol figures, fills CSV and an equity/drawdown PNG."""

from __future__ import annotations

import csv
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from engine.broker import buy_and_hold_cash
from engine.replay import ReplayResult

NS = 1_000_000_000
TRADING_DAYS = 252
SESSION_SECONDS = 6.5 * 3600


def _iso(ts: int) -> str:
    return datetime.fromtimestamp(ts / NS, UTC).isoformat().replace("+00:00", "Z")


def max_drawdown(equity: np.ndarray) -> float:
    """Largest peak-to-trough fall as a fraction of the peak (0.25 = -25%)."""
    if equity.size == 0:
        return 0.0
    peak = np.maximum.accumulate(equity)
    return float(np.max((peak - equity) / peak))


def sharpe_ratio(equity: np.ndarray, periods_per_year: float) -> float:
    """Annualised Sharpe ratio of per-period simple returns (risk-free rate 0)."""
    if equity.size < 3:
        return 0.0
    rets = np.diff(equity) / equity[:-1]
    sd = rets.std(ddof=1)
    if not sd > 0:
        return 0.0
    return float(rets.mean() / sd * math.sqrt(periods_per_year))


def periods_per_year(bar_seconds: float, bar_data: bool) -> float:
    if bar_data:
        return float(TRADING_DAYS)
    return TRADING_DAYS * max(1.0, SESSION_SECONDS / bar_seconds)


def build_report(result: ReplayResult, strategy_name: str) -> dict[str, Any]:
    eng = result.engine
    broker = eng.broker
    curve = np.asarray([p.equity for p in eng.equity_curve], np.float64)
    initial = broker.initial_capital()
    final = broker.equity()
    firsts, lasts = eng.first_prices(), eng.last_prices()
    per_symbol: dict[str, Any] = {}
    bh_total = 0.0
    for i, sym in enumerate(eng.symbols):
        acct = broker.accounts[i]
        f, last = firsts[i], lasts[i]
        traded = f == f and last == last
        bh = (buy_and_hold_cash(f, last, broker.cash_per_symbol, broker.commission)
              if traded else broker.cash_per_symbol)
        bh_total += bh
        per_symbol[sym] = {
            "final_equity": acct.equity(),
            "roi": acct.equity() / broker.cash_per_symbol - 1.0,
            "roi_buy_hold": bh / broker.cash_per_symbol - 1.0,
            "trades": acct.trades,
            "commission": acct.commission_paid,
            "position": acct.position,
            "first_price": f if traded else None,
            "last_price": last if traded else None,
        }
    bar_data = eng._bar_group_ts >= 0
    ppy = periods_per_year(eng.config.bar_seconds, bar_data)
    ticks = eng.stats.ticks + eng.stats.quotes + (eng.stats.bars if bar_data else 0)
    report: dict[str, Any] = {
        "strategy": strategy_name,
        "source": result.source_name,
        "transport": result.transport,
        "fill": eng.fill_model,
        "ticks": ticks,
        "trades": eng.stats.ticks,
        "quotes": eng.stats.quotes,
        "bars": eng.stats.bars,
        "bar_events": eng.stats.bar_events,
        "orders": eng.stats.orders,
        "fills": eng.stats.fills,
        "wall_seconds": result.wall_seconds,
        "ticks_per_second": ticks / result.wall_seconds if result.wall_seconds > 0 else 0.0,
        "initial_equity": initial,
        "final_equity": final,
        "roi": final / initial - 1.0 if initial > 0 else 0.0,
        "roi_buy_hold": bh_total / initial - 1.0 if initial > 0 else 0.0,
        "sharpe": sharpe_ratio(curve, ppy),
        "max_drawdown": max_drawdown(curve),
        "first_time": _iso(eng.equity_curve[0].ts) if eng.equity_curve else None,
        "last_time": _iso(eng.equity_curve[-1].ts) if eng.equity_curve else None,
        "skipped": result.skipped,
        "source_skipped": result.source_skipped,
        "messages_received": result.received,
        "per_symbol": per_symbol,
    }
    if eng.option_book is not None:
        report["options"] = eng.option_book.summary()
        report["options"]["values_published"] = eng.stats.option_values
    return report


TIMING_KEYS = ("wall_seconds", "ticks_per_second")


def write_outputs(report: dict[str, Any], result: ReplayResult, out_dir: Path) -> dict[str, str]:
    """report.json, fills.csv and equity.png in `out_dir`; returns their paths."""
    import json

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "report": str(out_dir / "report.json"),
        "fills": str(out_dir / "fills.csv"),
        "plot": str(out_dir / "equity.png"),
    }
    Path(paths["report"]).write_text(json.dumps(report, indent=2, sort_keys=True))
    with open(paths["fills"], "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["time", "ts", "symbol", "order_id", "side", "quantity", "price", "commission"])
        for f in result.engine.broker.fills:
            w.writerow([_iso(f.ts), f.ts, f.symbol, f.order_id, "buy" if f.side > 0 else "sell",
                        f.quantity, repr(f.price), f.commission])
    plot_equity(result, Path(paths["plot"]), str(report.get("strategy", "")))
    return paths


def plot_equity(result: ReplayResult, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = result.engine.equity_curve
    ts = np.asarray([p.ts for p in curve], dtype="datetime64[ns]")
    eq = np.asarray([p.equity for p in curve], np.float64)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True,
                                   gridspec_kw={"height_ratios": [3, 1]})
    if eq.size:
        ax1.plot(ts, eq, lw=1.0, color="tab:blue")
        peak = np.maximum.accumulate(eq)
        ax2.fill_between(ts, -(peak - eq) / peak * 100.0, 0.0, color="tab:red", alpha=0.5)
    ax1.set_ylabel("equity ($)")
    ax1.set_title(f"Replay: {title}")
    ax1.grid(alpha=0.3)
    ax2.set_ylabel("drawdown (%)")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
