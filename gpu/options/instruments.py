"""What an option is, apart from how it is priced: contracts and the market they are valued in.

As in QuantLib, the instrument (`OptionContract`: strike, expiry, right, exercise style)
is separate from the market inputs (`MarketInputs`: spot, vol, rate, dividend yield) and
from the pricing engine (`gpu.options.engines.FdPricingEngine`,
`gpu.options.engines.AnalyticEuropeanEngine`), so a caller that holds contracts never knows which
device, grid or formula prices them.

`OptionContracts` is a batch of contracts as parallel arrays (a chain, an option group):
engines price a whole batch at once. Units: expiry is the time to expiry in years at the
valuation time (calendar days / 365 where a date is involved; ≤ 0 means expired, valued
at intrinsic); vol, rate and dividend yield per year, continuously compounded (the yield
q is paid by the underlying: its forward is S·e^((r−q)T); q = 0 by default, which leaves
every value as without dividends, bit for bit).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: the dividend yields accepted, per year: beyond ±100% a yield is a units mistake
#: (a percentage typed as a number), not a market
DIVIDEND_YIELD_LIMIT = 1.0


def check_dividend_yield(q: npt.ArrayLike, what: str = "dividend yield") -> None:
    """Raise ValueError (one line) unless every yield is a finite number in [−1, 1]."""
    a = np.asarray(q, dtype=np.float64)
    bad = ~(np.isfinite(a) & (np.abs(a) <= DIVIDEND_YIELD_LIMIT))
    if bad.any():
        first = a.reshape(-1)[int(np.flatnonzero(bad.reshape(-1))[0])]
        raise ValueError(f"{what} must be a finite number in [-1, 1] per year "
                         f"(0.02 for 2%), got {float(first)!r}")


class Right(enum.Enum):
    """Call or put; the value is the one-letter code used in symbols and configs."""

    CALL = "C"
    PUT = "P"


class Exercise(enum.Enum):
    """Exercise style: only at expiry (European) or at any time until then (American)."""

    EUROPEAN = "european"
    AMERICAN = "american"


@dataclass(frozen=True)
class OptionContract:
    """One option: strike (> 0), time to expiry in years, right and exercise style."""

    strike: float
    expiry: float
    right: Right = Right.CALL
    exercise: Exercise = Exercise.EUROPEAN


@dataclass(frozen=True)
class OptionContracts:
    """A batch of contracts as parallel arrays, the form engines price.

    Build it with `OptionContracts.of(strike, expiry, is_call, is_american)` (broadcast
    arrays) or `OptionContracts.from_contracts([...])`.
    """

    strike: FloatArray
    expiry: FloatArray
    is_call: BoolArray
    is_american: BoolArray

    @classmethod
    def of(
        cls,
        strike: npt.ArrayLike,
        expiry: npt.ArrayLike,
        is_call: npt.ArrayLike = True,
        is_american: npt.ArrayLike = False,
    ) -> OptionContracts:
        """Contracts from broadcastable arrays (scalars repeat)."""
        k, t, c, a = np.broadcast_arrays(
            np.asarray(strike, dtype=np.float64),
            np.asarray(expiry, dtype=np.float64),
            np.asarray(is_call, dtype=bool),
            np.asarray(is_american, dtype=bool),
        )
        return cls(k.ravel().copy(), t.ravel().copy(), c.ravel().copy(), a.ravel().copy())

    @classmethod
    def from_contracts(cls, contracts: Iterable[OptionContract]) -> OptionContracts:
        items = list(contracts)
        return cls.of(
            [c.strike for c in items],
            [c.expiry for c in items],
            [c.right is Right.CALL for c in items],
            [c.exercise is Exercise.AMERICAN for c in items],
        )

    def __len__(self) -> int:
        return int(self.strike.shape[0])

    def __getitem__(self, index: int) -> OptionContract:
        return OptionContract(
            float(self.strike[index]),
            float(self.expiry[index]),
            Right.CALL if self.is_call[index] else Right.PUT,
            Exercise.AMERICAN if self.is_american[index] else Exercise.EUROPEAN,
        )

    def select(self, mask: npt.NDArray[np.bool_] | npt.NDArray[np.intp]) -> OptionContracts:
        """The contracts where `mask` is true (or at the given indices)."""
        return OptionContracts(self.strike[mask], self.expiry[mask], self.is_call[mask],
                               self.is_american[mask])

    def with_expiry(self, expiry: npt.ArrayLike) -> OptionContracts:
        """The same contracts at other times to expiry (the valuation date moved)."""
        t = np.broadcast_to(np.asarray(expiry, dtype=np.float64), self.strike.shape)
        return OptionContracts(self.strike, t.copy(), self.is_call, self.is_american)

    def with_exercise(self, is_american: npt.ArrayLike) -> OptionContracts:
        """The same contracts with another exercise style (scalar or per contract)."""
        a = np.broadcast_to(np.asarray(is_american, dtype=bool), self.strike.shape)
        return OptionContracts(self.strike, self.expiry, self.is_call, a.copy())


@dataclass(frozen=True)
class MarketInputs:
    """What the market adds to a contract: underlying spot, volatility, rate and continuous
    dividend yield per year.

    Each is a scalar or one value per contract (broadcast against the contracts). The
    dividend yield is checked here (finite, in [−1, 1]); the rest where rows are built.
    """

    spot: npt.ArrayLike
    vol: npt.ArrayLike
    rate: npt.ArrayLike = 0.0
    dividend_yield: npt.ArrayLike = 0.0

    def __post_init__(self) -> None:
        check_dividend_yield(self.dividend_yield)

    def with_vol(self, vol: npt.ArrayLike) -> MarketInputs:
        return MarketInputs(self.spot, vol, self.rate, self.dividend_yield)

    def select(self, mask: npt.NDArray[np.bool_] | npt.NDArray[np.intp],
               n: int) -> MarketInputs:
        """The inputs of the contracts where `mask` is true, of a batch of `n` contracts."""
        s, v, r, q = (np.broadcast_to(np.asarray(x, dtype=np.float64), (n,))[mask]
                      for x in (self.spot, self.vol, self.rate, self.dividend_yield))
        return MarketInputs(s, v, r, q)
