"""Benchmark scripts, run as files (`python benchmarks/NAME.py`); `common` holds what they share."""
