"""Recordings of a websocket feed: "<local receive ns> <frame>" lines, gzip, and their reader.

The line format is the one public Binance collectors write: the local receive time in
integer nanoseconds since the epoch, one space, the frame's text exactly as received (a
line break inside a frame becomes a space: `feeds.binance.sanitise`). Our writer adds the
subscription requests it sent, as lines of their own (`{"method":"SUBSCRIBE",...}`): the
reader takes the symbol table from them, so a replay accepts exactly the symbols the live
feed did. A recording without them (another collector's) gets its table from the `"s"`
fields of its frames, sorted.

`RecordingSource` replays a recording through `feeds.binance.FrameNormaliser`, the code the
live feed ran, so a recorded session replays record for record (trades and quotes both,
whatever `kinds` a LEAN reader would be asked for). Lines that are not "<digits> <text>"
are counted as `bad_line`; a file cut short (a writer killed mid-block) ends the replay at
its last whole line, counted as `truncated_gzip`.

The writer appends (several sessions of one collector make one file: gzip members
concatenate) and flushes the compressor at most once a second, so a killed feed loses at
most about a second of frames.
"""

from __future__ import annotations

import gzip
import re
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import msgspec
import numpy as np

from feeds.binance import FeedCounters, FrameNormaliser
from feeds.records import CHUNK_RECORDS, SkipCounter

_LINE = re.compile(rb"^(\d{1,20}) (.*)$", re.DOTALL)
_SYMBOL = re.compile(rb'"s":\s*"([A-Za-z0-9]{1,20})"')
_GZIP_MAGIC = b"\x1f\x8b"


class RecordingWriter:
    """Appends "<receive ns> <frame>" lines to a gzip file."""

    def __init__(self, path: str | Path, flush_every_s: float = 1.0) -> None:
        self.path = Path(path)
        # held open for the feed's life, closed by close()
        self._file = gzip.GzipFile(self.path, "ab")  # noqa: SIM115
        self.flush_every_s = flush_every_s
        self._last_flush = time.monotonic()
        self.lines = 0

    def write(self, recv_ns: int, text: str) -> None:
        self._file.write(b"%d %s\n" % (recv_ns, text.encode("utf-8", "surrogatepass")))
        self.lines += 1
        now = time.monotonic()
        if now - self._last_flush >= self.flush_every_s:
            self._file.flush()  # a sync flush: what was written so far can be read back
            self._last_flush = now

    def close(self) -> None:
        self._file.close()


def is_recording(path: str | Path) -> bool:
    """Whether `path` is a gzip file whose first line is "<digits> <text>"."""
    p = Path(path)
    if not p.is_file():
        return False
    with open(p, "rb") as probe:
        if probe.read(2) != _GZIP_MAGIC:
            return False
    try:
        with gzip.open(p, "rb") as f:
            first = f.readline(1 << 16)
    except (OSError, EOFError, zlib.error):
        return False
    return bool(_LINE.match(first.rstrip(b"\r\n"))) and b" {" in first[:24]


def _lines(path: Path, skipped: SkipCounter) -> Iterator[tuple[int, bytes]]:
    """(receive ns, frame bytes) of each good line; bad lines counted, a cut file ends."""
    try:
        with gzip.open(path, "rb") as f:
            for raw in f:
                m = _LINE.match(raw.rstrip(b"\r\n"))
                if m is None:
                    if raw.strip():
                        skipped.add("bad_line", 1, raw[:80])
                    continue
                yield int(m.group(1)), m.group(2)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        skipped.add("truncated_gzip", 1, str(exc))


def recorded_symbols(path: str | Path) -> list[str]:
    """The recording's symbol table: the subscribed symbols in order of subscription, or
    (no subscription lines) every `"s"` seen, sorted."""
    subscribed: dict[str, None] = {}
    seen: set[str] = set()
    for _, frame in _lines(Path(path), SkipCounter()):
        if b'"SUBSCRIBE"' in frame:
            try:
                request = msgspec.json.decode(frame)
                params = request.get("params", []) if isinstance(request, dict) else []
            except msgspec.DecodeError:
                continue
            for name in params:
                if isinstance(name, str) and "@" in name:
                    subscribed.setdefault(name.split("@", 1)[0].upper(), None)
        elif not subscribed:
            seen.update(m.decode().upper() for m in _SYMBOL.findall(frame))
    return list(subscribed) if subscribed else sorted(seen)


class RecordingSource:
    """A recording as a Source (see the module docstring).

    `symbols` keeps only those (case-insensitive; one the recording lacks is an error unless
    `missing_ok`); `start`/`end` keep records with start <= ts < end (ns).
    """

    def __init__(self, path: str | Path, symbols: Sequence[str] | None = None,
                 start: int | None = None, end: int | None = None,
                 missing_ok: bool = False) -> None:
        self.path = Path(path)
        table = recorded_symbols(self.path)
        if symbols is not None:
            wanted = [s.strip().upper() for s in symbols]
            absent = [s for s in wanted if s not in table]
            if absent and not missing_ok:
                raise ValueError(f"{self.path}: symbol(s) {', '.join(absent)} not recorded "
                                 f"(recorded: {', '.join(table) or 'none'})")
            self._ignored = [s for s in table if s not in wanted]
            table = [s for s in table if s in wanted]
        else:
            self._ignored = []
        self.symbols: list[str] = table
        self.name = f"recording {self.path.name}"
        self.start, self.end = start, end
        self.counters = FeedCounters()
        self.skipped = self.counters.skipped

    def chunks(self) -> Iterator[np.ndarray]:
        self.counters = counters = FeedCounters()
        self.skipped = counters.skipped
        norm = FrameNormaliser(self.symbols, counters, ignore=self._ignored)
        for recv_ns, frame in _lines(self.path, counters.skipped):
            if b'"SUBSCRIBE"' in frame and b'"method"' in frame:
                continue  # our own request, not a received frame
            norm.add(recv_ns, frame)
            if norm.pending >= CHUNK_RECORDS:
                yield from self._within(norm.take())
        if norm.pending:
            yield from self._within(norm.take())

    def _within(self, records: np.ndarray) -> Iterator[np.ndarray]:
        keep = np.ones(len(records), np.bool_)
        if self.start is not None:
            keep &= records["ts"] >= self.start
        if self.end is not None:
            keep &= records["ts"] < self.end
        kept = records if keep.all() else records[keep]
        if len(kept):
            yield kept
