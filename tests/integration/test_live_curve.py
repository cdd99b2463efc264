"""Strangers kept out: with --curve neither a keyless publisher (an impostor on the tick
port) nor a keyless or wrongly keyed reader gets anything through; key holders do."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq
import zmq.auth

from engine.live.curve_keys import load_keys
from feeds.synthetic import SyntheticMarket
from feeds.transport import Publisher
from tests.helpers import trade_messages
from tests.live_procs import (
    ROOT,
    endpoints,
    processed,
    run_feed,
    start_daemon,
    stop_daemon,
    wait_journal_held,
)


def _reader(endpoint: str, keys: tuple[bytes, bytes, bytes] | None, got: list[bytes],
            stop: threading.Event) -> None:
    ctx = zmq.Context()
    s = ctx.socket(zmq.SUB)
    if keys is not None:
        s.curve_publickey, s.curve_secretkey, s.curve_serverkey = keys
    s.setsockopt(zmq.SUBSCRIBE, b"")
    s.connect(endpoint)
    while not stop.is_set():
        if s.poll(50):
            got.append(s.recv_multipart()[0])
    s.close(0)
    ctx.term()


@pytest.mark.slow
def test_curve_keeps_strangers_out(tmp_path: Path) -> None:
    keydir = tmp_path / "keys"
    r = subprocess.run([sys.executable, str(ROOT / "run_engine.py"), "keys", "--out",
                        str(keydir)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    keys = load_keys(keydir)
    assert (keydir / "server.key_secret").stat().st_mode & 0o077 == 0

    ticks, out = endpoints()
    stranger_pub, stranger_sec = zmq.curve_keypair()
    readers = {"keyless": None, "wrong_key": (stranger_pub, stranger_sec, keys.server_public),
               "client": keys.client}
    got: dict[str, list[bytes]] = {k: [] for k in readers}
    stop = threading.Event()
    threads = [threading.Thread(target=_reader, args=(out, v, got[k], stop), daemon=True)
               for k, v in readers.items()]
    for th in threads:
        th.start()
    j = tmp_path / "j.db"
    d = start_daemon(j, ticks, out, tmp_path / "s.json", "--curve", str(keydir))
    # the flood below lasts 2 s: started before the daemon is up (its start-up alone can
    # take longer on a loaded machine) it proved nothing
    wait_journal_held(j, d)

    # an impostor binds the tick port without the keys and floods it
    ctx = zmq.Context()
    impostor = Publisher(ticks, ctx, nodrop=False)
    trades = trade_messages(SyntheticMarket(n_symbols=3, n_ticks=5_000, seed=5))
    t_end = time.monotonic() + 2.0
    while time.monotonic() < t_end:
        for t in trades[:500]:
            impostor.send(t)
        time.sleep(0.05)
    impostor.close()
    time.sleep(0.3)
    assert processed(j) == 0  # nothing got in

    # the real feed holds the keys
    run_feed(ticks, "--ticks", "8000", "--curve", str(keydir))
    deadline = time.monotonic() + 30
    while processed(j) < 8000 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    st = stop_daemon(d, tmp_path / "s.json")
    stop.set()
    for th in threads:
        th.join(5)
    ctx.term()
    assert st["ticks"] == 8000 and st["fills"] > 0
    assert got["keyless"] == [] and got["wrong_key"] == []
    assert sum(t.startswith(b"F.") for t in got["client"]) == st["fills"]
