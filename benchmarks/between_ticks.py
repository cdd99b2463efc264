"""GPU work between ticks: replay throughput with option groups, in the current configuration.

Rows (the same replay over ipc, sma-cross strategy, one process per row's engine), each the
default configuration or one setting changed where a claim of the README compares the two
(benchmarks/README.md lists the claims):
- SPY with one group: no option group; the group on the CPU twin (in-process); on CUDA
  in-process ("inline") against the GPU worker process (the default); the default worker
  with spots from the engine's hot loop (OPTION_TAP_EVERY=0) and from validation every 4th
  and 16th trade (the default: 8th); launches spaced 0.5 and 0 (OPTION_WORKER_SPACING);
- ten groups of 1,000 American options (--grid, default "default") on ten synthetic
  underlyings that tick about every millisecond of data time: no group; the default
  worker; split over 2 GPUs where there are 2; the lanes kernel capped at 128 registers;
  receive batches of 2,048, 1,024 and 512; one launch for all groups
  (OPTION_WORKER_BATCH=1); spots from the hot loop; the groups on the data's clock, every
  10 ms of data (`options_every_ms`: one launch a boundary, two in flight at most);
- the ten groups paced at 1x and 10x their data rate: no group, the default worker,
  spots from the hot loop, one launch in flight per group.
For every row: ticks/s, ratio to the no-group row, repricings, tick -> values latency (p50,
p99; from the spot's hand-over to the worker's client to the results in the engine's
hands), the largest data-time gap between consecutive repricings of a group and the
longest a newer spot waited (from the published messages). Then the pricer alone (launch
capacity, 1-4 launches in flight) and the GP bar close: CPU twin, CUDA (pre-bound, mapped
codes) and CUDA with numba's ordinary launch, and what `--device auto` picks; and the
event loop's time of an overlapped bar close (start, and the signals once ready: the wait
is the engine's to fill).

    python benchmarks/between_ticks.py [--quick] [--only NAMES] [--skip NAMES] [--no-gp]
        [--repeat N] [--json PATH]
    python benchmarks/between_ticks.py --pool RUN.json [RUN.json ...]   # rounds pooled

Default workload: the 1.89 M SPY trades of lean_ticks_2013-10 with examples/spy_options.toml
(102 American options). --quick: a small synthetic market and the CPU twin in place of
CUDA, to check the script anywhere. Prints a table, writes JSON and a PNG.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.common import scoped_env  # noqa: E402
from engine.options.book import open_option_book
from engine.options.group import OptionGroupConfig  # noqa: E402
from engine.settings.config import EngineConfig, load_config  # noqa: E402
from engine.trading.replay import replay  # noqa: E402
from feeds.datadir import data_dir  # noqa: E402
from feeds.messages import OptionGroupValues, OptionValue  # noqa: E402
from feeds.sources import open_sources  # noqa: E402
from feeds.synthetic import SyntheticMarket  # noqa: E402
from gpu.device import cuda_present, cuda_simulated  # noqa: E402
from strategies.sma_cross import SmaCross  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


#: a pause of the underlying longer than this (a night, a halt) is not a repricing gap
QUIET_NS = 1_000_000_000


def _tick_times(factory: functools.partial[Any]) -> dict[str, np.ndarray]:
    """Sorted trade timestamps (ns) of every symbol of a source."""
    source = factory()
    chunks = list(source.chunks())
    ts = np.concatenate([c["ts"] for c in chunks])
    sym = np.concatenate([c["sym"] for c in chunks])
    return {name: np.sort(ts[sym == k]) for k, name in enumerate(source.symbols)}


def _gaps_ms(values: Any, ticks: dict[str, np.ndarray]) -> dict[str, float]:
    """Per group, the largest data-time gap (ms) between consecutive published repricings
    while its underlying kept ticking: a pair of repricings is left out when the underlying
    paused for more than QUIET_NS in between (overnight, a halt), where there was nothing
    to reprice."""
    ts: dict[str, list[int]] = {}
    for m in values:
        if type(m) is OptionGroupValues:
            ts.setdefault(m.symbol, []).append(m.ts)
        elif type(m) is OptionValue:
            lst = ts.setdefault(m.underlying, [])
            if not lst or lst[-1] != m.ts:
                lst.append(m.ts)
    out: dict[str, float] = {}
    for sym, v in ts.items():
        r = np.array(v, dtype=np.int64)
        t = ticks.get(sym)
        if len(r) < 2 or t is None or len(t) < 2:
            out[sym] = float("nan")
            continue
        pause = np.diff(t)  # pause[i] = t[i+1] - t[i]
        lo = np.searchsorted(t, r[:-1], side="left")  # first tick at or after a repricing
        hi = np.searchsorted(t, r[1:], side="right")  # ticks up to the next one
        worst = 0
        for a, b, i0, i1 in zip(r[:-1].tolist(), r[1:].tolist(), lo.tolist(), hi.tolist(),
                                strict=True):
            if i1 - 1 > i0 and pause[i0:i1 - 1].max() > QUIET_NS:
                continue
            worst = max(worst, b - a)
        out[sym] = worst / 1e6
    return out


def _repriced_ts(values: Any) -> dict[str, np.ndarray]:
    """Per underlying, the sorted data times (tick ts) of its published repricings."""
    ts: dict[str, set[int]] = {}
    for m in values:
        if type(m) is OptionGroupValues:
            ts.setdefault(m.symbol, set()).add(m.ts)
        elif type(m) is OptionValue:
            ts.setdefault(m.underlying, set()).add(m.ts)
    return {s: np.array(sorted(v), dtype=np.int64) for s, v in ts.items()}


def worst_waits(repriced: np.ndarray, ticks: np.ndarray, k: int = 5
                ) -> list[tuple[float, int]]:
    """The k longest newer-spot waits of one group (as `newer_spot_waits_ms`, pauses
    longer than QUIET_NS left out) as (wait ms, data time ns of the repricing that ended
    it): where in the replay the longest waits happened."""
    if len(repriced) < 2 or len(ticks) < 2:
        return []
    a, b = repriced[:-1], repriced[1:]
    first = np.searchsorted(ticks, a, side="right")
    first_ts = np.where(first < len(ticks), ticks[np.minimum(first, len(ticks) - 1)], b)
    wait = np.where(first_ts < b, b - first_ts, 0)
    pause = np.diff(ticks)
    lo = np.searchsorted(ticks, a, side="left")
    hi = np.searchsorted(ticks, b, side="right")
    for i in np.argsort(wait)[::-1]:
        i0, i1 = int(lo[i]), int(hi[i])
        if i1 - 1 > i0 and pause[i0:i1 - 1].max() > QUIET_NS:
            wait[i] = 0
    top = np.argsort(wait)[::-1][:k]
    return [(float(wait[i] / 1e6), int(b[i])) for i in top if wait[i] > 0]


def newer_spot_waits_ms(repriced: np.ndarray, ticks: np.ndarray) -> float:
    """The longest a newer spot waited, in data time, for a repricing of its group: over
    consecutive repricings a < b, b minus the first tick after a (0 when no tick came in
    between). Unlike the gap b - a this leaves out the stretches with nothing new to
    price, so the underlying's own pauses do not count; pairs spanning a pause longer
    than QUIET_NS (a night, a halt) are left out too."""
    if len(repriced) < 2 or len(ticks) < 2:
        return float("nan")
    a, b = repriced[:-1], repriced[1:]
    first = np.searchsorted(ticks, a, side="right")  # the first tick after a
    has = first < len(ticks)
    first_ts = np.where(has, ticks[np.minimum(first, len(ticks) - 1)], b)
    wait = np.where(first_ts < b, b - first_ts, 0)
    lo = np.searchsorted(ticks, a, side="left")  # as _gaps_ms: the ticks from a to b
    hi = np.searchsorted(ticks, b, side="right")
    pause = np.diff(ticks)
    quiet = np.zeros(len(a), dtype=bool)
    for i, (i0, i1) in enumerate(zip(lo.tolist(), hi.tolist(), strict=True)):
        if i1 - 1 > i0 and pause[i0:i1 - 1].max() > QUIET_NS:
            quiet[i] = True
    wait = wait[~quiet]
    return float(wait.max() / 1e6) if wait.size else float("nan")


def _tick_gaps_ms(ticks: dict[str, np.ndarray]) -> dict[str, float]:
    """Largest data-time gap between consecutive ticks of each symbol (the floor)."""
    return {s: float(np.diff(t).max() / 1e6) if len(t) > 1 else float("nan")
            for s, t in ticks.items()}


def run_row(name: str, factory: functools.partial[Any], groups: list[OptionGroupConfig],
            device: str, dispatch: str, messages: str, transport: str,
            prebind: bool, publish_rate: float = 0.0, receive_batch: int = 0,
            every_ms: float = 0.0, frame_ticks: int = -1) -> dict[str, Any]:
    groups = [OptionGroupConfig(**{**{f: getattr(g, f) for f in g.__struct_fields__},
                                   "messages": messages}) for g in groups]
    book = None
    t_start = time.perf_counter()
    if groups:
        # read by the pricers (in this process, or inherited by the worker process)
        os.environ["GPU_OPTIONS_PREBIND"] = "1" if prebind else "0"
        book = open_option_book(groups, device=device, dispatch=dispatch, every_ms=every_ms)
    startup = time.perf_counter() - t_start
    try:
        cfg = EngineConfig(transport=transport,  # type: ignore[arg-type]
                           receive_batch=receive_batch)
        if frame_ticks >= 0:
            cfg = msgspec.structs.replace(cfg, replay_frame_ticks=frame_ticks)
        # the engine process's CPU time (its zmq I/O thread included; the feed and the
        # worker are other processes): steadier than wall time on a host others share
        cpu0 = time.process_time()
        res = replay(factory, SmaCross(), cfg, option_book=book, publish_rate=publish_rate)
        engine_cpu = time.process_time() - cpu0
        stats = res.engine.stats
        row: dict[str, Any] = {
            "row": name, "device": device if groups else None,
            "dispatch": dispatch if groups else None, "messages": messages if groups else None,
            "prebound_launch": prebind if groups and device == "cuda" else None,
            "ticks": stats.market_data, "seconds": res.wall_seconds,
            "ticks_per_second": stats.market_data / res.wall_seconds,
            "option_values": stats.option_values, "startup_seconds": startup,
            "engine_cpu_seconds": engine_cpu,
            "receive_batch": cfg.receive_batch_in_force,
            "engine_cpu_us_per_tick": engine_cpu / max(stats.market_data, 1) * 1e6,
        }
        if book is not None:
            s = book.summary()
            s.pop("last")
            row["worker_repricings"] = s.get("worker_repricings")
            # a clocked book: its boundaries and how long each waited for the one before
            row.update({k: s[k] for k in ("every_ms", "boundaries", "boundary_wait_us_p50",
                                          "boundary_wait_us_max") if k in s})
            row.update({k: s[k] for k in ("groups", "options", "repricings", "coalesced_ticks",
                                          "latency_us_p50", "latency_us_p99",
                                          "latency_us_max")})
            tick_times = _tick_times(factory)
            gaps = _gaps_ms(res.engine.option_values, tick_times)
            row["max_repricing_gap_ms"] = max(gaps.values()) if gaps else None
            waits = [newer_spot_waits_ms(r, tick_times[s]) for s, r in
                     _repriced_ts(res.engine.option_values).items() if s in tick_times]
            row["max_newer_spot_wait_ms"] = max(waits) if waits else None
            # where the longest waits fell: seconds of data time from the feed's first tick
            start = min(int(t[0]) for t in tick_times.values() if len(t))
            top = [(w, s, (at - start) / 1e9) for s, r in
                   _repriced_ts(res.engine.option_values).items() if s in tick_times
                   for w, at in worst_waits(r, tick_times[s])]
            row["longest_newer_spot_waits"] = [
                {"ms": w, "group": s, "at_s": at} for w, s, at in sorted(top, reverse=True)[:8]]
            row["gap_window_messages"] = len(res.engine.option_values)
    finally:
        if book is not None:
            book.close()
    return row


def _bar_close_us(decider: Any, feats: np.ndarray, rounds: int = 51) -> float:
    """Median microseconds of one bar close (start, poll until ready, result)."""
    decider._bar_close(feats)
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        decider._bar_close(feats)
        samples.append(time.perf_counter() - t0)
    return float(np.median(samples) * 1e6)


def _loop_time_us(strategy: Any, feats: np.ndarray, rounds: int = 51) -> float:
    """Median event-loop microseconds of one overlapped bar close of a GP strategy:
    `begin_signals` plus `end_signals` once the evaluation is done; the wait between
    (the engine applies the next messages meanwhile) is not counted."""
    closed = np.ones(feats.shape[0], np.bool_)
    decider = strategy._decider

    async def run() -> list[float]:
        samples = []
        for _ in range(rounds + 1):
            t0 = time.perf_counter()
            strategy.begin_signals(feats, closed)
            t1 = time.perf_counter()
            while not decider.ready():
                pass
            t2 = time.perf_counter()
            await strategy.end_signals()
            samples.append(t1 - t0 + time.perf_counter() - t2)
        return samples[1:]

    return float(np.median(asyncio.run(run())) * 1e6)


def gp_bar_close(sizes: list[tuple[int, int]], gpu: str) -> list[dict[str, Any]]:
    """A GP strategy's bar close (start, poll, result) on each backend, the CUDA one also
    with numba's ordinary launch, what `--device auto` picks (its own measurement), and the
    event loop's time of an overlapped bar close on each."""
    from gpu.gp import decider as gp_decider
    from gpu.gp.decider import AsyncDecider
    from strategies.gp.init import ramped_half_and_half
    from strategies.gp.strategy import GPEnsemble

    out = []
    for n_rules, n_symbols in sizes:
        pop = ramped_half_and_half(n_rules, np.random.default_rng(n_rules), 2, 6)
        rules = [pop.rule(i) for i in range(n_rules)]
        feats = np.random.default_rng(0).normal(size=(n_symbols, 31)).astype(np.float32)
        cpu_strategy = GPEnsemble(rules, device="cpu")
        cpu_strategy.reset([f"S{i}" for i in range(n_symbols)])
        cpu = cpu_strategy._decider
        row: dict[str, Any] = {"rules": n_rules, "symbols": n_symbols,
                               "cpu_us": _bar_close_us(cpu, feats), "cuda_us": None,
                               "cuda_plain_us": None, "auto": "cpu",
                               "cpu_loop_us": _loop_time_us(cpu_strategy, feats),
                               "cuda_overlapped_loop_us": None}
        if gpu == "cuda":
            gp_decider.BREAK_EVEN.pop((n_rules, n_symbols), None)
            auto = GPEnsemble(rules, device="auto")
            auto.reset([f"S{i}" for i in range(n_symbols)])
            cal = auto._decider.calibration or {}
            fast = AsyncDecider(cpu.programs, cpu.lengths, "cuda")
            plain = AsyncDecider(cpu.programs, cpu.lengths, "cuda", prebind=False)
            overlapped = GPEnsemble(rules, device="cuda")
            overlapped.reset([f"S{i}" for i in range(n_symbols)])
            row.update(cuda_us=_bar_close_us(fast, feats),
                       cuda_overlapped_loop_us=_loop_time_us(overlapped, feats),
                       cuda_plain_us=_bar_close_us(plain, feats), auto=auto.device,
                       auto_cpu_us=cal.get("cpu_us"), auto_cuda_us=cal.get("cuda_us"),
                       codes_agree=cal.get("codes_agree"))
        out.append(row)
        print(f"    GP {n_rules} rules x {n_symbols} symbols: {row}", file=sys.stderr)
    return out


def launch_capacity(groups: list[OptionGroupConfig], gpu: str, name: str
                    ) -> list[dict[str, Any]]:
    """The pricer alone, no engine: median launch -> results seen (µs) of one batch of the
    groups, and batches per second with k launches kept in flight (the GPU's ceiling)."""

    from engine.options.group import AllWarm, build_group
    from gpu.options.batch import BatchPricer

    grps = [build_group(c, "cpu", False, AllWarm()) for c in groups]
    rows = [g.pricer.params for g in grps]
    for r in rows:
        r[:, 0] = 0.97 * r[:, 1].mean()  # spot near the strikes
    key = tuple(range(len(rows)))
    rounds = 240 if gpu == "cuda" else 12  # the CPU twin of 10,000 options is slow
    out = []
    for k in (1, 2, 3, 4):
        pricer = BatchPricer([len(r) for r in rows], grps[0].pricer.grid, gpu, k)
        lat = []
        t0 = time.perf_counter()
        for _ in range(rounds // k):
            starts = []
            for slot in range(k):
                pricer.launch(slot, rows, key)
                starts.append(time.perf_counter_ns())
            for slot in range(k):
                while not pricer.done(slot):
                    pass
                lat.append(time.perf_counter_ns() - starts[slot])
                pricer.results(slot)
        wall = time.perf_counter() - t0
        out.append({"case": name, "in_flight": k, "options": sum(len(r) for r in rows),
                    "launch_to_seen_us_p50": float(np.median(lat) / 1e3),
                    "batches_per_s": (rounds // k) * k / wall, "prebound": pricer.prebound})
        print(f"    launch capacity {out[-1]}", file=sys.stderr)
    return out


def gpu_name() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


class Row(NamedTuple):
    """One replay of the table: its workload, its option groups and how they are priced."""

    name: str
    workload: str
    factory: functools.partial[Any]
    groups: list[OptionGroupConfig]
    device: str = "cpu"
    dispatch: str = "inline"
    messages: str = "group"
    prebind: bool = False
    #: environment of the row's engine and worker (launch slots, batching, event query)
    env: dict[str, str] = {}
    #: ticks per second the feed is paced at (0: as fast as the engine takes them)
    rate: float = 0.0
    #: messages the engine takes from its socket per batch, at most (0: the default)
    receive_batch: int = 0
    #: the groups repriced on the data's clock, every this many ms of data (0: per tick)
    every_ms: float = 0.0
    #: trades per feed frame (-1: the default; 0: one message per tick, as with groups)
    frame_ticks: int = -1


#: the worker's spots from the engine's hot loop on every tick (OPTION_TAP_EVERY=0; the
#: default takes them from validation)
HOT_LOOP = {"OPTION_TAP_EVERY": "0"}
#: the lanes kernel under a 128-register cap (GPU_FD_MAX_REGISTERS; the default: no cap)
CAP_128 = {"GPU_FD_MAX_REGISTERS": "128"}


def _gpu_count() -> int:
    from numba import cuda
    return len(cuda.gpus)


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="a small synthetic market, the CPU twin in place of CUDA")
    ap.add_argument("--transport", default="ipc")
    ap.add_argument("--config", default=str(ROOT / "examples" / "spy_options.toml"))
    ap.add_argument("--big-ticks", type=int, default=1_000_000,
                    help="ticks of the 10 x 1,000 synthetic feed (10 symbols)")
    ap.add_argument("--paced-ticks", type=int, default=100_000,
                    help="ticks of the paced 10 x 1,000 rows (at 1x: 10 s of data)")
    ap.add_argument("--skip", default="", help="row names to leave out, separated by semicolons")
    ap.add_argument("--only", default="",
                    help="keep only rows whose name contains one of these (semicolons)")
    ap.add_argument("--part", choices=("all", "one", "ten"), default="all",
                    help="one: only the single-group (SPY) rows; ten: only the 10 x 1,000 "
                         "rows (full speed and paced); the GP table and capacity either way")
    ap.add_argument("--exact", action="store_true",
                    help="--only names whole rows (the name with {gpu} as 'cuda' or 'cpu')")
    ap.add_argument("--no-gp", action="store_true", help="leave out the GP bar-close table")
    ap.add_argument("--no-capacity", action="store_true",
                    help="leave out the pricer-alone launch capacity")
    ap.add_argument("--placement", choices=("os", "cores", "both"), default="os",
                    help="os: the scheduler places the processes; cores: engine, feed and "
                         "worker pinned to different physical cores; both: every row twice")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of every row (interleaved rounds; medians reported)")
    ap.add_argument("--grid", default="default",
                    help="FD grid of the 10 x 1,000 groups (gpu.options.engines.GRIDS; before "
                         "2026-11-25's goal-3 run: seed)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--pool", type=Path, nargs="+", default=None, metavar="JSON",
                    help="run nothing: pool the rounds of these earlier --json files per row "
                         "(ratio to the same round's replay without options; medians, ranges)")
    return ap.parse_args()


def _workloads(args: argparse.Namespace) -> tuple[Row, Row]:
    """(the single-group workload, the 10 x 1,000 one) as rows without groups."""
    spy = data_dir() / "lean_ticks_2013-10" / "equity" / "usa" / "tick" / "spy"
    if args.quick or not spy.is_dir():
        factory: functools.partial[Any] = functools.partial(
            SyntheticMarket, n_symbols=3, n_ticks=20_000, seed=5, tick_rate=50.0)
        group = OptionGroupConfig(underlying="SYN000",
                                  strikes=tuple(np.geomspace(10, 300, 17).tolist()),
                                  expiries=(30, 60, 90), style="american", vol=0.15,
                                  rate=0.001, grid="seed")
        workload = "synthetic 20,000 ticks x 3 symbols (quick)"
    else:
        factory = functools.partial(open_sources, [str(spy)], kinds=("trade",))
        group = load_config(args.config).options[0]
        workload = "LEAN SPY trades, 2013-10 (5 days)"
    big_factory = functools.partial(SyntheticMarket, n_symbols=10, seed=21, tick_rate=1000.0,
                                    n_ticks=20_000 if args.quick else args.big_ticks)
    big_groups = [
        OptionGroupConfig(underlying=f"SYN{i:03d}",
                          strikes=tuple(np.geomspace(5, 400, 50).tolist()),
                          expiries=(7, 14, 30, 60, 90, 120, 180, 270, 365, 730),
                          style="american", vol=0.25, rate=0.02, grid=args.grid)
        for i in range(10)]
    return (Row(workload, workload, factory, [group]),
            Row("10 synthetic", "10 synthetic", big_factory, big_groups))


def plan(one: Row, big: Row, gpu: str, paced_ticks: int = 100_000, n_gpus: int = 1
         ) -> list[Row]:
    """The table's rows: the default configuration on both workloads, beside the settings
    a claim of the README compares it with (benchmarks/README.md); then the 10 x 1,000 feed
    paced at its own data rate (1x: data time runs as wall time, as a
    live feed arrives) and at ten times it. With `n_gpus` > 1 the 10 x 1,000 replay also
    runs with its groups split over that many GPU workers (OPTION_WORKER_GPUS)."""
    g1, wl, fac = one.groups, one.workload, one.factory
    gb, bwl, bfac = big.groups, big.workload, big.factory
    keywords = {**big.factory.keywords, "n_ticks": paced_ticks}
    pfac = functools.partial(big.factory.func, *big.factory.args, **keywords)
    data_rate = keywords["n_symbols"] * keywords["tick_rate"]  # ticks per data second
    paced = [(f"{x}x", x * data_rate) for x in (1, 10)]
    return [
        Row("no group", wl, fac, []),
        Row("CPU group", wl, fac, g1, "cpu", "inline", "option"),
        Row(f"{gpu} inline, group msgs", wl, fac, g1, gpu, "inline", "group"),
        Row(f"{gpu} process, default worker", wl, fac, g1, gpu, "process", "group", True, {}),
        Row(f"{gpu} process, default worker, spots from the hot loop", wl, fac, g1,
            gpu, "process", "group", True, HOT_LOOP),
        *(Row(f"{gpu} process, default worker, spots from validation every {k}", wl, fac, g1,
              gpu, "process", "group", True, {"OPTION_TAP_EVERY": str(k)}) for k in (4, 16)),
        *(Row(f"{gpu} process, default worker, launches spaced {f}", wl, fac, g1, gpu,
              "process", "group", True, {"OPTION_WORKER_SPACING": f}) for f in ("0.5", "0")),
        Row("10x1,000: no group", bwl, bfac, []),
        Row("10x1,000: no group, one message per tick (as with groups)", bwl, bfac, [],
            frame_ticks=0),
        Row(f"10x1,000: {gpu} process, default worker (2 in flight per group, no batching)",
            bwl, bfac, gb, gpu, "process", "group", True, {}),
        *([Row(f"10x1,000: {gpu} process, default worker, {n_gpus} GPUs", bwl, bfac, gb, gpu,
               "process", "group", True, {"OPTION_WORKER_GPUS": str(n_gpus)})]
          if n_gpus > 1 else []),
        Row(f"10x1,000: {gpu} process, default worker, lanes capped at 128 registers", bwl,
            bfac, gb, gpu, "process", "group", True, CAP_128),
        *(Row(f"10x1,000: {gpu} process, default worker, receive batch {k}", bwl, bfac, gb,
              gpu, "process", "group", True, receive_batch=k) for k in (2048, 1024, 512)),
        Row(f"10x1,000: {gpu} process, one launch for all groups", bwl, bfac, gb, gpu,
            "process", "group", True, {"OPTION_WORKER_BATCH": "1"}),
        Row(f"10x1,000: {gpu} process, default worker, spots from the hot loop", bwl, bfac,
            gb, gpu, "process", "group", True, HOT_LOOP),
        Row(f"10x1,000: {gpu} clocked, every 10 ms of data (one launch a boundary)", bwl,
            bfac, gb, gpu, "inline", "group", True, every_ms=10.0),
        *(r for speed, rate in paced for r in (
            Row(f"10x1,000 paced {speed}: no group", f"10 synthetic paced {speed}", pfac, [],
                rate=rate),
            Row(f"10x1,000 paced {speed}: {gpu} process, default worker",
                f"10 synthetic paced {speed}", pfac, gb, gpu, "process", "group", True, {},
                rate=rate),
            Row(f"10x1,000 paced {speed}: {gpu} process, default worker, spots from the hot "
                "loop", f"10 synthetic paced {speed}", pfac, gb, gpu, "process", "group", True,
                HOT_LOOP, rate=rate),
            Row(f"10x1,000 paced {speed}: {gpu} process, 1 launch in flight per group",
                f"10 synthetic paced {speed}", pfac, gb, gpu, "process", "group", True,
                {"OPTION_WORKER_SLOTS": "1"}, rate=rate))),
    ]


def pinned(rows: list[Row]) -> list[Row]:
    """Each row again with the engine, the feed and the option worker pinned to CPUs of
    different physical cores (engine.affinity): the engine two (its zmq I/O thread runs
    beside it), the feed and the worker one each. The ratio is then to the pinned
    replay without options."""
    from engine.affinity import ENGINE_ENV, FEED_ENV, WORKER_ENV, distinct_cores

    cpus = distinct_cores(4)
    if len(cpus) < 4:
        raise SystemExit(f"--placement cores needs 4 physical cores, this host has {len(cpus)}")
    env = {ENGINE_ENV: f"{cpus[0]},{cpus[1]}", FEED_ENV: str(cpus[2]),
           WORKER_ENV: str(cpus[3])}
    return [r._replace(name=f"{r.name} [pinned]", workload=f"{r.workload} [pinned]",
                       env={**r.env, **env}) for r in rows]


def _one(r: Row, args: argparse.Namespace) -> dict[str, Any]:
    from engine.affinity import ENGINE_ENV, pin_engine

    print(f"... {r.name}", file=sys.stderr, flush=True)
    before = os.sched_getaffinity(0)
    with scoped_env(r.env):  # the worker process inherits them
        try:
            if ENGINE_ENV in r.env:
                pin_engine()
            row = run_row(r.name, r.factory, r.groups, r.device, r.dispatch, r.messages,
                          args.transport, r.prebind, r.rate, r.receive_batch, r.every_ms,
                          r.frame_ticks)
        finally:
            os.sched_setaffinity(0, before)
    row["workload"], row["env"] = r.workload, dict(r.env)
    print(f"    {row['ticks_per_second']:,.0f} ticks/s, repricings "
          f"{row.get('repricings', '-')}, p50 {row.get('latency_us_p50')}", file=sys.stderr)
    return row


def run_plan(rows: list[Row], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every kept row `--repeat` times, rounds interleaved (a slow moment of the machine
    then hits every row alike); each row reports its run of median ticks/s, with all
    runs' ticks/s and repricings, and its ratio to the no-group row's median run."""
    skip = {s.strip() for s in args.skip.split(";") if s.strip()}
    only = [s.strip() for s in args.only.split(";") if s.strip()]
    kept = [r for r in rows if r.name.removesuffix(" [pinned]") not in skip
            and not (only and r.groups and not any(
                o == r.name.removesuffix(" [pinned]") if args.exact else o in r.name
                for o in only))]
    # a replay without options only for workloads that still have a row to compare
    wanted = {r.workload for r in kept if r.groups}
    kept = [r for r in kept if r.groups or r.workload in wanted or not only]
    runs: dict[str, list[dict[str, Any]]] = {r.name: [] for r in kept}
    for _ in range(max(1, args.repeat)):
        for r in kept:
            runs[r.name].append(_one(r, args))
    out: list[dict[str, Any]] = []
    base: dict[str, float] = {}
    for r in kept:
        rs = sorted(runs[r.name], key=lambda x: x["ticks_per_second"])
        row = dict(rs[(len(rs) - 1) // 2])  # the median run (the lower one of two)
        row["ticks_per_second_runs"] = [x["ticks_per_second"] for x in runs[r.name]]
        row["repricings_runs"] = [x.get("repricings") for x in runs[r.name]]
        row["engine_cpu_us_per_tick_runs"] = [x["engine_cpu_us_per_tick"]
                                              for x in runs[r.name]]
        if not r.groups:
            base[r.workload] = row["ticks_per_second"]
        row["ratio_to_no_group"] = (row["ticks_per_second"] / base[r.workload]
                                    if r.workload in base else None)
        out.append(row)
    return out


def _f(x: Any, fmt: str) -> str:
    return "–" if x is None else format(x, fmt)


def print_tables(rows: list[dict[str, Any]], gp_rows: list[dict[str, Any]],
                 big_tick_gap: dict[str, float], head: str) -> None:
    print(f"\n{head}")
    print("| run | ticks/s | ratio | repricings | tick→values p50 µs | p99 µs | "
          "max repricing gap while ticking (data ms) | longest a newer spot waited (data ms) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['row']} | {r['ticks_per_second']:,.0f} | "
              f"{_f(r['ratio_to_no_group'], '.2f')} | {_f(r.get('repricings'), ',')} | "
              f"{_f(r.get('latency_us_p50'), ',.0f')} | {_f(r.get('latency_us_p99'), ',.0f')} | "
              f"{_f(r.get('max_repricing_gap_ms'), ',.1f')} | "
              f"{_f(r.get('max_newer_spot_wait_ms'), ',.1f')} |")
    print(f"10x1,000 feed: largest gap between ticks of one underlying "
          f"{max(big_tick_gap.values()):.1f} ms of data time (the floor of the repricing gap)")
    if not gp_rows:
        return
    print("\n| GP bar close | CPU µs | CUDA µs | CUDA µs, numba launch | --device auto picks "
          "| strategy on the CPU, loop µs | CUDA overlapped, loop µs |")
    print("|---|---:|---:|---:|---|---:|---:|")
    for g in gp_rows:
        print(f"| {g['rules']} rules x {g['symbols']} symbols | {_f(g['cpu_us'], ',.0f')} | "
              f"{_f(g['cuda_us'], ',.0f')} | {_f(g.get('cuda_plain_us'), ',.0f')} | "
              f"{g['auto']} | {_f(g.get('cpu_loop_us'), ',.1f')} | "
              f"{_f(g.get('cuda_overlapped_loop_us'), ',.1f')} |")


def main() -> None:
    args = _args()
    if args.pool:
        from benchmarks.pool_rounds import pooled_table
        print(pooled_table(args.pool))
        return
    gpu = "cuda" if cuda_present() and not cuda_simulated() and not args.quick else "cpu"
    stamp = datetime.now(UTC)
    node = platform.node()
    json_path = args.json or ROOT / "benchmarks" / "results" / (
        f"between_ticks_{node}_{stamp:%Y-%m-%d}{'_quick' if args.quick else ''}.json")
    one, big = _workloads(args)
    planned = plan(one, big, gpu, args.paced_ticks, _gpu_count() if gpu == "cuda" else 1)
    if args.part != "all":  # the 10 x 1,000 rows' names start with it, none of the others
        planned = [r for r in planned if r.name.startswith("10x1,000") == (args.part == "ten")]
    if args.placement != "os":
        planned = ([] if args.placement == "cores" else planned) + pinned(planned)
    rows = run_plan(planned, args)
    big_tick_gap = _tick_gaps_ms(_tick_times(big.factory))
    capacity = [] if args.no_capacity else (launch_capacity(one.groups, gpu, "one group")
                                            + launch_capacity(big.groups, gpu, "10 x 1,000"))
    gp_rows = [] if args.no_gp else gp_bar_close(
        [(1, 128), (1, 1000), (50, 128), (50, 1000)], gpu)
    head = (f"workload: {one.workload}; transport {args.transport}; machine {node} "
            f"({os.cpu_count()} cores, GPU {gpu_name()})")
    print_tables(rows, gp_rows, big_tick_gap, head)
    for c in capacity:
        print(f"launch capacity, {c['case']}: {c['in_flight']} in flight: "
              f"{c['batches_per_s']:,.0f} batches/s, launch -> seen p50 "
              f"{c['launch_to_seen_us_p50']:,.0f} µs")
    meta = {"machine": node, "cpu_count": os.cpu_count(), "gpu": gpu_name(),
            "python": platform.python_version(), "date": stamp.isoformat(),
            "transport": args.transport, "workload": one.workload, "quick": args.quick,
            "strategy": "sma-cross(10,50)", "big_tick_gap_ms": big_tick_gap,
            "note": "on the GPU the set of spots repriced depends on timing (coalescing)"}
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps({"meta": meta, "rows": rows, "launch_capacity": capacity,
                                     "gp_bar_close": gp_rows},
                                    indent=2, default=float))
    _plot(rows, json_path.with_suffix(".png"), f"{one.workload} / {node}")
    print(f"wrote {json_path} and {json_path.with_suffix('.png')}")


def _plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(12, 4.5))
    names = [r["row"] for r in rows]
    y = np.arange(len(rows))
    ax[0].barh(y, [r["ticks_per_second"] for r in rows], color="tab:blue")
    ax[0].set_yticks(y, names, fontsize=8)
    ax[0].invert_yaxis()
    ax[0].set_xlabel("ticks / s")
    lat = [r.get("latency_us_p50") or 0.0 for r in rows]
    ax[1].barh(y, lat, color="tab:orange", label="p50")
    ax[1].barh(y, [r.get("latency_us_p99") or 0.0 for r in rows], color="none",
               edgecolor="black", label="p99")
    ax[1].set_yticks(y, [""] * len(rows))
    ax[1].invert_yaxis()
    ax[1].set_xscale("symlog")
    ax[1].set_xlabel("tick → values µs")
    ax[1].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
