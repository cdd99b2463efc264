"""The journal's snapshot format: data only, MessagePack (msgspec), never pickle.

A snapshot is a tree of plain values: None, bool, int, float, str, bytes, lists and
str-keyed dicts travel as MessagePack itself; the few other types the engine's state holds
travel as MessagePack extensions whose payload is again this format:

    tuple, set, dict with keys other than str, int beyond 64 bits, numpy arrays and
    scalars of bool/int/uint/float/complex dtypes (dtype, shape, raw bytes), dates and
    the engine's messages (an Order pending in the book, encoded as on the wire).

Decoding builds only those types, so a crafted journal can at worst hold wrong numbers:
it cannot name a class, import a module or run code. Anything else in a state (an object
with behaviour) is refused when the snapshot is written (`NotData`), so the format never
grows a way to carry code. A blob starts with `MAGIC`; a snapshot of the old pickle
format is recognised by its first byte and refused by the journal with what to do.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec
import numpy as np

#: first bytes of every snapshot blob (format version 1)
MAGIC = b"TRDSNAP1"
#: pickle protocols 2..5 start with this byte (the format before MAGIC)
PICKLE_START = 0x80

_TUPLE, _SET, _DICT, _BIGINT, _ARRAY, _SCALAR, _DATE, _MESSAGE = range(1, 9)
#: numpy dtype kinds that are numbers (never "O": objects would be code again)
_NUMERIC_KINDS = frozenset("biufc")
_INT64 = (-(2**63), 2**64 - 1)  # what MessagePack holds natively


class NotData(TypeError):
    """A value that is not plain data (it has no place in a snapshot)."""


class BadSnapshot(ValueError):
    """A blob that is not a snapshot of this format."""


_encoder = msgspec.msgpack.Encoder()


def to_data(x: Any) -> Any:
    """`x` as a tree MessagePack encodes natively (extensions for the other types)."""
    t = type(x)
    if x is None or t is bool or t is float or t is str or t is bytes:
        return x
    if t is int:
        return x if _INT64[0] <= x <= _INT64[1] else _ext(_BIGINT, str(x))
    if t is list:
        return [to_data(v) for v in x]
    if t is dict:
        if all(type(k) is str for k in x):
            return {k: to_data(v) for k, v in x.items()}
        return _ext(_DICT, [[to_data(k), to_data(v)] for k, v in x.items()])
    if t is tuple:
        return _ext(_TUPLE, [to_data(v) for v in x])
    if t is set or t is frozenset:
        return _ext(_SET, [to_data(v) for v in x])
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in _NUMERIC_KINDS:
            raise NotData(f"numpy array of dtype {x.dtype}")
        a = np.ascontiguousarray(x)
        return _ext(_ARRAY, [a.dtype.str, list(a.shape), a.tobytes()])
    if isinstance(x, np.generic):
        if x.dtype.kind not in _NUMERIC_KINDS:
            raise NotData(f"numpy scalar of dtype {x.dtype}")
        return _ext(_SCALAR, [x.dtype.str, x.tobytes()])
    if t is dt.date:
        return _ext(_DATE, x.isoformat())
    if isinstance(x, msgspec.Struct):
        from feeds.messages import MESSAGE_TYPES

        if t in MESSAGE_TYPES:
            return _ext(_MESSAGE, _encoder.encode(x))
    raise NotData(f"{t.__module__}.{t.__qualname__} is not plain data")


def _ext(code: int, payload: Any) -> msgspec.msgpack.Ext:
    return msgspec.msgpack.Ext(code, _encoder.encode(payload))


def encode(state: Any) -> bytes:
    """The snapshot blob of `state` (NotData names the first value that is not data)."""
    return MAGIC + _encoder.encode(to_data(state))


def decode(blob: bytes) -> Any:
    """The state of a snapshot blob; BadSnapshot for anything that is not one."""
    if not blob.startswith(MAGIC):
        raise BadSnapshot("not a snapshot of this format")
    try:
        return _decoder.decode(blob[len(MAGIC):])
    except (msgspec.DecodeError, ValueError, TypeError, OverflowError) as exc:
        raise BadSnapshot(f"damaged snapshot: {exc}") from None


def _ext_hook(code: int, data: memoryview) -> Any:
    payload = _decoder.decode(data)
    if code == _TUPLE:
        return tuple(payload)
    if code == _SET:
        return set(payload)
    if code == _DICT:
        return {k: v for k, v in payload}
    if code == _BIGINT:
        return int(payload)
    if code == _ARRAY:
        dtype, shape, raw = _numeric_dtype(payload[0]), payload[1], payload[2]
        return np.frombuffer(raw, dtype).reshape(shape).copy()  # writable, owns its data
    if code == _SCALAR:
        return np.frombuffer(payload[1], _numeric_dtype(payload[0]))[0]
    if code == _DATE:
        return dt.date.fromisoformat(payload)
    if code == _MESSAGE:
        from feeds.messages import make_decoder

        return make_decoder().decode(payload)
    raise ValueError(f"unknown extension type {code}")


def _numeric_dtype(name: str) -> np.dtype[Any]:
    dtype = np.dtype(name)
    if dtype.kind not in _NUMERIC_KINDS:
        raise ValueError(f"dtype {name} is not numeric")
    return dtype


_decoder = msgspec.msgpack.Decoder(ext_hook=_ext_hook)
