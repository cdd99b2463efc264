"""The American reference portfolio (american_reference.csv) and accuracy statistics on it.

The CSV is written by make_american_reference.py (QuantLib's QdFpAmericanEngine, converged
to ~1e-8 relative). `load_reference` gives the contracts and their market as the engine
takes them; `accuracy` compares prices with the reference the way the literature on
American option benchmarks does (e.g. Andersen, Lake and Offengenden 2016; kwinto-cuda):
RMSE over every contract, RRMSE and the worst relative error over the contracts worth at
least `RELATIVE_FLOOR` (0.5 on a spot of 100), where a relative error means something.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from gpu.options.instruments import MarketInputs, OptionContracts

REFERENCE_CSV = Path(__file__).resolve().parent / "american_reference.csv"
#: relative errors are taken over contracts worth at least this much (spot 100)
RELATIVE_FLOOR = 0.5

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Reference:
    """The portfolio: contract ids, contracts, market inputs and reference prices."""

    ids: npt.NDArray[np.int64]
    contracts: OptionContracts
    market: MarketInputs
    price: FloatArray       # American, QdFp high precision
    european: FloatArray    # analytic Black–Scholes–Merton with the dividend yield

    def __len__(self) -> int:
        return len(self.contracts)

    def subset(self, index: npt.NDArray[np.intp]) -> Reference:
        """The contracts at `index` (a sample, or the portfolio tiled)."""
        m = self.market
        return Reference(
            self.ids[index], self.contracts.select(index),
            MarketInputs(*(np.asarray(x, dtype=np.float64)[index]
                           for x in (m.spot, m.vol, m.rate, m.dividend_yield))),
            self.price[index], self.european[index])

    def sample(self, n: int, seed: int) -> Reference:
        """A seeded random sample of `n` contracts (without replacement, in id order)."""
        rng = np.random.default_rng(seed)
        return self.subset(np.sort(rng.choice(len(self), size=min(n, len(self)),
                                              replace=False)))

    def tiled(self, n: int) -> Reference:
        """The portfolio repeated to `n` contracts (for throughput)."""
        return self.subset(np.arange(n) % len(self))

    def describe(self, i: int) -> str:
        """One contract in words, e.g. 'id 17: American put K=84.3 T=1.92y σ=0.71 ...'."""
        c, m = self.contracts, self.market
        right = "call" if c.is_call[i] else "put"
        return (f"id {int(self.ids[i])}: {right} S={float(np.asarray(m.spot)[i]):g} "
                f"K={c.strike[i]:g} T={c.expiry[i]:.3f}y σ={float(np.asarray(m.vol)[i]):.3f} "
                f"r={float(np.asarray(m.rate)[i]):.4f} "
                f"q={float(np.asarray(m.dividend_yield)[i]):.4f}")


def load_reference(path: Path = REFERENCE_CSV, american: bool = True) -> Reference:
    """The portfolio as the engine prices it (American; `american=False`: the same
    contracts as European, to compare with the `european` column)."""
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    col = {k: np.array([float(r[k]) for r in rows]) for k in
           ("spot", "strike", "expiry", "vol", "rate", "dividend_yield", "price", "european")}
    contracts = OptionContracts.of(col["strike"], col["expiry"],
                                   np.array([r["right"] == "C" for r in rows]), american)
    market = MarketInputs(col["spot"], col["vol"], col["rate"], col["dividend_yield"])
    return Reference(np.array([int(r["id"]) for r in rows]), contracts, market,
                     col["price"], col["european"])


def accuracy(price: FloatArray, ref: FloatArray,
             floor: float = RELATIVE_FLOOR) -> dict[str, Any]:
    """RMSE (all contracts), RRMSE and worst relative error (reference ≥ floor), worst
    absolute error, and the index of each worst contract."""
    err = np.asarray(price, dtype=np.float64) - ref
    worth = np.flatnonzero(ref >= floor)
    rel = err[worth] / ref[worth]
    i_abs = int(np.argmax(np.abs(err)))
    i_rel = int(worth[int(np.argmax(np.abs(rel)))])
    return {
        "contracts": int(ref.size),
        "relative_count": int(worth.size),
        "rmse": float(np.sqrt(np.mean(err**2))),
        "rrmse": float(np.sqrt(np.mean(rel**2))),
        "max_abs_error": float(np.abs(err[i_abs])),
        "max_abs_index": i_abs,
        "max_rel_error": float(np.abs(err[i_rel] / ref[i_rel])),
        "max_rel_index": i_rel,
    }
