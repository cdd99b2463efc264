"""Orders to the paper broker: sizing, the risk check, pending and working orders.

Under `signal-close` (or `bar-close`) a market order fills at once at the price that
decided it; under `next-tick` and `next-open` it waits, pending, for the symbol's next
price (the engine calls `fill_pending` from its per-tick flag or at the next bar's open).

Working orders (engine/trading/order_types.py: limit, stop, stop-limit, trailing stop; DAY, GTC,
IOC) wait for a price that fills them: the engine hands each bar (`on_bar`) or trade
(`on_tick`) of a symbol that has some to the desk before its pending market orders, so an
exit attached at a fill works from the next price on. A signal strategy's entries get the
exits of `Bracket` (stop-loss, take-profit, trailing stop; fractions of the entry price):
one filled cancels the others, and a signal's own close cancels them all when it is placed
(it is decided first: a market close fills at the next price, before any stop inside the
bar could). Every state change (accepted, filled, cancelled, expired, rejected) goes to
`on_state` (the daemon journals it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from engine.trading.broker import PaperBroker
from engine.trading.order_types import (
    EXIT_REASONS,
    OrderState,
    OrderType,
    TimeInForce,
    WorkingOrder,
    bar_fill_price,
    first_of_bracket,
    round_to_tick,
    tick_fill_price,
    trail,
)
from engine.trading.stats import EngineStats
from feeds.messages import Fill, Order

#: the live daemon's pre-trade risk check: (sym, side, quantity, reason, price, ts) -> allowed
RiskCheck = Callable[[int, int, float, str, float, int], bool]


def sign(x: float) -> int:
    """-1, 0 or 1: the side of a position."""
    return 0 if x == 0 else (1 if x > 0 else -1)


@dataclass(frozen=True)
class Bracket:
    """Exits attached to every entry of a signal strategy, fractions of the entry price
    (0: none): `[broker] stop_loss`, `take_profit`, `trailing_stop`."""

    stop_loss: float = 0.0
    take_profit: float = 0.0
    trailing_stop: float = 0.0

    def __bool__(self) -> bool:
        return bool(self.stop_loss or self.take_profit or self.trailing_stop)


@dataclass(frozen=True)
class StateChange:
    """One order's new state (the journal's order_states row)."""

    ts: int
    order_id: int
    symbol: str
    state: OrderState
    type: OrderType
    side: int
    quantity: float
    limit: float
    stop: float
    reason: str
    tif: TimeInForce = TimeInForce.GTC
    group: int = 0
    trail: float = 0.0
    best: float = math.nan
    expires_ns: int = 0

    @classmethod
    def from_row(cls, r: dict[str, object]) -> StateChange:
        """A journaled row (engine.live.journal.Journal.order_states) back to a change."""
        def num(k: str) -> float:
            v = r.get(k)
            return math.nan if v is None else float(v)  # type: ignore[arg-type]

        return cls(int(num("ts")), int(num("order_id")), str(r["symbol"]),
                   OrderState(r["state"]), OrderType(r["type"]), int(num("side")),
                   num("quantity"), num("limit_price"), num("stop_price"), str(r["reason"]),
                   TimeInForce(r["tif"]), int(num("group_id")), num("trail"), num("best"),
                   int(num("expires_ns")))


def _never(ts: int) -> int:
    return 0


def _no_symbol(sym: int) -> None:
    """The entry-void hook of a desk without an engine (tests): nothing to fall back."""


@dataclass(frozen=True, slots=True)
class OrderHooks:
    """What the order desk calls outside the engine, given at construction. None: nothing.

    The live daemon journals and publishes every order and fill (`on_order`, `on_fill`) and
    every state change of a working order (`on_state`); `risk_check` (sym, side, quantity,
    reason, price, ts) -> allowed is its pre-trade gate (engine/live/risk_gate.py); without
    one every order goes to the broker."""

    on_order: Callable[[Order], None] | None = None
    on_fill: Callable[[Fill], None] | None = None
    on_state: Callable[[StateChange], None] | None = None
    risk_check: RiskCheck | None = None


class OrderDesk:
    """Places orders with the broker and keeps each symbol's pending and working ones."""

    def __init__(self, broker: PaperBroker, n: int, fill: str, stats: EngineStats,
                 bracket: Bracket | None = None,
                 tick_sizes: dict[str, float] | None = None,
                 day_end: Callable[[int], int] = _never,
                 hooks: OrderHooks | None = None,
                 on_entry_void: Callable[[int], None] = _no_symbol) -> None:
        self.broker = broker
        self.stats = stats
        self.fill_on_close = fill in ("signal-close", "bar-close")
        self.pending: list[list[Order]] = [[] for _ in range(n)]
        self.has_pending: list[bool] = [False] * n
        self.working: list[list[WorkingOrder]] = [[] for _ in range(n)]
        self.has_working: list[bool] = [False] * n
        self.bracket = bracket or Bracket()
        self.tick_sizes = tick_sizes or {}
        #: the data time (ns) a DAY order accepted at `ts` expires at (the exchange's day end)
        self.day_end = day_end
        self._group = 0
        hooks = hooks or OrderHooks()
        # plain attributes, read on the hot path (one attribute load, no indirection)
        self.on_state = hooks.on_state
        self.on_order, self.on_fill = hooks.on_order, hooks.on_fill
        self.risk_check = hooks.risk_check
        #: called with the symbol of an entry that came to nothing (refused, unaffordable)
        #: and of a working order's fill (an exit closed the position, a strategy's own
        #: order moved it): the intended position becomes what is held
        self.on_entry_void = self.on_exit = on_entry_void

    def add_symbol(self) -> None:
        self.pending.append([])
        self.has_pending.append(False)
        self.working.append([])
        self.has_working.append(False)

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
        if reason == "close" and self.has_working[sym]:
            self.cancel_exits(sym, ts)  # the signal's close is decided first
        if not self._submit(sym, side, qty, reason, price, ts):
            if reason == "enter":
                self.on_entry_void(sym)
            return False
        return not self.fill_on_close

    def rebalance(self, sym: int, side: int, qty: float, price: float, ts: int) -> bool:
        """Trade `qty` of a held position towards a target weight (never across zero);
        True when the order waits for the symbol's next price, as `place`."""
        return self._submit(sym, side, qty, "rebalance", price, ts) and not self.fill_on_close

    def _submit(self, sym: int, side: int, qty: float, reason: str, price: float,
                ts: int) -> bool:
        """A market order past the risk check: filled now (fills on the close) or pending
        until the symbol's next price (`fill_on_close` says which). False: refused
        (nothing placed)."""
        if qty <= 0 or (self.risk_check is not None
                        and not self.risk_check(sym, side, qty, reason, price, ts)):
            return False
        order = self.broker.new_order(ts, sym, side, qty, reason)
        self.stats.orders += 1
        if self.on_order is not None:
            self.on_order(order)
        if self.fill_on_close:
            self.execute(order, sym, price, ts)
        else:
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
        if order.reason == "enter" and self.bracket:
            self.attach_exits(sym, fill)

    def held_sign(self, sym: int) -> int:
        return sign(self.broker.accounts[sym].position)

    def position_after_pending(self, sym: int) -> float:
        """The position once the pending orders fill (a pending close closes everything
        held, so only the pending entries behind it remain)."""
        pending = self.pending[sym]
        entries = sum(o.side * o.quantity for o in pending
                      if o.reason == "enter" or o.reason == "rebalance")
        if any(o.reason == "close" for o in pending):
            return entries
        return self.broker.accounts[sym].position + entries

    # ------------------------------------------------------------------ working orders
    def submit(self, sym: int, side: int, quantity: float, type: OrderType, ts: int, *,
               limit: float = math.nan, stop: float = math.nan,
               tif: TimeInForce = TimeInForce.GTC, reason: str = "order", group: int = 0,
               trail_by: float = 0.0) -> WorkingOrder | None:
        """Accept a working order (None, and a REJECTED state, for a malformed one: a
        quantity <= 0, or a price the type needs that is missing or <= 0)."""
        order = self.broker.new_order(ts, sym, side, quantity, reason)
        tick = self.tick_sizes.get(order.symbol, 0.0)
        w = WorkingOrder(order, sym, type, round_to_tick(limit, tick, up=side < 0),
                         round_to_tick(stop, tick, up=side > 0), tif,
                         self.day_end(ts) if tif is TimeInForce.DAY else 0, group,
                         trail_by)
        needs_limit = type in (OrderType.LIMIT, OrderType.STOP_LIMIT)
        needs_stop = type in (OrderType.STOP, OrderType.STOP_LIMIT)
        if (side not in (1, -1) or not quantity > 0
                or (needs_limit and not w.limit > 0) or (needs_stop and not w.stop > 0)):
            self._state(w, OrderState.REJECTED, ts)
            return None
        self.stats.orders += 1
        if self.on_order is not None:
            self.on_order(order)
        self._state(w, OrderState.ACCEPTED, ts)
        self.working[sym].append(w)
        self.has_working[sym] = True
        return w

    def attach_exits(self, sym: int, fill: Fill) -> None:
        """The bracket's exits of an entry's fill, one group: one fills, the rest cancel."""
        b, p, side = self.bracket, fill.price, fill.side
        self._group += 1
        g, qty, ts, exit_side = self._group, fill.quantity, fill.ts, -fill.side
        if b.stop_loss:
            self.submit(sym, exit_side, qty, OrderType.STOP, ts,
                        stop=p * (1 - side * b.stop_loss), reason="stop-loss", group=g)
        if b.take_profit:
            self.submit(sym, exit_side, qty, OrderType.LIMIT, ts,
                        limit=p * (1 + side * b.take_profit), reason="take-profit", group=g)
        if b.trailing_stop:
            w = self.submit(sym, exit_side, qty, OrderType.STOP, ts,
                            stop=p * (1 - side * b.trailing_stop), reason="trailing-stop",
                            group=g, trail_by=b.trailing_stop)
            if w is not None:
                w.best = p

    def cancel_exits(self, sym: int, ts: int) -> None:
        """Cancel the symbol's attached exits (its position is being closed otherwise)."""
        keep = []
        for w in self.working[sym]:
            if w.order.reason in EXIT_REASONS:
                self._state(w, OrderState.CANCELLED, ts)
            else:
                keep.append(w)
        self._set_working(sym, keep)

    def on_bar(self, sym: int, o: float, h: float, lo: float, c: float, ts: int) -> None:
        """A bar of the symbol (open, high, low, close; closing at `ts`): its working orders
        that it fills fill (module rules of engine/trading/order_types.py), then trailing stops
        follow its close."""
        live = self._unexpired(sym, ts)
        filled_groups: set[int] = set()
        hits: dict[int, list[tuple[WorkingOrder, float]]] = {}
        for w in live:
            at = bar_fill_price(w, o, h, lo)
            if at is not None:
                hits.setdefault(w.group or -w.order.order_id, []).append((w, at))
        done: set[int] = set()
        for key, group_hits in hits.items():
            w, at = first_of_bracket(group_hits, o) if key > 0 else group_hits[0]
            self._fill_working(w, at, ts)
            done.add(w.order.order_id)
            if key > 0:
                filled_groups.add(key)
        self._after_prices(sym, live, done, filled_groups, ts, c)

    def on_tick(self, sym: int, p: float, ts: int) -> None:
        """A trade of the symbol: the first that crosses a working order's price fills it."""
        live = self._unexpired(sym, ts)
        done: set[int] = set()
        filled_groups: set[int] = set()
        for w in live:
            if w.group in filled_groups:
                continue
            at = tick_fill_price(w, p)
            if at is not None:
                self._fill_working(w, at, ts)
                done.add(w.order.order_id)
                if w.group:
                    filled_groups.add(w.group)
        self._after_prices(sym, live, done, filled_groups, ts, p)

    def _after_prices(self, sym: int, live: list[WorkingOrder], done: set[int],
                      filled_groups: set[int], ts: int, close: float) -> None:
        """Keep what still works: the filled leave, their groups' other legs cancel, IOC
        orders that met a price and did not fill cancel, trailing stops follow the price."""
        keep = []
        for w in live:
            if w.order.order_id in done:
                continue
            if (w.group and w.group in filled_groups) or w.tif is TimeInForce.IOC:
                self._state(w, OrderState.CANCELLED, ts)
            else:
                if trail(w, close):  # journaled, so a restart trails from here
                    self._state(w, OrderState.AMENDED, ts)
                keep.append(w)
        self._set_working(sym, keep)

    def _unexpired(self, sym: int, ts: int) -> list[WorkingOrder]:
        """The symbol's working orders; DAY orders whose day ended expire now."""
        live = []
        for w in self.working[sym]:
            if w.expires_ns and ts >= w.expires_ns:
                self._state(w, OrderState.EXPIRED, ts)
            else:
                live.append(w)
        return live

    def _fill_working(self, w: WorkingOrder, price: float, ts: int) -> None:
        fill = self.broker.execute(w.order, w.sym, price, ts,
                                   market=w.type is OrderType.MARKET)
        if fill is None:  # an exit with nothing left to close, or an unaffordable entry
            self._state(w, OrderState.CANCELLED if w.order.reason in EXIT_REASONS
                        else OrderState.REJECTED, ts)
            return
        self._state(w, OrderState.FILLED, ts)
        self.stats.fills += 1
        if self.on_fill is not None:
            self.on_fill(fill)
        # an exit closed the position, a strategy's own order moved it: intent follows
        self.on_exit(w.sym)

    def _set_working(self, sym: int, keep: list[WorkingOrder]) -> None:
        self.working[sym] = keep
        self.has_working[sym] = bool(keep)

    def _state(self, w: WorkingOrder, state: OrderState, ts: int) -> None:
        if self.on_state is not None:
            o = w.order
            self.on_state(StateChange(ts, o.order_id, o.symbol, state, w.type, o.side,
                                      o.quantity, w.limit, w.stop, o.reason, w.tif, w.group,
                                      w.trail, w.best, w.expires_ns))

    def restore_working(self, changes: list[StateChange]) -> int:
        """After a restart: the orders whose last journaled state is ACCEPTED or AMENDED
        work again (a trailing stop from its last journaled price). Returns how many."""
        last: dict[int, StateChange] = {}
        for c in changes:
            last[c.order_id] = c
        by_id = {o.order_id: o for o in self.broker.orders}
        n = 0
        for c in last.values():
            order = by_id.get(c.order_id)
            if c.state not in (OrderState.ACCEPTED, OrderState.AMENDED) or order is None:
                continue
            sym = self.broker.symbols.index(order.symbol)
            w = WorkingOrder(order, sym, c.type, c.limit, c.stop, c.tif, c.expires_ns,
                             c.group, c.trail, c.best)
            self.working[sym].append(w)
            self.has_working[sym] = True
            self._group = max(self._group, c.group)
            n += 1
        return n
