"""The trading engine: the event loop, its parts (bars, decisions, orders), replay, daemon.

`from engine import backtest` is the Python API (engine/api.py), imported on first use so
that importing any engine module stays light and pandas-free."""

from typing import Any

__all__ = ["backtest", "Result"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from engine import api

        return getattr(api, name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
