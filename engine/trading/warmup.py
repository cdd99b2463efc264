"""Indicator warm-up before a replay's first date: how many bars, and from where.

A replay from `--start` first feeds the bars before it to the indicator bank without
trading (`Engine.warm_until`), so a strategy can trade on its first bar. How many bars:

- `--warmup BARS` when given;
- else the strategy's longest lookback, the bars its indicators need before their first
  value: for `sma-cross` the slow window; for GP rules the longest of the terminals their
  trees use (SMA/EMA N: N bars, MACD against zero 26, against its signal 34, MFI and EOM
  15, CCI 20, NVI/PVI against their 255-bar EMA 255); for any other strategy its
  `lookback` attribute, or the bank's longest, 255 bars. EMAs remember every bar, so a
  longer warm-up still moves them in the last bits; exact agreement with the GP evaluator
  needs its own start, which `replay --window test` uses (the training window's first
  day, where the evaluator's panel starts);
- a replay without `--start` starts with its data: nothing comes before it.

The bars are counted in the data itself (`find_warmup_start`): bar events, as the engine
makes them, i.e. distinct bar times of bar data and distinct time bars holding a trade of
tick data. A data set with fewer bars before `--start` warms on what it has; the report
says how many bars were used and whether that was the number asked for.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np

from feeds.records import KIND_BAR, KIND_TRADE, Source
from gpu.indicators import core as ic
from gpu.indicators.catalogue import N_TERMINALS, TERMINALS

NS = 1_000_000_000
NS_PER_DAY = 86_400 * NS

#: the bank's longest lookback: NVI and PVI against their 255-bar EMA
LONGEST_LOOKBACK = ic.VOLUME_INDEX_EMA


def terminal_lookback(name: str) -> int:
    """Bars a terminal needs before its first value (gpu/indicators/core.py's warm-ups)."""
    if name.startswith(("sma", "ema")):
        return int(name[3:])
    if name in ("close", "typical"):
        return 1
    if name.startswith(("nvi", "pvi")):
        return ic.VOLUME_INDEX_EMA
    if name.startswith("macd_") and name.endswith("zero"):
        return ic.MACD_SLOW
    if name.startswith("macd_"):  # against its signal line: an EMA of the MACD
        return ic.MACD_SLOW + ic.MACD_SIGNAL - 1
    if name.startswith("mfi"):
        return ic.MFI_N + 1  # money flows compare with the previous bar
    if name.startswith("eom"):
        return ic.EOM_N + 1  # EMV compares with the previous bar
    if name.startswith("cci"):
        return ic.CCI_N
    raise ValueError(f"unknown terminal {name!r}")


def strategy_lookback(strategy: Any) -> tuple[int, str]:
    """(bars, why) of the warm-up a strategy needs by default (the module docstring)."""
    from strategies.gp.strategy import GPEnsemble
    from strategies.sma_cross import SmaCross

    if isinstance(strategy, SmaCross):
        return strategy.slow, f"its slow SMA window ({strategy.slow})"
    if isinstance(strategy, GPEnsemble):
        used = {int(op) for rule in strategy.rules for tree in (rule.buy, rule.sell)
                for op in np.asarray(tree).tolist() if 0 <= int(op) < N_TERMINALS}
        if not used:
            return 0, "its rules use no indicator"
        name = max((TERMINALS[op] for op in used), key=terminal_lookback)
        return terminal_lookback(name), f"its longest indicator, {name}"
    own = getattr(strategy, "lookback", None)
    if isinstance(own, int) and own >= 0:
        return own, "its own lookback"
    return LONGEST_LOOKBACK, f"the indicator bank's longest lookback ({LONGEST_LOOKBACK})"


def parse_warmup(text: str | None) -> int | None:
    """`--warmup` as a count of bars (None when not given); ValueError when not one."""
    if text is None:
        return None
    try:
        n = int(text.strip())
    except ValueError:
        raise ValueError(f"--warmup {text!r}: expected a whole number of bars >= 0") from None
    if n < 0:
        raise ValueError(f"--warmup {text!r}: expected a whole number of bars >= 0")
    return n


def _bar_keys(chunk: np.ndarray, bar_ns: int, tz: ZoneInfo) -> tuple[np.ndarray, np.ndarray]:
    """(bar key, ts) of the records of `chunk` that make bar events: bar records by their
    time, trades by the time bar (on the exchange's clock) they fall in."""
    kind, ts = chunk["kind"], chunk["ts"].astype(np.int64)
    bars = kind == KIND_BAR
    trades = kind == KIND_TRADE
    keys = np.full(len(chunk), -1, np.int64)
    keys[bars] = ts[bars]
    if trades.any():
        t = ts[trades]
        offsets = np.array([_utc_offset_ns(int(x), tz) for x in (t[0], t[-1])], np.int64)
        if offsets[0] == offsets[1]:
            off: Any = offsets[0]
        else:  # a change of UTC offset inside the chunk: per record
            off = np.array([_utc_offset_ns(int(x), tz) for x in t.tolist()], np.int64)
        keys[trades] = (t + off) // bar_ns
    keep = bars | trades
    return keys[keep], ts[keep]


def _utc_offset_ns(ts: int, tz: ZoneInfo) -> int:
    off = dt.datetime.fromtimestamp(ts // NS, dt.UTC).astimezone(tz).utcoffset()
    return int(off.total_seconds()) * NS if off is not None else 0


def count_bars(source: Source, bar_seconds: float, timezone: str) -> dict[int, int]:
    """Each bar event's key in `source` with the time of its first record."""
    bar_ns, tz = int(bar_seconds * NS), ZoneInfo(timezone)
    first: dict[int, int] = {}
    for chunk in source.chunks():
        keys, ts = _bar_keys(chunk, bar_ns, tz)
        if len(keys) == 0:
            continue
        uniq, at = np.unique(keys, return_index=True)
        for k, t in zip(uniq.tolist(), ts[at].tolist(), strict=True):
            if k not in first or t < first[k]:
                first[k] = t
    return first


def find_warmup_start(open_before: Callable[[int | None], Source], trade_from: int,
                      bars: int, bar_seconds: float, timezone: str,
                      first_span_ns: int | None) -> tuple[int | None, int]:
    """(first time of the warm-up's data, bar events found) for `bars` bar events before
    `trade_from`. `open_before(lo)` opens the data in [lo, trade_from) (lo None: from the
    data's start); `first_span_ns` is a first, shorter look back (tick data: a few days hold
    many bars), None to read everything before `trade_from` at once (daily files, read
    whole anyway). With fewer bars in the data, all of them and their count."""
    if bars <= 0:
        return None, 0
    spans: list[int | None] = [first_span_ns, None] if first_span_ns else [None]
    found: dict[int, int] = {}
    for span in spans:
        lo = None if span is None else trade_from - span
        found = count_bars(open_before(lo), bar_seconds, timezone)
        if len(found) >= bars:
            break
    if not found:
        return None, 0
    keys = sorted(found)[-bars:]
    return found[keys[0]], len(keys)


def first_look_back_ns(bars: int, bar_seconds: float) -> int:
    """How far back the first look for `bars` time bars of tick data goes: three times
    their length, at least three days (a weekend, a holiday)."""
    return max(3 * NS_PER_DAY, int(3 * bars * bar_seconds * NS))
