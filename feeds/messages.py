"""Wire messages: msgspec Structs in one tagged union, MessagePack-encoded.

Every struct is frozen, array_like (encoded as a MessagePack array, tag first) and gc=False.
Timestamps `ts` are integer nanoseconds since the epoch, UTC. Prices and sizes are floats in
the instrument's units. `seq` is the publisher's sequence number on its stream, starting at 1
and rising by exactly 1 per message.

ZeroMQ frames are `[topic, payload]` with topic = kind tag and symbol, e.g. `b"T.BAC"`, so a
SUB socket filters by prefix (`b"T."` = every trade, `b"T.BAC"` = BAC trades).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import msgspec
import numpy as np


class Side(IntEnum):
    BUY = 1
    SELL = -1


_STRUCT = {"frozen": True, "array_like": True, "gc": False, "tag_field": "k"}


class Trade(msgspec.Struct, tag="T", **_STRUCT):
    """A trade print: `size` units traded at `price`."""

    seq: int
    ts: int
    symbol: str
    price: float
    size: float


class Quote(msgspec.Struct, tag="Q", **_STRUCT):
    """Top of book. A side that is absent has price 0 and size 0."""

    seq: int
    ts: int
    symbol: str
    bid: float
    bid_size: float
    ask: float
    ask_size: float


class Bar(msgspec.Struct, tag="B", **_STRUCT):
    """OHLCV over [ts - duration_ns, ts): `ts` is the bar's close time."""

    seq: int
    ts: int
    symbol: str
    open: float
    high: float
    low: float
    close: float
    volume: float
    duration_ns: int = 0


class Order(msgspec.Struct, tag="O", **_STRUCT):
    """A market order. `quantity` > 0; `side` says buy or sell."""

    seq: int
    ts: int
    symbol: str
    order_id: int
    side: int
    quantity: float
    reason: str = ""


class Fill(msgspec.Struct, tag="F", **_STRUCT):
    """A simulated execution of an order, commission in account currency. `fill_id` is
    its row in the live daemon's journal (0 outside the daemon)."""

    seq: int
    ts: int
    symbol: str
    order_id: int
    side: int
    quantity: float
    price: float
    commission: float
    fill_id: int = 0


class Heartbeat(msgspec.Struct, tag="H", **_STRUCT):
    """Liveness and end-of-stream marker; `final=True` means the publisher is done.

    `session` is the publisher's session id (epoch): a publisher stamps every heartbeat,
    the first message of its stream included, with it; a new session resets the
    subscriber's sequence check (a restarted feed numbers its streams from 1 again).
    """

    seq: int
    ts: int
    symbol: str = ""
    final: bool = False
    session: int = 0


class OptionValue(msgspec.Struct, tag="V", **_STRUCT):
    """Theoretical value and greeks of one option after repricing on an underlying tick."""

    seq: int
    ts: int
    symbol: str
    underlying: str
    spot: float
    price: float
    delta: float
    gamma: float


class OptionGroupValues(msgspec.Struct, tag="G", **_STRUCT):
    """Theoretical values and greeks of a whole option group after one repricing.

    One message per group and repricing (instead of one `OptionValue` per contract):
    `options` names the contracts in order; `price`, `delta` and `gamma` are the raw bytes
    of float64 little-endian arrays of the same length (MessagePack bin, so the payload is
    decoded without a per-number cost). `symbol` is the underlying. Use `prices()`,
    `deltas()`, `gammas()` for numpy views and `option_values()` for per-contract messages.
    """

    seq: int
    ts: int
    symbol: str
    spot: float
    options: tuple[str, ...]
    price: bytes
    delta: bytes
    gamma: bytes

    def prices(self) -> Any:
        return np.frombuffer(self.price, dtype="<f8")

    def deltas(self) -> Any:
        return np.frombuffer(self.delta, dtype="<f8")

    def gammas(self) -> Any:
        return np.frombuffer(self.gamma, dtype="<f8")

    def option_values(self, first_seq: int = 1) -> list[OptionValue]:
        """The same values as one `OptionValue` per contract (seq from `first_seq`)."""
        p, d, g = self.prices().tolist(), self.deltas().tolist(), self.gammas().tolist()
        return [OptionValue(first_seq + i, self.ts, sym, self.symbol, self.spot, pi, di, gi)
                for i, (sym, pi, di, gi) in enumerate(zip(self.options, p, d, g, strict=True))]


class TradeBatch(msgspec.Struct, tag="C", **_STRUCT):
    """A run of trade prints in columns (a replay's frame: one message for thousands of
    ticks, feeds/trade_batch.py). Row i is the trade `Trade(seqs[i], times[i],
    symbols[sym_ids[i]], prices[i], sizes[i])`: each row keeps its own sequence number on
    its symbol's trade stream (topic `T.SYMBOL`), so validation sees exactly the stream the
    one-tick messages make. The columns are the raw bytes of little-endian arrays (int32
    ids, int64 seqs and times, float64 prices and sizes), one value per row. `seq` is 0
    (the frame itself is not a stream position), `ts` the last row's time, `symbol` "".
    The topic is `C.`."""

    seq: int
    ts: int
    symbol: str
    symbols: tuple[str, ...]
    sym_ids: bytes
    seqs: bytes
    times: bytes
    prices: bytes
    sizes: bytes


#: most trades in one `TradeBatch` frame: a larger frame is counted (`oversize_batch`) and
#: skipped (feeds/trade_batch.py; here, with the message, so the engine's config checks
#: `replay_frame_ticks` without importing that module's compiled loops, numba)
MAX_BATCH_ROWS = 1 << 16
#: trades per frame a replay's feed sends by default (about 150 kB per frame)
DEFAULT_FRAME_TICKS = 4096


class RiskRejection(msgspec.Struct, tag="R", **_STRUCT):
    """An order the risk limits refused before the broker; `limit` names the limit."""

    seq: int
    ts: int
    symbol: str
    side: int
    quantity: float
    limit: str
    detail: str = ""


Message = (Trade | Quote | Bar | Order | Fill | Heartbeat | OptionValue | OptionGroupValues
           | RiskRejection | TradeBatch)
MESSAGE_TYPES: tuple[type, ...] = (
    Trade, Quote, Bar, Order, Fill, Heartbeat, OptionValue, OptionGroupValues, RiskRejection,
    TradeBatch)
KIND_OF: dict[type, bytes] = {
    t: t.__struct_config__.tag.encode() for t in MESSAGE_TYPES  # type: ignore[attr-defined]
}

_encoder = msgspec.msgpack.Encoder()
encode = _encoder.encode


def make_decoder() -> msgspec.msgpack.Decoder[Message]:
    return msgspec.msgpack.Decoder(Message)


def topic_for(msg: Message) -> bytes:
    return KIND_OF[type(msg)] + b"." + msg.symbol.encode()
