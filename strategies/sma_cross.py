"""Built-in SMA-crossover strategy (`sma-cross`): long when the fast SMA is above the slow.

Signals: +1 when SMA(fast) > SMA(slow), -1 when below (0 instead when long-only), the
previous signal when they are equal, 0 while either average is still warming up.
Long/short by default, entering at the first crossover (the seed table's behaviour: no
entry on FROM_ZERO). Long-only enters on FROM_ZERO, since its signals only move 0 <-> +1.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpu.terminals import SMA_WINDOWS, TERMINAL_INDEX
from strategies.base import Features, Signals


class SmaCross:
    def __init__(self, fast: int = 10, slow: int = 50, long_only: bool = False) -> None:
        for w in (fast, slow):
            if w not in SMA_WINDOWS:
                raise ValueError(
                    f"sma-cross window {w} is not one of the indicator bank's SMA windows "
                    f"{SMA_WINDOWS}"
                )
        if fast >= slow:
            raise ValueError(f"sma-cross needs fast < slow, got {fast} and {slow}")
        self.fast, self.slow = fast, slow
        self.name = f"sma-cross({fast},{slow}{',long-only' if long_only else ''})"
        self.long_only = long_only
        self.enter_on_from_zero = long_only
        self._fast_col = TERMINAL_INDEX[f"sma{fast}"]
        self._slow_col = TERMINAL_INDEX[f"sma{slow}"]
        self._signal: Signals = np.zeros(0, np.int8)

    def reset(self, symbols: list[str]) -> None:
        self._signal = np.zeros(len(symbols), np.int8)

    async def target_signals(self, features: Features, closed: npt.NDArray[np.bool_]) -> Signals:
        n = features.shape[0]
        if self._signal.shape[0] < n:  # symbols registered after reset (live mode)
            self._signal = np.concatenate(
                [self._signal, np.zeros(n - self._signal.shape[0], np.int8)]
            )
        fast = features[:, self._fast_col]
        slow = features[:, self._slow_col]
        new = self._signal.copy()
        warm = ~(np.isfinite(fast) & np.isfinite(slow))
        new[fast > slow] = 1
        new[fast < slow] = 0 if self.long_only else -1
        new[warm] = 0
        # symbols whose bar did not close keep their signal
        self._signal = np.where(closed, new, self._signal).astype(np.int8)
        return self._signal


def parse_sma_cross(spec: str) -> SmaCross:
    """ "sma-cross", "sma-cross:20,100" or "sma-cross:10,50,long-only"."""
    _, _, args = spec.partition(":")
    if not args:
        return SmaCross()
    parts = [p.strip() for p in args.split(",") if p.strip()]
    long_only = "long-only" in parts
    nums = [p for p in parts if p != "long-only"]
    try:
        fast, slow = (int(x) for x in nums) if nums else (10, 50)
    except ValueError:
        raise ValueError(
            f"bad sma-cross spec {spec!r}: expected sma-cross:FAST,SLOW[,long-only]"
        ) from None
    return SmaCross(fast, slow, long_only)
