"""Pre-trade risk limits of the live daemon: every entry order passes them before the broker.

Limits (the `[risk]` table of the engine's TOML; 0 turns a limit off):

- `max_position`: the most units held in one symbol after the order;
- `max_gross_notional`: the most money at risk over all symbols (|position| x last price)
  after the order; the broker applies it again at the fill price (a fill after a gap is cut
  to what fits, or refused and counted under `max_gross_notional`), as it does `max_position`
  for entries sized at fill time;
- `max_orders_per_second`: entry orders per second of data time (data time, not the wall
  clock, so a restarted daemon decides exactly as one that never stopped);
- `max_daily_loss`: a loss from the day's starting equity (the exchange's day) beyond this
  trips the kill switch: every position is flattened and entries are refused until an
  operator resets it (`journal --reset-kill-switch`).

Orders that close a position are never refused (they reduce risk), and while the feed is
stale (no message within the heartbeat timeout) entries are refused too. Each refusal
becomes a `RiskRejection`, journaled and published by the daemon.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import msgspec

from engine.bounds import require_non_negative
from feeds.messages import RiskRejection

NS = 1_000_000_000


class RiskLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    max_position: float = 0.0
    max_gross_notional: float = 0.0
    max_orders_per_second: float = 0.0
    max_daily_loss: float = 0.0

    def __post_init__(self) -> None:
        require_non_negative(self, "risk", ("max_position", "max_gross_notional",
                                            "max_orders_per_second", "max_daily_loss"),
                             note=" (0 = no limit)")


class RiskGate:
    """Decides each entry order of one engine; keeps the kill switch and the day's equity."""

    def __init__(self, limits: RiskLimits) -> None:
        self.limits = limits
        self.engine: Any = None  # set by `attach`
        self.rejections: list[RiskRejection] = []  # of the current batch, for the daemon
        self.rejected: dict[str, int] = {}
        self.killed = False
        self.stale = False
        self._recent: deque[int] = deque()  # data times of recent entry orders
        self._day: Any = None
        self._day_equity = 0.0

    def attach(self, engine: Any) -> None:
        self.engine = engine
        engine.orders.risk_check = self.check
        engine.broker.position_cap = self.limits.max_position
        engine.broker.gross_notional_cap = self.limits.max_gross_notional

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
        else:
            broker = self.engine.broker
            new_pos = self._position_after_entry(sym, side, qty, price)
            if lim.max_position and abs(new_pos) > lim.max_position:
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
        if broker.sizing == "all-in":
            freed = acct.cash + acct.position * price - (broker.commission if acct.position
                                                          else 0.0)
            fill_qty = math.floor(max(0.0, freed - broker.commission)
                                  / (price * broker._margin(side)))
            qty = max(qty, float(fill_qty))
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
        equity = eng.broker.equity()
        day = eng.local_date(now)
        if day != self._day:
            self._day, self._day_equity = day, equity
        lim = self.limits.max_daily_loss
        if self.killed or not lim or self._day_equity - equity <= lim:
            return False
        self.killed = True
        self._refuse(now, "", 0, 0.0, "max_daily_loss",
                     f"loss {self._day_equity - equity:,.2f} since the day's start "
                     f"> {lim:,.2f}: kill switch on, flattening")
        return True

    def reset_kill_switch(self) -> None:
        self.killed = False
        self._day_equity = self.engine.broker.equity()  # the loss counts from now

    @property
    def day_baseline(self) -> tuple[Any, float] | None:
        """(the exchange day, the equity the day's loss counts from), once a batch set it;
        the daemon journals it whenever it changes so a restart without a snapshot keeps
        the day's loss instead of counting it from the restart."""
        return None if self._day is None else (self._day, self._day_equity)

    def restore_day(self, day: Any, equity: float) -> None:
        self._day, self._day_equity = day, equity

    # ------------------------------------------------------------------ snapshot
    def state(self) -> dict[str, Any]:
        return {"killed": self.killed, "recent": list(self._recent), "day": self._day,
                "day_equity": self._day_equity, "rejected": dict(self.rejected)}

    def restore(self, st: dict[str, Any]) -> None:
        self.killed = bool(st.get("killed", False))
        self._recent = deque(st.get("recent", []))
        self._day = st.get("day")
        self._day_equity = float(st.get("day_equity", 0.0))
        self.rejected = dict(st.get("rejected", {}))
