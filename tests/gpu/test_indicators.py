"""The 31 GP terminals: pandas references on real S&P data, incremental == whole history,
CUDA (simulator, tiny; real GPU under the `gpu` marker) against the CPU twin.

The references below are written from the formulas with pandas rolling/ewm and numpy,
independently of gpu/indicators/core.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from feeds.datadir import data_dir
from gpu.device import cuda_present, cuda_simulated
from gpu.indicators import core
from gpu.indicators.catalogue import N_FLOAT, TERMINAL_INDEX, TERMINALS
from gpu.indicators.compute import IndicatorBank, _raw_history, compute_panel

SP500 = Path("sp500_5yr_daily") / "all_stocks_5yr.csv.gz"
FIELDS = ("open", "high", "low", "close", "volume")
RAW = {name: i for i, name in enumerate(core.RAW_NAMES)}
RTOL64 = 1e-9

Frames = dict[str, pd.DataFrame]
Market = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # OHLCV


# ---- data ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sp500() -> Frames:
    """The 470 tickers with all 1259 days, one (days x tickers) frame per OHLCV field."""
    path = data_dir() / SP500
    if not path.exists():
        pytest.skip(f"real S&P data not found at {path} (set TRADING_DATA_DIR)")
    df = pd.read_csv(path)
    counts = df.groupby("Name").size()
    complete = counts[counts == counts.max()].index
    df = df[df["Name"].isin(complete)]
    return {f: df.pivot(index="date", columns="Name", values=f).astype(float) for f in FIELDS}


def _select(frames: Frames, tickers: pd.Index) -> Frames:
    return {f: frames[f][tickers] for f in FIELDS}


@pytest.fixture(scope="module")
def clean(sp500: Frames) -> Frames:
    """Complete tickers without any NaN field (468 of the 470)."""
    ok = ~pd.concat([sp500[f].isna().any() for f in FIELDS], axis=1).any(axis=1)
    tickers = ok[ok].index
    assert len(tickers) >= 100
    return _select(sp500, tickers)


def _arrays(frames: Frames) -> Market:
    o, h, l, c, v = (frames[f].to_numpy(np.float64) for f in FIELDS)
    return o, h, l, c, v


def _random_market(n_days: int, n_stocks: int, seed: int) -> Market:
    """Random OHLCV with repeated and zero volumes, flat bars (H == L) and unchanged closes."""
    rng = np.random.default_rng(seed)
    close = 50.0 * np.exp(np.cumsum(rng.normal(0.0, 0.02, (n_days, n_stocks)), axis=0))
    close = np.where(rng.random(close.shape) < 0.05, np.roll(close, 1, axis=0), close)
    spread = rng.uniform(0.0, 0.03, close.shape) * (rng.random(close.shape) > 0.05)
    high = close * (1.0 + spread)
    low = close * (1.0 - rng.uniform(0.0, 1.0, close.shape) * spread)
    volume = rng.integers(1, 6, close.shape).astype(float) * 1e5
    volume[rng.random(close.shape) < 0.03] = 0.0
    return close.copy(), high, low, close, volume


# ---- pandas reference ----------------------------------------------------------------------
def _seeded_ema(x: pd.DataFrame, span: int, first: int) -> pd.DataFrame:
    """EMA (alpha 2/(span+1)) of x from row `first` on, seeded with the mean of its first
    `span` values."""
    seed_row = first + span - 1
    y = x.copy()
    seed = x.iloc[first : seed_row + 1].mean()
    y.iloc[:seed_row] = np.nan
    y.iloc[seed_row] = seed
    return y.ewm(span=span, adjust=False).mean()


def _above(x: pd.DataFrame, threshold: pd.DataFrame | float) -> np.ndarray:
    xv = np.asarray(x, dtype=float)
    tv = np.broadcast_to(np.asarray(threshold, dtype=float), xv.shape)
    return np.where(np.isnan(xv) | np.isnan(tv), np.nan, (xv > tv).astype(float))


def _below(x: pd.DataFrame, threshold: pd.DataFrame | float) -> np.ndarray:
    xv = np.asarray(x, dtype=float)
    tv = np.broadcast_to(np.asarray(threshold, dtype=float), xv.shape)
    return np.where(np.isnan(xv) | np.isnan(tv), np.nan, (xv < tv).astype(float))


def reference(frames: Frames) -> dict[str, np.ndarray]:
    """Float64 reference of every raw value, every terminal, and threshold scales."""
    high, low, close, volume = (frames[f] for f in ("high", "low", "close", "volume"))
    ref: dict[str, pd.DataFrame] = {}
    for n in (1, 5, 10, 15, 25, 50, 75, 100, 150, 200):
        ref[f"sma{n}"] = close.rolling(n).mean()
    for n in (5, 9, 15, 20, 25):
        ref[f"ema{n}"] = _seeded_ema(close, n, 0)
    ref["close"] = close
    tp = (high + low + close) / 3.0
    ref["typical"] = tp

    macd = _seeded_ema(close, 12, 0) - _seeded_ema(close, 26, 0)
    ref["macd"] = macd
    ref["macd_signal"] = _seeded_ema(macd, 9, 25)

    flow = tp * volume
    dtp = tp.diff()
    pos = flow.where(dtp > 0, 0.0).where(dtp.notna())
    neg = flow.where(dtp < 0, 0.0).where(dtp.notna())
    pos14, neg14 = pos.rolling(14).sum(), neg.rolling(14).sum()
    no_falling_bar = (neg != 0).astype(float).where(neg.notna()).rolling(14).sum() == 0
    ref["mfi"] = (100.0 - 100.0 / (1.0 + pos14 / neg14)).mask(no_falling_bar, 100.0)

    mid = (high + low) / 2.0
    box = (volume / 10000.0) / (high - low)
    emv = (mid.diff() / box).mask((high == low) | (volume == 0), 0.0).where(mid.diff().notna())
    ref["eom"] = emv.rolling(14).mean()

    sma_tp = tp.rolling(20).mean()
    windows = np.lib.stride_tricks.sliding_window_view(tp.to_numpy(), 20, axis=0)
    md = np.full(tp.shape, np.nan)
    md[19:] = np.abs(windows - sma_tp.to_numpy()[19:, :, None]).mean(axis=2)
    md_frame = pd.DataFrame(md, index=tp.index, columns=tp.columns)
    ref["cci"] = ((tp - sma_tp) / (0.015 * md_frame)).mask(md_frame == 0, 0.0)

    change = close.pct_change()
    dvol = volume.diff()
    for name, moves in (("nvi", dvol < 0), ("pvi", dvol > 0)):
        index = 1000.0 * (1.0 + change.where(moves, 0.0)).cumprod()
        ref[name] = index
        ref[f"{name}_ema255"] = _seeded_ema(index, 255, 0)

    out = {k: v.to_numpy(np.float64) for k, v in ref.items()}
    r = ref
    out["nvi_above"], out["nvi_below"] = _above(r["nvi"], r["nvi_ema255"]), _below(
        r["nvi"], r["nvi_ema255"])
    out["pvi_above"], out["pvi_below"] = _above(r["pvi"], r["pvi_ema255"]), _below(
        r["pvi"], r["pvi_ema255"])
    out["macd_above_zero"], out["macd_below_zero"] = _above(macd, 0.0), _below(macd, 0.0)
    out["macd_above_signal"] = _above(macd, r["macd_signal"])
    out["macd_below_signal"] = _below(macd, r["macd_signal"])
    out["mfi_above_80"], out["mfi_below_20"] = _above(r["mfi"], 80.0), _below(r["mfi"], 20.0)
    out["eom_above_zero"], out["eom_below_zero"] = _above(r["eom"], 0.0), _below(r["eom"], 0.0)
    out["cci_above_100"] = _above(r["cci"], 100.0)
    out["cci_below_minus_100"] = _below(r["cci"], -100.0)
    out["scale_eom"] = emv.abs().rolling(14).mean().to_numpy()
    return out


# Each boolean terminal: (value, threshold, scale) names or constants in the reference.
BOOL_INPUTS: dict[str, tuple[str, str | float, str | float]] = {
    "nvi_above": ("nvi", "nvi_ema255", "nvi_ema255"),
    "nvi_below": ("nvi", "nvi_ema255", "nvi_ema255"),
    "pvi_above": ("pvi", "pvi_ema255", "pvi_ema255"),
    "pvi_below": ("pvi", "pvi_ema255", "pvi_ema255"),
    "macd_above_zero": ("macd", 0.0, "close"),
    "macd_below_zero": ("macd", 0.0, "close"),
    "macd_above_signal": ("macd", "macd_signal", "close"),
    "macd_below_signal": ("macd", "macd_signal", "close"),
    "mfi_above_80": ("mfi", 80.0, 100.0),
    "mfi_below_20": ("mfi", 20.0, 100.0),
    "eom_above_zero": ("eom", 0.0, "scale_eom"),
    "eom_below_zero": ("eom", 0.0, "scale_eom"),
    "cci_above_100": ("cci", 100.0, 100.0),
    "cci_below_minus_100": ("cci", -100.0, 100.0),
}
# Absolute tolerance scale of each raw value, for values that cross zero.
RAW_SCALE: dict[str, str | float] = {
    "macd": "close", "macd_signal": "close", "eom": "scale_eom", "mfi": 100.0, "cci": 1.0,
}


def _get(ref: dict[str, np.ndarray], key: str | float) -> np.ndarray | float:
    return ref[key] if isinstance(key, str) else key


def near_threshold(ref: dict[str, np.ndarray], name: str, rel: float) -> np.ndarray:
    """Where the reference input of boolean `name` is within rel*scale of its threshold."""
    value, threshold, scale = (_get(ref, k) for k in BOOL_INPUTS[name])
    with np.errstate(invalid="ignore"):
        return np.asarray(np.abs(value - threshold) <= rel * np.abs(scale))


def assert_same_nan(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    diff = np.isnan(actual) != np.isnan(expected)
    assert not diff.any(), f"{what}: NaN pattern differs at (day, stock) {np.argwhere(diff)[:5]}"


def check_against_reference(frames: Frames, *, few_ties: bool = True) -> None:
    """`few_ties`: real data, where inputs sitting on a threshold must be rare."""
    arrays = _arrays(frames)
    ref = reference(frames)
    raw = _raw_history(*arrays)
    panel = compute_panel(*arrays, device="cpu")

    for name, i in RAW.items():
        got, want = raw[:, i, :], ref[name]
        assert_same_nan(got, want, name)
        scale = np.abs(np.nan_to_num(_get(ref, RAW_SCALE.get(name, 0.0))))
        ok = np.isnan(want) | (np.abs(got - want) <= RTOL64 * (np.abs(want) + scale))
        assert ok.all(), f"{name}: {np.argwhere(~ok)[:5]} got {got[~ok][:5]} want {want[~ok][:5]}"

    for i in range(N_FLOAT):
        name = TERMINALS[i]
        # the float32 outputs are exactly the cast of the float64 values
        assert np.array_equal(panel[:, i, :], raw[:, i, :].astype(np.float32), equal_nan=True)
        np.testing.assert_allclose(panel[:, i, :], ref[name], rtol=1e-6, err_msg=name)

    for name in BOOL_INPUTS:
        flag, want = panel[:, TERMINAL_INDEX[name], :], ref[name]
        assert_same_nan(flag, want, name)
        assert set(np.unique(flag[~np.isnan(flag)])) <= {0.0, 1.0}
        near = near_threshold(ref, name, RTOL64)
        if few_ties:
            assert near.mean() < 1e-3, f"{name}: too many entries on the threshold to judge"
        bad = ~near & ~np.isnan(want) & (flag != want)
        assert not bad.any(), f"{name}: differs from pandas at (day, stock) {np.argwhere(bad)[:5]}"


# ---- tests: correctness on real data ------------------------------------------------------
def test_all_terminals_match_pandas_on_100_sp500_stocks(clean: Frames) -> None:
    tickers = clean["close"].columns
    picked = tickers[np.linspace(0, len(tickers) - 1, 120).astype(int)]
    check_against_reference(_select(clean, picked))


def test_all_terminals_match_pandas_on_a_random_market_with_ties() -> None:
    """Repeated volumes and closes, flat bars (H == L) and one missing high/low."""
    arrays = _random_market(400, 6, seed=5)
    arrays[1][100, 2] = np.nan
    arrays[2][101, 3] = np.nan
    days = pd.RangeIndex(400)
    frames = {f: pd.DataFrame(a, index=days) for f, a in zip(FIELDS, arrays, strict=True)}
    check_against_reference(frames, few_ties=False)


def test_missing_high_low_give_nan_windows_like_pandas(sp500: Frames) -> None:
    """REGN and VRTX each miss open/high/low on one day: TP-based windows over it are NaN."""
    has_nan = sp500["high"].isna().any()
    tickers = has_nan[has_nan].index
    assert len(tickers) >= 1
    frames = _select(sp500, tickers)
    check_against_reference(frames)
    panel = compute_panel(*_arrays(frames), device="cpu")
    day = int(np.argmax(frames["high"].isna().to_numpy()[:, 0]))
    cci = panel[:, TERMINAL_INDEX["cci_above_100"], 0]
    assert np.isnan(cci[day : day + 20]).all() and not np.isnan(cci[day + 20])
    assert not np.isnan(panel[day:, TERMINAL_INDEX["sma200"], 0]).any()


def test_warm_up_is_nan_exactly_until_the_first_full_window(clean: Frames) -> None:
    panel = compute_panel(*_arrays(_select(clean, clean["close"].columns[:8])), device="cpu")
    first = {f"sma{n}": n - 1 for n in (1, 5, 10, 15, 25, 50, 75, 100, 150, 200)}
    first |= {f"ema{n}": n - 1 for n in (5, 9, 15, 20, 25)}
    first |= {"close": 0, "typical": 0}
    first |= {n: 254 for n in ("nvi_above", "nvi_below", "pvi_above", "pvi_below")}
    first |= {"macd_above_zero": 25, "macd_below_zero": 25}
    first |= {"macd_above_signal": 33, "macd_below_signal": 33}
    first |= {n: 14 for n in ("mfi_above_80", "mfi_below_20", "eom_above_zero", "eom_below_zero")}
    first |= {"cci_above_100": 19, "cci_below_minus_100": 19}
    assert set(first) == set(TERMINALS)
    for name, d in first.items():
        column = panel[:, TERMINAL_INDEX[name], :]
        assert np.isnan(column[:d]).all(), name
        assert np.isfinite(column[d:]).all(), name


def test_incremental_bank_equals_panel_bitwise_on_real_data(clean: Frames) -> None:
    tickers = clean["close"].columns[::97][:5]
    arrays = _arrays(_select(clean, tickers))
    panel = compute_panel(*arrays, device="cpu")
    n_days, n_stocks = arrays[3].shape
    one = IndicatorBank(n_stocks)          # fed with update_one, symbol by symbol
    batch = IndicatorBank(n_stocks + 3)    # fed with update, stocks at shuffled symbols
    symbols = np.array([4, 0, 6, 2, 7][:n_stocks], np.int32)
    for d in range(n_days):
        for s in range(n_stocks):
            one.update_one(s, *(float(a[d, s]) for a in arrays))
        batch.update(symbols, *(a[d] for a in arrays))
        assert np.array_equal(one.values, panel[d].T, equal_nan=True), f"day {d}"
        assert np.array_equal(batch.values[symbols], panel[d].T, equal_nan=True), f"day {d}"
    assert (one.bars_seen == n_days).all()
    assert batch.bars_seen[symbols].tolist() == [n_days] * n_stocks
    assert np.isnan(batch.values[[1, 3, 5]]).all() and batch.bars_seen[[1, 3, 5]].sum() == 0

    history = IndicatorBank(2)
    history.feed_history(1, *(a[:, 0] for a in arrays))
    assert np.array_equal(history.values[1], panel[-1, :, 0], equal_nan=True)
    history.reset()
    assert np.isnan(history.values).all() and history.bars_seen.sum() == 0


# ---- tests: numerics and documented definitions ------------------------------------------
def test_rolling_sums_do_not_drift_over_two_million_bars() -> None:
    """Prices swing over eight orders of magnitude; after 2M bars the windows ending at the
    low level must still match an exact (fsum) recomputation."""
    n = 2_000_000
    rng = np.random.default_rng(7)
    level = 9.0 * np.sin(np.linspace(0.0, 3.5 * math.pi, n))  # ends near the bottom
    close = np.exp(level + rng.normal(0.0, 0.01, n))
    high, low = close * 1.01, close * 0.99
    volume = rng.integers(1, 1000, n).astype(float) * 100.0
    bank = IndicatorBank(1)
    bank.feed_history(0, close, high, low, close, volume)
    raw = bank._state[0, core.S_RAW : core.S_RAW + core.N_RAW]
    for w in (50, 200):
        exact = math.fsum(close[-w:]) / w
        assert raw[RAW[f"sma{w}"]] == pytest.approx(exact, rel=1e-13, abs=0.0)
    tp = (high + low + close) / 3.0
    mid = (high + low) / 2.0
    emv = (mid[-14:] - mid[-15:-1]) / ((volume[-14:] / 10000.0) / (high[-14:] - low[-14:]))
    assert raw[RAW["eom"]] == pytest.approx(math.fsum(emv) / 14, rel=1e-11)
    flow = tp[-14:] * volume[-14:]
    up, down = tp[-14:] > tp[-15:-1], tp[-14:] < tp[-15:-1]
    pos, neg = math.fsum(flow[up]), math.fsum(flow[down])
    mfi = 100.0 if neg == 0 else 100.0 - 100.0 / (1.0 + pos / neg)
    assert raw[RAW["mfi"]] == pytest.approx(mfi, rel=1e-11)


def test_window_sums_return_to_exact_zero() -> None:
    """Mixed-sign flows of wildly different sizes leave the window: the compensated running
    sum tracks fsum of the window and is exactly 0 once only zeros remain (so MFI's
    neg == 0 rule and EOM's sign see no rounding residue)."""
    rng = np.random.default_rng(2)
    window = 14
    ring, sum_k, count_k = 4, 0, 2
    for _ in range(3000):
        values = rng.normal(0.0, 1.0, int(rng.integers(2, 30)))
        values *= 10.0 ** rng.uniform(-5.0, 10.0, values.size)
        values = np.concatenate([values, np.zeros(window)])
        state = np.zeros(ring + window)
        for t, x in enumerate(values):
            total = core._window_push(state, ring, sum_k, count_k, t % window, x, t >= window)
            exact = math.fsum(values[max(0, t - window + 1) : t + 1])
            assert total == pytest.approx(exact, rel=1e-12, abs=1e-12 * np.abs(values).max())
        assert total == 0.0


def test_flat_market_follows_the_documented_zero_cases() -> None:
    """A moving market that goes flat (H == L == C, equal volumes) for good: MD == 0 -> CCI 0,
    no falling bar -> MFI 100, H == L -> EMV 0, each exactly, once the windows hold only
    flat bars; an index equal to its EMA is neither above nor below it."""
    moving, flat = 300, 40
    o, h, l, c, v = (a[:, :4] for a in _random_market(moving, 4, seed=11))
    price = np.concatenate([c, np.full((flat, 4), c[-1])])
    high = np.concatenate([h, price[moving:]])
    low = np.concatenate([l, price[moving:]])
    volume = np.concatenate([v * 1234.567, np.full((flat, 4), 1000.0)])
    panel = compute_panel(price, high, low, price, volume, device="cpu")
    raw = _raw_history(price, high, low, price, volume)
    after = moving + 20  # every 20-bar window is flat from here on
    assert (raw[after:, RAW["cci"]] == 0.0).all()
    assert (raw[after:, RAW["mfi"]] == 100.0).all()
    assert (raw[after:, RAW["eom"]] == 0.0).all()
    last = panel[-1]
    assert (last[TERMINAL_INDEX["cci_above_100"]] == 0).all()
    assert (last[TERMINAL_INDEX["cci_below_minus_100"]] == 0).all()
    assert (last[TERMINAL_INDEX["mfi_above_80"]] == 1).all()
    assert (last[TERMINAL_INDEX["mfi_below_20"]] == 0).all()
    assert (last[TERMINAL_INDEX["eom_above_zero"]] == 0).all()
    assert (last[TERMINAL_INDEX["eom_below_zero"]] == 0).all()

    const = np.full((260, 1), 20.0)  # past the 255-bar warm-up of the NVI/PVI EMAs
    const_panel = compute_panel(const, const, const, const, const * 50.0, device="cpu")
    const_raw = _raw_history(const, const, const, const, const * 50.0)
    assert (const_raw[:, RAW["nvi"]] == 1000.0).all()
    assert (const_raw[:, RAW["pvi"]] == 1000.0).all()
    assert (const_raw[254:, RAW["nvi_ema255"]] == 1000.0).all()
    for name in ("nvi_above", "nvi_below", "pvi_above", "pvi_below"):
        assert const_panel[-1, TERMINAL_INDEX[name], 0] == 0.0


# ---- tests: bad input ------------------------------------------------------------------------
def test_bad_input_is_a_one_line_value_error() -> None:
    o, h, l, c, v = _random_market(30, 3, seed=1)
    c_bad = c.copy()
    c_bad[7, 2] = np.nan
    with pytest.raises(ValueError, match=r"close\[day 7, stock 2\] is nan"):
        compute_panel(o, h, l, c_bad, v, device="cpu")
    v_bad = v.copy()
    v_bad[3, 1] = -1.0
    with pytest.raises(ValueError, match=r"volume\[day 3, stock 1\]"):
        compute_panel(o, h, l, c, v_bad, device="cpu")
    c_bad[7, 2], c_bad[5, 1] = 1.0, 0.0
    with pytest.raises(ValueError, match=r"close\[day 5, stock 1\] is 0.0: .* > 0"):
        compute_panel(o, h, l, c_bad, v, device="cpu")
    with pytest.raises(ValueError, match="shape"):
        compute_panel(o[:-1], h, l, c, v, device="cpu")

    bank = IndicatorBank(3)
    sym = np.array([0, 1, 2], np.int32)
    with pytest.raises(ValueError, match="listed twice"):
        bank.update(np.array([0, 1, 1], np.int32), o[0], h[0], l[0], c[0], v[0])
    with pytest.raises(ValueError, match="symbol 5 is outside"):
        bank.update(np.array([0, 5, 1], np.int32), o[0], h[0], l[0], c[0], v[0])
    with pytest.raises(ValueError, match="closes must be finite"):
        bank.update(sym, o[0], h[0], l[0], np.array([1.0, np.inf, 1.0]), v[0])
    with pytest.raises(ValueError, match="volumes must be finite"):
        bank.update_one(1, 1.0, 1.0, 1.0, 1.0, math.nan)
    with pytest.raises(ValueError, match="symbol -1 is outside"):
        bank.update_one(-1, 1.0, 1.0, 1.0, 1.0, 1.0)
    assert bank.bars_seen.sum() == 0 and np.isnan(bank.values).all()  # nothing advanced


# ---- tests: CUDA (simulator in CI) -----------------------------------------------------------
needs_cuda = pytest.mark.skipif(not cuda_present(), reason="no CUDA GPU and no simulator")


def _assert_close_across_backends(
    got: np.ndarray, want: np.ndarray, raw: np.ndarray, rel: float
) -> None:
    """got/want: (days, 31, stocks) panels; raw: float64 CPU values behind `want`."""
    assert_same_nan(got, want, "panel")
    np.testing.assert_allclose(got[:, :N_FLOAT], want[:, :N_FLOAT], rtol=1e-6)
    ref = {name: raw[:, i, :] for name, i in RAW.items()}
    ref["scale_eom"] = ref["close"]  # price level: only used to excuse flips at EOM ~ 0
    for name in BOOL_INPUTS:
        i = TERMINAL_INDEX[name]
        flip = (got[:, i] != want[:, i]) & ~np.isnan(want[:, i])
        assert not (flip & ~near_threshold(ref, name, rel)).any(), name


@needs_cuda
def test_cuda_panel_matches_cpu_on_a_tiny_random_market() -> None:
    arrays = _random_market(300, 3, seed=3)  # > 255 bars so the NVI/PVI EMAs are defined
    arrays[1][40, 1] = np.nan  # one missing high
    cpu = compute_panel(*arrays, device="cpu")
    gpu = compute_panel(*arrays, device="cuda")
    _assert_close_across_backends(gpu, cpu, _raw_history(*arrays), 1e-9)
    assert np.isfinite(cpu[-1]).all()


@needs_cuda
def test_cuda_bank_matches_cpu_bank_for_a_few_bars() -> None:
    o, h, l, c, v = _random_market(40, 3, seed=4)
    gpu, cpu = IndicatorBank(4, device="cuda"), IndicatorBank(4, device="cpu")
    symbols = np.array([3, 0, 1], np.int32)
    for d in range(35):
        gpu.update(symbols, o[d], h[d], l[d], c[d], v[d])
        cpu.update(symbols, o[d], h[d], l[d], c[d], v[d])
    for d in range(35, 40):
        gpu.update_one(2, o[d, 0], h[d, 0], l[d, 0], c[d, 0], v[d, 0])
        cpu.update_one(2, o[d, 0], h[d, 0], l[d, 0], c[d, 0], v[d, 0])
    # the banks as one-day panels (1, 31, symbols), with the CPU bank's float64 values
    raw = cpu._state[:, core.S_RAW : core.S_RAW + core.N_RAW].T[None]
    _assert_close_across_backends(gpu.values.T[None], cpu.values.T[None], raw, 1e-9)
    assert np.isfinite(cpu.values[symbols, : N_FLOAT - 2]).any()
    assert gpu.bars_seen.tolist() == cpu.bars_seen.tolist() == [35, 35, 5, 35]
    with pytest.raises(ValueError, match="listed twice"):
        gpu.update(np.array([1, 1], np.int32), o[0, :2], h[0, :2], l[0, :2], c[0, :2], v[0, :2])
    gpu.reset()
    assert np.isnan(gpu.values).all() and gpu.bars_seen.sum() == 0


@pytest.mark.gpu
@pytest.mark.skipif(
    cuda_simulated() or not cuda_present(), reason="needs a real CUDA GPU (not the simulator)"
)
def test_real_gpu_matches_cpu_on_all_complete_sp500_stocks(sp500: Frames) -> None:
    arrays = _arrays(sp500)
    cpu = compute_panel(*arrays, device="cpu")
    gpu = compute_panel(*arrays, device="cuda")
    _assert_close_across_backends(gpu, cpu, _raw_history(*arrays), 1e-9)
    # on the GPU, the incremental form reproduces the GPU panel bit for bit
    n_days, n_stocks = arrays[3].shape
    bank = IndicatorBank(n_stocks, device="cuda")
    symbols = np.arange(n_stocks, dtype=np.int32)
    for d in range(n_days):
        bank.update(symbols, *(a[d] for a in arrays))
    assert np.array_equal(bank.values, gpu[-1].T, equal_nan=True)


def test_grown_bank_keeps_state_of_existing_symbols() -> None:
    """A bank grown for new symbols continues the old symbols exactly (live engine)."""
    rng = np.random.default_rng(3)
    n_bars = 60
    c = 50 + np.cumsum(rng.normal(0, 0.5, (n_bars, 3)), axis=0)
    h, l = c + 0.3, c - 0.3
    v = rng.integers(1_000, 5_000, (n_bars, 3)).astype(np.float64)
    ref = IndicatorBank(3)
    small = IndicatorBank(2)
    for d in range(n_bars):
        ref.update(np.arange(3, dtype=np.int32), c[d], h[d], l[d], c[d], v[d])
        if d == 30:
            small = small.grown(3)
        if d < 30:
            small.update(np.arange(2, dtype=np.int32), c[d, :2], h[d, :2], l[d, :2], c[d, :2],
                         v[d, :2])
        else:
            small.update(np.arange(3, dtype=np.int32), c[d], h[d], l[d], c[d], v[d])
    np.testing.assert_array_equal(small.values[:2], ref.values[:2])
    assert small.bars_seen.tolist() == [n_bars, n_bars, n_bars - 30]
