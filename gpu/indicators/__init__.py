"""gpu.indicators.compute."""
