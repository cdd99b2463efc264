"""What re-evolution costs the tick path: the same tick replay with and without it.

The built-in synthetic market (several New York sessions of trades) goes through the whole
engine (feed, ZeroMQ, validation, one-minute bars, indicator bank, a GP strategy, the phase
table, the paper broker) twice per round, the two ways interleaved:

- `with`: the live daemon's re-evolution (engine/live/reevolution.py, `LiveReevolution`, a real
  SQLite journal): every session at `--at` data time a GP evolution on the S&P daily file
  (`--stocks` x `--train-days`, `--population` x `--generations` on `--device`) starts in
  the background worker process, and its rule is swapped in at the next session boundary.
  The engine never waits for it: the worker is busy while the ticks flow (the table says
  for what share of the replay), which is the contention the tick path must not pay for.
- `without`: the same rules swapped in at the same sessions as the `with` run before it
  adopted them (read back from its journal), with no evolution running: the same trades,
  so the two differ only by the background evolution (a rule that trades more costs the
  tick path more, whoever evolved it).

Per way it prints ticks/s (market-data messages over the replay's wall time, medians over
`--rounds`) and the ratio with/without; the issue's goal is >= 0.95 on the GPU machine
(`--device cuda`: the evolution on the GPU, the tick path on its CPU core). Results and
their history: benchmarks/results/*/README.md.

    python benchmarks/reevolution_overhead.py [--device cpu] [--ticks 200000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import log, write_json  # noqa: E402
from engine.live.journal import Journal  # noqa: E402
from engine.live.reevolution import LiveReevolution  # noqa: E402
from engine.settings.config import EngineConfig  # noqa: E402
from engine.settings.reevolve import ReevolveSettings  # noqa: E402
from engine.trading.replay import replay  # noqa: E402
from feeds.datadir import data_dir  # noqa: E402
from feeds.synthetic import SyntheticMarket  # noqa: E402
from gpu.gp.core import DEFAULT_COSTS  # noqa: E402
from strategies.gp.evolution import EvolutionConfig  # noqa: E402
from strategies.gp.reevolve import AsOfJob, Reevolver, RuleText, RuleVersion  # noqa: E402
from strategies.gp.representation import GPRule  # noqa: E402
from strategies.gp.strategy import SwappableGP  # noqa: E402

RULE = ("(close > sma25)", "(close < sma25)")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                   help="the evolution's and the strategy's device (default auto)")
    p.add_argument("--ticks", type=int, default=400_000, help="synthetic trades (400000)")
    p.add_argument("--n-symbols", type=int, default=10, help="synthetic symbols (10)")
    p.add_argument("--tick-rate", type=float, default=0.1,
                   help="trades per second per symbol: lower spans more sessions (0.1)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of both ways (3)")
    p.add_argument("--at", default="09:31", help="re-evolution time of day (09:31)")
    p.add_argument("--stocks", type=int, default=32, help="S&P stocks evolved on (32)")
    p.add_argument("--train-days", type=int, default=252, help="training days (252)")
    p.add_argument("--population", type=int, default=2000, help="individuals (2000)")
    p.add_argument("--generations", type=int, default=10, help="generations (10)")
    p.add_argument("--json", type=Path, help="results as JSON")
    return p.parse_args()


def s_and_p_symbols(n: int) -> list[str]:
    from strategies.gp.window import history_matrix

    return list(history_matrix(data_dir() / "sp500_5yr_daily", n).symbols)


class ScriptedSwaps:
    """Swaps in given rules at given sessions (the adoptions of a `with` run)."""

    def __init__(self, strategy: SwappableGP, swaps: list[tuple[int, list[GPRule]]]) -> None:
        self.strategy = strategy
        self.swaps = dict(swaps)

    async def new_session(self, engine: Any, last_ts: int, next_ts: int) -> None:
        rules = self.swaps.get(next_ts)
        if rules is not None:
            self.strategy.swap(rules)


def one_replay(args: argparse.Namespace, reevolve: bool, reevolver: Reevolver,
               symbols: list[str], tmp: Path,
               swaps: list[tuple[int, list[GPRule]]]) -> dict[str, Any]:
    strategy = SwappableGP([GPRule.from_infix(*RULE)], device=args.device, name="gp")
    cfg = EngineConfig(bar_seconds=60.0, device=args.device)
    factory = functools.partial(SyntheticMarket, n_symbols=args.n_symbols,
                                n_ticks=args.ticks, seed=1, tick_rate=args.tick_rate)
    hook: Any = ScriptedSwaps(strategy, swaps)
    journal = None
    if reevolve:
        journal = Journal(tmp / f"bench-{time.monotonic_ns()}.db")
        settings = ReevolveSettings(
            at=args.at, data=str(data_dir() / "sp500_5yr_daily"), symbols=symbols,
            train_days=args.train_days, population=args.population,
            generations=args.generations, device=args.device, gpu_seconds=0)
        first = RuleVersion(version=1, rules=[RuleText(*RULE)], train_start="",
                            train_end="", seed=0, fitness=0.0, origin="benchmark")
        hook = LiveReevolution(settings, strategy, journal, first, cfg.timezone, symbols,
                               DEFAULT_COSTS, reevolver=reevolver)
    result = replay(factory, strategy, cfg, session_hook=hook)
    ticks = result.engine.stats.market_data
    out: dict[str, Any] = {"ticks": ticks, "wall_seconds": result.wall_seconds,
                           "ticks_per_second": ticks / result.wall_seconds,
                           "bar_events": result.engine.stats.bar_events,
                           "fills": len(result.engine.broker.fills),
                           "final_equity": result.engine.broker.equity()}
    if isinstance(hook, LiveReevolution):
        busy_until = time.perf_counter()
        running = hook.running
        if running is not None:  # finished outside the timing: the next round starts idle
            running.result()
        out.update({"evolutions": dict(hook.counts),
                    "worker_still_busy_after_s": time.perf_counter() - busy_until,
                    "rule_version_at_end": hook.current.version})
    if journal is not None:
        swaps[:] = [(v["adopted_ts"], [GPRule.from_infix(r["buy"], r["sell"])
                                       for r in v["rules"]])
                    for v in journal.rule_versions()[1:]]
        journal.close()
    out["swaps"] = len(swaps)
    return out


def main() -> None:
    args = parse_args()
    symbols = s_and_p_symbols(args.stocks)
    ways: dict[str, list[dict[str, Any]]] = {"without": [], "with": []}
    with tempfile.TemporaryDirectory() as d, Reevolver() as reevolver:
        # the worker's start-up (spawn, imports) and a first evolution happen before timing
        warm = reevolver._warm
        if warm is not None:
            warm.result()
        # a first small evolution: the file's parse and the kernels' compilation
        reevolver.submit(AsOfJob(
            data=str(data_dir() / "sp500_5yr_daily"), symbols=symbols, as_of="2030-01-01",
            train_days=args.train_days,
            config=EvolutionConfig(population=16, generations=2, elite=1),
            device=args.device)).result()
        for r in range(args.rounds):
            swaps: list[tuple[int, list[GPRule]]] = []
            for way in ("with", "without"):  # `without` replays `with`'s swaps
                res = one_replay(args, way == "with", reevolver, symbols, Path(d), swaps)
                ways[way].append(res)
                log(f"round {r + 1}/{args.rounds} {way:>7}: {res['ticks_per_second']:,.0f} "
                    f"ticks/s, {res['wall_seconds']:.2f} s, {res['swaps']} swaps, "
                    f"{res['fills']} fills"
                    + (f", evolutions {res['evolutions']}" if "evolutions" in res else ""))
    same = all((a["fills"], a["final_equity"]) == (b["fills"], b["final_equity"])
               for a, b in zip(ways["with"], ways["without"], strict=True))
    med = {w: statistics.median(x["ticks_per_second"] for x in runs) for w, runs in ways.items()}
    ratio = med["with"] / med["without"]
    print(f"{'way':<10}{'ticks/s (median)':>18}{'runs':>24}")
    for w, runs in ways.items():
        print(f"{w:<10}{med[w]:>18,.0f}   "
              + ", ".join(f"{x['ticks_per_second']:,.0f}" for x in runs))
    print(f"ratio with/without: {ratio:.3f} (goal >= 0.95 on the GPU machine); "
          f"evolutions per replay: {ways['with'][-1]['evolutions']}; the same fills and "
          f"final equity both ways in every round: {'yes' if same else 'NO'}")
    if args.json:
        write_json(args.json, {"host": platform.node(), "args": vars(args) | {
            "json": str(args.json)}, "ways": ways, "median_ticks_per_second": med,
            "ratio": ratio, "same_trades": same})


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
