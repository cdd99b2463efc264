"""Lazy k-way merge of time-ordered record streams.

`merge_sources` joins Sources under one symbol table (a name shared by two sources gets one
index) and interleaves their chunks by `ts`. Ties keep source order: among records with the
same `ts`, all those of an earlier source come first, and within a source their own order is
kept. The merge works chunk-wise, never per record: each round it takes, from every source's
buffered chunk, the records older than the smallest "last ts" among the buffers of sources
that still have data to come, and merges them (linear time, ties in source order).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from feeds.records import CHUNK_RECORDS, RECORD_DTYPE, SkipCounter, Source, split_chunks


def merge_chunk_iters(
    streams: Sequence[Iterator[np.ndarray]], limit: int = CHUNK_RECORDS
) -> Iterator[np.ndarray]:
    """Merge chunk iterators whose `sym` indices already agree; chunks of <= `limit` records.

    Each input must be non-decreasing in `ts` within and across its chunks.
    """
    iters = list(streams)
    if len(iters) == 1:
        for chunk in iters[0]:
            yield from split_chunks(chunk, limit)
        return
    empty = np.zeros(0, dtype=RECORD_DTYPE)
    buffers: list[np.ndarray] = [empty] * len(iters)
    more = [True] * len(iters)

    def pull(i: int) -> None:
        """Append the next non-empty chunk of stream i to its buffer, or mark it finished."""
        for chunk in iters[i]:
            if len(chunk):
                buffers[i] = chunk if len(buffers[i]) == 0 else np.concatenate((buffers[i], chunk))
                return
        more[i] = False

    while True:
        for i in range(len(iters)):
            if more[i] and len(buffers[i]) == 0:
                pull(i)
        live = [i for i in range(len(iters)) if more[i]]
        if not live:
            parts = [b for b in buffers if len(b)]
            if parts:
                yield from split_chunks(_stable_merge(parts), limit)
            return
        if len(live) == 1 and all(len(buffers[i]) == 0 for i in range(len(iters)) if i != live[0]):
            # Only one stream left: pass its chunks through untouched.
            i = live[0]
            yield from split_chunks(buffers[i], limit)
            buffers[i] = empty
            for chunk in iters[i]:
                yield from split_chunks(chunk, limit)
            return
        # Every record still to come from a live stream has ts >= that stream's buffered last ts.
        bound = min(int(buffers[i]["ts"][-1]) for i in live)
        parts = []
        for i, buf in enumerate(buffers):
            if len(buf) == 0:
                continue
            cut = int(np.searchsorted(buf["ts"], bound, side="left"))
            if cut:
                parts.append(buf[:cut])
                buffers[i] = buf[cut:]
        if parts:
            yield from split_chunks(_stable_merge(parts), limit)
        else:
            # Every buffered record is at ts >= bound, and the bounding streams hold only
            # records at exactly `bound`: read further so ties resolve in source order.
            for i in live:
                if int(buffers[i]["ts"][-1]) == bound:
                    pull(i)


def _stable_merge(parts: list[np.ndarray]) -> np.ndarray:
    """Records of time-ordered `parts` (in source order) in one time order, ties in source
    order: each part is merged into the merge of those before it, in linear time."""
    merged = parts[0]
    for part in parts[1:]:
        merged = _merge_two(merged, part)
    return merged


def _merge_two(first: np.ndarray, then: np.ndarray) -> np.ndarray:
    """Two time-ordered record arrays as one, `first`'s records before `then`'s at equal
    `ts`: each of `then`'s records goes after every record of `first` not later than it
    (a sort of the concatenation would cost n log n for what is a merge)."""
    if len(first) == 0:
        return then
    if len(then) == 0:
        return first
    at = np.searchsorted(first["ts"], then["ts"], side="right")
    at += np.arange(len(then))
    out = np.empty(len(first) + len(then), dtype=first.dtype)
    out[at] = then
    rest = np.ones(len(out), dtype=np.bool_)
    rest[at] = False
    out[rest] = first
    return out


def _remapped(chunks: Iterable[np.ndarray], mapping: np.ndarray | None) -> Iterator[np.ndarray]:
    for chunk in chunks:
        if mapping is None:
            yield chunk
        else:
            out = chunk.copy()
            out["sym"] = mapping[chunk["sym"]]
            yield out


class MergedSource:
    """Several Sources as one, time-ordered, with a unified symbol table."""

    def __init__(self, sources: Sequence[Source]) -> None:
        if not sources:
            raise ValueError("merge_sources needs at least one source")
        self.sources = list(sources)
        self.symbols: list[str] = []
        index: dict[str, int] = {}
        self._maps: list[np.ndarray | None] = []
        for src in self.sources:
            mapping = np.array(
                [index.setdefault(name, len(index)) for name in src.symbols], dtype=np.int32
            )
            identity = np.array_equal(mapping, np.arange(len(mapping)))
            self._maps.append(None if identity else mapping)
        self.symbols = list(index)
        self.name = " + ".join(src.name for src in self.sources)

    @property
    def skipped(self) -> SkipCounter:
        """Snapshot of the summed skip counts of the merged sources that keep them."""
        total = SkipCounter("merged")
        for src in self.sources:
            counter = getattr(src, "skipped", None)
            if isinstance(counter, SkipCounter):
                for kind, n in counter.counts.items():
                    total.counts[kind] = total.counts.get(kind, 0) + n
        return total

    def chunks(self) -> Iterator[np.ndarray]:
        streams = [
            _remapped(src.chunks(), m) for src, m in zip(self.sources, self._maps, strict=True)
        ]
        yield from merge_chunk_iters(streams)


def merge_sources(sources: Sequence[Source]) -> Source:
    """One Source that lazily interleaves `sources` by ts (stable: ties keep source order)."""
    if len(sources) == 1:
        return sources[0]
    return MergedSource(sources)
