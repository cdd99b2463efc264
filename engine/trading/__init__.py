"""engine.trading."""
