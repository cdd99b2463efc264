"""Shared test setup: real-GPU tests skip unless a real CUDA device is present; ZeroMQ
contexts a test leaves open get linger 0 when it ends."""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from feeds.datadir import data_dir

# Commands run by the tests (in this process and in subprocesses, which inherit these):
# no parallel first-run compile workers (gpu/compile_cache.py; two cores run the suite) and
# no first-compile notice on stderr (which test compiles first depends on their order,
# and the one-line-error tests read stderr whole). tests/gpu/test_compile_cache.py turns
# both back on for the processes it starts.
os.environ.setdefault("GTE_PREWARM", "0")
os.environ.setdefault("GTE_COMPILE_NOTICE", "0")

if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1":
    # the simulator's threads take turns at a barrier instead of a manager polling them
    # (tests/cuda_simulator.py: the same values, a simulated launch several times faster)
    from tests import cuda_simulator

    cuda_simulator.install()
    cuda_simulator.install_in_child_processes()  # option worker processes


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


# Every ZeroMQ context made in this process, weakly: a context a test forgets to close is
# otherwise finalised by whichever later garbage collection finds it (the engine runs a full
# collection before each replay, engine/gcpause.py), and pyzmq's finaliser then waits, with
# the sockets' default linger, for messages queued to peers long gone: a later, unrelated
# test hangs. Setting linger 0 on them when their own test ends (nothing is closed: a fixture
# shared by a module may still use its context) lets that finaliser return at once.
_contexts: weakref.WeakSet[Any] = weakref.WeakSet()
_context_init = zmq.Context.__init__


def _tracked_init(self: Any, *args: Any, **kwargs: Any) -> None:
    _context_init(self, *args, **kwargs)
    _contexts.add(self)


zmq.Context.__init__ = _tracked_init  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _zmq_contexts_never_linger() -> Iterator[None]:
    before = set(_contexts)
    yield
    for ctx in list(_contexts):
        if ctx in before or ctx.closed:
            continue
        ctx.linger = 0  # sockets made later
        for sock in list(getattr(ctx, "_sockets", None) or []):
            if sock is not None and not sock.closed:
                sock.setsockopt(zmq.LINGER, 0)


@pytest.fixture(scope="session")
def shared_data():
    d = data_dir()
    if not d.is_dir():
        pytest.skip(f"shared market data not found at {d}")
    return d
