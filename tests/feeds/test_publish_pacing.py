"""A paced feed keeps its pace across chunk boundaries: the next chunk is drawn and encoded
while the current one is sent, so a slow source never stops the stream."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import zmq

from feeds.publish import publish_source
from feeds.records import RECORD_DTYPE
from feeds.transport import Publisher

RATE = 2_000.0  # messages a second
CHUNK = 200  # 0.1 s of stream a chunk
STALL_S = 0.06  # drawing a chunk takes this long


class SlowChunks:
    """Trades of two symbols, each chunk after STALL_S of "work" (a sleep, so it releases
    the GIL like numpy's generation mostly does)."""

    symbols = ["AAA", "BBB"]
    name = "slow chunks"

    def __init__(self, n_chunks: int, fail_at: int | None = None) -> None:
        self.n_chunks = n_chunks
        self.fail_at = fail_at

    def chunks(self) -> Iterator[np.ndarray]:
        for k in range(self.n_chunks):
            if k:
                time.sleep(STALL_S)
            if k == self.fail_at:
                raise OSError("disk gone")
            recs = np.zeros(CHUNK, dtype=RECORD_DTYPE)
            recs["ts"] = 1_700_000_000_000_000_000 + (k * CHUNK + np.arange(CHUNK)) * 500_000
            recs["sym"] = np.arange(CHUNK) % 2
            recs["f0"] = 100.0
            recs["f1"] = 1.0
            yield recs


def _arrivals(endpoint: str, ctx: zmq.Context[zmq.Socket[bytes]], want: int,
              out: list[float]) -> None:
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"T.")
    sub.connect(endpoint)
    poller = zmq.Poller()
    poller.register(sub, zmq.POLLIN)
    deadline = time.monotonic() + 20
    while len(out) < want and time.monotonic() < deadline:
        if poller.poll(100):
            sub.recv_multipart()
            out.append(time.perf_counter())
    sub.close(linger=0)


@pytest.mark.alone  # gaps of 20 ms between messages: no other test's processes beside it
def test_paced_stream_does_not_stop_at_chunk_boundaries() -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    pub = Publisher("inproc://paced", ctx)
    n_chunks = 4
    got: list[float] = []
    reader = threading.Thread(target=_arrivals, args=(pub.endpoint, ctx, n_chunks * CHUNK, got))
    reader.start()
    pub.wait_for_subscriber(5.0)
    sent = publish_source(SlowChunks(n_chunks), pub, rate=RATE)
    reader.join()
    pub.close()
    ctx.term()
    assert sent == len(got) == n_chunks * CHUNK
    gaps = np.diff(got)
    # messages leave every 1/RATE = 0.5 ms in steps of a few; a chunk drawn only when
    # the previous one is sent would leave a STALL_S (60 ms) hole at each boundary
    assert gaps.max() < STALL_S / 3, f"largest gap {gaps.max() * 1e3:.1f} ms"
    span = got[-1] - got[0]
    assert span == pytest.approx((n_chunks * CHUNK - 1) / RATE, rel=0.25)


def test_a_source_failing_while_prefetched_fails_the_publisher() -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    pub = Publisher("inproc://paced-fail", ctx)
    try:
        with pytest.raises(OSError, match="disk gone"):
            publish_source(SlowChunks(3, fail_at=2), pub, rate=RATE)
    finally:
        pub.close()
        ctx.term()


def test_overlapping_paced_streams_restore_the_switch_interval_once_both_end() -> None:
    """Two paced publishers in one process (two inproc replays), the one that started
    first ending first: the interval is the original once both are done, not the short
    one the second found when it started."""
    import sys

    before = sys.getswitchinterval()
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    pubs = [Publisher(f"inproc://overlap{i}", ctx) for i in range(2)]
    first = threading.Thread(target=publish_source, args=(SlowChunks(1), pubs[0]),
                             kwargs={"rate": RATE})
    first.start()
    time.sleep(0.02)
    publish_source(SlowChunks(3), pubs[1], rate=RATE)  # still sending when the first ends
    first.join()
    for p in pubs:
        p.close()
    ctx.term()
    assert sys.getswitchinterval() == before
