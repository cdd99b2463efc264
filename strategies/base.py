"""The strategy protocol: indicator values of all symbols in, target signals out.

A strategy sees, when bars close, a float32 matrix `features[symbol, terminal]` laid out as
`gpu.terminals.TERMINALS` (NaN where an indicator is still warming up) and returns the
target signal of every symbol: -1 short, 0 flat, +1 long (int8). The engine turns signal
transitions into orders through the exhaustive trading-phase table (engine/phases.py).

`target_signals` is a coroutine so that a strategy whose evaluation runs on the GPU can
launch one batched kernel for all symbols and await it without blocking the event loop.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

Features = npt.NDArray[np.float32]   # (n_symbols, N_TERMINALS)
Signals = npt.NDArray[np.int8]       # (n_symbols,) in {-1, 0, +1}


@runtime_checkable
class Strategy(Protocol):
    name: str
    #: whether a flat position also enters on a FROM_ZERO transition (0 -> ±1). The GP paper's
    #: long-only decision matrix needs it; the seed table enters only on CHANGE.
    enter_on_from_zero: bool
    #: never go short: a -1 signal is treated as 0 (flat).
    long_only: bool

    def reset(self, symbols: list[str]) -> None:
        """Called once before the first bar with the engine's symbol table."""
        ...

    async def target_signals(self, features: Features, closed: npt.NDArray[np.bool_]) -> Signals:
        """Signals for all symbols; `closed[i]` marks symbols whose bar just closed.

        Rows of symbols whose bar did not close carry their last values; a strategy must
        return the previous signal for them unchanged.
        """
        ...


@runtime_checkable
class OverlappedStrategy(Strategy, Protocol):
    """A strategy whose bar-close evaluation can run while the engine goes on receiving.

    `begin_signals` starts the evaluation of one bar close (on a GPU: a launch) and returns
    at once; `end_signals` returns the signals `target_signals` would have returned for the
    same call. Between the two the engine applies the ticks that follow the close but holds
    back their fills (engine.core.Engine: overlapped decisions), so the evaluation runs
    between transactions and the results are those of a bar close that waited."""

    #: True where `begin_signals` returns before the evaluation is done (a GPU launch);
    #: the engine overlaps only such strategies unless told to always
    asynchronous: bool

    def begin_signals(self, features: Features, closed: npt.NDArray[np.bool_]) -> None:
        """Start the evaluation of one bar close; `features` is not changed until
        `end_signals` returned."""
        ...

    async def end_signals(self) -> Signals:
        """The signals of the evaluation `begin_signals` started."""
        ...
