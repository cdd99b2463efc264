"""Paper broker: one account, simulated fills, cash and positions per symbol.

One account: the capital is set once (`cash`; when 0, `cash_per_symbol` x the symbols known
at the start, at least one) and shared by all symbols; a symbol that appears later never
adds money. The account's cash is kept as each symbol's part of it (`Account.cash`: the
sleeve the symbol started with plus the cash its fills moved) and `pool`, the cash no
symbol started with (interest and borrow fees accrue there): cash = pool + sum of the
parts, equity = cash + sum of position x price x multiplier. Under the GP paper's
`per-symbol` sizing the parts are isolated accounts of `cash_per_symbol` each: an
"all-in" order of one symbol can never spend another symbol's money. Money arithmetic is
float64 throughout, the same as the GP evaluator's, so a replay matches it to the cent.

Sizing (`engine/trading/sizing.py`): `per-symbol` (the symbol's own part, all-in), `equal-weight`,
`fixed-fraction`, `volatility-target` and `fixed` (units). Entries are sized when they
fill, at the fill price; closing orders take the whole position.

Checks at every fill (not only at the order), entries only: closing orders are never
refused (they only reduce risk). Per-symbol: a long entry needs its cost and commission in
the symbol's cash, a short entry `short_margin` x its notional plus commission in the
symbol's equity. One account: a long entry needs its cost and commission in the account's
cash (no borrowing), a short entry keeps the account's equity at or above `short_margin` x
all short notional, and any entry keeps gross exposure (sum of |position| x price x
multiplier) at or below `max_leverage` x equity. An entry that does not pass is cut to the
most that does (`fixed` sizing, whose units the user named, is refused instead); one cut
to nothing is refused and counted by reason in `refused`.

Slippage moves the fill price against the order by `slippage_bps` basis points.
Quotes: with a best bid and offer known for the symbol (`quote`, from quote messages), a
market order crosses the spread: a buy fills at the ask, a sell at the bid (slippage, when
set, moves it further), and `spread_paid` adds quantity x half the spread, the cost of
crossing measured from the mid. Without a two-sided quote the order fills at the trade price
as before. The latest quote is used, however old: quote data that stops is the data's gap.

Instruments carry a contract multiplier (`multipliers`, by symbol; 1 by default): a fill of
q contracts at p moves cash by q x p x multiplier, so futures P&L is right.

Interest on cash (`interest_rate`) and a borrow fee on short notional (`borrow_rate`),
annual rates, accrue once per exchange day over the calendar days passed (act/365), into
`pool` (`accrue`).
Invariants (tested): equity = cash + sum of position x last price x multiplier.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import date

import numpy as np

from engine.trading.sizing import SizingModel, canonical, make_sizing
from feeds.messages import Fill, Order

#: kept for old imports: the sizing model's name (engine/trading/sizing.py lists them)
Sizing = str
EPS = 1e-9
#: reasons of orders that only close (never refused; they take the whole position): a
#: signal's close and the exits attached to an entry (engine/trading/order_types.py)
CLOSING = frozenset(("close", "stop-loss", "take-profit", "trailing-stop"))


@dataclass(slots=True)
class Account:
    """One symbol's part of the account: its cash part, position and marks."""

    cash: float
    position: float = 0.0
    last_price: float = math.nan
    commission_paid: float = 0.0
    trades: int = 0
    #: units per contract: a futures contract's P&L per point (1 for shares)
    multiplier: float = 1.0

    def equity(self) -> float:
        if self.position == 0.0:
            return self.cash
        if self.multiplier == 1.0:  # the paper's expression, to the last bit
            return self.cash + self.position * self.last_price
        return self.cash + self.position * self.last_price * self.multiplier

    def book(self, side: int, qty: float, fill_price: float, mark: float,
             commission: float) -> None:
        """A fill of `qty` at `fill_price` (the broker's own fills and journaled ones)."""
        if self.multiplier == 1.0:
            self.cash -= side * qty * fill_price + commission
        else:
            self.cash -= side * qty * fill_price * self.multiplier + commission
        self.position += side * qty
        if abs(self.position) < 1e-12:
            self.position = 0.0
        self.last_price = mark
        self.commission_paid += commission
        self.trades += 1

    def book_fill(self, f: Fill) -> None:
        """A journaled fill (a restart rebuilding the account)."""
        self.book(f.side, f.quantity, f.price, f.price, f.commission)

    def notional(self) -> float:
        """|position| x last price x multiplier (0 when flat)."""
        if self.position == 0.0:
            return 0.0
        return abs(self.position) * self.last_price * self.multiplier


@dataclass
class PaperBroker:
    symbols: list[str]
    cash_per_symbol: float = 10_000.0
    commission: float = 1.0
    slippage_bps: float = 0.0
    #: a sizing model's name (engine/trading/sizing.py); "all-in" is per-symbol's old name
    sizing: str = "per-symbol"
    quantity: float = 100.0
    allow_short: bool = False
    short_margin: float = 1.0
    #: the account's capital, $; 0: cash_per_symbol x the symbols known now (at least one)
    cash: float = 0.0
    #: fixed-fraction: the fraction of equity per entry
    fraction: float = 0.1
    #: volatility-target: annualised target, lookback in bars, bars per year
    volatility_target: float = 0.15
    volatility_lookback: int = 20
    bars_per_year: float = 252.0
    #: one account: gross exposure at most this multiple of equity (0 = no limit)
    max_leverage: float = 1.0
    #: annual rates: interest on positive cash, fee on short notional (act/365, daily)
    interest_rate: float = 0.0
    borrow_rate: float = 0.0
    #: contract multiplier by symbol (1 when not named)
    multipliers: dict[str, float] = field(default_factory=dict)
    #: the sizing model; None: `make_sizing(sizing, ...)` (volatility-target needs one
    #: built with the engine's bar history)
    sizer: SizingModel | None = None
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
    #: symbols whose signal is active (equal-weight's divisor; the engine sets it per bar)
    active_signals: int = 1
    #: cash no symbol started with: interest and fees accrue here (see the module)
    pool: float = 0.0
    interest_paid: float = 0.0
    borrow_fees: float = 0.0
    _order_id: int = 0
    _accrued_to: date | None = None

    def __post_init__(self) -> None:
        self.sizing = canonical(self.sizing)
        if not (self.commission >= 0 and self.slippage_bps >= 0 and self.cash_per_symbol > 0
                and self.short_margin > 0 and self.quantity > 0 and self.cash >= 0
                and self.max_leverage >= 0
                and all(map(math.isfinite, (self.commission, self.slippage_bps,
                                            self.cash_per_symbol, self.quantity,
                                            self.cash, self.interest_rate,
                                            self.borrow_rate, self.max_leverage)))):
            raise ValueError("commission, slippage, cash and leverage must be numbers >= 0; "
                             "cash per symbol, quantity and short margin numbers > 0")
        if self.sizer is None:
            self.sizer = make_sizing(self.sizing, quantity=self.quantity,
                                     fraction=self.fraction,
                                     volatility_target=self.volatility_target,
                                     volatility_lookback=self.volatility_lookback,
                                     bars_per_year=self.bars_per_year,
                                     closes=_no_history)
        n = len(self.symbols)
        if self.cash:  # the capital set once, split evenly into the symbols' parts
            self.capital = self.cash
            part = self.cash / max(1, n)
        else:  # the paper's $10,000 per symbol known at the start
            self.capital = self.cash_per_symbol * max(1, n)
            part = self.cash_per_symbol
        self.sleeves = [part] * n
        self.accounts = [Account(part, multiplier=self.multipliers.get(s, 1.0))
                         for s in self.symbols]
        self.pool = self.capital - part * n if n else self.capital
        #: the capital no symbol's part took at the start (buy-and-hold keeps it as cash)
        self.unallocated = self.pool
        self.per_symbol = self.sizing == "per-symbol"

    def add_symbol(self, symbol: str) -> int:
        """A symbol first seen now: its part starts empty (a symbol never adds money)."""
        self.symbols.append(symbol)
        self.sleeves.append(0.0)
        self.accounts.append(Account(0.0, multiplier=self.multipliers.get(symbol, 1.0)))
        return len(self.symbols) - 1

    # --- marks -----------------------------------------------------------------------
    def mark(self, sym: int, price: float) -> None:
        self.accounts[sym].last_price = price

    def equity(self) -> float:
        """Cash + sum of position x last price x multiplier (see the module)."""
        return self.pool + sum(a.equity() for a in self.accounts)

    def total_cash(self) -> float:
        return self.pool + sum(a.cash for a in self.accounts)

    def gross(self) -> float:
        """Sum of |position| x last price x multiplier over all symbols."""
        return sum(a.notional() for a in self.accounts)

    def initial_capital(self) -> float:
        return self.capital

    def sleeve_cash(self, sym: int) -> float:
        return self.accounts[sym].cash

    def multiplier(self, sym: int) -> float:
        return self.accounts[sym].multiplier

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

    # --- interest --------------------------------------------------------------------
    @property
    def accrues(self) -> bool:
        return bool(self.interest_rate or self.borrow_rate)

    def accrue(self, day: date) -> None:
        """Interest on positive cash and the fee on short notional for the calendar days
        since the last accrual (act/365), booked at the first bar event of `day`."""
        last, self._accrued_to = self._accrued_to, day
        if last is None or day <= last:
            return
        years = (day - last).days / 365.0
        interest = max(0.0, self.total_cash()) * self.interest_rate * years
        shorts = sum(a.notional() for a in self.accounts if a.position < 0.0)
        fee = shorts * self.borrow_rate * years
        self.pool += interest - fee
        self.interest_paid += interest
        self.borrow_fees += fee

    # --- orders ----------------------------------------------------------------------
    def _fill_price(self, side: int, price: float) -> float:
        return price * (1.0 + side * self.slippage_bps * 1e-4)

    def entry_quantity(self, sym: int, side: int, price: float) -> float:
        """Units an entry of `side` would take at `price` (0 when the money allows none):
        the estimate at the order; `execute` sizes it again at the fill.

        Per-symbol sizes from the symbol's money once any position is closed (a switch of
        sides closes first, paying one more commission)."""
        fill_price = self._fill_price(side, self._touch(self.symbols[sym], side, price)[0])
        if not self.per_symbol:
            assert self.sizer is not None
            return self.sizer.entry_units(self, sym, side, fill_price)
        acct = self.accounts[sym]
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

    def execute(self, order: Order, sym: int, price: float, ts: int,
                market: bool = True) -> Fill | None:
        """Fill an order at `price` (before slippage; a market order crosses a known quote,
        `market=False` fills a limit or stop at `price` itself). None if nothing fills.

        Closing orders are re-sized to the position actually held, and entries from flat
        by the sizing model at the fill, then cut to what the account's checks allow."""
        acct = self.accounts[sym]
        side = order.side
        qty = order.quantity
        touch, half_spread = (self._touch(order.symbol, side, price) if market
                              else (price, 0.0))
        fill_price = self._fill_price(side, touch)
        entry = order.reason not in CLOSING
        if not entry:
            qty = abs(acct.position)
        elif acct.position == 0.0 and order.reason == "enter":
            # sized at the fill: a pending entry behind a pending close (a switch of sides
            # under next-tick fills) was sized before the close freed the money
            assert self.sizer is not None
            qty = self.sizer.entry_units(self, sym, side, fill_price)
            if self.position_cap:
                qty = min(qty, math.floor(self.position_cap))
        elif order.reason == "rebalance" and side * acct.position < 0:
            qty = min(qty, abs(acct.position))  # a rebalance never flips the position
        if self.gross_notional_cap and entry:
            qty = self._within_gross_notional(sym, side, qty, fill_price)
            if qty <= 0.0:
                self._refuse("max_gross_notional")
                return None
        if qty <= 0.0:
            if entry and not self.per_symbol:
                self._refuse("no_size")
            return None
        if entry:
            qty = self._checked(acct, sym, side, qty, fill_price)
            if qty <= 0.0:
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

    def _refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1

    def _checked(self, acct: Account, sym: int, side: int, qty: float,
                 fill_price: float) -> float:
        """`qty` cut to what the account's checks allow at the fill (0: refused, counted)."""
        if self.per_symbol:
            if self._affordable(acct, side, qty, fill_price):
                return qty
            self._refuse("insufficient_cash" if side > 0 else "insufficient_margin")
            return 0.0
        allowed = self._account_room(acct, sym, side, fill_price)
        if allowed[0] >= qty:
            return qty
        assert self.sizer is not None
        if allowed[0] <= 0.0 or self.sizer.exact:  # named units: those or none
            self._refuse(allowed[1])
            return 0.0
        return allowed[0]

    def _account_room(self, acct: Account, sym: int, side: int, fill_price: float
                      ) -> tuple[float, str]:
        """(the most units of an entry of `side` at `fill_price` that one account allows,
        the check that binds): cash for a buy that ends long, margin for a sale that ends
        short, gross exposure for both (see the module)."""
        mult = acct.multiplier
        unit = fill_price * mult
        fee = self.commission
        held = acct.position
        # equity with this symbol marked at the fill price, less the commission
        equity = (self.equity() - acct.equity() + acct.cash + held * unit) - fee
        room, why = math.inf, ""
        if side > 0:
            cash = self.total_cash() - fee
            # a buy that covers a short is paid by the short's proceeds: only the part
            # that ends long needs cash
            cover = max(0.0, -held)
            room, why = cover + max(0.0, cash - cover * unit) / unit, "insufficient_cash"
        else:
            shorts = sum(a.notional() for a in self.accounts if a.position < 0.0
                         and a is not acct)
            own = max(0.0, -held)
            sell_long = max(0.0, held)
            margin_room = (equity / self.short_margin - shorts) / unit - own
            room, why = sell_long + max(0.0, margin_room), "insufficient_margin"
        if self.max_leverage:
            others = self.gross() - acct.notional()
            gross_room = (self.max_leverage * equity - others) / unit
            # units that reduce |position| first, then those that add to it
            reducing = abs(held) if held * side < 0 else 0.0
            if held * side > 0:
                gross_room -= abs(held)
            gross_room = reducing + max(0.0, gross_room)
            if gross_room < room:
                room, why = gross_room, "max_leverage"
        if room >= 2**53:
            return room, why
        return float(max(0, math.floor(room + EPS))), why

    def _within_gross_notional(self, sym: int, side: int, qty: float, fill_price: float
                               ) -> float:
        """The most of `qty` that keeps gross notional within the cap at the fill price
        (other symbols at their last prices); an order that reduces exposure is not cut."""
        acct = self.accounts[sym]
        if acct.position * side < 0:
            return qty
        others = sum(a.notional() for i, a in enumerate(self.accounts)
                     if i != sym and a.position)
        room = self.gross_notional_cap - others - abs(acct.position) * fill_price
        return float(min(qty, max(0, math.floor(room / fill_price))))

    def _margin(self, side: int) -> float:
        """Money an all-in entry needs per dollar of notional: 1 for a buy (no leverage),
        the short margin for a short sale (sized so that the margin check passes)."""
        return 1.0 if side > 0 or self.short_margin == 1.0 else self.short_margin

    margin_per_notional = _margin

    def _affordable(self, acct: Account, side: int, qty: float, fill_price: float) -> bool:
        """Whether a per-symbol account can pay for an entry of `qty` (see module)."""
        unit = fill_price * acct.multiplier if acct.multiplier != 1.0 else fill_price
        cash_after = acct.cash - side * qty * unit - self.commission
        position_after = acct.position + side * qty
        if side > 0:
            # a buy that covers a short is paid from the short's proceeds: only a long
            # position afterwards must be fully paid for in cash
            return cash_after >= -1e-9 or position_after <= 0.0
        if position_after >= 0.0:  # a sale out of a long position
            return True
        equity_after = cash_after + position_after * unit
        return equity_after + 1e-9 >= self.short_margin * -position_after * unit

    def total_refused(self) -> int:
        return sum(self.refused.values())


def _no_history(sym: int, n: int) -> np.ndarray:
    """A broker built without the engine's bar history has none to size by."""
    return np.zeros(0)


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
