"""The 31 technical-indicator terminals of the GP trading-rule paper, in panel order.

Index i of the indicator axis of every panel and of every incremental output row is
`TERMINALS[i]`. Float terminals come first (17), then boolean ones (14), so a typed GP
tree can tell a terminal's type from its index alone. Booleans are stored as 0.0 / 1.0 in
the same float32 arrays; a value not yet defined (warm-up) is NaN.

Bump TERMINAL_SET_VERSION whenever the list, its order or a formula changes: strategy files
record it and refuse to load against another version.
"""

from __future__ import annotations

TERMINAL_SET_VERSION = 1

FLOAT_TERMINALS: tuple[str, ...] = (
    "sma1", "sma5", "sma10", "sma15", "sma25", "sma50", "sma75", "sma100", "sma150", "sma200",
    "ema5", "ema9", "ema15", "ema20", "ema25",
    "close", "typical",
)
BOOL_TERMINALS: tuple[str, ...] = (
    "nvi_above", "nvi_below",          # NVI above / below its 255-bar EMA
    "pvi_above", "pvi_below",          # PVI above / below its 255-bar EMA
    "macd_above_zero", "macd_below_zero",
    "macd_above_signal", "macd_below_signal",
    "mfi_above_80", "mfi_below_20",
    "eom_above_zero", "eom_below_zero",
    "cci_above_100", "cci_below_minus_100",
)
TERMINALS: tuple[str, ...] = FLOAT_TERMINALS + BOOL_TERMINALS
N_FLOAT = len(FLOAT_TERMINALS)
N_BOOL = len(BOOL_TERMINALS)
N_TERMINALS = len(TERMINALS)
TERMINAL_INDEX: dict[str, int] = {name: i for i, name in enumerate(TERMINALS)}

SMA_WINDOWS: tuple[int, ...] = (1, 5, 10, 15, 25, 50, 75, 100, 150, 200)
EMA_WINDOWS: tuple[int, ...] = (5, 9, 15, 20, 25)

assert N_FLOAT == 17 and N_BOOL == 14 and N_TERMINALS == 31
