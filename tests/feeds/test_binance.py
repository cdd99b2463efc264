"""Binance frames to records: documented formats, gaps, skips, time order, hostile frames."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feeds.binance import (
    FeedCounters,
    FrameNormaliser,
    StaleWatch,
    parse_market,
    parse_streams,
    parse_symbols,
    sanitise,
    stream_names,
    stream_url,
)
from feeds.records import KIND_QUOTE, KIND_TRADE
from tests.feeds.binance_venue import T0_MS, agg_trade, spot_book, spot_trade, usdm_book, wrap

MS = 1_000_000
RECV = T0_MS * MS + 40 * MS  # frames arrive 40 ms after their event time


def _norm(*symbols: str) -> FrameNormaliser:
    return FrameNormaliser(list(symbols) or ["BTCUSDT", "ETHUSDT"])


def test_spot_trade_and_book_ticker_become_trade_and_quote_records() -> None:
    n = _norm()
    n.add(RECV, wrap(spot_trade("BTCUSDT", 100, 91_234.5, 0.25, T0_MS)))
    n.add(RECV + 5 * MS, json.dumps(spot_book("ETHUSDT", 7, 3000.1, 3000.2, 4.0, 5.0)))
    r = n.take()
    assert r["kind"].tolist() == [KIND_TRADE, KIND_QUOTE]
    assert r["sym"].tolist() == [0, 1]
    # a trade's time is the venue's event time E, a spot quote's (no time) its receipt
    assert r["ts"].tolist() == [T0_MS * MS, RECV + 5 * MS]
    assert (r["f0"][0], r["f1"][0]) == (91_234.5, 0.25)
    assert r[1][["f0", "f1", "f2", "f3"]].tolist() == (3000.1, 4.0, 3000.2, 5.0)
    assert n.counters.trades == 1 and n.counters.quotes == 1 and n.counters.frames == 2


def test_usdm_book_ticker_and_agg_trade_use_the_event_time() -> None:
    n = _norm()
    n.add(RECV, wrap(usdm_book("BTCUSDT", 5, 91_000.0, 91_000.1, T0_MS + 3)))
    n.add(RECV, wrap(agg_trade("BTCUSDT", 9, 91_000.1, 0.002, T0_MS + 7)))
    r = n.take()
    assert r["ts"].tolist() == [(T0_MS + 3) * MS, (T0_MS + 7) * MS]
    assert r["kind"].tolist() == [KIND_QUOTE, KIND_TRADE]


def test_trade_id_gaps_count_jumps_per_symbol_and_keep_the_trade() -> None:
    n = _norm()
    ids = {"BTCUSDT": [1, 2, 5, 6, 10, 11], "ETHUSDT": [40, 41, 42, 44]}
    for sym, seq in ids.items():
        for i, t in enumerate(seq):
            n.add(RECV, wrap(spot_trade(sym, t, 10.0 + i, 1.0, T0_MS)))
    # BTC jumps 2->5 and 6->10 (two gaps, however many trades are missing); ETH 42->44
    assert n.counters.gaps == {"BTCUSDT": 2, "ETHUSDT": 1}
    assert n.counters.trades == 10 and len(n.take()) == 10


def test_repeated_or_backward_trade_ids_are_skipped_and_counted() -> None:
    n = _norm()
    for t in (1, 2, 3, 2, 3, 4):
        n.add(RECV, wrap(spot_trade("BTCUSDT", t, 10.0, 1.0, T0_MS)))
    assert n.counters.skipped.counts == {"trade_id_repeated_or_backwards": 2}
    assert n.counters.trades == 4 and not n.counters.gaps


def test_ts_never_goes_backwards_across_streams() -> None:
    n = _norm()
    n.add(RECV, wrap(spot_trade("BTCUSDT", 1, 10.0, 1.0, T0_MS + 9)))
    n.add(RECV, wrap(spot_trade("ETHUSDT", 1, 10.0, 1.0, T0_MS + 2)))  # older event time
    r = n.take()
    assert r["ts"].tolist() == [(T0_MS + 9) * MS] * 2


def test_control_and_bad_frames_are_counted_once_each() -> None:
    n = _norm()
    frames = [
        '{"result":null,"id":1}',                      # subscription reply
        '{"result":["x"],"id":2}',                     # a refused or odd reply
        '{"code":2,"msg":"Invalid request"}',          # an error from the venue
        '{"e":"trade","E":1,',                         # truncated JSON
        "[1,2,3]",                                     # not an object
        json.dumps({"e": "kline", "s": "BTCUSDT"}),    # unknown event
        wrap(spot_trade("XRPUSDT", 1, 1.0, 1.0, T0_MS)),  # not subscribed
        wrap({**spot_trade("BTCUSDT", 1, 1.0, 1.0, T0_MS), "p": "abc"}),
        wrap({**spot_trade("BTCUSDT", 1, 1.0, 1.0, T0_MS), "p": "1e400"}),  # inf
        wrap({**spot_trade("BTCUSDT", 1, 1.0, 1.0, T0_MS), "q": "0"}),
        wrap({**spot_trade("BTCUSDT", 1, 1.0, 1.0, T0_MS), "t": "1"}),  # id as string
        wrap({**spot_trade("BTCUSDT", 1, 1.0, 1.0, T0_MS), "E": T0_MS + 86_400_000}),
        wrap(spot_book("BTCUSDT", 3, 101.0, 100.0)),   # crossed
    ]
    for f in frames:
        n.add(RECV, f)
    c = n.counters
    assert c.acks == 1 and c.trades == 0 and c.quotes == 0 and len(n.take()) == 0
    assert c.skipped.counts == {
        "subscription_refused": 1, "venue_error": 1, "malformed_json": 1, "not_an_object": 1,
        "unknown_event": 1, "symbol_not_subscribed": 1, "bad_number": 2,
        "non_positive_price_or_size": 1, "bad_id_or_time": 1, "time_far_from_receipt": 1,
        "crossed_quote": 1}
    assert c.frames == len(frames) == c.acks + c.skipped.total


def test_line_breaks_inside_a_frame_become_spaces() -> None:
    text = '{"e": "trade",\n"s":"BTCUSDT"}\r\n'
    assert "\n" not in sanitise(text) and "\r" not in sanitise(text)
    assert json.loads(sanitise(text)) == json.loads(text)


_GOOD = [wrap(spot_trade("BTCUSDT", 1, 91_000.0, 0.1, T0_MS)),
         json.dumps(spot_book("ETHUSDT", 9, 3000.0, 3000.5)),
         wrap(usdm_book("BTCUSDT", 4, 90_999.0, 91_001.0, T0_MS)),
         wrap(agg_trade("ETHUSDT", 3, 3000.2, 1.5, T0_MS))]
_EXTREME: list[object] = ["1e308", "-1", "nan", "inf", "-0", "0x10", "1" * 400, "", " 1", "1e-320",
            None, True, [], {}, 2**70, -(2**70), 1.5]


def _mutations(rng: random.Random, n: int) -> list[str | bytes]:
    """Frames of every bad class: random bytes, cut JSON, wrong types, extreme numbers."""
    out: list[str | bytes] = []
    for _ in range(n):
        base = rng.choice(_GOOD)
        roll = rng.random()
        if roll < 0.2:
            out.append(bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 60))))
        elif roll < 0.4:
            out.append(base[: rng.randint(0, len(base) - 1)])
        else:
            obj = json.loads(base)
            data = obj.get("data", obj)
            data[rng.choice(sorted(data))] = rng.choice(_EXTREME)
            out.append(json.dumps(obj))
    return out


def _check_total(n: FrameNormaliser) -> None:
    c = n.counters
    assert c.frames == c.trades + c.quotes + c.acks + c.shutdown_notices + c.skipped.total
    r = n.take()
    assert len(r) == c.trades + c.quotes
    assert np.all(np.diff(r["ts"]) >= 0)
    assert np.all(np.isfinite(r[["f0", "f1", "f2", "f3"]].tolist()))
    trades = r[r["kind"] == KIND_TRADE]
    assert np.all(trades["f0"] > 0) and np.all(trades["f1"] > 0)


def test_seeded_fuzz_of_bad_frames_never_raises_and_counts_every_frame() -> None:
    for seed in range(5):
        n = _norm()
        for frame in _mutations(random.Random(seed), 400):
            n.add(RECV, frame)
        _check_total(n)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=80), st.text(max_size=80),
                          st.sampled_from(_GOOD)), max_size=20))
def test_any_frames_are_used_or_counted(frames: list[str | bytes]) -> None:
    n = _norm()
    for f in frames:
        n.add(RECV, f)
    _check_total(n)


@pytest.mark.parametrize("text,word", [
    ("x", "--market"), ("", "--market")])
def test_bad_market(text: str, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        parse_market(text)


def test_options_parse_and_refuse_in_one_line() -> None:
    assert parse_market("USDM") == "usdm"
    assert parse_symbols("btcusdt, ethusdt,btcusdt") == ["BTCUSDT", "ETHUSDT"]
    assert parse_streams("trade,bookticker") == ["trade", "bookTicker"]
    assert stream_url("ws://127.0.0.1:9") == "ws://127.0.0.1:9/stream"
    assert stream_url("wss://h/ws/x") == "wss://h/ws/x"
    assert stream_names(["BTCUSDT"], ["trade", "bookTicker"]) == [
        "btcusdt@trade", "btcusdt@bookTicker"]
    for bad, fn in ((" , ", parse_symbols), ("btc-usdt", parse_symbols),
                    ("trades", parse_streams), ("", parse_streams),
                    ("http://x", stream_url), ("ws://", stream_url), ("ws://h:99999", stream_url)):
        with pytest.raises(ValueError) as err:
            fn(bad)
        assert "\n" not in str(err.value)


def test_stale_watch_marks_a_quiet_stream_once_per_spell() -> None:
    counters = FeedCounters()
    seen: dict[str, int] = {}
    watch = StaleWatch(["btcusdt@trade", "btcusdt@bookTicker"], seen, counters, after_s=1.0)
    t = watch.since
    seen["btcusdt@trade"] = t
    watch.check(t + 500 * MS)
    assert counters.stale_marks == {}
    watch.check(t + 1500 * MS)
    watch.check(t + 1600 * MS)  # still the same quiet spell: not counted again
    assert counters.stale_marks == {"btcusdt@trade": 1, "btcusdt@bookTicker": 1}
    seen["btcusdt@trade"] = t + 1700 * MS  # it speaks again, then goes quiet again
    watch.check(t + 1800 * MS)
    watch.check(t + 3000 * MS)
    assert counters.stale_marks == {"btcusdt@trade": 2, "btcusdt@bookTicker": 1}
    assert math.isfinite(watch.after_ns)
