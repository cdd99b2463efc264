"""The tearsheet: `report.html` beside `report.json`, one self-contained file.

Its figures are the report's own: every number shown comes from report.json's dict or from
the same equity curve (`equity.csv`) by the definitions stated in the page, so a reader can
recompute each one. Each shown number carries its full-precision value in a `data-value`
attribute (tests parse them). Images are PNGs inlined as base64 and the page links nothing,
so it opens offline and can be mailed as one file.

Built with matplotlib (already a dependency for equity.png) and a small HTML template
written here; quantstats would add pandas, seaborn, scipy and its own definitions of
Sharpe and drawdown to the base install, and its figures would not be the report's.

Sections: headline statistics, equity against buy-and-hold (the report's benchmark),
underwater drawdown and the five worst drawdown periods, monthly returns, rolling Sharpe
ratio and volatility, the distribution of daily returns, the statistics against buy-and-
hold (`vs_buy_hold`), the round trips, the run's settings, and the definitions.
"""

from __future__ import annotations

import base64
import html
import io
import math
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any

import numpy as np

from engine.reporting.plots import pyplot

NS = 1_000_000_000
TRADING_DAYS = 252
#: rolling Sharpe and volatility over about a quarter of trading days
ROLLING_DAYS = 63
WORST_DRAWDOWNS = 5
MAX_TRADE_ROWS = 500

DEFINITIONS = {
    "annualisation": "Sharpe, Sortino and volatility come from daily returns (the equity at "
                     "each exchange day's last bar, the first day against the initial "
                     "capital), annualised with 252 trading days and a zero risk-free rate; "
                     "none under 20 daily returns. CAGR compounds over the calendar span "
                     "(365.25 days a year; none under 30 days).",
    "drawdown": "Drawdown is measured on every point of the equity curve (each bar event, "
                "not only daily closes): the fall from the running peak as a fraction of "
                "the peak. A drawdown period runs from its peak to the first point back at "
                "or above it (its recovery; none if the run ends below it); its trough is "
                "its lowest point; its length counts calendar days and bars from peak to "
                "recovery (or to the end).",
    "turnover": "turnover_annual_one_way: the traded notional over both sides divided by "
                "two (one-way), over the mean equity, per 252 trading days. `turnover` is "
                "the whole run's two-way notional over the mean equity (2.0 = the "
                "account's size bought and sold once).",
    "trades": "`trades` and `round_trips` count round trips (a position opened from flat "
              "until flat again; trades.csv's rows); `market_trades` counts the market "
              "data's trade messages.",
    "benchmark": "Buy-and-hold buys every symbol all-in at its first price with the "
                 "strategy's commission and slippage and sells at the end with them.",
    "monthly returns": "Each month's return is its last daily-close equity over the "
                       "previous month's (the first month against the initial capital).",
}


@dataclass(frozen=True)
class Curve:
    """The equity curve of a run: UTC ns times, equity and buy-and-hold's equity ($)."""

    ts: np.ndarray
    equity: np.ndarray
    buy_hold: np.ndarray
    initial: float
    tz: tzinfo


# ---------------------------------------------------------------- analytics


def daily_closes(curve: Curve) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(exchange dates, equity, buy-and-hold) at each exchange day's last point."""
    days = [datetime.fromtimestamp(int(t) // NS, UTC).astimezone(curve.tz).date().isoformat()
            for t in curve.ts]
    last = [i for i in range(len(days)) if i + 1 == len(days) or days[i + 1] != days[i]]
    return [days[i] for i in last], curve.equity[last], curve.buy_hold[last]


def daily_returns(closes: np.ndarray, initial: float) -> np.ndarray:
    full = np.concatenate([[initial], closes])
    return np.diff(full) / full[:-1]


def drawdown_periods(ts: np.ndarray, equity: np.ndarray, worst: int = WORST_DRAWDOWNS
                     ) -> list[dict[str, Any]]:
    """The `worst` deepest drawdown periods of the curve (module DEFINITIONS), deepest
    first: start (the peak), trough, recovery (None if never), depth (a negative
    fraction), days and bars from peak to recovery or to the end."""
    periods: list[dict[str, Any]] = []
    peak_i, trough_i = 0, 0
    in_dd = False
    for i in range(1, len(equity)):
        if equity[i] >= equity[peak_i]:
            if in_dd:
                periods.append(_period(ts, equity, peak_i, trough_i, i))
                in_dd = False
            peak_i = trough_i = i
        else:
            in_dd = True
            if equity[i] < equity[trough_i]:
                trough_i = i
    if in_dd:
        periods.append(_period(ts, equity, peak_i, trough_i, None))
    periods.sort(key=lambda p: p["depth"])
    return periods[:worst]


def _period(ts: np.ndarray, equity: np.ndarray, peak: int, trough: int, recovery: int | None
            ) -> dict[str, Any]:
    end = recovery if recovery is not None else len(ts) - 1
    return {
        "start": _iso(int(ts[peak])), "trough": _iso(int(ts[trough])),
        "recovery": _iso(int(ts[recovery])) if recovery is not None else None,
        "depth": float(equity[trough] / equity[peak] - 1.0),
        "days": (int(ts[end]) - int(ts[peak])) / (86_400 * NS),
        "bars": end - peak,
    }


def monthly_returns(dates: list[str], closes: np.ndarray, initial: float
                    ) -> dict[str, float]:
    """Return of each month ("YYYY-MM") from daily-close equity (DEFINITIONS)."""
    out: dict[str, float] = {}
    prev = initial
    for i, d in enumerate(dates):
        if i + 1 == len(dates) or dates[i + 1][:7] != d[:7]:
            out[d[:7]] = float(closes[i] / prev - 1.0)
            prev = float(closes[i])
    return out


def rolling_sharpe_volatility(rets: np.ndarray, window: int = ROLLING_DAYS
                              ) -> tuple[np.ndarray, np.ndarray]:
    """Annualised Sharpe ratio and volatility over the trailing `window` daily returns
    (NaN before the window fills or where the returns do not move)."""
    n = rets.size
    sharpe, vol = np.full(n, np.nan), np.full(n, np.nan)
    for i in range(window - 1, n):
        w = rets[i - window + 1: i + 1]
        sd = w.std(ddof=1)
        vol[i] = sd * math.sqrt(TRADING_DAYS)
        if sd > 0:
            sharpe[i] = w.mean() / sd * math.sqrt(TRADING_DAYS)
    return sharpe, vol


# ---------------------------------------------------------------- figures


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=96)
    pyplot().close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _times(ts: np.ndarray) -> list[datetime]:
    return [datetime.fromtimestamp(int(t) / NS, UTC) for t in ts]


def figure_equity(curve: Curve) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.6))
    x = list(range(len(curve.ts)))  # by point: closed-market gaps skipped, as equity.png
    ax.plot(x, curve.equity, label="strategy", lw=1.2)
    ax.plot(x, curve.buy_hold, label="buy and hold", lw=1.0, alpha=0.8)
    _date_ticks(ax, curve.ts)
    ax.set_ylabel("equity ($)")
    ax.legend(loc="best")
    ax.set_title("Equity against buy-and-hold")
    return _png(fig)


def figure_underwater(curve: Curve) -> str:
    plt = pyplot()
    peak = np.maximum.accumulate(curve.equity)
    dd = curve.equity / peak - 1.0
    fig, ax = plt.subplots(figsize=(9, 2.6))
    x = list(range(len(curve.ts)))
    ax.fill_between(x, dd * 100, 0, color="tab:red", alpha=0.4)
    _date_ticks(ax, curve.ts)
    ax.set_ylabel("drawdown (%)")
    ax.set_title("Underwater: fall from the running peak")
    return _png(fig)


def figure_rolling(dates: list[str], sharpe: np.ndarray, vol: np.ndarray, window: int) -> str:
    plt = pyplot()
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 4.2), sharex=True)
    x = np.arange(len(dates))
    a1.plot(x, sharpe, lw=1.0)
    a1.axhline(0, color="grey", lw=0.8, ls=":")
    a1.set_ylabel(f"Sharpe ({window} d)")
    a2.plot(x, vol * 100, lw=1.0, color="tab:orange")
    a2.set_ylabel(f"volatility % ({window} d)")
    step = max(1, len(dates) // 8)
    a2.set_xticks(x[::step], [d for d in dates[::step]], rotation=30, fontsize=7)
    a1.set_title("Rolling Sharpe ratio and volatility (annualised)")
    return _png(fig)


def figure_distribution(rets: np.ndarray) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.0))
    ax.hist(rets * 100, bins=min(60, max(10, rets.size // 5)), color="tab:blue", alpha=0.7)
    ax.axvline(float(rets.mean()) * 100, color="black", lw=1, label="mean")
    ax.set_xlabel("daily return (%)")
    ax.set_ylabel("days")
    ax.legend()
    ax.set_title("Distribution of daily returns")
    return _png(fig)


def _date_ticks(ax: Any, ts: np.ndarray) -> None:
    n = len(ts)
    if n == 0:
        return
    idx = np.linspace(0, n - 1, min(8, n)).astype(int)
    ax.set_xticks(idx, [_iso(int(ts[i]))[:10] for i in idx], rotation=30, fontsize=7)


def _iso(ts: int) -> str:
    return datetime.fromtimestamp(ts / NS, UTC).isoformat().replace("+00:00", "Z")


# ---------------------------------------------------------------- page

#: the headline rows: report key, label, format ("pct": a fraction shown in %, "num", "money",
#: "int", "x": a multiple)
HEADLINE = (
    ("roi", "Return", "pct"), ("roi_buy_hold", "Buy-and-hold return", "pct"),
    ("cagr", "CAGR", "pct"), ("sharpe", "Sharpe ratio", "num"),
    ("sortino", "Sortino ratio", "num"), ("calmar", "Calmar ratio", "num"),
    ("annual_volatility", "Volatility (annual)", "pct"),
    ("max_drawdown", "Max drawdown", "pct"), ("trading_days", "Trading days", "int"),
    ("initial_equity", "Initial equity", "money"), ("final_equity", "Final equity", "money"),
    ("trades", "Round trips", "int"), ("win_rate", "Win rate", "pct"),
    ("profit_factor", "Profit factor", "num"), ("average_win", "Average win", "money"),
    ("average_loss", "Average loss", "money"), ("exposure", "Exposure", "pct"),
    ("time_in_market", "Time in market", "pct"),
    ("turnover_annual_one_way", "Turnover (annual, one-way)", "x"),
    ("turnover", "Turnover (whole run, two-way)", "x"), ("fills", "Fills", "int"),
    ("market_trades", "Market-data trades", "int"),
)
VS_BUY_HOLD = (
    ("excess_return", "Excess return", "pct"), ("beta", "Beta", "num"),
    ("alpha_annual", "Alpha (annual)", "pct"), ("correlation", "Correlation", "num"),
    ("information_ratio", "Information ratio", "num"),
    ("mean_daily_excess", "Mean daily excess return", "pct"),
    ("deflated_sharpe", "Deflated Sharpe ratio", "num"), ("trials", "Rules tried", "int"),
    ("days", "Days", "int"),
)
SETTINGS = ("strategy", "source", "fill", "transport", "costs", "session", "warmup",
            "first_time", "last_time", "initial_equity")


def fmt(value: Any, kind: str) -> str:
    """A number as the page shows it (the data-value attribute keeps it whole)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if kind == "pct":
        return f"{value * 100:.2f}%"
    if kind == "money":
        return f"${value:,.2f}"
    if kind == "int":
        return f"{int(value):,}"
    if kind == "x":
        return f"{value:.2f}x"
    return f"{value:.3f}"


def _cell(key: str, value: Any, kind: str) -> str:
    raw = "" if value is None else repr(value)
    return (f'<td class="num" data-key="{html.escape(key)}" data-value="{html.escape(raw)}">'
            f"{html.escape(fmt(value, kind))}</td>")


def _table_rows(source: dict[str, Any], rows: tuple[tuple[str, str, str], ...],
                prefix: str = "") -> str:
    return "".join(f"<tr><th>{html.escape(label)}</th>{_cell(prefix + key, source.get(key), k)}"
                   "</tr>" for key, label, k in rows if key in source)


def _ci_row(vs: dict[str, Any]) -> str:
    ci = vs.get("excess_ci95")
    if not ci:
        return ""
    return ("<tr><th>Bootstrap 95% interval, mean daily excess</th><td class=\"num\">"
            f'<span data-key="vs_buy_hold.excess_ci95.0" data-value="{ci[0]!r}">'
            f"{ci[0] * 100:.3f}%</span> to "
            f'<span data-key="vs_buy_hold.excess_ci95.1" data-value="{ci[1]!r}">'
            f"{ci[1] * 100:.3f}%</span></td></tr>")


def _drawdown_table(periods: list[dict[str, Any]]) -> str:
    head = ("<tr><th>#</th><th>start (peak)</th><th>trough</th><th>recovery</th>"
            "<th>depth</th><th>days</th><th>bars</th></tr>")
    rows = []
    for i, p in enumerate(periods, 1):
        rows.append(
            f'<tr class="drawdown" data-start="{p["start"]}" data-trough="{p["trough"]}" '
            f'data-recovery="{p["recovery"] or ""}" data-depth="{p["depth"]!r}" '
            f'data-days="{p["days"]!r}" data-bars="{p["bars"]}"><td>{i}</td>'
            f'<td>{p["start"]}</td><td>{p["trough"]}</td>'
            f'<td>{p["recovery"] or "not recovered"}</td>'
            f'<td class="num">{p["depth"] * 100:.2f}%</td><td class="num">{p["days"]:.1f}</td>'
            f'<td class="num">{p["bars"]:,}</td></tr>')
    return f"<table>{head}{''.join(rows)}</table>" if rows else "<p>No drawdown.</p>"


def _monthly_table(months: dict[str, float]) -> str:
    years = sorted({m[:4] for m in months})
    head = "<tr><th>year</th>" + "".join(f"<th>{m:02d}</th>" for m in range(1, 13)) + \
        "<th>year</th></tr>"
    rows = []
    for y in years:
        cells, total = [], 1.0
        for m in range(1, 13):
            key = f"{y}-{m:02d}"
            if key in months:
                r = months[key]
                total *= 1.0 + r
                cls = "pos" if r >= 0 else "neg"
                cells.append(f'<td class="num {cls}" data-month="{key}" data-value="{r!r}">'
                             f"{r * 100:.2f}%</td>")
            else:
                cells.append("<td></td>")
        rows.append(f"<tr><th>{y}</th>{''.join(cells)}"
                    f'<td class="num" data-year="{y}">{(total - 1) * 100:.2f}%</td></tr>')
    return f"<table>{head}{''.join(rows)}</table>"


def _trades_table(trips: list[dict[str, Any]]) -> str:
    cols = ("symbol", "side", "quantity", "entry_time", "entry_price", "exit_time",
            "exit_price", "pnl", "return", "holding_seconds")
    head = "<tr>" + "".join(f"<th>{c}</th>" for c in cols) + "</tr>"
    rows = []
    for t in trips[:MAX_TRADE_ROWS]:
        cells = []
        for c in cols:
            v = t[c]
            text = (f"{v * 100:.2f}%" if c == "return" else f"{v:,.2f}"
                    if isinstance(v, float) else str(v))
            cells.append(f"<td>{html.escape(text)}</td>")
        rows.append("<tr class=\"trade\">" + "".join(cells) + "</tr>")
    more = (f"<p>First {MAX_TRADE_ROWS:,} of {len(trips):,} round trips; all are in "
            "trades.csv.</p>" if len(trips) > MAX_TRADE_ROWS else "")
    return (f"<table>{head}{''.join(rows)}</table>{more}" if rows
            else "<p>No round trips.</p>")


def _settings_table(report: dict[str, Any]) -> str:
    rows = []
    for key in SETTINGS:
        if key in report and report[key] is not None:
            value = report[key]
            text = (", ".join(f"{k}: {v}" for k, v in value.items() if v is not None)
                    if isinstance(value, dict) else str(value))
            rows.append(f"<tr><th>{key}</th><td data-setting=\"{key}\">{html.escape(text)}"
                        "</td></tr>")
    return f"<table>{''.join(rows)}</table>"


STYLE = """body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{padding:2px 8px;border-bottom:1px
solid #ddd;text-align:left;font-size:13px}td.num{text-align:right}.pos{color:#06632a}
.neg{color:#a11}img{max-width:100%}h2{margin-top:1.6em;border-bottom:2px solid #333}
.cols{display:flex;gap:2em;flex-wrap:wrap}dt{font-weight:bold}dd{margin:0 0 .6em 1em}"""


def render(report: dict[str, Any], curve: Curve, trips: list[dict[str, Any]]) -> str:
    """The whole page as one HTML string (module docstring)."""
    dates, closes, _ = daily_closes(curve)
    rets = daily_returns(closes, curve.initial)
    window = min(ROLLING_DAYS, max(5, rets.size // 3))
    sharpe, vol = rolling_sharpe_volatility(rets, window)
    vs = report.get("vs_buy_hold") or {}
    title = f"{report.get('strategy', '')} on {report.get('source', '')}"
    parts = [
        f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
        f"</title><style>{STYLE}</style></head><body><h1>Tearsheet: {html.escape(title)}</h1>",
        f"<p>{html.escape(str(report.get('first_time')))} to "
        f"{html.escape(str(report.get('last_time')))}</p>",
        "<div class=\"cols\"><div><h2>Statistics</h2><table>",
        _table_rows(report, HEADLINE), "</table></div>",
        "<div><h2>Against buy-and-hold</h2><table>",
        _table_rows(vs, VS_BUY_HOLD, "vs_buy_hold."), _ci_row(vs), "</table>",
        f"<p>{html.escape(str(vs.get('verdict', '')))}</p></div></div>",
        f'<h2>Equity</h2><img alt="equity" src="{figure_equity(curve)}">',
        f'<h2>Drawdowns</h2><img alt="underwater" src="{figure_underwater(curve)}">',
        f"<h3>The {WORST_DRAWDOWNS} worst drawdown periods</h3>",
        _drawdown_table(drawdown_periods(curve.ts, curve.equity)),
        "<h2>Monthly returns</h2>", _monthly_table(monthly_returns(dates, closes,
                                                                   curve.initial)),
    ]
    if rets.size >= 2 * window:
        parts.append(f'<h2>Rolling statistics</h2><img alt="rolling" '
                     f'src="{figure_rolling(dates, sharpe, vol, window)}">')
    else:
        parts.append(f"<h2>Rolling statistics</h2><p>{rets.size} daily returns: too few "
                     "for a rolling window.</p>")
    if rets.size >= 2:
        parts.append(f'<h2>Daily returns</h2><img alt="returns" '
                     f'src="{figure_distribution(rets)}">')
    parts += ["<h2>Round trips</h2>", _trades_table(trips),
              "<h2>Settings</h2>", _settings_table(report), "<h2>Definitions</h2><dl>"]
    parts += [f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>"
              for k, v in DEFINITIONS.items()]
    parts.append("</dl></body></html>")
    return "\n".join(parts)


def write_tearsheet(path: Path, report: dict[str, Any], curve: Curve,
                    trips: list[dict[str, Any]]) -> Path:
    path.write_text(render(report, curve, trips), encoding="utf-8")
    return path
