"""gpu.timeseries.analysis."""
