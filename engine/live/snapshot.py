"""Snapshot and restore of a live engine's state, so a restarted daemon is one that never died.

A snapshot holds everything that decides future orders: the open bar of every symbol, the
indicator bank's rolling state, the strategy's state, the signals and intended positions,
pending orders, the bar clock, the broker's accounts and the validator's stream state
(sequence numbers, session, last prices and times that the sanity checks compare with,
and the messages it holds ahead of the stream's clock until the stream agrees).
Restored from a snapshot taken at shutdown and fed the rest of the same stream, the engine
makes exactly the orders and fills of one that never stopped.

After `kill -9` the journal can be ahead of the last snapshot (fills and orders of later
batches): those are applied on top, so positions equal the sum of the journaled fills and
orders journaled without a fill are pending again. Without any snapshot the engine starts
cold, and `WarmupGuard` keeps a restored position from being read as a signal to flatten
while the indicators warm up (`WeightWarmupGuard` for a weight strategy: `warmup_guard`).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from engine.live.snapshot_format import NotData, to_data
from engine.trading.core import Engine
from engine.trading.orders import sign
from engine.trading.stats import EngineStats
from feeds.messages import Fill, Order
from feeds.validation import Validator
from gpu.indicators.compute import IndicatorBank
from strategies.base import Features, Signals, Strategy, Weights, WeightStrategy

log = logging.getLogger(__name__)

#: the engine's state, by the part that owns it ("" = the engine itself); the stats are
#: restored field by field into the engine's own object, which the order desk shares
ENGINE_FIELDS: dict[str, tuple[str, ...]] = {
    "bars": ("o", "h", "l", "c", "v", "first_price"),
    "clock": ("next_boundary", "group_ts"),
    "orders": ("pending", "has_pending"),
    "decisions": ("signal", "intended"),
    "stats": tuple(f.name for f in dataclasses.fields(EngineStats)),
    "": ("_flagged", "_now", "bank"),
}
#: snapshots written before the engine was split into parts: flat attribute -> (part, field)
_FLAT_NAMES = {"_o": ("bars", "o"), "_h": ("bars", "h"), "_l": ("bars", "l"),
               "_c": ("bars", "c"), "_v": ("bars", "v"), "_first_price": ("bars", "first_price"),
               "_next_boundary": ("clock", "next_boundary"),
               "_bar_group_ts": ("clock", "group_ts"), "_pending": ("orders", "pending"),
               "_has_pending": ("orders", "has_pending"), "_signal": ("decisions", "signal"),
               "_intended": ("decisions", "intended")}
VALIDATOR_FIELDS = ("last_seq", "_sym", "clock", "session", "_fresh", "received",
                    "session_changes")


def capture(engine: Engine, validator: Validator, extra: dict[str, Any]) -> dict[str, Any]:
    """The state to journal (copies, so later batches do not change it): plain data only
    (engine.live.snapshot_format), the indicator bank as its arrays."""
    strategy = engine.strategy
    if isinstance(strategy, WarmupGuard):
        strategy = strategy.inner
    b = engine.broker
    parts = {part: {f: getattr(_part(engine, part), f) for f in fields if f != "bank"}
             for part, fields in ENGINE_FIELDS.items()}
    parts[""]["bank"] = bank_state(engine.bank)
    return {
        "symbols": list(engine.symbols),
        "engine": copy.deepcopy(parts),
        "accounts": [{f.name: getattr(a, f.name) for f in dataclasses.fields(a)}
                     for a in b.accounts],
        "order_id": b._order_id,
        "refused": dict(b.refused),
        # the account's cash no symbol holds (interest and fees accrued there)
        "pool": b.pool, "interest_paid": b.interest_paid, "borrow_fees": b.borrow_fees,
        "accrued_to": None if b._accrued_to is None else b._accrued_to.isoformat(),
        "broker": broker_state(b),
        "strategy_name": strategy.name,
        "strategy": strategy_state(strategy),
        "validator": copy.deepcopy({**{f: getattr(validator, f) for f in VALIDATOR_FIELDS},
                                    "held": validator.held_state()}),
        **extra,
    }


def _restore_pool(engine: Engine, snap: dict[str, Any]) -> None:
    """The account's pool and accruals (snapshots before issue 29 have none: kept)."""
    b = engine.broker
    if "pool" in snap:
        b.pool = float(snap["pool"])
        b.interest_paid = float(snap.get("interest_paid", 0.0))
        b.borrow_fees = float(snap.get("borrow_fees", 0.0))
        when = snap.get("accrued_to")
        b._accrued_to = None if when is None else dt.date.fromisoformat(when)


def restore(engine: Engine, validator: Validator, snap: dict[str, Any],
            orders: list[Order], fills: list[Fill], last_fill_id: int,
            last_order_id: int) -> None:
    """Put a snapshot's state into a fresh engine built on the snapshot's symbols, then
    apply the journal's later orders and fills (`kill -9` after the snapshot)."""
    for part, fields in _engine_state(snap["engine"]).items():
        obj = _part(engine, part)
        for name, value in fields.items():
            if part == "" and name == "bank" and isinstance(value, dict):
                value = bank_from_state(value)
            setattr(obj, name, value)
    engine.sym_index = {s: i for i, s in enumerate(engine.symbols)}
    for part, value in snap.get("broker", {}).items():  # capital, pools, marks
        if hasattr(engine.broker, part):
            setattr(engine.broker, part, value)
    for i, acct in enumerate(snap["accounts"]):
        a = engine.broker.accounts[i]
        if isinstance(acct, dict):
            for name, value in acct.items():
                setattr(a, name, value)
        else:  # a snapshot of the five fields the account had first
            a.cash, a.position, a.last_price, a.commission_paid, a.trades = acct
    engine.broker._order_id = snap["order_id"]
    engine.broker.refused = dict(snap["refused"])
    _restore_pool(engine, snap)
    if isinstance(snap["strategy"], dict) and snap["strategy_name"] == engine.strategy.name:
        engine.strategy.__dict__.update(snap["strategy"])
    elif snap["strategy_name"] != engine.strategy.name:
        log.warning("snapshot was taken with strategy %s, now %s: its state starts cold",
                    snap["strategy_name"], engine.strategy.name)
    _restore_validator(validator, snap["validator"])
    # the tick flags derive from this run's option book as much as from the saved state
    # (a snapshot taken without groups, or with spots from validation, flagged an
    # underlying NOT_FLAGGED): recomputed, never trusted, or its groups would go unpriced
    for i in range(len(engine.symbols)):
        engine.refresh_flag(i)
    engine.broker.orders = list(orders)
    engine.broker.fills = list(fills)
    later_fills = [f for f in fills if f.fill_id > last_fill_id]
    later_orders = [o for o in orders if o.order_id > last_order_id]
    if not later_fills and not later_orders:
        return  # a clean snapshot (shutdown): exactly the state it was taken in
    log.warning("journal is %d orders and %d fills ahead of the last snapshot (killed?): "
                "applying them", len(later_orders), len(later_fills))
    filled = {f.order_id for f in fills}
    for f in later_fills:
        sym = engine.sym_index.get(f.symbol)
        if sym is None:
            sym = engine.register(f.symbol)
        engine.broker.accounts[sym].book_fill(f)
    engine.broker._order_id = max(engine.broker._order_id,
                                  max((o.order_id for o in orders), default=0))
    _restore_pending(engine, [*(p for lst in engine.orders.pending for p in lst),
                              *later_orders], filled)


#: the broker's attributes a snapshot leaves out: the journal's (orders, fills), the
#: engine's (symbols), captured apart (accounts, order id, refusals), rebuilt (sizer) or
#: the risk limits' (caps); the settings ([broker] keys) come from this run's config
_BROKER_ELSEWHERE = frozenset({"orders", "fills", "symbols", "accounts", "_order_id",
                               "refused", "sizer", "position_cap", "gross_notional_cap",
                               "allow_short", "multipliers"})


def broker_state(broker: Any) -> dict[str, Any]:
    """The broker's other plain-data attributes (its capital, cash pool, quotes, accrued
    fees): a restart must size orders from the same money as a daemon that never stopped."""
    from engine.settings.config import BrokerConfig

    settings = set(BrokerConfig.__struct_fields__)
    state: dict[str, Any] = {}
    for name, value in vars(broker).items():
        if name in _BROKER_ELSEWHERE or name in settings:
            continue
        try:
            to_data(value)
        except NotData:
            continue
        state[name] = copy.deepcopy(value)
    return state


def strategy_state(strategy: Strategy) -> dict[str, Any]:
    """The strategy's attributes that are plain data (its signals, windows, counters); the
    others (a decider holding GPU buffers, rule objects) are rebuilt by the strategy itself
    from its name, which the restore checks."""
    state: dict[str, Any] = {}
    for name, value in vars(strategy).items():
        try:
            to_data(value)
        except NotData:
            log.debug("strategy %s: %s is not data, restarts as built", strategy.name, name)
            continue
        state[name] = copy.deepcopy(value)
    return state


def bank_state(bank: IndicatorBank) -> dict[str, Any]:
    """The indicator bank's rolling state as arrays (read back from the GPU there)."""
    state = (bank._state if bank.device == "cpu"
             else bank._state_dev.copy_to_host().T.copy())  # device layout: (STATE_LEN, n)
    return {"n_symbols": bank.n_symbols, "device": bank.device, "state": state,
            "values": bank._values, "bars_seen": bank._bars_seen, "stamp": bank._stamp,
            "generation": bank._generation}


def bank_from_state(st: dict[str, Any]) -> IndicatorBank:
    """A bank holding a `bank_state` (shapes checked: a damaged snapshot is an error)."""
    bank = IndicatorBank(int(st["n_symbols"]), device=str(st["device"]))
    state = np.asarray(st["state"], np.float64)
    want = (bank._state.shape if bank.device == "cpu"
            else bank._state_dev.shape[::-1])
    if state.shape != want:
        raise ValueError(f"indicator state of shape {state.shape} for {bank.n_symbols} symbols")
    if bank.device == "cpu":
        bank._state[:] = state
    else:
        bank._state_dev.copy_to_device(np.ascontiguousarray(state.T))
    bank._values[:] = st["values"]
    bank._bars_seen[:] = st["bars_seen"]
    bank._stamp[:] = st["stamp"]
    bank._generation = int(st["generation"])
    return bank


def _restore_pending(engine: Engine, orders: list[Order], filled: set[int]) -> None:
    """Pending = orders without a fill, whether the snapshot or a later batch placed them;
    each symbol then intends the position its account and pending orders lead to."""
    pending: dict[int, list[Order]] = {}
    for o in orders:
        if o.order_id not in filled:
            # a symbol first seen after the snapshot has an order but no index yet
            sym = engine.sym_index.get(o.symbol)
            if sym is None:
                sym = engine.register(o.symbol)
            pending.setdefault(sym, []).append(o)
    desk, decisions = engine.orders, engine.decisions
    for i in range(len(engine.symbols)):
        desk.pending[i] = sorted(pending.get(i, []), key=lambda o: o.order_id)
        desk.has_pending[i] = bool(desk.pending[i])
        engine.refresh_flag(i)
        held = sign(desk.position_after_pending(i))
        decisions.intended[i] = held
        if held != 0 and int(decisions.signal[i]) != held:
            decisions.signal[i] = held  # the signal that led to the position held


def _restore_validator(validator: Validator, state: dict[str, Any]) -> None:
    """The validator's stream state; a snapshot of separate symbol tables is translated."""
    state = dict(state)
    if "_band" in state:
        validator.load_symbols(state.pop("_band"), state.pop("last_price", {}),
                               state.pop("last_ts", {}))
    held = state.pop("held", None)  # snapshots before held messages were kept have none
    for name, value in state.items():
        setattr(validator, name, value)
    if held is not None:
        validator.load_held(held)


def _part(engine: Engine, part: str) -> Any:
    return getattr(engine, part) if part else engine


def _engine_state(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The snapshot's engine state by part; a snapshot of the flat engine is translated."""
    if not any(k.startswith("_") and k in _FLAT_NAMES for k in state):
        return state
    out: dict[str, dict[str, Any]] = {}
    for k, v in state.items():
        if k == "stats":
            out["stats"] = dataclasses.asdict(v)
        else:
            part, f = _FLAT_NAMES.get(k, ("", k))
            out.setdefault(part, {})[f] = v
    return out


class WarmupGuard:
    """Wraps a strategy after a cold restart: a symbol restored with a position keeps its
    signal while its indicators warm up (any terminal still NaN) and the strategy says 0,
    so warm-up is never read as a signal to flatten. Released per symbol at the first
    nonzero signal or once every terminal is warm."""

    def __init__(self, inner: Strategy, held: npt.NDArray[np.int8]) -> None:
        self.inner = inner
        self.name = inner.name
        self.enter_on_from_zero = inner.enter_on_from_zero
        self.long_only = inner.long_only
        self.held = held.copy()
        self.held_bars = 0  # bars on which a warming signal was held (status)

    def reset(self, symbols: list[str]) -> None:
        self.inner.reset(symbols)

    async def target_signals(self, features: Features, closed: npt.NDArray[np.bool_]) -> Signals:
        out = np.asarray(await self.inner.target_signals(features, closed)).astype(np.int8)
        n = min(len(self.held), len(out))
        if n == 0 or not self.held[:n].any():
            return out
        held = self.held[:n]
        warming = np.isnan(features[:n]).any(axis=1)
        keep = (held != 0) & (out[:n] == 0) & warming
        # released for good: a real signal or warm indicators
        self.held[:n] = np.where(keep, held, 0)
        if keep.any():
            self.held_bars += int(keep.sum())
            out = out.copy()
            out[:n][keep] = held[keep]
        return out


class WeightWarmupGuard(WarmupGuard):
    """`WarmupGuard` for a weight strategy (strategies.base.WeightStrategy), so the wrapped
    strategy stays one (the engine asks it for weights, and sizes by them). A held symbol,
    warming and weighted 0, gets the weight its position has now (`held_weights`, read at
    the bar close): its sign keeps the signal, and the rebalance (engine.trading.core.Engine.
    _rebalance) targets the position it holds, so warm-up neither flattens nor resizes it.
    Released per symbol exactly as the signal guard: at the first nonzero weight or warm."""

    def __init__(self, inner: WeightStrategy, held: npt.NDArray[np.int8],
                 held_weights: Callable[[], npt.NDArray[np.float64]]) -> None:
        super().__init__(inner, held)
        self.weighted = inner
        self.held_weights = held_weights

    async def target_weights(self, features: Features,
                             closed: npt.NDArray[np.bool_]) -> Weights:
        out = np.asarray(await self.weighted.target_weights(features, closed), np.float64)
        n = min(len(self.held), len(out))
        if n == 0 or not self.held[:n].any():
            return out
        held = self.held[:n]
        warming = np.isnan(features[:n]).any(axis=1)
        keep = (held != 0) & (out[:n] == 0) & warming
        self.held[:n] = np.where(keep, held, 0)  # released for good, as the signal guard
        if keep.any():
            self.held_bars += int(keep.sum())
            now = self.held_weights()[:n]
            out = out.copy()
            # a weight of 0 (no price yet) would close: the smallest one of the held sign
            out[:n][keep] = np.where(now[keep] != 0, now[keep],
                                     held[keep] * np.finfo(np.float64).tiny)
        return out


def position_weights(engine: Engine) -> npt.NDArray[np.float64]:
    """Each position's weight for the engine's rebalance: the one whose target
    (floor(|w| x equity / (close x multiplier)), engine.trading.core.Engine._rebalance) is the
    position itself. Half a unit over it, so the floor lands on the held units although
    equity moves by the fees of other symbols' fills before the rebalance reads it; at
    most 1 (a weight strategy's bound)."""
    equity = engine.broker.equity()
    closes = engine.bars.c
    out = np.zeros(len(engine.broker.accounts))
    if not equity > 0:
        return out
    for i, a in enumerate(engine.broker.accounts):
        unit = closes[i] * a.multiplier
        if a.position != 0 and unit > 0:
            w = (abs(a.position) + 0.5) * unit / equity
            out[i] = math.copysign(min(1.0, w), a.position)
    return out


def warmup_guard(engine: Engine, held: npt.NDArray[np.int8]) -> WarmupGuard:
    """The guard of the engine's strategy after a cold restart: a weight strategy's keeps
    it a weight strategy (`WeightWarmupGuard`), holding each position at its weight."""
    strategy = engine.strategy
    if isinstance(strategy, WeightStrategy):
        return WeightWarmupGuard(strategy, held, lambda: position_weights(engine))
    return WarmupGuard(strategy, held)
