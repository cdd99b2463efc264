"""Seeded option parameter rows shared by the option kernel tests (no QuantLib here)."""

from __future__ import annotations

import numpy as np

from gpu.options import core
from gpu.options.engines import OptionGroupPricer, OptionValues, option_params


def random_params(n: int, seed: int) -> np.ndarray:
    """`n` rows: spots 80-120, strikes 85-115, 0.05-1 year, vols 0.15-0.45, rates 0-6 %;
    calls and puts alternating, European and American in pairs."""
    rng = np.random.default_rng(seed)
    return option_params(
        rng.uniform(80, 120, n), rng.uniform(85, 115, n), rng.uniform(0.05, 1.0, n),
        rng.uniform(0.15, 0.45, n), rng.uniform(0.0, 0.06, n),
        np.arange(n) % 2 == 0, np.arange(n) % 4 >= 2,
    )


def reprice_at(pricer: OptionGroupPricer, spot: float, wait: bool
               ) -> tuple[OptionValues, np.ndarray]:
    """One repricing of a group at `spot` (waited for, or polled until done) and the
    group's rows at that spot, for pricing them another way."""
    pricer.set_spot(spot)
    pricer.launch()
    if wait:
        pricer.wait()
    while not pricer.done():
        pass
    rows = pricer.rows()
    assert (rows[:, core.SPOT] == spot).all()
    return pricer.results(), rows
