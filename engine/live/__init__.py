"""engine.live."""
