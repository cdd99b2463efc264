"""The compiled chunk encoder writes exactly the bytes msgspec writes for the same Struct."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from feeds.messages import Bar, Quote, Trade, encode, make_decoder
from feeds.records import KIND_BAR, KIND_QUOTE, KIND_TRADE, RECORD_DTYPE
from feeds.wire_encode import ChunkEncoder

NAMES = ["A", "BAC", "SYN000", "X" * 31, "Y" * 32, "LONGNAME" * 12]


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 300),
    seed=st.integers(0, 2**32 - 1),
    start_seq=st.sampled_from([0, 100, 200, 60_000, 70_000, 4_294_967_290]),
)
def test_encoder_is_byte_identical_to_msgspec(n: int, seed: int, start_seq: int) -> None:
    rng = np.random.default_rng(seed)
    rec = np.zeros(n, RECORD_DTYPE)
    rec["ts"] = np.sort(rng.choice([0, 5, 200, 70_000, 5_000_000_000, 1_700_000_000 * 10**9],
                                   n) + rng.integers(0, 1000, n))
    rec["sym"] = rng.integers(0, len(NAMES), n)
    rec["kind"] = rng.choice([KIND_TRADE, KIND_QUOTE, KIND_BAR], n)
    for f in range(5):
        rec[f"f{f}"] = rng.choice([0.0, 1.5, 13.8, -2.25, 1e300, np.nan, np.inf], n) * \
            rng.random(n)
    enc = ChunkEncoder(NAMES, 86_400 * 10**9)
    enc.counters[:] = start_seq
    payloads, offsets = enc.encode(rec)
    counters = {(k, s): start_seq for k in range(3) for s in range(len(NAMES))}
    dec = make_decoder()
    for i, r in enumerate(rec):
        k, s = int(r["kind"]), int(r["sym"])
        counters[k, s] += 1
        seq, ts, name = counters[k, s], int(r["ts"]), NAMES[s]
        fv = [float(r[f"f{j}"]) for j in range(5)]
        if k == KIND_TRADE:
            msg: object = Trade(seq, ts, name, fv[0], fv[1])
        elif k == KIND_QUOTE:
            msg = Quote(seq, ts, name, fv[0], fv[1], fv[2], fv[3])
        else:
            msg = Bar(seq, ts, name, fv[0], fv[1], fv[2], fv[3], fv[4], 86_400 * 10**9)
        got = payloads[offsets[i]:offsets[i + 1]]
        assert got == encode(msg), (i, msg)
        assert enc.topics[k][s] == {0: b"T.", 1: b"Q.", 2: b"B."}[k] + name.encode()
        back = dec.decode(got)
        assert type(back) is type(msg)
