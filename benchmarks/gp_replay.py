"""The GP replay's bar closes: the CPU twin, CUDA waiting, and CUDA overlapped with the next bars.

An evolved strategy (`evolve` on the S&P 500 daily bars, 128 stocks x 768 days by default)
is replayed over its training window through the whole engine (`replay --strategy
best.json --window train`: real sockets, the GP paper's signal-close fills), its best rule
and its hall-of-fame ensemble, each way, in rounds that interleave the ways:

- `cpu`: the CPU twin (a bar close evaluates at once);
- `cpu, on the engine's thread`: the CPU twin with bar closes of up to 256 decisions
  evaluated on the calling thread instead of numba's thread pool
  (GP_CPU_SERIAL_MAX_DECISIONS=256; the default is the pool);
- `cpu, overlapped`: the CPU twin with overlapped decisions forced (`"always"`): what the
  overlapping itself costs the engine, on any machine;
- `cuda, waiting`: a launch per bar close that the close awaits (`overlap_decisions =
  "never"`, the engine before overlapped decisions);
- `cuda, overlapped`: the launch starts at the close and the engine applies the next
  day's bars meanwhile (`overlap_decisions = "auto"`, the default for CUDA);
- `auto`: `--device auto` (the backend whose bar close measured faster at this size).

`--transports` replays each way with the feed as a thread of the engine's process
(`inproc`), a process of its own (`ipc`) or the default (`auto`: ipc for a strategy on the
GPU, else inproc); each row counts the receive batches the engine took.

Per replay it records the wall time and the event loop's time in bar closes: every
`Engine._close_bars` and `Engine.settle` call timed from entry to return (a waiting
close's round trip; an overlapped close's start plus whatever of the wait the next bars did
not hide), per bar event. The issue's goal: CUDA costs the bar close no more than the CPU
twin at 128 symbols. Every way must end with the same money per symbol.

    python benchmarks/gp_replay.py [--quick] [--rounds 5] [--transports inproc,auto]
                                   [--ways "cpu;auto"] [--json PATH] [--png PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import run_engine  # noqa: E402
from benchmarks.common import device_or_none, log, write_json  # noqa: E402
from engine.trading.core import Engine  # noqa: E402
from feeds.datadir import data_dir  # noqa: E402
from feeds.transport import Subscriber  # noqa: E402
from gpu.gp.decider import SERIAL_ENV  # noqa: E402

WAYS = [("cpu", "cpu", "never"), ("cpu, on the engine's thread", "cpu", "never"),
        ("cpu, overlapped", "cpu", "always"), ("auto", "auto", "auto"),
        ("cuda, waiting", "cuda", "never"), ("cuda, overlapped", "cuda", "auto")]
WAY_NAMES = {w[0] for w in WAYS}


class ReceiveCounter:
    """How many receive batches the engine took (`Subscriber.lazy_batch` calls) in the
    benchmark's process: a replay that chases its feed in small batches pays a receive
    through the event loop for each."""

    def __init__(self) -> None:
        self.batches = 0
        self._saved: Any = None

    def __enter__(self) -> ReceiveCounter:
        self._saved = Subscriber.lazy_batch
        original, counter = self._saved, self

        async def counted(sub: Subscriber) -> Any:
            counter.batches += 1
            return await original(sub)

        Subscriber.lazy_batch = counted  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        Subscriber.lazy_batch = self._saved  # type: ignore[method-assign]


class BarCloseClock:
    """Wall time the engine spends in bar-close calls (`_close_bars`, `settle`), summed,
    installed around the Engine class for the benchmark's process only."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._inside = False
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> BarCloseClock:
        for name in ("_close_bars", "settle"):
            original = getattr(Engine, name)
            self._saved[name] = original
            setattr(Engine, name, self._timed(original))
        return self

    def __exit__(self, *exc: object) -> None:
        for name, original in self._saved.items():
            setattr(Engine, name, original)

    def _timed(self, original: Callable[..., Any]) -> Callable[..., Any]:
        clock = self

        async def timed(engine: Engine, *args: Any, **kw: Any) -> Any:
            if clock._inside:  # `_close_bars` settles first: count that time once
                return await original(engine, *args, **kw)
            clock._inside = True
            t0 = time.perf_counter()
            try:
                return await original(engine, *args, **kw)
            finally:
                clock.seconds += time.perf_counter() - t0
                clock._inside = False
        return timed


def evolve(tmp: Path, args: argparse.Namespace, device: str) -> Path:
    best = tmp / "best.json"
    log(f"evolving {args.stocks} stocks x {args.days} days, population {args.population} "
        f"x {args.generations} generations on {device} ...")
    rc = run_engine.main([
        "evolve", "--data", str(args.data), "--stocks", str(args.stocks),
        "--train-days", str(args.days), "--test-days", str(args.test_days),
        "--population", str(args.population), "--generations", str(args.generations),
        "--hall-of-fame", str(args.hall_of_fame), "--seed", "1", "--device", device,
        "--quiet", "--out", str(best), "--json", str(tmp / "evolve.json")])
    if rc != 0:
        raise SystemExit(f"evolve failed ({rc})")
    return best


@contextlib.contextmanager
def serial_up_to(max_decisions: int | None) -> Iterator[None]:
    """With a number, CPU bar closes of up to that many decisions skip the thread pool
    (GP_CPU_SERIAL_MAX_DECISIONS, read when the strategy is built)."""
    saved = os.environ.get(SERIAL_ENV)
    if max_decisions is not None:
        os.environ[SERIAL_ENV] = str(max_decisions)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(SERIAL_ENV, None)
        else:
            os.environ[SERIAL_ENV] = saved


def replay_once(spec: str, device: str, overlap: str, tmp: Path, tag: str,
                serial: int | None = None, profile: Path | None = None,
                transport: str = "inproc") -> dict[str, Any]:
    config = tmp / f"{overlap}-{transport}.toml"
    config.write_text(f'overlap_decisions = "{overlap}"\ntransport = "{transport}"\n')
    out = tmp / tag
    argv = ["replay", "--strategy", spec, "--window", "train", "--device", device,
            "--config", str(config), "--out", str(out)]
    with (BarCloseClock() as clock, ReceiveCounter() as received,
          contextlib.redirect_stdout(io.StringIO()), serial_up_to(serial)):
        if profile is None:
            rc = run_engine.main(argv)
        else:
            prof = cProfile.Profile()
            rc = prof.runcall(run_engine.main, argv)
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
            with profile.open("a") as f:
                f.write(f"\n===== {tag}\n{text.getvalue()}")
    if rc != 0:
        raise SystemExit(f"replay {tag} failed ({rc})")
    rep = json.loads((out / "report.json").read_text())
    return {"wall_s": rep["wall_seconds"], "bar_events": rep["bar_events"],
            "overlapped_bar_events": rep["overlapped_bar_events"],
            "bar_close_us": clock.seconds / max(rep["bar_events"], 1) * 1e6,
            "receive_batches": received.batches, "transport": rep["transport"],
            "strategy_device": rep.get("strategy_device"),
            "fills": rep["fills"],
            "per_symbol": {s: v["final_equity"] for s, v in rep["per_symbol"].items()}}


def run_rounds(args: argparse.Namespace, tmp: Path, gpu: bool,
               ways: list[tuple[str, str, str]], transports: list[str]
               ) -> dict[str, list[dict[str, Any]]]:
    """Evolve the strategy, then replay its best rule and its ensemble every way over every
    transport, in rounds that interleave the ways (round 0 compiles and fills caches: not
    kept); the rows by name."""
    rows: dict[str, list[dict[str, Any]]] = {}
    best = evolve(tmp, args, "cuda" if gpu else "cpu")
    for strategy, spec in (("best rule", str(best)),
                           (f"ensemble of {args.hall_of_fame}", f"{best}#ensemble")):
        for r in range(args.rounds + 1):
            for transport in transports:
                for name, device, overlap in ways:
                    got = replay_once(
                        spec, device, overlap, tmp,
                        f"r{r}-{device}-{overlap}-{'thread' in name}-{transport}",
                        serial=256 if "thread" in name else None, transport=transport)
                    way = name if transports == ["auto"] else f"{name} [{transport}]"
                    if r:
                        rows.setdefault(f"{strategy}: {way}", []).append(got)
                    log(f"  {strategy}, round {r}, {way}: wall {got['wall_s']:.3f} s, "
                        f"bar close {got['bar_close_us']:.1f} us, overlapped "
                        f"{got['overlapped_bar_events']}/{got['bar_events']}, "
                        f"{got['receive_batches']} receive batches")
        if args.profile:
            for name, device, overlap in ways:
                replay_once(spec, device, overlap, tmp, f"{strategy}: {name}",
                            serial=256 if "thread" in name else None, profile=args.profile)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--data", type=Path, default=data_dir() / "sp500_5yr_daily")
    ap.add_argument("--quick", action="store_true", help="6 stocks x 120 days, 2 rounds")
    ap.add_argument("--stocks", type=int, default=128)
    ap.add_argument("--days", type=int, default=768)
    ap.add_argument("--test-days", type=int, default=256)
    ap.add_argument("--population", type=int, default=2000)
    ap.add_argument("--generations", type=int, default=3)
    ap.add_argument("--hall-of-fame", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--png", type=Path)
    ap.add_argument("--replot", type=Path, metavar="JSON",
                    help="draw --png from an earlier run's --json and exit")
    ap.add_argument("--profile", type=Path,
                    help="after the rounds, one more replay per way under cProfile: the top "
                         "functions by own time appended to this text file")
    ap.add_argument("--ways", default="",
                    help="keep only these ways (semicolons): a way's full name keeps it alone, "
                         "other text every way whose name contains it")
    ap.add_argument("--transports", default="auto",
                    help="the replay's feed transports, commas (inproc: a thread of the "
                         "engine's process; ipc: a process of its own)")
    args = ap.parse_args()
    if args.replot is not None:
        rows_of = json.loads(args.replot.read_text())["runs"]
        plot(summarise(rows_of), args.png or args.replot.with_suffix(".png"))
        return
    if args.quick:
        args.stocks, args.days, args.test_days = 6, 120, 20
        args.population, args.generations, args.hall_of_fame, args.rounds = 60, 1, 5, 2
    gpu = device_or_none("cuda", "the CUDA rows")
    keys = [k for k in args.ways.split(";") if k]
    exact = [w for w in WAYS if w[0] in keys]  # a way named in full keeps only itself
    ways = [w for w in WAYS if (w[1] == "cpu" or gpu) and (
        not keys or w in exact or any(k in w[0] for k in keys if k not in WAY_NAMES))]
    transports = [t for t in args.transports.split(",") if t]
    with tempfile.TemporaryDirectory() as td:
        rows = run_rounds(args, Path(td), gpu is not None, ways, transports)
    table = summarise(rows)
    print(f"{'row':56} {'wall s':>8} {'bar close us':>13} {'range':>15} {'overlapped':>11} "
          f"{'receives':>9} {'ran as':>11} same money")
    for t in table:
        lo, hi = t["bar_close_us_range"]
        print(f"{t['row']:56} {t['wall_s_median']:8.3f} {t['bar_close_us_median']:13.1f} "
              f"{lo:7.1f}-{hi:<7.1f} {t['overlapped_bar_events']:>5}/{t['bar_events']:<5} "
              f"{t['receive_batches_median']:>9.0f} {t['ran_as']:>11} {t['same_money_as_cpu']}")
    from gpu.gp.decider import BREAK_EVEN
    for cal in BREAK_EVEN.values():  # what --device auto measured (one bar close each)
        print(f"--device auto at {cal['n_programs']} rules x {cal['n_symbols']} symbols: "
              f"cpu {cal['cpu_us']:.1f} us, cuda {cal['cuda_us']:.1f} us "
              f"(gap {cal.get('gap_ms', 0):.1f} ms) -> {cal['choice']}")
    result = {"benchmark": "gp_replay", "machine": platform.node(),
              "calibrations": list(BREAK_EVEN.values()),
              "gpu": _gpu_name() if gpu else None,
              "date": datetime.now(UTC).isoformat(timespec="seconds"),
              "stocks": args.stocks, "days": args.days, "population": args.population,
              "generations": args.generations, "hall_of_fame": args.hall_of_fame,
              "rows": table, "runs": rows}
    if args.json:
        write_json(args.json, result)
    if args.png:
        plot(table, args.png)
    if not all(t["same_money_as_cpu"] for t in table):
        raise SystemExit("the ways ended with different money: see the table")


def summarise(rows: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A row per way: medians and ranges over its rounds, and whether every round ended
    with the money of the strategy's first way."""
    table = []
    for key, runs in rows.items():
        money = [run["per_symbol"] for run in runs]
        first_way = next(k for k in rows if k.split(":")[0] == key.split(":")[0])
        same = all(m == rows[first_way][0]["per_symbol"] for m in money)
        table.append({"row": key, "rounds": len(runs),
                      "wall_s_median": statistics.median(r["wall_s"] for r in runs),
                      "bar_close_us_median": statistics.median(r["bar_close_us"] for r in runs),
                      "bar_close_us_range": [min(r["bar_close_us"] for r in runs),
                                             max(r["bar_close_us"] for r in runs)],
                      "wall_s_range": [min(r["wall_s"] for r in runs),
                                       max(r["wall_s"] for r in runs)],
                      "overlapped_bar_events": runs[0]["overlapped_bar_events"],
                      "bar_events": runs[0]["bar_events"], "fills": runs[0]["fills"],
                      "receive_batches_median": statistics.median(
                          r["receive_batches"] for r in runs),
                      "ran_as": f"{runs[0]['strategy_device']}/{runs[0]['transport']}",
                      "same_money_as_cpu": same})
    return table


def _gpu_name() -> str:
    from benchmarks.common import gpu_name
    from gpu.device import cuda_simulated
    return "numba CUDA simulator" if cuda_simulated() else gpu_name()


def plot(table: list[dict[str, Any]], png: Path) -> None:
    """Two panels per row: the replay's wall time and the event loop's time per bar close
    (medians, ranges over rounds)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 0.45 * len(table) + 1.8), sharey=True)
    names = [t["row"] for t in table]
    for ax, key, label in (
            (axes[0], "wall_s", "replay wall time, s"),
            (axes[1], "bar_close_us", "event-loop time per bar close, µs")):
        med = [t[f"{key}_median"] for t in table]
        lo = [t.get(f"{key}_range", [m, m])[0] for m, t in zip(med, table, strict=True)]
        hi = [t.get(f"{key}_range", [m, m])[1] for m, t in zip(med, table, strict=True)]
        err = [[m - a for m, a in zip(med, lo, strict=True)],
               [b - m for m, b in zip(med, hi, strict=True)]]
        colors = ["tab:orange" if "cpu/" in t.get("ran_as", "") else "tab:blue" for t in table]
        ax.barh(names, med, xerr=err, color=colors)
        ax.set_xlabel(f"{label} (median, range over rounds)")
    axes[0].invert_yaxis()
    fig.suptitle("GP replay over the training window, per way and feed transport "
                 "(orange: ran on the CPU, blue: on CUDA)")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    log(f"wrote {png}")


if __name__ == "__main__":
    main()
