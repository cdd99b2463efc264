"""With quotes, market orders pay the spread: buys at the ask, sells at the bid.

Checked by hand on the broker, and through the engine on trades and quotes against a
reference that walks the message list itself (the latest quote before each fill's trade).
"""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from engine.settings.config import BrokerConfig, EngineConfig
from engine.trading.broker import PaperBroker
from engine.trading.core import Engine
from feeds.messages import Message, Quote, Trade

NS = 1_000_000_000
T0 = 1_764_003_600 * NS  # 2025-11-24 17:00 UTC, midday in New York


def test_broker_buys_at_the_ask_and_sells_at_the_bid_by_hand() -> None:
    b = PaperBroker(["BTCUSDT"], cash_per_symbol=10_000.0, commission=1.0)
    b.quote("BTCUSDT", 99.0, 101.0)
    buy = b.execute(b.new_order(1, 0, 1, b.entry_quantity(0, 1, 100.0), "enter"), 0, 100.0, 1)
    # floor((10,000 - 1) / 101) = 99 units at the ask, not at the trade's 100
    assert buy is not None and (buy.quantity, buy.price) == (99.0, 101.0)
    assert b.accounts[0].cash == 10_000.0 - 99 * 101.0 - 1.0 == 0.0
    b.quote("BTCUSDT", 104.0, 106.0)
    sell = b.execute(b.new_order(2, 0, -1, 99.0, "close"), 0, 105.0, 2)
    assert sell is not None and sell.price == 104.0
    assert b.accounts[0].cash == 99 * 104.0 - 1.0 == 10_295.0
    # half of a 2.0 spread on 99 units, twice
    assert b.spread_paid == 99 * 1.0 + 99 * 1.0 == 198.0


def test_without_a_two_sided_quote_orders_fill_at_the_trade_price() -> None:
    b = PaperBroker(["X"], sizing="fixed", quantity=10.0, commission=0.0)
    b.quote("X", 0.0, 101.0)  # no bid: no touch
    f = b.execute(b.new_order(1, 0, 1, 10.0, "enter"), 0, 100.0, 1)
    assert f is not None and f.price == 100.0 and b.spread_paid == 0.0
    b.quote("X", 99.0, 99.5)
    b.quote("X", 100.0, 99.0)  # crossed: forgets the last good one too
    f = b.execute(b.new_order(2, 0, -1, 10.0, "close"), 0, 100.5, 2)
    assert f is not None and f.price == 100.5


class Pattern:
    """The same long-only signal for every symbol, cycling through `pattern` per bar."""

    name = "pattern"
    long_only = True
    enter_on_from_zero = True

    def __init__(self, pattern: list[int]) -> None:
        self.pattern = pattern
        self.k = 0

    def reset(self, symbols: list[str]) -> None:
        self.n = len(symbols)

    async def target_signals(self, features: np.ndarray, closed: np.ndarray) -> np.ndarray:
        s = self.pattern[self.k % len(self.pattern)]
        self.k += 1
        return np.full(closed.size, s, np.int8)


def _market(seed: int) -> list[Message]:
    """A trade every 7 s for 20 minutes, a quote around each trade's price after it."""
    rng = np.random.default_rng(seed)
    msgs: list[Message] = []
    p = 90_000.0
    for k in range(170):
        p *= math.exp(rng.normal(0, 1e-3))
        ts = T0 + k * 7 * NS
        msgs.append(Trade(k + 1, ts, "BTCUSDT", round(p, 2), 0.01))
        half = float(rng.uniform(0.5, 5.0))
        msgs.append(Quote(k + 1, ts + 1, "BTCUSDT", round(p - half, 2), 1.0,
                          round(p + half, 2), 1.0))
    return msgs


@pytest.mark.parametrize("seed", [1, 2])
def test_engine_fills_cross_the_latest_quote(seed: int) -> None:
    msgs = _market(seed)
    cfg = EngineConfig(bar_seconds=60.0, broker=BrokerConfig(fill="next-tick", commission=1.0,
                                                             cash_per_symbol=100_000.0))
    eng = Engine(["BTCUSDT"], Pattern([1, 1, 0]), cfg)

    async def go() -> None:
        await eng.process(msgs)
        await eng.finish()

    asyncio.run(go())
    fills = eng.broker.fills
    assert len(fills) >= 6
    cash, paid = 100_000.0, 0.0
    for f in fills:
        # the quote in force: the last one at or before the fill (the trade that filled
        # it, or the end of the data for the final close-out)
        quote = next(m for m in reversed(msgs) if isinstance(m, Quote) and m.ts <= f.ts)
        assert f.price == (quote.ask if f.side > 0 else quote.bid)
        cash -= f.side * f.quantity * f.price + f.commission
        paid += f.quantity * (quote.ask - quote.bid) / 2
    acct = eng.broker.accounts[0]
    assert acct.cash == pytest.approx(cash, abs=1e-6)
    assert eng.broker.spread_paid == pytest.approx(paid, rel=1e-12)
    assert paid > 0
