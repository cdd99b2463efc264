"""gpu.options.engines."""
