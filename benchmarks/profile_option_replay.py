"""Profile a replay with an option group (diagnostic): where the event loop's time goes.

    python benchmarks/profile_option_replay.py --device cuda [--day 2013-10-07]
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.options.book import open_option_book  # noqa: E402
from engine.settings.config import load_config  # noqa: E402
from engine.trading.replay import replay  # noqa: E402
from feeds.datadir import data_dir  # noqa: E402
from feeds.sources import open_sources, parse_date  # noqa: E402
from strategies.sma_cross import SmaCross  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto")
    ap.add_argument("--day", default="2013-10-07")
    ap.add_argument("--config", default="examples/spy_options.toml")
    args = ap.parse_args()
    cfg = load_config(args.config)
    spy = data_dir() / "lean_ticks_2013-10" / "equity" / "usa" / "tick" / "spy"
    factory = functools.partial(open_sources, [str(spy)], start=parse_date(args.day),
                                end=parse_date(args.day, end_of_day=True))
    book = open_option_book(list(cfg.options), device=args.device)
    prof = cProfile.Profile()
    prof.enable()
    res = replay(factory, SmaCross(), cfg, option_book=book)
    prof.disable()
    s = book.summary()
    s.pop("last")
    print(f"{res.engine.stats.trades:,} trades in {res.wall_seconds:.2f} s; {s}")
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
