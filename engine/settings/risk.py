"""The `[risk]` table of the engine's TOML: the live daemon's pre-trade limits (what each one
means and does: engine/live/risk_gate.py)."""

from __future__ import annotations

import msgspec

from engine.settings.bounds import require_non_negative


class RiskLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    max_position: float = 0.0
    max_gross_notional: float = 0.0
    max_orders_per_second: float = 0.0
    max_daily_loss: float = 0.0
    min_price: float = 1e-4
    max_order_quantity: float = 1_000_000.0
    max_order_notional: float = 1_000_000.0

    def __post_init__(self) -> None:
        require_non_negative(self, "risk", ("max_position", "max_gross_notional",
                                            "max_orders_per_second", "max_daily_loss",
                                            "min_price", "max_order_quantity",
                                            "max_order_notional"),
                             note=" (0 = no limit)")
