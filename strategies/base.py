"""The strategy protocol: indicator values of all symbols in, target signals out.

A strategy sees, when bars close, a float32 matrix `features[symbol, terminal]` laid out as
`gpu.indicators.catalogue.TERMINALS` (NaN where an indicator is still warming up) and returns the
target signal of every symbol: -1 short, 0 flat, +1 long (int8). The engine turns signal
transitions into orders through the exhaustive trading-phase table (engine/phases.py).

`target_signals` is a coroutine so that a strategy whose evaluation runs on the GPU can
launch one batched kernel for all symbols and await it without blocking the event loop.

What else a strategy may see and say (issue 29):
- its book, read-only (`BookView`): positions, cash, equity and, when it sets
  `history_bars = N`, each symbol's last N closed bars (open, high, low, close, volume).
  The engine hands it over once, before the first bar, through `see_book` (`BookAware`);
  every read is a copy, so writing into it moves nothing.
- target weights (`WeightStrategy.target_weights`): a fraction of equity in [-1, 1] per
  symbol instead of a signal. The engine takes the weight's sign as the signal, so the
  trading-phase table still decides every entry and exit (and when: WAIT never enters,
  LIQUIDATE and STOP only close); an entry takes |weight| x equity, and while a position
  is held on the weight's side in the TRADE phase the engine trades it towards
  weight x equity whenever the difference is at least `[broker] min_trade` x equity
  (no churn on tiny drifts). A weight of the other sign is a switch, 0 a close.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

Features = npt.NDArray[np.float32]   # (n_symbols, N_TERMINALS)
Signals = npt.NDArray[np.int8]       # (n_symbols,) in {-1, 0, +1}
Weights = npt.NDArray[np.float64]    # (n_symbols,) in [-1, 1], fractions of equity


@runtime_checkable
class BookView(Protocol):
    """The strategy's book, read-only (engine/trading/book.py builds it over the account)."""

    @property
    def symbols(self) -> list[str]: ...

    @property
    def cash(self) -> float: ...

    @property
    def equity(self) -> float: ...

    def positions(self) -> npt.NDArray[np.float64]:
        """Units held per symbol (negative: short), in the engine's symbol order."""
        ...

    def bars_seen(self, sym: int) -> int:
        """Closed bars of the symbol so far (warm-up bars included)."""
        ...

    def bars(self, sym: int, n: int | None = None) -> npt.NDArray[np.float64]:
        """The symbol's last `n` closed bars, oldest first, columns open, high, low, close,
        volume (fewer rows while fewer are known; none without `history_bars`)."""
        ...


@runtime_checkable
class BookAware(Protocol):
    """A strategy that reads its book: the engine calls `see_book` once, after `reset`."""

    def see_book(self, book: BookView) -> None: ...


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
    back their fills (engine.trading.core.Engine: overlapped decisions), so the evaluation runs
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


@runtime_checkable
class WeightStrategy(Strategy, Protocol):
    """A strategy that says target weights (see the module docstring); `target_signals`
    is not called for it (the engine derives the signals from the weights' signs)."""

    async def target_weights(self, features: Features,
                             closed: npt.NDArray[np.bool_]) -> Weights:
        """A weight in [-1, 1] per symbol; symbols whose bar did not close keep theirs."""
        ...


@dataclass(frozen=True)
class OrderRequest:
    """An order a strategy places itself (`OrderingStrategy`): `sym` in the engine's symbol
    order, `side` +1 buy / -1 sell, `quantity` units; `limit`/`stop` prices where the type
    needs them; time in force DAY (until the exchange day ends), GTC or IOC (its first
    price or never). Fill rules: engine/trading/order_types.py."""

    sym: int
    side: int
    quantity: float
    type: Literal["market", "limit", "stop", "stop-limit"] = "market"
    limit: float = float("nan")
    stop: float = float("nan")
    tif: Literal["day", "gtc", "ioc"] = "gtc"


@runtime_checkable
class OrderingStrategy(Protocol):
    """A strategy that also places its own orders: after each bar close's decisions the
    engine asks `orders()` and works what it returns from the next price on. A fill of such
    an order makes the held position the intended one (so the phase table closes it at
    STOP and at the end of data); a strategy that places its own orders should answer
    signal 0 where it does not want the table to trade for it."""

    def orders(self) -> list[OrderRequest]: ...
