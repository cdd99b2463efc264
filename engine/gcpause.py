"""The objects alive when a hot loop starts, kept out of Python's full garbage collections.

A full (oldest-generation) collection walks every object the collector tracks. In an engine
process that has imported numba, numpy, msgspec and pyzmq that is hundreds of thousands of
objects, so a collection the hot loop's own allocations happen to trigger can stop the loop
for milliseconds. `gc.freeze()` moves everything alive at the start into a permanent
generation that collections skip; the loop's own garbage is still collected.

It was added for a stall of every option group at once in a paced replay, which turned out
to be the feed's; the freeze stays because it costs one collection at the start and keeps
the start-up objects out of every full collection in the loop (measured:
benchmarks/results/h200-2026-11-23-session3/README.md).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def startup_objects_frozen() -> Iterator[None]:
    """Collect once, then freeze what is alive for the block (unfrozen afterwards, so a
    process running several replays does not keep their objects). Inside a block that
    already froze, nothing changes."""
    if gc.get_freeze_count():
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def freeze_for_life() -> None:
    """Collect once and freeze what is alive, for a process whose hot loop runs until it
    exits (the option worker)."""
    gc.collect()
    gc.freeze()
