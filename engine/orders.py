"""Orders to the paper broker: sizing, the risk check, pending orders and the fill model.

Under `signal-close` (or `bar-close`) an order fills at once at the price that decided it;
under `next-tick` and `next-open` it waits, pending, for the symbol's next price (the
engine calls `fill_pending` from its per-tick flag or at the next bar's open).
"""

from __future__ import annotations

from collections.abc import Callable

from engine.broker import PaperBroker
from engine.stats import EngineStats
from feeds.messages import Fill, Order

#: the live daemon's pre-trade risk check: (sym, side, quantity, reason, price, ts) -> allowed
RiskCheck = Callable[[int, int, float, str, float, int], bool]


def sign(x: float) -> int:
    """-1, 0 or 1: the side of a position."""
    return 0 if x == 0 else (1 if x > 0 else -1)


class OrderDesk:
    """Places orders with the broker and keeps each symbol's pending ones."""

    def __init__(self, broker: PaperBroker, n: int, fill: str, stats: EngineStats) -> None:
        self.broker = broker
        self.stats = stats
        self.fill_on_close = fill in ("signal-close", "bar-close")
        self.pending: list[list[Order]] = [[] for _ in range(n)]
        self.has_pending: list[bool] = [False] * n
        #: called with every order and fill (the live daemon journals and publishes them)
        self.on_order: Callable[[Order], None] | None = None
        self.on_fill: Callable[[Fill], None] | None = None
        #: None: every order goes to the broker (engine/risk.py sets the daemon's limits)
        self.risk_check: RiskCheck | None = None
        #: called with the symbol of an entry that came to nothing (refused, unaffordable):
        #: the intended position falls back to what is held
        self.on_entry_void: Callable[[int], None] = lambda sym: None

    def add_symbol(self) -> None:
        self.pending.append([])
        self.has_pending.append(False)

    def place(self, sym: int, side: int, reason: str, price: float, ts: int) -> bool:
        """Order `side` for `sym` at the last price seen; True when the order now waits for
        the symbol's next price (the caller flags the symbol)."""
        if side == 0:
            return False
        if reason == "close":
            qty = abs(self.broker.accounts[sym].position)
            for pend in self.pending[sym]:  # an entry still pending is closed too
                if pend.reason == "enter":
                    qty += pend.quantity
        else:
            qty = self.broker.entry_quantity(sym, side, price)
        if qty <= 0 or (self.risk_check is not None
                        and not self.risk_check(sym, side, qty, reason, price, ts)):
            if reason == "enter":
                self.on_entry_void(sym)
            return False
        order = self.broker.new_order(ts, sym, side, qty, reason)
        self.stats.orders += 1
        if self.on_order is not None:
            self.on_order(order)
        if self.fill_on_close:
            self.execute(order, sym, price, ts)
            return False
        self.pending[sym].append(order)
        self.has_pending[sym] = True
        return True

    def fill_pending(self, sym: int, price: float, ts: int) -> None:
        """The symbol's next price arrived: its pending orders fill at it, in order."""
        pending = self.pending[sym]
        self.pending[sym] = []
        self.has_pending[sym] = False
        for order in pending:
            self.execute(order, sym, price, ts)

    def execute(self, order: Order, sym: int, price: float, ts: int) -> None:
        fill = self.broker.execute(order, sym, price, ts)
        if fill is None:
            if order.reason == "enter":
                self.on_entry_void(sym)
            return
        self.stats.fills += 1
        if self.on_fill is not None:
            self.on_fill(fill)

    def held_sign(self, sym: int) -> int:
        return sign(self.broker.accounts[sym].position)

    def position_after_pending(self, sym: int) -> float:
        """The position once the pending orders fill (a pending close closes everything
        held, so only the pending entries behind it remain)."""
        pending = self.pending[sym]
        entries = sum(o.side * o.quantity for o in pending if o.reason == "enter")
        if any(o.reason == "close" for o in pending):
            return entries
        return self.broker.accounts[sym].position + entries
