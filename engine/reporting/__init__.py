"""engine.reporting."""
