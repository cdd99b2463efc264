"""`OpenBars.push` (one array for the five price lists, a gather only for a partial close)
against the per-column gather it replaced, over seeded random bars where some symbols'
bars have no tick: the indicator bank ends exactly the same."""

from __future__ import annotations

import random

import numpy as np
import pytest

from engine.trading.bars import OpenBars
from gpu.indicators.compute import IndicatorBank


def _reference_push(b: OpenBars, idx: list[int], bank: IndicatorBank) -> None:
    bank.update(np.asarray(idx, np.int32), np.asarray([b.o[i] for i in idx]),
                np.asarray([b.h[i] for i in idx]), np.asarray([b.l[i] for i in idx]),
                np.asarray([b.c[i] for i in idx]), np.asarray([b.v[i] for i in idx]))


@pytest.mark.parametrize("seed", range(6))
def test_push_equals_the_per_column_gather(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    bars = OpenBars(n)
    ref, new = IndicatorBank(max(n, 16)), IndicatorBank(max(n, 16))
    closes = 0
    for _ in range(40):
        for i in range(n):
            if rng.random() < (1.0 if seed % 2 else 0.7):  # odd seeds: every symbol closes
                p = rng.uniform(1.0, 100.0)
                bars.o[i], bars.h[i], bars.l[i], bars.c[i] = p, p * 1.01, p * 0.99, p
                bars.v[i] = rng.uniform(1.0, 1e4)
        idx = bars.with_ticks()
        if not idx:
            continue
        _reference_push(bars, idx, ref)
        bars.push(idx, new)
        closes += 1
        assert np.array_equal(ref.values, new.values, equal_nan=True)
        bars.reopen(idx)
    assert closes > 30 and np.isfinite(new.values).any()
