"""Start-up objects frozen out of full collections for a hot loop, and given back after."""

from __future__ import annotations

import functools
import gc

import numpy as np
import numpy.typing as npt

from engine.gcpause import startup_objects_frozen
from engine.settings.config import EngineConfig
from engine.trading.replay import replay
from feeds.synthetic import SyntheticMarket
from strategies.base import Features, Signals
from strategies.sma_cross import SmaCross


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_block_freezes_what_is_alive_and_collects_later_garbage() -> None:
    assert gc.get_freeze_count() == 0
    alive = [_Cycle() for _ in range(10)]
    with startup_objects_frozen():
        frozen = gc.get_freeze_count()
        assert frozen >= len(alive)
        with startup_objects_frozen():  # nested: the outer block's freeze stays
            assert gc.get_freeze_count() == frozen
        assert gc.get_freeze_count() == frozen
        _Cycle()  # garbage made inside the block is still collected
        assert gc.collect() >= 1
    assert gc.get_freeze_count() == 0


def test_replay_freezes_only_while_it_runs() -> None:
    seen: list[int] = []

    class Watching(SmaCross):
        async def target_signals(self, features: Features, closed: npt.NDArray[np.bool_]
                                 ) -> Signals:
            seen.append(gc.get_freeze_count())
            return await super().target_signals(features, closed)

    factory = functools.partial(SyntheticMarket, n_symbols=2, n_ticks=20_000, seed=5)
    # ten-minute bars: a tenth of the bar closes, each still checked. get_freeze_count
    # walks the whole frozen list (every start-up object): 0.05 s a call measured here,
    # 16 s of this test at one-minute bars; the property does not depend on the count
    res = replay(factory, Watching(), EngineConfig(bar_seconds=600.0))
    assert res.engine.stats.market_data == 20_000
    assert seen and min(seen) > 0  # bar closes ran with the start-up objects frozen
    assert gc.get_freeze_count() == 0
