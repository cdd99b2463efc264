"""Small builders shared by tests."""

from __future__ import annotations

from feeds.messages import Trade
from feeds.records import Source


def trade_messages(source: Source) -> list[Trade]:
    """Every trade record of `source` as a wire message, numbered per symbol from 1."""
    seq: dict[str, int] = {}
    out: list[Trade] = []
    for chunk in source.chunks():
        for ts, sym, p, q in zip(chunk["ts"].tolist(), chunk["sym"].tolist(),
                                 chunk["f0"].tolist(), chunk["f1"].tolist(), strict=True):
            name = source.symbols[sym]
            seq[name] = seq.get(name, 0) + 1
            out.append(Trade(seq[name], ts, name, p, q))
    return out
