"""A deterministic synthetic tick market: regime-switching mid prices seen through a spread.

Model, per symbol (all randomness from numpy PCG64 Generators spawned from one SeedSequence,
so a seed reproduces the market exactly, whatever the consumer does with the chunks):

- Arrivals: one market-wide Poisson process at `tick_rate` trades/second per symbol on
  average (0.5 by default: a trade every ~2 s), each trade assigned to a symbol with fixed
  activity weights in [0.5, 1.5]. Time runs only inside the New York regular session,
  09:30-16:00 on business days (Mon-Fri; exchange holidays are not modelled) from `start`,
  so 200,000 trades over 10 symbols span about 1.7 sessions (~650 one-minute bars a symbol).
- True mid price, in log space, alternating two regimes of random (exponential, mean 30 min
  of session time) length:
    trending       dx = mu dt + sigma dW, |mu| = (1..2) sigma / sqrt(30 min), random sign;
    mean-reverting Ornstein-Uhlenbeck around the level where the regime began, half-life
      1-10 minutes, exact discretisation over each inter-trade interval.
  sigma is 1-3 % a day (per sqrt(session second): daily / sqrt(23,400)); prices start at
  10-300 USD (log-uniform).
- Quotes: bid = mid - half the symbol's spread rounded down to the cent, ask = bid + spread
  (spread 2-5 bp of the start price, at least 1 cent); a trade prints at the bid or the ask
  with equal odds (bid-ask bounce), so trade-price changes have negative lag-1
  autocorrelation, as real ticks do. Prices are whole cents and at least 0.01.
- Sizes: 100 x Geometric(0.4) shares for trades, 100 x Geometric(0.25) for quote sides.

`with_quotes=True` emits, before each trade, a KIND_QUOTE record with the same ts holding the
bid/ask at that moment. `regimes()` returns, for every record in `chunks()` order, the regime
that generated its price (REGIME_TREND or REGIME_MEAN_REVERT), for tests and demos.

Generation is vectorised per chunk (random arrays drawn at once, the per-symbol recursion in
one numba loop): about a million trades a second.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator

import numpy as np
from numba import njit

from feeds.records import (
    CHUNK_RECORDS,
    KIND_QUOTE,
    KIND_TRADE,
    NS_PER_SECOND,
    RECORD_DTYPE,
    SkipCounter,
    as_date,
    date_ns,
    ns_to_local_ms,
)

REGIME_TREND = 0
REGIME_MEAN_REVERT = 1
SESSION_SECONDS = 23_400.0  # 09:30-16:00
MEAN_REGIME_SECONDS = 1_800.0
HALF_LIFE_RANGE = (60.0, 600.0)  # seconds, mean-reverting regime
LOT = 100.0


@njit(cache=True)
def _evolve_mid(
    sym: np.ndarray,
    t: np.ndarray,
    z: np.ndarray,
    e_len: np.ndarray,
    u_param: np.ndarray,
    u_sign: np.ndarray,
    x: np.ndarray,
    regime: np.ndarray,
    remaining: np.ndarray,
    mu: np.ndarray,
    level: np.ndarray,
    theta: np.ndarray,
    last_t: np.ndarray,
    sigma: np.ndarray,
    out_x: np.ndarray,
    out_regime: np.ndarray,
) -> None:
    """Advance each symbol's log mid to its trades' times; switch regimes when they expire.

    Per-symbol state arrays are updated in place (they carry over to the next chunk).
    `out_regime[k]` is the regime that moved the price from the symbol's previous trade to k.
    """
    mu_scale = 1.0 / math.sqrt(MEAN_REGIME_SECONDS)
    for k in range(len(sym)):
        s = sym[k]
        step = t[k] - last_t[s]
        if step < 0.0:
            step = 0.0
        last_t[s] = t[k]
        if regime[s] == REGIME_TREND:
            x[s] += mu[s] * step + sigma[s] * math.sqrt(step) * z[k]
        else:
            a = math.exp(-theta[s] * step)
            sd = sigma[s] * math.sqrt((1.0 - a * a) / (2.0 * theta[s]))
            x[s] = level[s] + (x[s] - level[s]) * a + sd * z[k]
        out_x[k] = x[s]
        out_regime[k] = regime[s]
        remaining[s] -= step
        if remaining[s] <= 0.0:
            remaining[s] = MEAN_REGIME_SECONDS * e_len[k]
            if regime[s] == REGIME_TREND:
                regime[s] = REGIME_MEAN_REVERT
                level[s] = x[s]
                half_life = (
                    HALF_LIFE_RANGE[0] + (HALF_LIFE_RANGE[1] - HALF_LIFE_RANGE[0]) * u_param[k]
                )
                theta[s] = math.log(2.0) / half_life
            else:
                regime[s] = REGIME_TREND
                sign = 1.0 if u_sign[k] < 0.5 else -1.0
                mu[s] = sign * (1.0 + u_param[k]) * mu_scale * sigma[s]


class SyntheticMarket:
    """The built-in synthetic market as a Source (see the module docstring for the model).

    `n_ticks` trades in total over `n_symbols` symbols named SYN000, SYN001, ...; `start` the
    first session's date (rolled forward to a business day).
    """

    def __init__(
        self,
        n_symbols: int = 10,
        n_ticks: int = 200_000,
        seed: int = 1,
        start: str | dt.date | np.datetime64 = "2024-01-02",
        with_quotes: bool = False,
        tick_rate: float = 0.5,
    ) -> None:
        if n_symbols < 1:
            raise ValueError(f"n_symbols must be >= 1, got {n_symbols}")
        if n_ticks < 0:
            raise ValueError(f"n_ticks must be >= 0, got {n_ticks}")
        if not tick_rate > 0:
            raise ValueError(f"tick_rate must be > 0, got {tick_rate}")
        self.n_symbols = int(n_symbols)
        self.n_ticks = int(n_ticks)
        self.seed = int(seed)
        self.start = as_date(start)
        self.with_quotes = with_quotes
        self.tick_rate = float(tick_rate)
        width = max(3, len(str(self.n_symbols - 1)))
        self.symbols: list[str] = [f"SYN{i:0{width}d}" for i in range(self.n_symbols)]
        self.name = (
            f"synthetic market: {self.n_ticks} trades, {self.n_symbols} symbols, "
            f"seed {self.seed}, from {self.start}"
        )
        self.skipped = SkipCounter(self.name)  # nothing is ever malformed here
        self._first_day = np.busday_offset(np.datetime64(self.start, "D"), 0, roll="forward")

    # -- public
    def chunks(self) -> Iterator[np.ndarray]:
        for records, _ in self._generate():
            yield records

    def regimes(self) -> np.ndarray:
        """Regime label (uint8) of every record, aligned with the concatenated chunks."""
        parts = [labels for _, labels in self._generate()]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)

    def session_dates(self) -> np.ndarray:
        """The business days (datetime64[D]) the market's trades fall on."""
        dates = set()
        for records, _ in self._generate():
            dates.update(self._day_of_ts(records["ts"]).tolist())
        return np.array(sorted(dates), dtype="M8[D]")

    # -- generation
    def _streams(self) -> dict[str, np.random.Generator]:
        # one generator per variate: each stream is then consumed in order whatever the chunk
        # size, so a shorter market is an exact prefix of a longer one with the same seed
        names = (
            "init", "arrival", "symbol", "mid", "regime_length", "regime_param", "regime_sign",
            "side", "trade_size", "bid_size", "ask_size",
        )  # fmt: skip
        children = np.random.SeedSequence(self.seed).spawn(len(names))
        return {
            n: np.random.Generator(np.random.PCG64(c)) for n, c in zip(names, children, strict=True)
        }

    def _generate(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        n = self.n_symbols
        rng = self._streams()
        init = rng["init"]
        price0 = np.exp(init.uniform(np.log(10.0), np.log(300.0), n))
        daily_vol = init.uniform(0.01, 0.03, n)
        sigma = daily_vol / math.sqrt(SESSION_SECONDS)
        weights = init.uniform(0.5, 1.5, n)
        cum_weights = np.cumsum(weights / weights.sum())
        cum_weights[-1] = 1.0
        spread_cents = np.maximum(1.0, np.round(price0 * init.uniform(2e-4, 5e-4, n) * 100.0))
        # per-symbol regime state (carried across chunks by _evolve_mid)
        x = np.log(price0)
        regime = (init.random(n) < 0.5).astype(np.int64)
        remaining = MEAN_REGIME_SECONDS * init.exponential(1.0, n)
        mu = (
            np.where(init.random(n) < 0.5, 1.0, -1.0)
            * (1.0 + init.random(n))
            * sigma
            / math.sqrt(MEAN_REGIME_SECONDS)
        )
        level = x.copy()
        half_life = init.uniform(*HALF_LIFE_RANGE, n)
        theta = math.log(2.0) / half_life
        last_t = np.zeros(n)

        market_rate = self.tick_rate * n  # trades per session second, all symbols
        per_chunk = CHUNK_RECORDS // 2 if self.with_quotes else CHUNK_RECORDS
        clock = 0.0  # session seconds since the first open
        open_ns: dict[int, int] = {}
        done = 0
        while done < self.n_ticks:
            m = min(per_chunk, self.n_ticks - done)
            t = clock + np.cumsum(rng["arrival"].exponential(1.0 / market_rate, m))
            clock = float(t[-1])
            sym = np.searchsorted(cum_weights, rng["symbol"].random(m), side="right")
            sym = np.minimum(sym, n - 1).astype(np.int64)
            z = rng["mid"].standard_normal(m)
            e_len = rng["regime_length"].exponential(1.0, m)
            u_param = rng["regime_param"].random(m)
            u_sign = rng["regime_sign"].random(m)
            buy = rng["side"].random(m) < 0.5
            trade_size = LOT * rng["trade_size"].geometric(0.4, m)
            bid_size = LOT * rng["bid_size"].geometric(0.25, m)
            ask_size = LOT * rng["ask_size"].geometric(0.25, m)

            log_mid = np.empty(m)
            labels = np.empty(m, dtype=np.int64)
            _evolve_mid(
                sym, t, z, e_len, u_param, u_sign, x, regime, remaining, mu, level, theta,
                last_t, sigma, log_mid, labels,
            )  # fmt: skip
            spread = spread_cents[sym]
            bid_c = np.maximum(1.0, np.floor(np.exp(log_mid) * 100.0 - spread / 2.0))
            ask_c = bid_c + spread
            price = np.where(buy, ask_c, bid_c) / 100.0
            ts = self._timestamps(t, open_ns)

            trades = np.zeros(m, dtype=RECORD_DTYPE)
            trades["ts"] = ts
            trades["sym"] = sym
            trades["kind"] = KIND_TRADE
            trades["f0"] = price
            trades["f1"] = trade_size
            if self.with_quotes:
                out = np.zeros(2 * m, dtype=RECORD_DTYPE)
                quotes = out[0::2]
                quotes["ts"] = ts
                quotes["sym"] = sym
                quotes["kind"] = KIND_QUOTE
                quotes["f0"] = bid_c / 100.0
                quotes["f1"] = bid_size
                quotes["f2"] = ask_c / 100.0
                quotes["f3"] = ask_size
                out[1::2] = trades
                yield out, np.repeat(labels.astype(np.uint8), 2)
            else:
                yield trades, labels.astype(np.uint8)
            done += m

    def _timestamps(self, t: np.ndarray, open_ns: dict[int, int]) -> np.ndarray:
        """UTC ns of session-clock seconds `t`: day k's 09:30 New York plus the remainder."""
        day = np.floor(t / SESSION_SECONDS).astype(np.int64)
        within = t - day * SESSION_SECONDS
        uniq, inverse = np.unique(day, return_inverse=True)
        opens = np.empty(len(uniq), dtype=np.int64)
        for i, k in enumerate(uniq.tolist()):
            if k not in open_ns:
                date = np.busday_offset(self._first_day, k, roll="forward")
                open_ns[k] = date_ns(as_date(date), 9, 30)
            opens[i] = open_ns[k]
        # floor keeps every time strictly before 16:00 and preserves the order of `t`
        within_ns = np.minimum(
            np.floor(within * NS_PER_SECOND).astype(np.int64),
            int(SESSION_SECONDS) * NS_PER_SECOND - 1,
        )
        return opens[inverse.reshape(-1)] + within_ns

    def _day_of_ts(self, ts: np.ndarray) -> np.ndarray:
        days, _ = ns_to_local_ms(ts)
        return days
