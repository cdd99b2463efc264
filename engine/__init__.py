"""The trading engine: the event loop, its parts (bars, decisions, orders), replay, daemon."""
