"""Seeded option parameter rows shared by the option kernel tests (no QuantLib here)."""

from __future__ import annotations

import numpy as np

from gpu.options.engines import option_params


def random_params(n: int, seed: int) -> np.ndarray:
    """`n` rows: spots 80-120, strikes 85-115, 0.05-1 year, vols 0.15-0.45, rates 0-6 %;
    calls and puts alternating, European and American in pairs."""
    rng = np.random.default_rng(seed)
    return option_params(
        rng.uniform(80, 120, n), rng.uniform(85, 115, n), rng.uniform(0.05, 1.0, n),
        rng.uniform(0.15, 0.45, n), rng.uniform(0.0, 0.06, n),
        np.arange(n) % 2 == 0, np.arange(n) % 4 >= 2,
    )
