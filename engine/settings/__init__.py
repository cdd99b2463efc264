"""engine.settings.resolve."""
