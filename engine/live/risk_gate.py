"""Pre-trade risk gate of the live daemon: every entry order passes its limits before the broker.

Limits (engine/settings/risk.py) (the `[risk]` table of the engine's TOML; 0 turns a limit off):

- `max_position`: the most units held in one symbol after the order;
- `max_gross_notional`: the most money at risk over all symbols (|position| x last price)
  after the order; the broker applies it again at the fill price (a fill after a gap is cut
  to what fits, or refused and counted under `max_gross_notional`), as it does `max_position`
  for entries sized at fill time;
- `max_orders_per_second`: entry orders per second of data time (data time, not the wall
  clock, so a restarted daemon decides exactly as one that never stopped);
- `max_daily_loss`: a loss from the day's start (the exchange's day) beyond this trips the
  kill switch: every position is flattened and entries are refused until an operator
  resets it (`journal --reset-kill-switch`). The loss is counted in P&L (equity less the
  capital of the symbols held), from the first batch of the day whose positions are all
  marked: a symbol first seen later brings its capital, not a gain, and an opening
  heartbeat before any symbol is P&L 0, never an equity of 0 that no loss could go below;
- `min_price` (default 0.0001), `max_order_quantity` (default 1,000,000 units) and
  `max_order_notional` (default 1,000,000 of money): an entry at a lower price, or of
  more units or money (the quantity it leads to, all-in entries sized from the account's
  cash), is refused, so a new symbol trading at 1e-9 cannot open a position of trillions
  of shares; the broker caps an all-in entry's re-sizing at fill time to
  `max_order_quantity` too. Set them to 0 to turn them off.

Orders that close a position are never refused (they reduce risk), and while the feed is
stale (no message within the heartbeat timeout) entries are refused too. Each refusal
becomes a `RiskRejection`, journaled and published by the daemon.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from engine.settings.risk import RiskLimits
from feeds.messages import RiskRejection

NS = 1_000_000_000


class RiskGate:
    """Decides each entry order of one engine; keeps the kill switch and the day's equity."""

    def __init__(self, limits: RiskLimits) -> None:
        self.limits = limits
        self.engine: Any = None  # set by `watch`
        self.rejections: list[RiskRejection] = []  # of the current batch, for the daemon
        self.rejected: dict[str, int] = {}
        self.killed = False
        self.stale = False
        self._recent: deque[int] = deque()  # data times of recent entry orders
        self._day: Any = None
        self._day_pnl = 0.0

    def watch(self, engine: Any) -> None:
        """The engine whose book the checks read (its order desk got `check` at
        construction, EngineHooks), and its broker's caps at fill time. An engine built
        without this gate's `check` is refused: watching it would only look like limits."""
        if engine.orders.risk_check != self.check:
            raise ValueError("this engine's orders do not pass the risk gate: give "
                             "EngineHooks(OrderHooks(risk_check=gate.check)) when building it")
        self.engine = engine
        lim = self.limits
        # an all-in entry from flat is re-sized at fill time: its position is its quantity
        caps = [c for c in (lim.max_position, lim.max_order_quantity) if c]
        engine.broker.position_cap = min(caps, default=0.0)
        engine.broker.gross_notional_cap = lim.max_gross_notional

    # ------------------------------------------------------------------ per order
    def check(self, sym: int, side: int, qty: float, reason: str, price: float, ts: int) -> bool:
        """True lets the order through; False refuses it (recorded with its reason)."""
        if reason == "close":
            return True
        lim = self.limits
        why = ""
        detail = ""
        if self.killed:
            why, detail = "kill_switch", "entries blocked until the kill switch is reset"
        elif self.stale:
            why, detail = "feed_stale", "no market data within the heartbeat timeout"
        elif lim.min_price and not price >= lim.min_price:
            why, detail = "min_price", f"price {price:g} < {lim.min_price:g}"
        else:
            broker = self.engine.broker
            new_pos = self._position_after_entry(sym, side, qty, price)
            held = broker.accounts[sym].position
            order_qty = abs(new_pos) if side * held <= 0 else qty  # a switch counts from flat
            if lim.max_order_quantity and not order_qty <= lim.max_order_quantity:
                why = "max_order_quantity"
                detail = f"order of {order_qty:g} > {lim.max_order_quantity:g}"
            elif lim.max_order_notional and not order_qty * price <= lim.max_order_notional:
                why = "max_order_notional"
                detail = (f"order notional {order_qty * price:,.2f} > "
                          f"{lim.max_order_notional:,.2f}")
            elif lim.max_position and abs(new_pos) > lim.max_position:
                why = "max_position"
                detail = f"|position| would be {abs(new_pos):g} > {lim.max_position:g}"
            elif lim.max_gross_notional:
                gross = sum(abs(a.position) * a.last_price for i, a in enumerate(broker.accounts)
                            if a.position and i != sym)
                gross += abs(new_pos) * price
                if gross > lim.max_gross_notional:
                    why = "max_gross_notional"
                    detail = f"gross notional would be {gross:,.2f} > {lim.max_gross_notional:,.2f}"
            if not why and lim.max_orders_per_second:
                recent = self._recent
                while recent and recent[0] <= ts - NS:
                    recent.popleft()
                if len(recent) >= lim.max_orders_per_second:
                    why = "max_orders_per_second"
                    detail = f"{len(recent)} entries in the last second"
                else:
                    recent.append(ts)
        if not why:
            return True
        self._refuse(ts, self.engine.symbols[sym], side, qty, why, detail)
        return False

    def _position_after_entry(self, sym: int, side: int, qty: float, price: float) -> float:
        """The position this entry leads to. An entry against the held side follows a close
        (a switch), and an all-in entry is sized again at fill time from the cash the close
        frees, so both count from flat with the quantity that cash buys, not with the
        position still held or the quantity sized before the close."""
        broker = self.engine.broker
        acct = broker.accounts[sym]
        if side * acct.position > 0:
            return acct.position + side * qty
        if broker.sizing == "per-symbol":  # all-in of the symbol's part
            freed = acct.cash + acct.position * price - (broker.commission if acct.position
                                                          else 0.0)
            fill_qty = max(0.0, freed - broker.commission) / (price * broker._margin(side))
            # beyond 2**53 a float has no fraction left to floor (and inf cannot be floored)
            qty = max(qty, float(math.floor(fill_qty)) if fill_qty < 2**53 else fill_qty)
        return side * qty

    def _refuse(self, ts: int, symbol: str, side: int, qty: float, why: str,
                detail: str) -> None:
        self.rejected[why] = self.rejected.get(why, 0) + 1
        self.rejections.append(RiskRejection(0, ts, symbol, side, qty, why, detail))

    # ------------------------------------------------------------------ per batch
    def after_batch(self) -> bool:
        """Check the day's loss; True when the kill switch trips now (the daemon flattens)."""
        eng = self.engine
        now = eng._now
        if now <= 0:
            return False
        day = eng.local_date(now)
        if day != self._day:
            if not self._marked():
                return False  # the day's baseline waits for a price of every position
            self._day, self._day_pnl = day, self._pnl()
        lim = self.limits.max_daily_loss
        if self.killed or not lim:  # no limit to check: the P&L (every account) is not needed
            return False
        loss = self._day_pnl - self._pnl()
        if not loss > lim:
            return False
        self.killed = True
        self._refuse(now, "", 0, 0.0, "max_daily_loss",
                     f"loss {loss:,.2f} since the day's start "
                     f"> {lim:,.2f}: kill switch on, flattening")
        return True

    def _pnl(self) -> float:
        """Equity less the capital of the symbols held: a new symbol's cash is no gain."""
        broker = self.engine.broker
        return float(broker.equity() - broker.initial_capital())

    def _marked(self) -> bool:
        return all(a.last_price > 0.0 for a in self.engine.broker.accounts if a.position)

    def reset_kill_switch(self) -> None:
        self.killed = False
        self._day_pnl = self._pnl()  # the loss counts from now

    @property
    def day_baseline(self) -> tuple[Any, float] | None:
        """(the exchange day, the P&L the day's loss counts from), once a batch set it;
        the daemon journals it whenever it changes so a restart without a snapshot keeps
        the day's loss instead of counting it from the restart."""
        return None if self._day is None else (self._day, self._day_pnl)

    def restore_day(self, day: Any, pnl: float) -> None:
        self._day, self._day_pnl = day, pnl

    # ------------------------------------------------------------------ snapshot
    def state(self) -> dict[str, Any]:
        return {"killed": self.killed, "recent": list(self._recent), "day": self._day,
                "day_pnl": self._day_pnl, "rejected": dict(self.rejected)}

    def restore(self, st: dict[str, Any]) -> None:
        self.killed = bool(st.get("killed", False))
        self._recent = deque(st.get("recent", []))
        self.rejected = dict(st.get("rejected", {}))
        if "day_pnl" in st:  # an older snapshot's equity baseline is not a P&L: re-taken
            self._day = st.get("day")
            self._day_pnl = float(st["day_pnl"])
