"""What a strategy may see of its book: positions, cash, equity and its last bars.

`BarHistory` keeps each symbol's last `length` closed bars (open, high, low, close,
volume) in one ring array; the engine pushes the closing bars of a bar event into it after
the indicator bank (one array store per symbol and bar event, nothing per tick). It is
kept only when something reads it (a strategy that asks for bars, volatility-target
sizing), so the GP paper's path pays nothing for it.

`EngineBook` is the read-only view a strategy gets (`strategies.base.BookView`): copies of
positions and of the bar windows, never the engine's own arrays, so a strategy cannot move
the book by writing into what it was shown.
"""

from __future__ import annotations

import numpy as np

from engine.trading.broker import PaperBroker

#: columns of a bar window
OPEN, HIGH, LOW, CLOSE, VOLUME = range(5)


class BarHistory:
    """The last `length` closed bars of every symbol, oldest first when read."""

    def __init__(self, n: int, length: int) -> None:
        if length < 1:
            raise ValueError(f"a bar history keeps at least 1 bar, got {length}")
        self.length = length
        self._ring = np.full((max(n, 1), length, 5), np.nan)
        self._count = np.zeros(max(n, 1), np.int64)

    def add_symbol(self) -> None:
        n = len(self._count)
        self._ring = np.concatenate([self._ring, np.full((n, self.length, 5), np.nan)])
        self._count = np.concatenate([self._count, np.zeros(n, np.int64)])

    def ensure(self, n: int) -> None:
        while len(self._count) < n:
            self.add_symbol()

    def push(self, idx: list[int], o: list[float], h: list[float], lo: list[float],
             c: list[float], v: list[float]) -> None:
        """The bars of `idx` closed with these values (the open bars' lists)."""
        if not idx:
            return
        self.ensure(max(idx) + 1)
        rows = np.asarray(idx, np.int64)
        slots = self._count[rows] % self.length
        self._ring[rows, slots] = np.column_stack(
            [[o[i] for i in idx], [h[i] for i in idx], [lo[i] for i in idx],
             [c[i] for i in idx], [v[i] for i in idx]])
        self._count[rows] += 1

    def window(self, sym: int, n: int | None = None) -> np.ndarray:
        """A copy of the symbol's last `n` bars (all kept when None), oldest first, shape
        (bars, 5): open, high, low, close, volume; fewer rows while fewer are known."""
        if sym >= len(self._count):
            return np.zeros((0, 5))
        count = int(self._count[sym])
        k = min(count, self.length, self.length if n is None else max(0, n))
        if k == 0:
            return np.zeros((0, 5))
        end = count % self.length
        order = (np.arange(end - k, end) % self.length)
        return self._ring[sym, order].copy()

    def seen(self, sym: int) -> int:
        """Bars pushed for the symbol so far (more than are kept, once the ring is full)."""
        return int(self._count[sym]) if sym < len(self._count) else 0

    def closes(self, sym: int, n: int) -> np.ndarray:
        """The symbol's last `n` closes, oldest first (fewer while fewer are known)."""
        return self.window(sym, n)[:, CLOSE]


class EngineBook:
    """The read-only book a strategy sees (strategies.base.BookView)."""

    def __init__(self, broker: PaperBroker, history: BarHistory | None) -> None:
        self._broker = broker
        self._history = history

    @property
    def symbols(self) -> list[str]:
        return list(self._broker.symbols)

    @property
    def cash(self) -> float:
        return self._broker.total_cash()

    @property
    def equity(self) -> float:
        return self._broker.equity()

    def positions(self) -> np.ndarray:
        """Units held per symbol (negative: short), in the engine's symbol order."""
        return np.asarray([a.position for a in self._broker.accounts], np.float64)

    def bars_seen(self, sym: int) -> int:
        """Closed bars of the symbol so far (0 without `history_bars`)."""
        return 0 if self._history is None else self._history.seen(sym)

    def bars(self, sym: int, n: int | None = None) -> np.ndarray:
        """The symbol's last `n` closed bars (open, high, low, close, volume), oldest
        first; empty when the strategy asked for no history (`history_bars`)."""
        if self._history is None:
            return np.zeros((0, 5))
        return self._history.window(sym, n)
