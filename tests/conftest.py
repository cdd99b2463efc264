"""Shared test setup: real-GPU tests skip unless a real CUDA device is present; ZeroMQ
contexts a test leaves open get linger 0 when it ends."""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Iterator
from typing import Any

# The suite keeps its bytecode (__pycache__, git-ignored) even where the environment says
# PYTHONDONTWRITEBYTECODE=1 (the dev VM's does): without it every run compiled the project's
# modules from source again and rewrote the asserts of all 120 test modules, 8 s of CPU per
# pytest process (each xdist worker is one), and every command the tests start as a
# process (about 90) compiled the engine's modules again, 0.2-0.3 s each. Set before the
# test modules are collected; the processes the tests start inherit the environment.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import pytest  # noqa: E402
import zmq  # noqa: E402

from feeds.datadir import data_dir  # noqa: E402

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


# ----------------------------------------------------------------------------- xdist
# `@pytest.mark.alone`: under pytest-xdist (`-n 2`, the README's command and CI's) the test
# runs with no other test running beside it: a few process tests measure a daemon against
# its feed, or the gaps in a paced stream, and two workers on two cores left the daemon not
# behind its feed once (the overload test). Every test holds a shared lock on a file of
# this run while it runs (setup to teardown); an `alone` test holds it exclusively. A gate
# lock in front gives the exclusive one precedence: once it waits, the other worker starts
# no new test, so the wait is at most the other worker's current test. Without xdist the
# tests run one at a time anyway and nothing is locked.
_xdist_run = os.environ.get("PYTEST_XDIST_WORKER") is not None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if not _xdist_run:
        yield
        return
    import fcntl

    # the workers' base temporary directories are popen-gwN inside this run's own one
    # (pytest keeps the last three runs' and removes older ones: no cleanup here)
    run_dir = item.config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]
    alone = item.get_closest_marker("alone") is not None
    with open(run_dir / "alone.gate", "a") as gate, open(run_dir / "alone.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)
