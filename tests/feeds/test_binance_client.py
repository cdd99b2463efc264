"""The websocket client against a local venue: reconnects, resubscribes, counts; and a
recording of it replays record for record."""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from feeds.binance import (
    BinanceClient,
    ClientSettings,
    FeedCounters,
    FrameNormaliser,
    StaleWatch,
    sanitise,
    stream_names,
    stream_url,
)
from feeds.recording import RecordingSource, RecordingWriter, is_recording, recorded_symbols
from feeds.sources import detect_format, open_source
from tests.feeds.binance_venue import T0_MS, Step, Venue, spot_book, spot_trade, wrap

SYMBOLS = ["BTCUSDT", "ETHUSDT"]
NAMES = stream_names(SYMBOLS, ["trade", "bookTicker"])


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _trades(symbol: str, ids: Sequence[int], price: float = 100.0) -> list[Step]:
    return [wrap(spot_trade(symbol, t, price + t * 0.01, 0.5, _now_ms())) for t in ids]


def _run_client(venue: Venue, until: int, counters: FeedCounters, *,
                recorder: RecordingWriter | None = None, reconnect_after: float = 3600.0,
                stale_after: float = 60.0, limit_s: float = 8.0) -> tuple[np.ndarray, list[str]]:
    """Run the client until `until` records arrived (or `limit_s`); records and frames."""
    norm = FrameNormaliser(SYMBOLS, counters)
    got: list[np.ndarray] = []
    frames: list[str] = []

    async def main() -> None:
        stop = asyncio.Event()

        def on_frame(recv_ns: int, text: str) -> None:
            frames.append(text)
            if recorder is not None:
                recorder.write(recv_ns, text)
            norm.add(recv_ns, text)
            got.append(norm.take())
            if sum(len(g) for g in got) >= until:
                stop.set()

        settings = ClientSettings(url=stream_url(venue.url), streams=tuple(NAMES),
                                  backoff_initial=0.05, backoff_max=0.2,
                                  reconnect_after=reconnect_after, stale_after=stale_after)
        client = BinanceClient(settings, on_frame, counters,
                               on_sent=recorder.write if recorder is not None else None)
        watch = StaleWatch(NAMES, norm.last_seen, counters, stale_after)
        asyncio.get_running_loop().call_later(limit_s, stop.set)
        await asyncio.gather(client.run(stop), watch.run(stop, every_s=0.05))

    asyncio.run(main())
    return np.concatenate(got) if got else np.zeros(0), frames


def test_reconnects_resubscribes_and_counts_through_drops_and_bad_frames() -> None:
    scripts: list[list[Step]] = [
        # 1st connection: trades 1-3, a quote, bad frames, a gap (3 -> 7), a backward id,
        # then the TCP connection drops
        [*_trades("BTCUSDT", [1, 2, 3]), json.dumps(spot_book("BTCUSDT", 1, 99.9, 100.1)),
         '{"e":"trade",', json.dumps({"e": "kline", "s": "BTCUSDT"}),
         " " * 70_000, b"\x00\x01binary",
         *_trades("BTCUSDT", [7, 5]), ("drop",)],
        # 2nd: closed on the subscription before any answer (a failure: backoff)
        [("close_before_ack",)],
        # 3rd: ETH trades, then a clean close, as the venue's 24-hour cut
        [*_trades("ETHUSDT", [50, 51]), ("close",)],
        # 4th: the stream goes on; BTC 8 follows 7 without a gap across the reconnects
        [*_trades("BTCUSDT", [8]), *_trades("ETHUSDT", [52])],
    ]
    counters = FeedCounters()
    with Venue(scripts) as venue:
        records, _ = _run_client(venue, until=9, counters=counters)
        subscriptions = list(venue.subscriptions)
    assert len(records) == 9  # 7 trades of BTC with 8, 1 quote, 3 ETH: 5 + 1 + 3
    assert counters.connections == 4
    assert subscriptions == [NAMES] * 4  # every connection subscribed again
    assert counters.disconnects == 3  # the drop, the close before the answer, the cut
    assert counters.gaps == {"BTCUSDT": 1}
    assert counters.skipped.counts == {"malformed_json": 1, "unknown_event": 1,
                                       "trade_id_repeated_or_backwards": 1,
                                       "frame_too_large": 1, "binary_frame": 1}
    assert counters.acks == 3
    assert counters.trades == 8 and counters.quotes == 1


def test_a_server_shutdown_notice_makes_the_client_move_at_once() -> None:
    notice = json.dumps({"e": "serverShutdown", "E": _now_ms()})
    scripts: list[list[Step]] = [[*_trades("BTCUSDT", [1]), notice, ("sleep", 30.0)],
                                 _trades("BTCUSDT", [2])]
    counters = FeedCounters()
    with Venue(scripts) as venue:
        t0 = time.monotonic()
        records, _ = _run_client(venue, until=2, counters=counters)
        assert time.monotonic() - t0 < 5.0  # it did not wait for the server to go
    assert len(records) == 2 and counters.shutdown_notices == 1
    assert counters.connections == 2 and not counters.skipped.counts


def test_refused_connections_back_off_and_the_client_stops_on_request() -> None:
    counters = FeedCounters()
    with Venue([[]]) as venue:
        url = venue.url
    # the venue is gone: every attempt fails, with growing delays (0.05, 0.1, 0.2, 0.2 ...)
    settings = ClientSettings(url=stream_url(url), streams=tuple(NAMES), backoff_initial=0.05,
                              backoff_max=0.2, open_timeout=1.0)

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(1.0, stop.set)
        await BinanceClient(settings, lambda ns, t: None, counters).run(stop)

    t0 = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - t0 < 3.0
    # without backoff a refused loopback connect repeats every few ms: hundreds in 1 s
    assert 3 <= counters.connect_failures <= 10
    assert counters.connections == 0


def test_a_venue_that_drops_every_young_connection_is_not_hammered() -> None:
    counters = FeedCounters()
    with Venue([[*_trades("BTCUSDT", [1]), ("close",)]]) as venue:
        _run_client(venue, until=10_000, counters=counters, limit_s=1.0)
    # data then a close, at once, every time: delays 0.05, 0.1, 0.2, 0.2 ... s between
    # connections; reconnecting at once would make hundreds in the second
    assert 3 <= counters.connections <= 10
    # every close the venue made is counted; the last connection may still have been open
    # (its data read, the close not yet) when the client was told to stop
    assert counters.connections - 1 <= counters.disconnects <= counters.connections


def test_scheduled_reconnect_and_stale_marks() -> None:
    # the venue sends a trade every 0.1 s on each connection; ETH never trades and no
    # quotes come, so three streams go stale; the client reconnects on its own every 0.4 s
    scripts: list[list[Step]] = [[] for _ in range(10)]
    for c, script in enumerate(scripts):  # new trade ids on each connection
        for i in range(30):
            script += [("sleep", 0.1), *_trades("BTCUSDT", [1000 * c + i + 1])]
    counters = FeedCounters()
    with Venue(scripts) as venue:
        _run_client(venue, until=10_000, counters=counters, reconnect_after=0.4,
                    stale_after=0.3, limit_s=1.5)
        n_subscriptions = len(venue.subscriptions)
    assert counters.scheduled_reconnects >= 2
    assert n_subscriptions == counters.connections == counters.scheduled_reconnects + 1
    assert counters.disconnects == 0
    assert set(counters.stale_marks) == {"btcusdt@bookTicker", "ethusdt@trade",
                                         "ethusdt@bookTicker"}


def test_pings_are_answered_so_the_venue_keeps_the_connection() -> None:
    # the venue pings every 0.1 s and drops a connection whose pong is 0.1 s late
    counters = FeedCounters()
    script: list[Step] = [("sleep", 1.0), *_trades("BTCUSDT", [1])]
    with Venue([script], ping_interval=0.1) as venue:
        records, _ = _run_client(venue, until=1, counters=counters)
    assert len(records) == 1 and counters.connections == 1 and counters.disconnects == 0


def test_a_recorded_session_replays_record_for_record(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl.gz"
    multi_line = ('{"stream":"btcusdt@bookTicker",\n"data":'
                  + json.dumps(spot_book("BTCUSDT", 9, 100.0, 100.2)) + "}")
    scripts: list[list[Step]] = [
        [*_trades("BTCUSDT", [1, 2]), json.dumps(spot_book("ETHUSDT", 1, 20.0, 20.1)),
         "not json", multi_line, *_trades("ETHUSDT", [5, 9]), ("close",)],
        [*_trades("BTCUSDT", [3]), json.dumps(spot_book("BTCUSDT", 10, 100.1, 100.3)),
         wrap(spot_trade("XRPUSDT", 1, 1.0, 1.0, T0_MS))],
    ]
    counters = FeedCounters()
    recorder = RecordingWriter(path)
    with Venue(scripts) as venue:
        live, _ = _run_client(venue, until=8, counters=counters, recorder=recorder)
    recorder.close()
    assert is_recording(path) and detect_format(path) == "recording"
    assert recorded_symbols(path) == SYMBOLS
    source = open_source(path)
    assert isinstance(source, RecordingSource) and source.symbols == SYMBOLS
    replayed = np.concatenate(list(source.chunks()))
    assert len(live) == 8
    assert replayed.tobytes() == live.tobytes()
    assert source.counters.as_dict() | {"connections": 0, "disconnects": 0} == \
        counters.as_dict() | {"connections": 0, "disconnects": 0}


def test_recording_reader_selects_cuts_and_survives_a_truncated_file(tmp_path: Path) -> None:
    path = tmp_path / "r.gz"
    w = RecordingWriter(path)
    w.write(1, json.dumps({"method": "SUBSCRIBE", "params": NAMES, "id": 1}))
    base = T0_MS * 1_000_000
    for i in range(200):
        sym = SYMBOLS[i % 2]
        w.write(base + i * 1_000_000, sanitise(wrap(spot_trade(sym, i // 2 + 1, 10.0, 1.0,
                                                               T0_MS + i))))
    w.write(base, "a frame that is not json")
    w.close()
    with gzip.open(path, "ab") as f:  # another member, as a second session appends
        f.write(b"a line without a receive time\n")
    eth = RecordingSource(path, symbols=["ethusdt"], start=base + 10_000_000)
    r = np.concatenate(list(eth.chunks()))
    assert eth.symbols == ["ETHUSDT"] and len(r) == 95 and set(r["sym"].tolist()) == {0}
    assert eth.skipped.counts == {"bad_line": 1, "malformed_json": 1}
    cut = tmp_path / "cut.gz"
    cut.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    part = RecordingSource(cut)
    got = sum(len(c) for c in part.chunks())
    assert 0 < got < 200 and part.skipped.counts.get("truncated_gzip") == 1
