"""The shared memory between the engine's client and the option worker process.

Neither side ever waits for the other. Results use a sequence lock (a counter that is odd
while the slot is written; the reader retries when it read an odd value or the counter
moved during its read). Requests, the engine's hot path, use two slots: the engine writes
request n into slot n % 2 and then publishes n (four stores, no loads); the worker reads n,
the slot, and n again, and retries unless n is unchanged (so the slot was not being
rewritten for request n + 2). Layout (int64 unless noted):

    header, one cache line: READY, STOP, FAILED, spare...
    per group g, two cache lines (the engine writes only the first, the worker only the
    second, so neither side's writes evict what the other one polls):
      request: REQ (the number of the newest request), then two slots of (REQ_TS, REQ_T0,
               REQ_SPOT float64): request n lives in slot n % 2, written before REQ = n
      result:  RES (seqlock), RES_REQ (request number priced), RES_TS, RES_T0,
               RES_SPOT (float64), LAUNCHES (repricings started), PRICED
               (repricings the worker published; the engine may read fewer, as a
               result slot holds only the newest), WANT (1 while the worker would
               launch the group at once: the engine sends its newest spot only then)
    per group g, float64[3, n_g]: price, delta, gamma of the newest finished repricing
"""

from __future__ import annotations

from multiprocessing import shared_memory
from typing import Any

import numpy as np

READY, STOP, FAILED = 0, 1, 2
HEADER = 8  # words (8 bytes each): one 64-byte cache line
SLOT = 16  # words per group: a request line and a result line
REQ = 0
REQ_TS, REQ_T0, REQ_SPOT = range(1, 4)  # slot 0; slot 1 is 3 words further
REQ_SLOT = 3
RES, RES_REQ, RES_TS, RES_T0, RES_SPOT, LAUNCHES, PRICED, WANT = range(8, 16)
#: a group's words as the tick path uses them: group, REQ, WANT, RES, and the (spot, ts, t0)
#: words of request slots 0 and 1
GroupWords = tuple[int, int, int, int, tuple[int, int, int], tuple[int, int, int]]


class Layout:
    """Offsets (in 8-byte words) of every slot, from the groups' sizes."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.n_groups = len(sizes)
        base = HEADER + SLOT * self.n_groups
        self.results: list[int] = []
        for n in sizes:
            self.results.append(base)
            base += 3 * n
        self.words = max(base, 1)

    def result_views(self, buf: Any) -> list[np.ndarray]:
        return [np.ndarray((3, n), dtype=np.float64, buffer=buf, offset=8 * off)
                for n, off in zip(self.sizes, self.results, strict=True)]


def group_sizes(configs: list[Any]) -> list[int]:
    """Options per group (strikes x expiries x rights)."""
    return [len(c.strikes) * len(c.expiries) * len(c.rights) for c in configs]


def words_by_symbol(configs: list[Any]) -> dict[str, tuple[list[GroupWords], list[int]]]:
    """Per underlying: its groups, each with the offsets of its REQ, WANT and RES words and
    of its two request slots' (spot, ts, t0) words (the tick path computes no offset), and
    a one-cell tick counter (cheaper than a dict count)."""
    by_symbol: dict[str, tuple[list[GroupWords], list[int]]] = {}
    for g, c in enumerate(configs):
        b = HEADER + SLOT * g
        slot0, slot1 = ((s + REQ_SPOT, s + REQ_TS, s + REQ_T0)
                        for s in (b, b + REQ_SLOT))
        by_symbol.setdefault(c.underlying, ([], [0]))[0].append(
            (g, b + REQ, b + WANT, b + RES, slot0, slot1))
    return by_symbol


def shm_buffer(shm: shared_memory.SharedMemory) -> memoryview:
    buf = shm.buf
    assert buf is not None, "shared memory already closed"
    return buf
