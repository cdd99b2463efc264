"""Engine configuration: a frozen msgspec Struct read from TOML; unknown keys are an error.

Every option has a default that works on one machine. Command-line flags given override the
file, flags not given never do (engine/settings/resolve.py: the one merge of default < file < flag).
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Literal

import msgspec

from engine.errors import UserError
from engine.options.config import OptionGroupConfig
from engine.settings.bounds import require_non_negative, require_positive
from engine.settings.gpu import GpuSettings
from engine.settings.live import LiveOptions
from engine.settings.reevolve import ReevolveSettings
from engine.settings.risk import RiskLimits
from feeds.messages import DEFAULT_FRAME_TICKS, MAX_BATCH_ROWS
from feeds.validation import ValidationLimits


class BrokerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: the account's capital, $, set once and shared by all symbols; 0: cash_per_symbol x
    #: the symbols known at the start (at least one). A symbol seen later adds no money
    cash: float = 0.0
    #: the per-symbol model's part per symbol when `cash` is 0 (the GP paper's $10,000)
    cash_per_symbol: float = 10_000.0
    commission: float = 1.0
    slippage_bps: float = 0.0
    #: how much an entry takes (engine/trading/sizing.py): per-symbol (the GP paper's isolated
    #: part per symbol, all-in; "all-in" is its old name), equal-weight (equity / symbols
    #: with an active signal), fixed-fraction, volatility-target, fixed (`quantity` units)
    sizing: Literal["per-symbol", "equal-weight", "fixed-fraction", "volatility-target",
                    "fixed", "all-in"] = "equal-weight"
    quantity: float = 100.0
    #: fixed-fraction: the fraction of equity one entry takes
    fraction: float = 0.1
    #: volatility-target: annualised volatility aimed at, and its lookback in bars
    volatility_target: float = 0.15
    volatility_lookback: int = 20
    #: bars in a year, to annualise a bar volatility (252 daily bars)
    bars_per_year: float = 252.0
    #: one account: gross exposure at most this multiple of equity (0: no limit)
    max_leverage: float = 1.0
    #: annual rates, accrued daily (act/365): interest on cash, fee on short notional
    interest_rate: float = 0.0
    borrow_rate: float = 0.0
    #: target weights: a rebalance smaller than this fraction of equity is not traded
    min_trade: float = 0.01
    #: fractions of the entry price attached to every entry of a signal strategy (0: none):
    #: a stop-loss, a take-profit and a trailing stop, one cancels the others
    stop_loss: float = 0.0
    take_profit: float = 0.0
    trailing_stop: float = 0.0
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
        require_positive(self, "broker", ("cash_per_symbol", "quantity", "short_margin",
                                          "bars_per_year", "volatility_target"))
        require_non_negative(self, "broker", ("commission", "slippage_bps", "cash",
                                              "fraction", "max_leverage", "interest_rate",
                                              "borrow_rate", "min_trade", "stop_loss",
                                              "take_profit", "trailing_stop"))
        if self.volatility_lookback < 2:
            raise ValueError(f"broker.volatility_lookback must be >= 2 bars, got "
                             f"{self.volatility_lookback}")
        for name in ("stop_loss", "trailing_stop", "fraction"):
            if getattr(self, name) > 1.0:
                raise ValueError(f"broker.{name} is a fraction from 0 to 1, got "
                                 f"{getattr(self, name)}")


class InstrumentConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A symbol's contract: P&L per point (`multiplier`, 1 for shares; 100 for COMEX gold)
    and the price grid its limit and stop prices are rounded to (`tick_size`, 0: none)."""

    multiplier: float = 1.0
    tick_size: float = 0.0

    def __post_init__(self) -> None:
        require_positive(self, "instruments", ("multiplier",))
        require_non_negative(self, "instruments", ("tick_size",))


#: messages taken from the socket per batch, at most (feeds.transport.Subscriber's default)
RECEIVE_BATCH = 8192
#: the largest receive_batch (a batch is held in memory at once)
MAX_RECEIVE_BATCH = 1_000_000


class EngineConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: length of the time bars built from ticks, seconds
    bar_seconds: float = 60.0
    #: "HH:MM,HH:MM,HH:MM": t1,t2,t3 of WAIT/TRADE/LIQUIDATE/STOP in New York time;
    #: "" keeps every bar in TRADE
    session: str = ""
    broker: BrokerConfig = BrokerConfig()
    #: per symbol: contract multiplier and tick size ([instruments.SYMBOL] tables)
    instruments: dict[str, InstrumentConfig] = {}
    #: option groups repriced after each tick of their underlying ([[options]] tables)
    options: list[OptionGroupConfig] = []
    #: 0 (the default): a group is repriced as its underlying ticks, the newest spot each
    #: time the previous repricing is done (which spots get priced depends on the device's
    #: speed). A number of milliseconds: the groups are repriced on the data's clock
    #: instead, every `options_every_ms` of data time at the spots as of each boundary
    #: (values stamped with it), two launches in flight at most: a replay waits at a
    #: boundary while both are busy. The values are then a function of the data alone
    #: and never more than two intervals behind it (engine/options/clocked.py)
    options_every_ms: float = 0.0
    #: transport of a replay's feed: inproc (a thread of the engine's process), ipc or tcp
    #: (a process of its own); auto: ipc when the strategy's bar closes run on the GPU
    #: (a feed thread there competes with the launches for the GIL), else inproc
    transport: Literal["auto", "inproc", "ipc", "tcp"] = "auto"
    #: device of GPU-capable work in the engine (strategy evaluation, option groups)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    #: the exchange's time zone: bar boundaries, session phases, day boundaries and option
    #: expiry dates are in its local time
    timezone: str = "America/New_York"
    #: sanity bounds on incoming messages ([validation] table; see feeds.transport)
    validation: ValidationLimits = ValidationLimits()
    #: pre-trade limits of the live daemon ([risk] table; see engine/live/risk_gate.py)
    risk: RiskLimits = RiskLimits()
    #: the live daemon's snapshots, heartbeat timeout, status, queues ([live] table)
    live: LiveOptions = LiveOptions()
    #: the live daemon's daily re-evolution of its GP rules ([reevolve] table;
    #: engine/settings/reevolve.py, engine/live/reevolution.py)
    reevolve: ReevolveSettings = ReevolveSettings()
    #: messages the engine takes from its socket, at most, before it applies them; 0: the
    #: default, RECEIVE_BATCH. With an option group's spots sent from the engine's hot loop
    #: (OPTION_TAP_EVERY=0) no tick reaches the GPU worker while a batch is received and
    #: decoded, so smaller batches spread the requests, at some tick rate (measured:
    #: benchmarks/results/h200-2026-11-23-session3/README.md). Spots from validation (the
    #: default) reach the worker while the batch is received, whatever its size
    receive_batch: int = 0
    #: trades per frame a replay's feed sends (`feeds.messages.TradeBatch`: the validator
    #: and the engine's bar updates take them in compiled loops, Python only at bar events
    #: and flagged ticks); 0: one message per tick, as a live venue's feed. A replay with
    #: option groups or a paced feed (--rate) always sends one message per tick
    replay_frame_ticks: int = DEFAULT_FRAME_TICKS
    #: whether a bar close's strategy evaluation overlaps the ticks after it: "auto" where
    #: the strategy evaluates asynchronously (a GP strategy on CUDA), "always" (any strategy
    #: that can: the GP strategies), "never". Overlapped, the engine starts the evaluation,
    #: applies the following messages of the batch (bars, option spots) and holds back
    #: their fills until the signals are in; then it places the orders at the close's
    #: prices, fills signal-close orders there and the others at each symbol's first price
    #: after the close, as a bar close that waited would have: the same orders, fills and
    #: equity curve (engine.trading.core.Engine.settle; a batch always ends settled)
    overlap_decisions: Literal["auto", "always", "never"] = "auto"
    #: GPU, option-worker and CPU-placement knobs ([gpu] table; engine/settings/gpu.py):
    #: exported to the environment variables the kernels and the worker read, an
    #: environment variable already set winning over the file
    gpu: GpuSettings = GpuSettings()

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
        for group in self.options:
            _check_grid(group)
        if self.options_every_ms != 0:
            from engine.options.config import check_every_ms

            check_every_ms(self.options_every_ms)
        if not 0 <= self.replay_frame_ticks <= MAX_BATCH_ROWS:
            raise ValueError(f"replay_frame_ticks must be an integer from 0 (one message per "
                             f"tick) to {MAX_BATCH_ROWS:,}, got {self.replay_frame_ticks:,}")
        if not 0 <= self.receive_batch <= MAX_RECEIVE_BATCH:
            raise ValueError(f"receive_batch must be an integer from 0 (the default) to "
                             f"{MAX_RECEIVE_BATCH:,}, got {self.receive_batch:,}")

    @property
    def receive_batch_in_force(self) -> int:
        """`receive_batch`, or RECEIVE_BATCH when it is 0."""
        return self.receive_batch or RECEIVE_BATCH


#: the most time steps of an option group's own grid (each repricing walks all of them)
MAX_TIME_STEPS = 100_000


def _check_grid(group: OptionGroupConfig) -> None:
    """An option group's step counts within what the pricing kernels take (0: the grid's
    own), so a bad count is a config error, not a failure at the first repricing."""
    from gpu.options.grids import MAX_NODES

    name = f"option group {group.underlying}"
    if group.price_steps and not 4 <= group.price_steps <= MAX_NODES - 1:
        raise ValueError(f"{name}: price_steps must be 0 (the grid's) or from 4 to "
                         f"{MAX_NODES - 1}, got {group.price_steps:,}")
    if not 0 <= group.time_steps <= MAX_TIME_STEPS:
        raise ValueError(f"{name}: time_steps must be from 0 (the grid's) to "
                         f"{MAX_TIME_STEPS:,}, got {group.time_steps:,}")


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
