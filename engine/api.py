"""A Python API over the replay engine: pandas DataFrames in, DataFrames out.

    from engine import backtest
    result = backtest({"AAPL": aapl, "MSFT": msft}, "sma-cross:10,50,long-only")
    result.stats["sharpe"], result.equity.tail(), result.trades, result.fills
    result.plot(); result.to_html("tearsheet.html")

`backtest` is named for what a quant calls it (vectorbt's `Portfolio.from_signals`,
backtesting.py's `Backtest`): it runs `engine.trading.replay.replay`, the very engine and ZeroMQ
path of `run_engine.py replay`, on an in-memory Source; there is no second simulator, so
its figures equal a replay of the same data written to a daily CSV (tests/engine/test_api.py).

Data: daily OHLCV bars, as a dict {symbol: DataFrame} (columns open, high, low, close
and optionally volume, any case; dates in the index or a `date` column) or one long
DataFrame with a `symbol` (or `name`, `ticker`) column. The bars get the daily CSV
reader's cleaning (feeds/daily.py: counted skips and repairs) and are stamped at their
16:00 New York close.

Strategy: a `strategies.base.Strategy` object, a built-in name or strategy file
(`strategies.registry.strategy_from_spec`), or a plain function of the indicator values:
`fn(features) -> signals`, where `features` is a DataFrame (one row per symbol, one column
per indicator of `gpu.indicators.catalogue.TERMINALS`, NaN while warming up) and the signals a
Series, dict or array of -1/0/+1 per symbol.

pandas is imported inside these functions only: the engine itself runs without it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from engine.errors import UserError
from engine.settings.config import EngineConfig
from engine.trading.replay import ReplayResult, replay
from feeds.daily import DailySource, clean_daily
from feeds.records import SkipCounter
from strategies.base import Features, Signals, Strategy

__all__ = ["backtest", "Result", "FunctionStrategy"]

_SYMBOL_COLUMNS = ("symbol", "name", "ticker")
_PRICE_COLUMNS = ("open", "high", "low", "close", "volume")


class FrameDailySource(DailySource):
    """Daily bars from pandas frames, cleaned and streamed as a daily CSV's are."""

    def __init__(self, long: Any, name: str = "DataFrame") -> None:
        skipped = SkipCounter(name, log_at_end=True)
        rows = (long["date"].to_numpy(dtype="datetime64[D]"),
                *(long[c].to_numpy(dtype=np.float64) for c in _PRICE_COLUMNS),
                long["symbol"].to_numpy(dtype="U16"))
        self.table = clean_daily(rows, None, None, None, skipped, False, name)
        self.skipped = self.table.skipped
        self.repaired = self.table.repaired
        self.symbols = list(self.table.symbols)
        first = str(self.table.dates.min()) if len(self.table) else "-"
        last = str(self.table.dates.max()) if len(self.table) else "-"
        self.name = f"daily bars {name}: {len(self.symbols)} symbols, {first}..{last}"


def long_frame(data: Any) -> Any:
    """The bars as one long frame: date, open, high, low, close, volume, symbol."""
    import pandas as pd

    if isinstance(data, Mapping):
        parts = [_one_symbol(frame, str(sym)) for sym, frame in data.items()]
        if not parts:
            raise UserError("backtest: no symbols in the data")
        return pd.concat(parts, ignore_index=True)
    if isinstance(data, pd.DataFrame):
        cols = {c.lower(): c for c in map(str, data.columns)}
        sym = next((cols[c] for c in _SYMBOL_COLUMNS if c in cols), None)
        if sym is None:
            raise UserError("backtest: a single DataFrame needs a symbol column (or pass "
                            "{symbol: frame})")
        return pd.concat([_one_symbol(g, str(s)) for s, g in data.groupby(sym, sort=True)],
                         ignore_index=True)
    raise UserError(f"backtest: data must be a DataFrame or a dict of DataFrames, not "
                    f"{type(data).__name__}")


def _one_symbol(frame: Any, symbol: str) -> Any:
    import pandas as pd

    df = frame.rename(columns={c: str(c).lower() for c in frame.columns})
    if "date" not in df.columns:
        df = df.reset_index().rename(columns={df.index.name or "index": "date"})
        df = df.rename(columns={str(c): str(c).lower() for c in df.columns})
    missing = [c for c in ("open", "high", "low", "close") if c not in df.columns]
    if missing:
        raise UserError(f"backtest: {symbol}: columns {', '.join(missing)} missing (need "
                        "open, high, low, close[, volume])")
    try:
        dates = pd.to_datetime(df["date"])
    except (ValueError, TypeError) as exc:
        raise UserError(f"backtest: {symbol}: dates not readable ({exc})") from None
    if getattr(dates.dt, "tz", None) is not None:
        dates = dates.dt.tz_localize(None)
    if (dates != dates.dt.normalize()).any():
        # one bar a day is stamped at its 16:00 close; intraday bars would collapse onto
        # their dates (counted as duplicates), so they are refused rather than misread
        raise UserError(f"backtest: {symbol}: times within the day; backtest() takes daily "
                        "bars (replay --data reads tick files)")
    return pd.DataFrame({
        "date": dates.dt.normalize(),
        **{c: pd.to_numeric(df[c], errors="coerce") if c in df.columns else 0.0
           for c in _PRICE_COLUMNS},
        "symbol": symbol,
    })


class FunctionStrategy:
    """A plain function of the indicator values as a Strategy (module docstring). The
    function is asked at every bar close; symbols whose bar did not close keep their
    signal, as the protocol requires."""

    def __init__(self, fn: Callable[[Any], Any], name: str | None = None,
                 long_only: bool = False, lookback: int = 0) -> None:
        self.fn = fn
        self.name: str = name or str(getattr(fn, "__name__", "function"))
        self.long_only = long_only
        self.enter_on_from_zero = True  # a function's +1 from flat means "enter"
        self.lookback = lookback
        self._symbols: list[str] = []
        self._signal: Signals = np.zeros(0, np.int8)

    def reset(self, symbols: list[str]) -> None:
        self._symbols = list(symbols)
        self._signal = np.zeros(len(symbols), np.int8)

    async def target_signals(self, features: Features, closed: npt.NDArray[np.bool_]
                             ) -> Signals:
        import pandas as pd

        from gpu.indicators.catalogue import TERMINALS

        n = features.shape[0]
        while len(self._symbols) < n:  # symbols registered after reset
            self._symbols.append(f"#{len(self._symbols)}")
        if self._signal.shape[0] < n:
            self._signal = np.concatenate([self._signal,
                                           np.zeros(n - self._signal.shape[0], np.int8)])
        frame = pd.DataFrame(features, index=self._symbols[:n], columns=list(TERMINALS))
        got = self.fn(frame)
        if isinstance(got, Mapping | pd.Series):
            got = pd.Series(got).reindex(frame.index).fillna(0).to_numpy()
        new = np.sign(np.nan_to_num(np.asarray(got, np.float64).reshape(-1))).astype(np.int8)
        if new.shape[0] != n:
            raise ValueError(f"strategy {self.name}: {new.shape[0]} signals for {n} symbols")
        if self.long_only:
            new = np.maximum(new, 0).astype(np.int8)
        self._signal = np.where(closed, new, self._signal).astype(np.int8)
        return self._signal


def _strategy(strategy: Any, device: str) -> Strategy:
    if isinstance(strategy, str):
        from strategies.registry import strategy_from_spec

        try:
            return strategy_from_spec(strategy, device=device)
        except (ValueError, OSError) as exc:
            raise UserError(str(exc)) from None
    if isinstance(strategy, Strategy):
        return strategy
    if callable(strategy):
        return FunctionStrategy(strategy)
    raise UserError("backtest: strategy must be a Strategy, a name or a function")


def _config(config: EngineConfig | None, settings: dict[str, Any], device: str
            ) -> EngineConfig:
    """The engine's settings: `config` (or the defaults) with top-level keys
    (bar_seconds, session, ...) and broker keys (fill, commission, slippage_bps, ...)
    from `settings`."""
    cfg = config or EngineConfig()
    broker_keys = set(cfg.broker.__struct_fields__)
    broker = {k: v for k, v in settings.items() if k in broker_keys}
    top = {k: v for k, v in settings.items() if k not in broker_keys}
    unknown = [k for k in top if k not in cfg.__struct_fields__]
    if unknown:
        raise UserError(f"backtest: unknown setting(s) {', '.join(unknown)}")
    try:
        if broker:
            top["broker"] = msgspec.structs.replace(cfg.broker, **broker)
        cfg = msgspec.structs.replace(cfg, device=device, **top)
        return msgspec.convert(msgspec.to_builtins(cfg), EngineConfig)
    except (ValueError, msgspec.ValidationError) as exc:
        raise UserError(f"backtest: {exc}") from None


@dataclass
class Result:
    """A backtest's results: report.json's dict (`report`) and DataFrames of the equity
    curve (index: UTC time), the round trips, the fills and the headline statistics."""

    report: dict[str, Any]
    result: ReplayResult = field(repr=False)

    @functools.cached_property
    def equity(self) -> Any:
        import pandas as pd

        pts = self.result.engine.equity_curve
        index = pd.to_datetime([p.ts for p in pts], unit="ns", utc=True)
        return pd.DataFrame({"equity": [p.equity for p in pts],
                             "gross_exposure": [p.gross for p in pts],
                             "buy_hold_equity": [p.buy_hold for p in pts]},
                            index=index.rename("time"))

    @functools.cached_property
    def trades(self) -> Any:
        import pandas as pd

        from engine.reporting.report import round_trips

        return pd.DataFrame(round_trips(self.result.engine.broker.fills,
                                        self.result.engine.broker.multipliers))

    @functools.cached_property
    def fills(self) -> Any:
        import pandas as pd

        rows = [{"time": pd.Timestamp(f.ts, unit="ns", tz="UTC"), "ts": f.ts,
                 "symbol": f.symbol, "order_id": f.order_id,
                 "side": "buy" if f.side > 0 else "sell", "quantity": f.quantity,
                 "price": f.price, "commission": f.commission}
                for f in self.result.engine.broker.fills]
        return pd.DataFrame(rows)

    @property
    def stats(self) -> Any:
        """The report's scalar figures as a Series (ROI, Sharpe, drawdown, ...)."""
        import pandas as pd

        return pd.Series({k: v for k, v in self.report.items()
                          if isinstance(v, int | float | str | type(None))
                          and not isinstance(v, bool)}, dtype=object)

    def plot(self) -> Any:
        """A matplotlib Figure: equity against buy-and-hold, and the drawdown."""
        from engine.reporting.plots import pyplot

        eq = self.equity
        fig, (a1, a2) = pyplot().subplots(2, 1, figsize=(9, 5), sharex=True,
                                          gridspec_kw={"height_ratios": [3, 1]})
        a1.plot(eq.index, eq["equity"], label="strategy")
        a1.plot(eq.index, eq["buy_hold_equity"], label="buy and hold")
        a1.legend()
        a1.set_ylabel("equity ($)")
        dd = eq["equity"] / eq["equity"].cummax() - 1.0
        a2.fill_between(eq.index, dd * 100, 0, color="tab:red", alpha=0.4)
        a2.set_ylabel("drawdown (%)")
        fig.tight_layout()
        return fig

    def to_html(self, path: str | Path | None = None) -> str:
        """The tearsheet (engine/reporting/tearsheet.py) as an HTML string; also written to
        `path`."""
        from engine.reporting.report import equity_curve, round_trips
        from engine.reporting.tearsheet import render

        page = render(self.report, equity_curve(self.result),
                      round_trips(self.result.engine.broker.fills,
                                  self.result.engine.broker.multipliers))
        if path is not None:
            Path(path).write_text(page, encoding="utf-8")
        return page

    def _repr_html_(self) -> str:  # a notebook shows the headline figures
        return str(self.stats.to_frame("value").to_html())


def backtest(data: Any, strategy: Any = "sma-cross", *, config: EngineConfig | None = None,
             device: str = "cpu", **settings: Any) -> Result:
    """Backtest `strategy` on `data` through the replay engine (module docstring).

    `settings`: EngineConfig keys (bar_seconds, session, ...) and broker keys (fill,
    commission, slippage_bps, cash, ...) over `config`'s or the defaults."""
    from engine.extras import require
    from engine.reporting.report import build_report

    require("pandas", "report", "backtest() (DataFrames in and out)")
    strat = _strategy(strategy, device)
    cfg = _config(config, settings, device)
    source = FrameDailySource(long_frame(data))
    if not source.symbols or len(source.table) == 0:
        raise UserError("backtest: no bars left in the data")
    if cfg.transport == "auto":  # the frames live in this process: a feed thread takes them
        cfg = msgspec.structs.replace(cfg, transport="inproc")
    result = replay(lambda: source, strat, cfg)
    report = build_report(result, strat.name)
    report["costs"] = {"commission": cfg.broker.commission,
                       "slippage_bps": cfg.broker.slippage_bps}
    return Result(report=report, result=result)
