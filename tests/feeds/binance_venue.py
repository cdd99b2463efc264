"""A local stand-in for Binance's public market-data websocket, for tests (loopback only).

Frames are built from Binance's documented formats (spot `trade` and `bookTicker`, USDⓈ-M
`bookTicker` and `aggTrade`, combined-stream wrapping, subscription replies). The venue
answers each connection's SUBSCRIBE with `{"result": null, "id": n}` and then plays that
connection's script: frames, pauses, a clean close (as the venue's 24-hour cut) or a
dropped TCP connection. Scripts run in a thread of their own with its own event loop, so a
test may drive a real feed process or a client in another loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

T0_MS = 1_764_000_000_000  # an event time near the tests' wall clock (2025-11)


def spot_trade(symbol: str, trade_id: int, price: float, qty: float,
               event_ms: int) -> dict[str, Any]:
    return {"e": "trade", "E": event_ms, "s": symbol, "t": trade_id, "p": f"{price:.8f}",
            "q": f"{qty:.8f}", "T": event_ms - 1, "m": trade_id % 2 == 0, "M": True}


def agg_trade(symbol: str, agg_id: int, price: float, qty: float, event_ms: int) -> dict[str, Any]:
    return {"e": "aggTrade", "E": event_ms, "s": symbol, "a": agg_id, "p": f"{price:.2f}",
            "q": f"{qty:.3f}", "f": agg_id * 10, "l": agg_id * 10 + 2, "T": event_ms - 1,
            "m": False}


def spot_book(symbol: str, update_id: int, bid: float, ask: float, bid_qty: float = 1.5,
              ask_qty: float = 2.5) -> dict[str, Any]:
    return {"u": update_id, "s": symbol, "b": f"{bid:.8f}", "B": f"{bid_qty:.8f}",
            "a": f"{ask:.8f}", "A": f"{ask_qty:.8f}"}


def usdm_book(symbol: str, update_id: int, bid: float, ask: float, event_ms: int) -> dict[str, Any]:
    return {"e": "bookTicker", "u": update_id, "E": event_ms, "T": event_ms - 1, "s": symbol,
            "b": f"{bid:.2f}", "B": "3.000", "a": f"{ask:.2f}", "A": "4.000"}


def wrap(data: dict[str, Any]) -> str:
    """A combined-stream frame: `{"stream": "btcusdt@trade", "data": {...}}`."""
    event = data.get("e", "bookTicker")
    return json.dumps({"stream": f"{data['s'].lower()}@{event}", "data": data})


#: script steps: a frame's text (bytes: a binary frame), ("sleep", s), ("close",) clean
#: close, ("drop",) TCP reset, ("close_before_ack",) close on the SUBSCRIBE unanswered
Step = str | bytes | tuple[Any, ...]


@dataclass
class Venue:
    """Serves `scripts[i]` to the i-th connection (the last script to any later one)."""

    scripts: Sequence[Sequence[Step]]
    ping_interval: float | None = 20.0
    subscriptions: list[list[str]] = field(default_factory=list)
    connections: int = 0
    port: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _ready: threading.Event = field(default_factory=threading.Event)
    _stop: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def _handler(self, ws: ServerConnection) -> None:
        with contextlib.suppress(ConnectionClosed):  # the client left: the script ends
            await self._play(ws)

    async def _play(self, ws: ServerConnection) -> None:
        index = self.connections
        self.connections += 1
        script = self.scripts[min(index, len(self.scripts) - 1)]
        request = json.loads(await ws.recv())
        self.subscriptions.append(list(request["params"]))
        if script and script[0] == ("close_before_ack",):
            await ws.close()
            return
        await ws.send(json.dumps({"result": None, "id": request["id"]}))
        for step in script:
            if isinstance(step, str | bytes):
                await ws.send(step)
            elif step[0] == "sleep":  # cut short when the venue stops
                assert self._stop is not None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), step[1])
                if self._stop.is_set():
                    return
            elif step[0] == "close":
                await ws.close(1000, "24h")
                return
            elif step[0] == "drop":
                ws.transport.abort()
                return
        await ws.wait_closed()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        async with serve(self._handler, "127.0.0.1", 0,
                         ping_interval=self.ping_interval, ping_timeout=self.ping_interval
                         ) as server:
            self.port = next(iter(server.sockets)).getsockname()[1]
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> Venue:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_until_complete,
                                        args=(self._main(),), daemon=True)
        self._thread.start()
        assert self._ready.wait(5.0), "local venue did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._thread is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(5.0)
