"""Engine configuration: a frozen msgspec Struct read from TOML; unknown keys are an error.

Every option has a default that works on one machine. Command-line flags override the file.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Literal

import msgspec

from engine.bounds import require_non_negative, require_positive
from engine.errors import UserError
from engine.live_options import LiveOptions
from engine.option_book import OptionGroupConfig
from engine.risk import RiskLimits
from feeds.validation import ValidationLimits


class BrokerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    cash_per_symbol: float = 10_000.0
    commission: float = 1.0
    slippage_bps: float = 0.0
    sizing: Literal["all-in", "fixed"] = "all-in"
    quantity: float = 100.0
    #: a short entry needs this fraction of its notional in the account (1.0 = 100%)
    short_margin: float = 1.0
    #: when an order decided at a bar's close fills:
    #: "signal-close": at that same close (the GP paper's model; optimistic: the close that
    #:   produced the signal is already past when the signal is known);
    #: "next-open": at the next bar's open (backtrader's and LEAN's default for bars);
    #: "next-tick": at the next trade after the order (tick data);
    #: "auto": next-open for bar data, next-tick for tick data.
    #: "bar-close" is the old name of signal-close.
    fill: Literal["auto", "signal-close", "next-open", "next-tick", "bar-close"] = "auto"

    def __post_init__(self) -> None:
        require_positive(self, "broker", ("cash_per_symbol", "quantity", "short_margin"))
        require_non_negative(self, "broker", ("commission", "slippage_bps"))


#: messages taken from the socket per batch, at most (feeds.transport.Subscriber's default)
RECEIVE_BATCH = 8192


class EngineConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: length of the time bars built from ticks, seconds
    bar_seconds: float = 60.0
    #: "HH:MM,HH:MM,HH:MM": t1,t2,t3 of WAIT/TRADE/LIQUIDATE/STOP in New York time;
    #: "" keeps every bar in TRADE
    session: str = ""
    broker: BrokerConfig = BrokerConfig()
    #: option groups repriced after each tick of their underlying ([[options]] tables)
    options: list[OptionGroupConfig] = []
    #: transport of a replay: inproc, ipc or tcp
    transport: Literal["inproc", "ipc", "tcp"] = "inproc"
    #: device of GPU-capable work in the engine (strategy evaluation, option groups)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    #: the exchange's time zone: bar boundaries, session phases, day boundaries and option
    #: expiry dates are in its local time
    timezone: str = "America/New_York"
    #: sanity bounds on incoming messages ([validation] table; see feeds.transport)
    validation: ValidationLimits = ValidationLimits()
    #: pre-trade limits of the live daemon ([risk] table; see engine/risk.py)
    risk: RiskLimits = RiskLimits()
    #: the live daemon's snapshots, heartbeat timeout, status, queues ([live] table)
    live: LiveOptions = LiveOptions()
    #: messages the engine takes from its socket, at most, before it applies them; 0: the
    #: default, RECEIVE_BATCH. With an option group's spots sent from the engine's hot loop
    #: (OPTION_TAP_EVERY=0) no tick reaches the GPU worker while a batch is received and
    #: decoded, so smaller batches spread the requests: on the H200 host (2026-11-23, SPY
    #: with 102 options, 4 rounds) 1,024 gave 80-92k repricings against 58-73k with 8,192,
    #: at a lower tick rate (median ratio 0.82 against 0.87). Spots from validation (the
    #: default) reach the worker while the batch is received, whatever its size
    receive_batch: int = 0
    #: whether a bar close's strategy evaluation overlaps the ticks after it: "auto" where
    #: the strategy evaluates asynchronously (a GP strategy on CUDA), "always" (any strategy
    #: that can: the GP strategies), "never". Overlapped, the engine starts the evaluation,
    #: applies the following messages of the batch (bars, option spots) and holds back
    #: their fills until the signals are in; then it places the orders at the close's
    #: prices, fills signal-close orders there and the others at each symbol's first price
    #: after the close, as a bar close that waited would have: the same orders, fills and
    #: equity curve (engine.core.Engine.settle; a batch always ends settled)
    overlap_decisions: Literal["auto", "always", "never"] = "auto"

    def __post_init__(self) -> None:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        from engine.phases import SessionSchedule

        if not (self.bar_seconds > 0 and math.isfinite(self.bar_seconds)):
            raise ValueError(f"bar_seconds must be a positive number, got {self.bar_seconds}")
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {self.timezone!r}") from None
        SessionSchedule.parse(self.session)  # raises ValueError with the reason
        if self.receive_batch < 0:
            raise ValueError(f"receive_batch must be >= 0 (0: the default), got "
                             f"{self.receive_batch}")

    @property
    def receive_batch_in_force(self) -> int:
        """`receive_batch`, or RECEIVE_BATCH when it is 0."""
        return self.receive_batch or RECEIVE_BATCH


def load_config(path: str | Path | None) -> EngineConfig:
    if path is None:
        return EngineConfig()
    p = Path(path)
    if not p.is_file():
        raise UserError(f"config file not found: {p}")
    try:
        raw = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"config {p}: not valid TOML: {exc}") from None
    try:
        return msgspec.convert(raw, EngineConfig)
    except msgspec.ValidationError as exc:
        raise UserError(f"config {p}: {exc}") from None
