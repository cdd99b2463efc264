"""Vectorised MessagePack encoding of record chunks into Trade / Quote / Bar payloads.

A feed in Python spends most of each message building a Struct and encoding it. This
encoder writes a whole chunk of records in one compiled loop, byte-identical to
`feeds.messages.encode` of the same Struct (tested), and numbers each (kind, symbol)
stream on the way. The sender then only slices payloads and sends frames.

Layout of each payload (msgspec, array_like with the tag first): fixarray header, the tag as
a one-character str, seq and ts as the shortest unsigned MessagePack int, the symbol as
fixstr/str8, every float as float64 (0xcb, big-endian), and for bars the duration int.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

from feeds.records import KIND_BAR, KIND_QUOTE, KIND_TRADE

# fields after (tag, seq, ts, symbol): floats per kind; bars add one int (duration_ns)
_N_FLOATS = np.array([2, 4, 5], np.int64)  # trade, quote, bar
_ARRAY_LEN = np.array([6, 8, 10], np.int64)
_TAG = np.array([ord("T"), ord("Q"), ord("B")], np.uint8)
MAX_PAYLOAD_NO_SYMBOL = 1 + 2 + 9 + 9 + 2 + 5 * 9 + 9

assert (KIND_TRADE, KIND_QUOTE, KIND_BAR) == (0, 1, 2)


@njit(cache=True)
def _put_uint(buf: npt.NDArray[np.uint8], pos: int, value: int) -> int:
    if value < 128:
        buf[pos] = value
        return pos + 1
    if value < 256:
        buf[pos] = 0xCC
        buf[pos + 1] = value
        return pos + 2
    if value < 65536:
        buf[pos] = 0xCD
        buf[pos + 1] = (value >> 8) & 0xFF
        buf[pos + 2] = value & 0xFF
        return pos + 3
    if value < 4294967296:
        buf[pos] = 0xCE
        for k in range(4):
            buf[pos + 1 + k] = (value >> (24 - 8 * k)) & 0xFF
        return pos + 5
    buf[pos] = 0xCF
    u = np.uint64(value)
    for k in range(8):
        buf[pos + 1 + k] = (u >> np.uint64(56 - 8 * k)) & np.uint64(0xFF)
    return pos + 9


@njit(cache=True)
def _put_f64(buf: npt.NDArray[np.uint8], pos: int, bits: np.uint64) -> int:
    buf[pos] = 0xCB
    for k in range(8):
        buf[pos + 1 + k] = (bits >> np.uint64(56 - 8 * k)) & np.uint64(0xFF)
    return pos + 9


@njit(cache=True)
def _encode(
    kind: npt.NDArray[np.uint8], sym: npt.NDArray[np.int32], ts: npt.NDArray[np.int64],
    fbits: npt.NDArray[np.uint64], names: npt.NDArray[np.uint8],
    name_off: npt.NDArray[np.int64], counters: npt.NDArray[np.int64], bar_duration: int,
    n_floats: npt.NDArray[np.int64], array_len: npt.NDArray[np.int64],
    tags: npt.NDArray[np.uint8], buf: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64],
) -> int:
    pos = 0
    for i in range(kind.shape[0]):
        offsets[i] = pos
        k = kind[i]
        s = sym[i]
        counters[k, s] += 1
        buf[pos] = 0x90 | array_len[k]
        buf[pos + 1] = 0xA1
        buf[pos + 2] = tags[k]
        pos = _put_uint(buf, pos + 3, counters[k, s])
        pos = _put_uint(buf, pos, ts[i])
        a, b = name_off[s], name_off[s + 1]
        ln = b - a
        if ln < 32:
            buf[pos] = 0xA0 | ln
            pos += 1
        else:
            buf[pos] = 0xD9
            buf[pos + 1] = ln
            pos += 2
        for j in range(ln):
            buf[pos + j] = names[a + j]
        pos += ln
        for f in range(n_floats[k]):
            pos = _put_f64(buf, pos, fbits[f, i])
        if k == 2:
            pos = _put_uint(buf, pos, bar_duration)
    offsets[kind.shape[0]] = pos
    return pos


class ChunkEncoder:
    """Encodes record chunks of one Source, keeping each stream's sequence numbers."""

    def __init__(self, symbols: list[str], bar_duration_ns: int) -> None:
        encoded = [s.encode() for s in symbols]
        if any(len(e) > 255 for e in encoded):
            raise ValueError("symbol names longer than 255 bytes are not supported")
        self.max_name = max((len(e) for e in encoded), default=0)
        self.names = np.frombuffer(b"".join(encoded), np.uint8).copy()
        self.name_off = np.zeros(len(encoded) + 1, np.int64)
        self.name_off[1:] = np.cumsum([len(e) for e in encoded])
        self.counters = np.zeros((3, max(1, len(symbols))), np.int64)
        self.bar_duration_ns = int(bar_duration_ns)
        tags = (b"T.", b"Q.", b"B.")
        self.topics: list[list[bytes]] = [[t + e for e in encoded] for t in tags]

    def encode(self, chunk: np.ndarray) -> tuple[bytes, npt.NDArray[np.int64]]:
        """Payloads of a chunk as one bytes object and the n + 1 offsets into it."""
        n = chunk.shape[0]
        fbits = np.empty((5, n), np.uint64)
        for f in range(5):
            fbits[f] = np.ascontiguousarray(chunk[f"f{f}"]).view(np.uint64)
        buf = np.empty(n * (MAX_PAYLOAD_NO_SYMBOL + self.max_name), np.uint8)
        offsets = np.empty(n + 1, np.int64)
        end = _encode(
            np.ascontiguousarray(chunk["kind"]), np.ascontiguousarray(chunk["sym"]),
            np.ascontiguousarray(chunk["ts"]), fbits, self.names, self.name_off,
            self.counters, self.bar_duration_ns, _N_FLOATS, _ARRAY_LEN, _TAG, buf, offsets,
        )
        return buf[:end].tobytes(), offsets
