"""Built-in moving-average crossover (`sma-cross`): long when the fast average is above the
slow.

Signals: +1 when MA(fast) > MA(slow), -1 when below (0 instead when long-only), the
previous signal when they are equal, 0 while either average is still warming up.
Long/short by default, entering at the first crossover (the seed table's behaviour: no
entry on FROM_ZERO). Long-only enters on FROM_ZERO, since its signals only move 0 <-> +1.

Any window a user names works (`sma-cross:20,100`, `sma-cross:12,26,ema`). Simple
averages of the indicator bank's windows (gpu.indicators.catalogue.SMA_WINDOWS: 5, 10, 20, 50, ...)
are read from the bank, as the GP evaluator reads them; any other window, and every
exponential average, is computed from the closes the engine keeps for the strategy (its
book's bar window, `history_bars`): the SMA as the mean of the last `w` closes, the EMA as
pandas' `ewm(span=w, adjust=False)` from the first close seen, warm from its w-th bar.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpu.indicators.catalogue import SMA_WINDOWS, TERMINAL_INDEX
from strategies.base import BookView, Features, Signals

CLOSE = 3  # the close column of a book's bar window


class SmaCross:
    def __init__(self, fast: int = 10, slow: int = 50, long_only: bool = False,
                 kind: str = "sma") -> None:
        if kind not in ("sma", "ema"):
            raise ValueError(f"sma-cross average {kind!r}: expected sma or ema")
        if not (1 <= fast < slow):
            raise ValueError(f"sma-cross needs 1 <= fast < slow, got {fast} and {slow}")
        self.fast, self.slow, self.kind = fast, slow, kind
        suffix = (",ema" if kind == "ema" else "") + (",long-only" if long_only else "")
        self.name = f"sma-cross({fast},{slow}{suffix})"
        self.long_only = long_only
        self.enter_on_from_zero = long_only
        #: read from the indicator bank (the GP evaluator's columns) or computed from bars
        self.from_bank = kind == "sma" and fast in SMA_WINDOWS and slow in SMA_WINDOWS
        #: closed bars the engine keeps for the strategy (0: none needed)
        self.history_bars = 0 if self.from_bank else slow
        if self.from_bank:
            self._fast_col = TERMINAL_INDEX[f"sma{fast}"]
            self._slow_col = TERMINAL_INDEX[f"sma{slow}"]
        self._signal: Signals = np.zeros(0, np.int8)
        self._book: BookView | None = None
        # EMA state per symbol: value of each average and closes seen
        self._ema = np.zeros((0, 2))
        self._seen = np.zeros(0, np.int64)

    def reset(self, symbols: list[str]) -> None:
        self._signal = np.zeros(len(symbols), np.int8)
        self._ema = np.zeros((len(symbols), 2))
        self._seen = np.zeros(len(symbols), np.int64)

    def see_book(self, book: BookView) -> None:
        self._book = book

    @property
    def signal(self) -> Signals:
        """Each symbol's last signal (the engine's compiled close, engine/trading/
        compiled_close.py, computes and sets them for a strategy read from the bank)."""
        return self._signal

    @signal.setter
    def signal(self, value: Signals) -> None:
        self._signal = value

    @property
    def fast_col(self) -> int:
        """The fast average's column in the indicator bank's values (`from_bank` only)."""
        return self._fast_col

    @property
    def slow_col(self) -> int:
        return self._slow_col

    def grow(self, n: int) -> None:
        """Symbols registered after reset (live mode)."""
        k = n - self._signal.shape[0]
        if k > 0:
            self._signal = np.concatenate([self._signal, np.zeros(k, np.int8)])
            self._ema = np.concatenate([self._ema, np.zeros((k, 2))])
            self._seen = np.concatenate([self._seen, np.zeros(k, np.int64)])

    def averages(self, features: Features, closed: npt.NDArray[np.bool_]
                 ) -> tuple[np.ndarray, np.ndarray]:
        """(fast, slow) per symbol now, NaN while warming up."""
        if self.from_bank:
            return (features[:, self._fast_col].astype(np.float64),
                    features[:, self._slow_col].astype(np.float64))
        if self._book is None:
            raise ValueError(f"{self.name} computes its averages from bars: it needs the "
                             "engine's book (see_book)")
        n = closed.size
        fast, slow = np.full(n, np.nan), np.full(n, np.nan)
        for i in range(n):
            if self.kind == "ema":
                self._catch_up(i)
                if self._seen[i] >= self.slow:
                    fast[i], slow[i] = self._ema[i]
                elif self._seen[i] >= self.fast:
                    fast[i] = self._ema[i, 0]
                continue
            c = self._book.bars(i, self.slow)[:, CLOSE]
            if c.size >= self.slow:
                fast[i], slow[i] = c[-self.fast:].mean(), c.mean()
        return fast, slow

    def _catch_up(self, i: int) -> None:
        """Feed the symbol's EMAs the closes of the bars closed since the last call (the
        warm-up's too: up to `history_bars` of them are still in the book)."""
        assert self._book is not None
        missed = self._book.bars_seen(i) - int(self._seen[i])
        if missed <= 0:
            return
        for close in self._book.bars(i, missed)[:, CLOSE].tolist():
            if self._seen[i] == 0:
                self._ema[i] = close
            else:
                for j, w in enumerate((self.fast, self.slow)):
                    alpha = 2.0 / (w + 1.0)
                    self._ema[i, j] = alpha * close + (1.0 - alpha) * self._ema[i, j]
            self._seen[i] += 1
        self._seen[i] = self._book.bars_seen(i)

    async def target_signals(self, features: Features, closed: npt.NDArray[np.bool_]
                             ) -> Signals:
        self.grow(features.shape[0])
        fast, slow = self.averages(features, closed)
        new = self._signal.copy()
        warm = ~(np.isfinite(fast) & np.isfinite(slow))
        new[fast > slow] = 1
        new[fast < slow] = 0 if self.long_only else -1
        new[warm] = 0
        # symbols whose bar did not close keep their signal
        self._signal = np.where(closed, new, self._signal).astype(np.int8)
        return self._signal


def parse_sma_cross(spec: str) -> SmaCross:
    """ "sma-cross", "sma-cross:20,100", "sma-cross:10,50,long-only",
    "sma-cross:12,26,ema[,long-only]"."""
    _, _, args = spec.partition(":")
    if not args:
        return SmaCross()
    parts = [p.strip() for p in args.split(",") if p.strip()]
    long_only = "long-only" in parts
    kind = "ema" if "ema" in parts else "sma"
    nums = [p for p in parts if p not in ("long-only", "ema", "sma")]
    try:
        fast, slow = (int(x) for x in nums) if nums else (10, 50)
    except ValueError:
        raise ValueError(
            f"bad sma-cross spec {spec!r}: expected sma-cross:FAST,SLOW[,ema][,long-only]"
        ) from None
    return SmaCross(fast, slow, long_only, kind)
