"""The Python API in a script (each `# %%` block is also a notebook cell).

    python examples/backtest_api.py [OUT_DIR]

Reads three stocks of the shared S&P 500 daily file with pandas (or makes random walks
when the data is not beside the checkout), backtests a built-in rule and a plain function
of the indicators through the replay engine, and writes each one's tearsheet and plot.
"""

# %%
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere

from engine import backtest  # noqa: E402
from feeds.datadir import data_dir  # noqa: E402


def load_prices() -> pd.DataFrame:
    """One long frame: date, open, high, low, close, volume, symbol."""
    path = data_dir() / "sp500_5yr_daily" / "all_stocks_5yr.csv.gz"
    if path.is_file():
        df = pd.read_csv(path)
        df = df[df["Name"].isin(["AAPL", "MSFT", "XOM"])]
        return df.rename(columns={"Name": "symbol"})
    rng = np.random.default_rng(1)  # no shared data: three random walks
    days = pd.bdate_range("2015-01-02", periods=500)
    parts = []
    for sym in ("AAA", "BBB", "CCC"):
        close = 50 * np.exp(np.cumsum(rng.normal(0.0003, 0.015, days.size)))
        parts.append(pd.DataFrame({"date": days, "open": close, "high": close * 1.01,
                                   "low": close * 0.99, "close": close, "volume": 1e6,
                                   "symbol": sym}))
    return pd.concat(parts)


# %%
if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/api-example")
    out.mkdir(parents=True, exist_ok=True)
    prices = load_prices()

    # a built-in rule by name, with the broker's costs as keywords
    rule = backtest(prices, "sma-cross:10,50,long-only", commission=1.0, slippage_bps=5)
    print(rule.stats[["roi", "roi_buy_hold", "sharpe", "max_drawdown", "trades"]])
    print(rule.trades.head())

    # %%
    # a plain function of the indicator values (one row per symbol, one column per
    # indicator of gpu/indicators/catalogue.py): long while the 10-day SMA is above the 50-day one
    # and the close above the 200-day SMA
    def trend(features: pd.DataFrame) -> pd.Series:
        return ((features["sma10"] > features["sma50"])
                & (features["close"] > features["sma200"])).astype(int)

    mine = backtest(prices, trend, commission=1.0, slippage_bps=5)
    print(mine.stats[["roi", "roi_buy_hold", "sharpe", "max_drawdown", "trades"]])

    # %%
    for name, res in (("rule", rule), ("trend", mine)):
        res.to_html(out / f"{name}.html")
        res.plot().savefig(out / f"{name}.png")
        res.equity.to_csv(out / f"{name}_equity.csv")
    print(f"wrote {out}/rule.html, trend.html (tearsheets), their PNGs and equity CSVs")
