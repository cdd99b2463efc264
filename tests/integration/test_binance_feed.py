"""End to end: a local venue -> `feed --source binance` (a real process) -> a ZeroMQ SUB;
its recording replayed by `feed --data` and `replay --data`; bad options.

Nothing here reaches the internet: the venue is a websockets server on 127.0.0.1.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import zmq

import run_engine
from engine.live.curve_keys import load_keys, write_keys
from feeds.messages import Heartbeat, Message, Quote, Trade, make_decoder
from tests.feeds.binance_venue import Step, Venue, spot_book, spot_trade, wrap
from tests.live_procs import (
    ROOT,
    _env,
    endpoints,
    free_port,
    processed,
    start_daemon,
    stop_daemon,
    wait_processed,
)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _scripts() -> list[list[Step]]:
    t = _now_ms()
    first: list[Step] = [
        wrap(spot_trade("BTCUSDT", 1, 91_000.0, 0.1, t)),
        json.dumps(spot_book("BTCUSDT", 10, 90_999.5, 91_000.5)),
        wrap(spot_trade("ETHUSDT", 70, 3_000.0, 2.0, t + 1)),
        '{"stream":"btcusdt@trade","data":{"e":"trade"',  # cut short
        json.dumps({"e": "depthUpdate", "s": "BTCUSDT"}),  # a stream we do not handle
        wrap(spot_trade("BTCUSDT", 4, 91_001.0, 0.2, t + 2)),  # 1 -> 4: a gap
        ("close",),  # the venue's 24-hour cut
    ]
    second: list[Step] = [
        wrap(spot_trade("BTCUSDT", 5, 91_002.0, 0.3, t + 3)),
        json.dumps(spot_book("ETHUSDT", 3, 2_999.9, 3_000.1)),
        wrap(spot_trade("ETHUSDT", 71, 3_000.1, 1.0, t + 4)),
    ]
    return [first, second]


def _subscriber(endpoint: str, curve: tuple[bytes, bytes, bytes] | None = None
                ) -> tuple[zmq.Context[Any], zmq.Socket[Any]]:
    ctx: zmq.Context[Any] = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    if curve is not None:
        sub.curve_publickey, sub.curve_secretkey, sub.curve_serverkey = curve
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(endpoint)
    return ctx, sub


def _receive(sub: zmq.Socket[Any], n_data: int, timeout: float, until_final: bool = False
             ) -> list[Message]:
    """Messages until `n_data` trades and quotes arrived (or the final heartbeat)."""
    dec = make_decoder()
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not sub.poll(100):
            continue
        msg = dec.decode(sub.recv_multipart()[1])
        got.append(msg)
        if until_final and isinstance(msg, Heartbeat) and msg.final:
            break
        if not until_final and sum(isinstance(m, Trade | Quote) for m in got) >= n_data:
            break
    return got


def _feed(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(ROOT / "run_engine.py"), "feed", *args],
                            cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _data(msgs: list[Message]) -> list[Message]:
    return [m for m in msgs if isinstance(m, Trade | Quote)]


@dataclass
class LiveSession:
    """One run of `feed --source binance` against the local venue, recorded."""

    record: Path
    live: list[Message]
    status: dict[str, Any]
    subscriptions: list[list[str]]
    returncode: int
    out: str
    err: str


@pytest.fixture(scope="module")
def live_session(tmp_path_factory: pytest.TempPathFactory) -> LiveSession:
    tmp = tmp_path_factory.mktemp("binance")
    record, status = tmp / "btc.jsonl.gz", tmp / "feed.json"
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    with Venue(_scripts()) as venue:
        ctx, sub = _subscriber(endpoint)
        proc = _feed("--source", "binance", "--market", "spot", "--symbols", "btcusdt,ethusdt",
                     "--streams", "trade,bookTicker", "--url", venue.url, "--publish", endpoint,
                     "--record", str(record), "--json", str(status), "--wait", "20")
        try:
            live = _receive(sub, 7, timeout=30)
        finally:
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=20)
            sub.close(0)
            ctx.term()
        subscriptions = list(venue.subscriptions)
    report = json.loads(status.read_text()) if status.exists() else {}
    return LiveSession(record, live, report, subscriptions, proc.returncode, out, err)


def test_venue_to_feed_process_to_subscriber(live_session: LiveSession) -> None:
    s = live_session
    assert s.returncode == 0, s.err
    assert s.subscriptions == [["btcusdt@trade", "btcusdt@bookTicker", "ethusdt@trade",
                                "ethusdt@bookTicker"]] * 2
    opening = s.live[0]
    assert isinstance(opening, Heartbeat) and opening.session > 0  # the session opens first
    data = _data(s.live)
    assert [(type(m).__name__, m.symbol) for m in data] == [
        ("Trade", "BTCUSDT"), ("Quote", "BTCUSDT"), ("Trade", "ETHUSDT"), ("Trade", "BTCUSDT"),
        ("Trade", "BTCUSDT"), ("Quote", "ETHUSDT"), ("Trade", "ETHUSDT")]
    first = data[0]
    assert isinstance(first, Trade) and (first.price, first.size) == (91_000.0, 0.1)
    assert all(b.ts >= a.ts for a, b in zip(data, data[1:], strict=False))
    report = s.status["binance"]
    assert report["gaps"] == {"BTCUSDT": 1} and report["connections"] == 2
    assert report["skipped"] == {"malformed_json": 1, "unknown_event": 1}
    assert report["disconnects"] == 1 and "trades" in s.out


def test_the_recording_replays_message_for_message(live_session: LiveSession) -> None:
    data = _data(live_session.live)
    assert len(data) == 7
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    ctx, sub = _subscriber(endpoint)
    replay_feed = _feed("--data", str(live_session.record), "--publish", endpoint,
                        "--wait", "20")
    try:
        replayed = _receive(sub, 0, timeout=30, until_final=True)
    finally:
        replay_feed.wait(20)
        sub.close(0)
        ctx.term()
    assert _data(replayed) == data


def test_a_backtest_reads_the_recording(live_session: LiveSession, tmp_path: Path) -> None:
    data = _data(live_session.live)
    result = tmp_path / "replay.json"
    assert run_engine.main(["replay", "--data", str(live_session.record), "--device", "cpu",
                            "--json", str(result)]) == 0
    replay = json.loads(result.read_text())
    assert replay["market_trades"] == sum(isinstance(m, Trade) for m in data) == 5
    assert replay["quotes"] == sum(isinstance(m, Quote) for m in data) == 2
    assert replay["ticks"] == len(data) and "spread_paid" in replay


def test_the_live_daemon_takes_the_venue_feed(tmp_path: Path) -> None:
    t = _now_ms()
    script: list[Step] = []
    for i in range(20):
        script += [wrap(spot_trade("BTCUSDT", i + 1, 91_000.0 + i, 0.01, t + i)),
                   json.dumps(spot_book("BTCUSDT", i + 1, 90_999.5 + i, 91_000.5 + i))]
    ticks, orders = endpoints()
    journal = tmp_path / "j.db"
    with Venue([script]) as venue:
        daemon = start_daemon(journal, ticks, orders, tmp_path / "status.json")
        feed = _feed("--source", "binance", "--symbols", "btcusdt", "--url", venue.url,
                     "--publish", ticks, "--wait", "30")
        try:
            wait_processed(journal, 40, daemon, timeout=30)
        finally:
            feed.send_signal(signal.SIGTERM)
            feed.communicate(timeout=20)
        status = stop_daemon(daemon, tmp_path / "status.json")
    assert feed.returncode == 0
    assert processed(journal) == 40  # 20 trades and 20 quotes, none skipped
    assert status["skipped"] == {}


def test_each_start_of_the_adapter_is_a_new_feed_session() -> None:
    sessions = []
    with Venue([[]]) as venue:
        for _ in range(2):
            endpoint = f"tcp://127.0.0.1:{free_port()}"
            ctx, sub = _subscriber(endpoint)
            proc = _feed("--source", "binance", "--symbols", "btcusdt", "--url", venue.url,
                         "--publish", endpoint, "--max-seconds", "0.5", "--wait", "20")
            try:
                msgs = _receive(sub, 0, timeout=20, until_final=False)
            finally:
                proc.communicate(timeout=20)
                sub.close(0)
                ctx.term()
            assert proc.returncode == 0
            sessions.append({m.session for m in msgs if isinstance(m, Heartbeat)})
            time.sleep(0.01)  # sessions are start times in ms
    assert len(sessions[0]) == len(sessions[1]) == 1 and sessions[0] != sessions[1]


def test_curve_serves_the_venue_feed_to_key_holders(tmp_path: Path) -> None:
    write_keys(tmp_path / "keys")
    keys = load_keys(tmp_path / "keys")
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    script: list[Step] = [wrap(spot_trade("BTCUSDT", 1, 91_000.0, 0.5, _now_ms()))]
    with Venue([script]) as venue:
        ctx, sub = _subscriber(endpoint, keys.client)
        proc = _feed("--source", "binance", "--symbols", "btcusdt", "--url", venue.url,
                     "--publish", endpoint, "--curve", str(tmp_path / "keys"), "--wait", "20")
        try:
            got = _receive(sub, 1, timeout=20)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=20)
            sub.close(0)
            ctx.term()
    assert proc.returncode == 0, err
    assert [(m.symbol, m.price) for m in got if isinstance(m, Trade)] == [("BTCUSDT", 91_000.0)]


@pytest.mark.parametrize("argv,word", [
    (["--market", "x"], "--market"),
    (["--symbols", " , "], "--symbols"),
    (["--symbols", ""], "--symbols"),
    (["--streams", "trades"], "--streams"),
    (["--streams", ""], "--streams"),
    (["--url", "http://127.0.0.1:1"], "--url"),
    (["--url", "ws://"], "--url"),
    (["--url", "ws://127.0.0.1:70000"], "--url"),
    (["--stale-after", "0"], "--stale-after"),
    (["--reconnect-after", "nan"], "--reconnect-after"),
    (["--record", "/nonexistent-folder/r.gz"], "--record"),
    (["--data", "x.csv"], "--data"),
    (["--source", "kraken"], "--source"),
    (["--symbols", ",".join(f"s{i}usdt" for i in range(600))], "1024"),
])
def test_bad_options_are_one_line_and_exit_2(argv: list[str], word: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    base = ["feed", "--source", "binance", "--symbols", "btcusdt", "--publish",
            "tcp://127.0.0.1:1", "--wait", "0.1", "--url", "ws://127.0.0.1:1"]
    code = run_engine.main(base + argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and word in err, err


def test_venue_options_without_the_venue_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code = run_engine.main(["feed", "--publish", "tcp://127.0.0.1:1", "--url", "ws://h:1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--url" in err
