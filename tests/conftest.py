"""Shared test setup: real-GPU tests skip unless a real CUDA device is present."""

from __future__ import annotations

import os

import pytest

from feeds.datadir import data_dir


def _real_gpu() -> bool:
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1":
        return False
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _real_gpu():
        return
    skip = pytest.mark.skip(reason="needs a real CUDA GPU (not the simulator)")
    for item in items:
        # the marker, not the keyword: every test under tests/gpu/ has "gpu" as a keyword
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_data():
    d = data_dir()
    if not d.is_dir():
        pytest.skip(f"shared market data not found at {d}")
    return d
