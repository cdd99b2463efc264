"""Paper broker and portfolio: market orders, simulated fills, cash and positions per symbol.

Every symbol has its own cash account (the GP paper gives each stock $10,000), so an
"all-in" order of one symbol can never spend another symbol's money. Money arithmetic is
float64 throughout, the same as the GP evaluator's, so a replay matches it to the cent.

Sizing:
- all-in: a buy (or a short sale) takes the most whole shares the symbol's cash allows after
  commission: floor((cash - commission) / fill_price); closing sells (or buys back)
  everything. A long all-in buy never leaves negative cash.
- fixed: `quantity` shares per entry.

Slippage moves the fill price against the order by `slippage_bps` basis points.
Quotes: with a best bid and offer known for the symbol (`quote`, from quote messages), a
market order crosses the spread: a buy fills at the ask, a sell at the bid (slippage, when
set, moves it further), and `spread_paid` adds quantity x half the spread, the cost of
crossing measured from the mid. Without a two-sided quote the order fills at the trade price
as before. The latest quote is used, however old: quote data that stops is the data's gap.
No entry may spend money the account does not have: a long entry needs its cost and
commission in cash, a short entry needs `short_margin` x its notional (100% by default) plus
commission in equity; orders that do not pass are refused and counted by reason in
`refused`. Closing orders are never refused (they only reduce risk).
Invariants (tested): equity = cash + position x last price, per symbol and in total.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from feeds.messages import Fill, Order

Sizing = Literal["all-in", "fixed"]


@dataclass(slots=True)
class Account:
    cash: float
    position: float = 0.0
    last_price: float = math.nan
    commission_paid: float = 0.0
    trades: int = 0

    def equity(self) -> float:
        if self.position == 0.0:
            return self.cash
        return self.cash + self.position * self.last_price

    def book(self, side: int, qty: float, fill_price: float, mark: float,
             commission: float) -> None:
        """A fill of `qty` at `fill_price` (the broker's own fills and journaled ones)."""
        self.cash -= side * qty * fill_price + commission
        self.position += side * qty
        if abs(self.position) < 1e-12:
            self.position = 0.0
        self.last_price = mark
        self.commission_paid += commission
        self.trades += 1

    def book_fill(self, f: Fill) -> None:
        """A journaled fill (a restart rebuilding the account)."""
        self.book(f.side, f.quantity, f.price, f.price, f.commission)


@dataclass
class PaperBroker:
    symbols: list[str]
    cash_per_symbol: float = 10_000.0
    commission: float = 1.0
    slippage_bps: float = 0.0
    sizing: Sizing = "all-in"
    quantity: float = 100.0
    allow_short: bool = False
    short_margin: float = 1.0
    accounts: list[Account] = field(default_factory=list)
    fills: list[Fill] = field(default_factory=list)
    orders: list[Order] = field(default_factory=list)
    #: entries refused because the account could not pay for them, by reason
    refused: dict[str, int] = field(default_factory=dict)
    #: largest |position| an entry may reach (0 = none); set by the live risk limits so an
    #: all-in entry re-sized at fill time (after a switch, at the next tick's price) cannot
    #: exceed what the risk gate approved at decision time
    position_cap: float = 0.0
    #: largest gross notional (sum of |position| x last price over all symbols, 0 = none)
    #: an entry may reach at its fill price; set by the live risk limits because the gate
    #: approves at the last trade before the order and the fill comes at a later price
    gross_notional_cap: float = 0.0
    #: each symbol's latest two-sided quote (bid, ask) by name (see the module docstring)
    quotes: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: money paid for crossing spreads: sum of quantity x (ask - bid) / 2 over quote fills
    spread_paid: float = 0.0
    _order_id: int = 0

    def __post_init__(self) -> None:
        if self.sizing not in ("all-in", "fixed"):
            raise ValueError(f"unknown sizing {self.sizing!r}: expected all-in or fixed")
        if not (self.commission >= 0 and self.slippage_bps >= 0 and self.cash_per_symbol > 0
                and self.short_margin > 0 and self.quantity > 0
                and all(map(math.isfinite, (self.commission, self.slippage_bps,
                                            self.cash_per_symbol, self.quantity)))):
            raise ValueError("commission and slippage must be numbers >= 0; cash per symbol, "
                             "quantity and short margin numbers > 0")
        self.accounts = [Account(self.cash_per_symbol) for _ in self.symbols]

    def add_symbol(self, symbol: str) -> int:
        self.symbols.append(symbol)
        self.accounts.append(Account(self.cash_per_symbol))
        return len(self.symbols) - 1

    # --- marks -----------------------------------------------------------------------
    def mark(self, sym: int, price: float) -> None:
        self.accounts[sym].last_price = price

    def equity(self) -> float:
        return sum(a.equity() for a in self.accounts)

    def initial_capital(self) -> float:
        return self.cash_per_symbol * len(self.accounts)

    def quote(self, symbol: str, bid: float, ask: float) -> None:
        """The symbol's best bid and offer now; a quote missing a side (price 0) or
        crossed leaves none, so orders fill at the trade price until the next good one."""
        if 0.0 < bid <= ask < math.inf:
            self.quotes[symbol] = (bid, ask)
        else:
            self.quotes.pop(symbol, None)

    def _touch(self, symbol: str, side: int, price: float) -> tuple[float, float]:
        """(the price a market order of `side` crosses to, before slippage; the half
        spread it pays per unit): the ask or the bid with a quote, else `price` and 0."""
        quoted = self.quotes.get(symbol)
        if quoted is None:
            return price, 0.0
        bid, ask = quoted
        return (ask if side > 0 else bid), (ask - bid) * 0.5

    # --- orders ----------------------------------------------------------------------
    def _fill_price(self, side: int, price: float) -> float:
        return price * (1.0 + side * self.slippage_bps * 1e-4)

    def entry_quantity(self, sym: int, side: int, price: float) -> float:
        """Shares an entry of `side` would take at `price` (0 when the money allows none).

        All-in sizes from the symbol's money once any position is closed (a switch of sides
        closes first, paying one more commission); `execute` sizes it exactly at fill time.
        """
        if self.sizing == "fixed":
            return self.quantity
        acct = self.accounts[sym]
        fill_price = self._fill_price(side, self._touch(self.symbols[sym], side, price)[0])
        money = acct.cash - self.commission
        if acct.position != 0.0:
            money += acct.position * price - self.commission
        return float(max(0, math.floor(money / (fill_price * self._margin(side)))))

    def new_order(self, ts: int, sym: int, side: int, quantity: float, reason: str) -> Order:
        self._order_id += 1
        order = Order(
            seq=self._order_id,
            ts=ts,
            symbol=self.symbols[sym],
            order_id=self._order_id,
            side=side,
            quantity=quantity,
            reason=reason,
        )
        self.orders.append(order)
        return order

    def execute(self, order: Order, sym: int, price: float, ts: int) -> Fill | None:
        """Fill a market order at `price` (before slippage). None if nothing can be filled.

        Closing orders are re-sized to the position actually held, and all-in entries to
        the cash actually available at fill time, so the account can never overdraw.
        """
        acct = self.accounts[sym]
        side = order.side
        qty = order.quantity
        touch, half_spread = self._touch(order.symbol, side, price)
        fill_price = self._fill_price(side, touch)
        if order.reason == "close":
            qty = abs(acct.position)
        elif self.sizing == "all-in" and acct.position == 0.0:
            # all-in means the cash at fill time: a pending entry behind a pending close
            # (a switch of sides under next-tick fills) was sized before the close freed it
            qty = float(max(0, math.floor((acct.cash - self.commission)
                                          / (fill_price * self._margin(side)))))
            if self.position_cap:
                qty = min(qty, math.floor(self.position_cap))
        if self.gross_notional_cap and order.reason != "close":
            qty = self._within_gross_notional(sym, side, qty, fill_price)
            if qty <= 0.0:
                self.refused["max_gross_notional"] = self.refused.get("max_gross_notional", 0) + 1
                return None
        if qty <= 0.0:
            return None
        if order.reason != "close" and not self._affordable(acct, side, qty, fill_price):
            reason = "insufficient_cash" if side > 0 else "insufficient_margin"
            self.refused[reason] = self.refused.get(reason, 0) + 1
            return None
        acct.book(side, qty, fill_price, price, self.commission)
        self.spread_paid += qty * half_spread
        fill = Fill(
            seq=len(self.fills) + 1,
            ts=ts,
            symbol=order.symbol,
            order_id=order.order_id,
            side=side,
            quantity=qty,
            price=fill_price,
            commission=self.commission,
        )
        self.fills.append(fill)
        return fill


    def _within_gross_notional(self, sym: int, side: int, qty: float, fill_price: float
                               ) -> float:
        """The most of `qty` that keeps gross notional within the cap at the fill price
        (other symbols at their last prices); an order that reduces exposure is not cut."""
        acct = self.accounts[sym]
        if acct.position * side < 0:
            return qty
        others = sum(abs(a.position) * a.last_price for i, a in enumerate(self.accounts)
                     if i != sym and a.position)
        room = self.gross_notional_cap - others - abs(acct.position) * fill_price
        return float(min(qty, max(0, math.floor(room / fill_price))))

    def _margin(self, side: int) -> float:
        """Money an all-in entry needs per dollar of notional: 1 for a buy (no leverage),
        the short margin for a short sale (sized so that the margin check passes)."""
        return 1.0 if side > 0 or self.short_margin == 1.0 else self.short_margin

    def _affordable(self, acct: Account, side: int, qty: float, fill_price: float) -> bool:
        """Whether the account can pay for an entry of `qty` at `fill_price` (see module)."""
        cash_after = acct.cash - side * qty * fill_price - self.commission
        position_after = acct.position + side * qty
        if side > 0:
            # a buy that covers a short is paid from the short's proceeds: only a long
            # position afterwards must be fully paid for in cash
            return cash_after >= -1e-9 or position_after <= 0.0
        if position_after >= 0.0:  # a sale out of a long position
            return True
        equity_after = cash_after + position_after * fill_price
        return equity_after + 1e-9 >= self.short_margin * -position_after * fill_price

    def total_refused(self) -> int:
        return sum(self.refused.values())


def buy_and_hold_cash(
    first_price: float, last_price: float, cash: float, commission: float
) -> float:
    """Final cash of buying all-in at `first_price` and selling everything at `last_price`."""
    shares = max(0, math.floor((cash - commission) / first_price))
    if shares == 0:
        return cash
    # the same order of operations as `execute` (and the GP evaluator): identical cents
    cash = cash - (shares * first_price + commission)
    return cash + (shares * last_price - commission)
