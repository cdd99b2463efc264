"""GPU work between ticks: replay throughput with option groups, before and after each change.

Rows (the same replay over ipc, sma-cross strategy, one process per row's engine):
- no option group;
- the group on the CPU twin (in-process, worker thread);
- the group on CUDA dispatched in-process ("inline"), one OptionValue per contract (before);
- inline, one OptionGroupValues message per repricing (change a: group messages);
- in a GPU worker process fed through shared memory, per-contract messages (change b);
- worker process + group messages (after: both);
and the 10 x 1,000 case: ten groups of 1,000 American options on ten synthetic underlyings
that tick about every millisecond of data time, without and with the groups. For every row:
ticks/s, ratio to the no-group row, repricings, tick -> values latency (p50, p99; from the
tick's arrival in the engine to the results in the engine's hands), and the largest
data-time gap between consecutive repricings of a group (from the published messages).

    python benchmarks/between_ticks.py [--quick] [--json PATH]

Default workload: the 1.89 M SPY trades of lean_ticks_2013-10 with examples/spy_options.toml
(102 American options). --quick: a small synthetic market and the CPU twin in place of
CUDA, to check the script anywhere. Prints a table, writes JSON and a PNG.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from engine.config import EngineConfig, load_config  # noqa: E402
from engine.option_book import OptionBook, OptionGroupConfig  # noqa: E402
from engine.replay import replay  # noqa: E402
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


def _tick_gaps_ms(ticks: dict[str, np.ndarray]) -> dict[str, float]:
    """Largest data-time gap between consecutive ticks of each symbol (the floor)."""
    return {s: float(np.diff(t).max() / 1e6) if len(t) > 1 else float("nan")
            for s, t in ticks.items()}


def run_row(name: str, factory: functools.partial[Any], groups: list[OptionGroupConfig],
            device: str, dispatch: str, messages: str, transport: str,
            prebind: bool) -> dict[str, Any]:
    groups = [OptionGroupConfig(**{**{f: getattr(g, f) for f in g.__struct_fields__},
                                   "messages": messages}) for g in groups]
    book = None
    t_start = time.perf_counter()
    if groups:
        # read by the pricers (in this process, or inherited by the worker process)
        os.environ["GPU_OPTIONS_PREBIND"] = "1" if prebind else "0"
        book = OptionBook(groups, device=device, dispatch=dispatch)
    startup = time.perf_counter() - t_start
    try:
        cfg = EngineConfig(transport=transport)  # type: ignore[arg-type]
        res = replay(factory, SmaCross(), cfg, option_book=book)
        stats = res.engine.stats
        row: dict[str, Any] = {
            "row": name, "device": device if groups else None,
            "dispatch": dispatch if groups else None, "messages": messages if groups else None,
            "prebound_launch": prebind if groups and device == "cuda" else None,
            "ticks": stats.market_data, "seconds": res.wall_seconds,
            "ticks_per_second": stats.market_data / res.wall_seconds,
            "option_values": stats.option_values, "startup_seconds": startup,
        }
        if book is not None:
            s = book.summary()
            s.pop("last")
            row.update({k: s[k] for k in ("groups", "options", "repricings", "coalesced_ticks",
                                          "latency_us_p50", "latency_us_p99",
                                          "latency_us_max")})
            gaps = _gaps_ms(res.engine.option_values, _tick_times(factory))
            row["max_repricing_gap_ms"] = max(gaps.values()) if gaps else None
            row["gap_window_messages"] = len(res.engine.option_values)
    finally:
        if book is not None:
            book.close()
    return row


def gp_bar_close(sizes: list[tuple[int, int]], gpu: str) -> list[dict[str, Any]]:
    """A GP strategy's bar close (start, poll, result) on each backend, and auto's choice."""
    from gpu import gp_decider
    from strategies.gp.init import ramped_half_and_half
    from strategies.gp.strategy import GPEnsemble

    out = []
    for n_rules, n_symbols in sizes:
        pop = ramped_half_and_half(n_rules, np.random.default_rng(n_rules), 2, 6)
        rules = [pop.rule(i) for i in range(n_rules)]
        row: dict[str, Any] = {"rules": n_rules, "symbols": n_symbols}
        if gpu == "cuda":
            gp_decider.BREAK_EVEN.pop((n_rules, n_symbols), None)
            auto = GPEnsemble(rules, device="auto")
            auto.reset([f"S{i}" for i in range(n_symbols)])
            cal = auto._decider.calibration or {}
            row.update(cpu_us=cal.get("cpu_us"), cuda_us=cal.get("cuda_us"),
                       auto=auto.device, codes_agree=cal.get("codes_agree"))
        else:
            cpu = GPEnsemble(rules, device="cpu")
            feats = np.random.default_rng(0).normal(size=(n_symbols, 31)).astype(np.float32)
            cpu._decider._bar_close(feats)
            t0 = time.perf_counter()
            for _ in range(7):
                cpu._decider._bar_close(feats)
            row.update(cpu_us=(time.perf_counter() - t0) / 7 * 1e6, cuda_us=None, auto="cpu")
        out.append(row)
        print(f"    GP {n_rules} rules x {n_symbols} symbols: {row}", file=sys.stderr)
    return out


def gpu_name() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="a small synthetic market, the CPU twin in place of CUDA")
    ap.add_argument("--transport", default="ipc")
    ap.add_argument("--config", default=str(ROOT / "examples" / "spy_options.toml"))
    ap.add_argument("--big-ticks", type=int, default=1_000_000,
                    help="ticks of the 10 x 1,000 synthetic feed (10 symbols)")
    ap.add_argument("--skip", default="", help="row names to leave out, separated by semicolons")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    gpu = "cuda" if cuda_present() and not cuda_simulated() and not args.quick else "cpu"
    stamp = datetime.now(UTC)
    node = platform.node()
    json_path = args.json or ROOT / "benchmarks" / "results" / (
        f"between_ticks_{node}_{stamp:%Y-%m-%d}{'_quick' if args.quick else ''}.json")

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
    big_n = 20_000 if args.quick else args.big_ticks
    big_factory = functools.partial(SyntheticMarket, n_symbols=10, n_ticks=big_n, seed=21,
                                    tick_rate=1000.0)
    big_groups = [
        OptionGroupConfig(underlying=f"SYN{i:03d}",
                          strikes=tuple(np.geomspace(5, 400, 50).tolist()),
                          expiries=(7, 14, 30, 60, 90, 120, 180, 270, 365, 730),
                          style="american", vol=0.25, rate=0.02, grid="seed")
        for i in range(10)]
    g1, wl, fac = [group], workload, factory
    plan: list[tuple[str, str, functools.partial[Any], list[OptionGroupConfig], str, str,
                     str, bool]] = [
        ("no group", wl, fac, [], "cpu", "inline", "group", False),
        ("CPU group", wl, fac, g1, "cpu", "inline", "option", False),
        (f"{gpu} inline, per-contract (before)", wl, fac, g1, gpu, "inline", "option", False),
        (f"{gpu} inline, group msgs", wl, fac, g1, gpu, "inline", "group", False),
        (f"{gpu} inline, per-contract, pre-bound", wl, fac, g1, gpu, "inline", "option", True),
        (f"{gpu} process, per-contract", wl, fac, g1, gpu, "process", "option", False),
        (f"{gpu} process, group msgs", wl, fac, g1, gpu, "process", "group", False),
        (f"{gpu} process, group msgs, pre-bound (after)", wl, fac, g1, gpu, "process", "group",
         True),
        ("10x1,000: no group", "10 synthetic", big_factory, [], "cpu", "inline", "group",
         False),
        (f"10x1,000: {gpu} process, group msgs, pre-bound", "10 synthetic", big_factory,
         big_groups, gpu, "process", "group", True),
    ]
    skip = {s.strip() for s in args.skip.split(";") if s.strip()}
    rows: list[dict[str, Any]] = []
    base: dict[str, float] = {}
    for name, wl, fac, groups, device, dispatch, messages, prebind in plan:
        if name in skip:
            continue
        print(f"... {name}", file=sys.stderr, flush=True)
        row = run_row(name, fac, groups, device, dispatch, messages, args.transport, prebind)
        row["workload"] = wl
        if not groups:
            base[wl] = row["ticks_per_second"]
        row["ratio_to_no_group"] = (row["ticks_per_second"] / base[wl]) if wl in base else None
        rows.append(row)
        print(f"    {row['ticks_per_second']:,.0f} ticks/s, repricings "
              f"{row.get('repricings', '-')}, p50 {row.get('latency_us_p50')}", file=sys.stderr)
    big_tick_gap = _tick_gaps_ms(_tick_times(big_factory))
    gp_rows = gp_bar_close([(1, 128), (1, 1000), (50, 128), (50, 1000)], gpu)

    def f(x: Any, fmt: str) -> str:
        return "–" if x is None else format(x, fmt)

    print(f"\nworkload: {workload}; transport {args.transport}; machine {node} "
          f"({os.cpu_count()} cores, GPU {gpu_name()})")
    print("| run | ticks/s | ratio | repricings | tick→values p50 µs | p99 µs | "
          "max repricing gap while ticking (data ms) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['row']} | {r['ticks_per_second']:,.0f} | "
              f"{f(r['ratio_to_no_group'], '.2f')} | {f(r.get('repricings'), ',')} | "
              f"{f(r.get('latency_us_p50'), ',.0f')} | {f(r.get('latency_us_p99'), ',.0f')} | "
              f"{f(r.get('max_repricing_gap_ms'), ',.1f')} |")
    print(f"10x1,000 feed: largest gap between ticks of one underlying "
          f"{max(big_tick_gap.values()):.1f} ms of data time (the floor of the repricing gap)")
    print("\n| GP bar close | CPU µs | CUDA µs | --device auto picks |")
    print("|---|---:|---:|---|")
    for g in gp_rows:
        print(f"| {g['rules']} rules x {g['symbols']} symbols | {f(g['cpu_us'], ',.0f')} | "
              f"{f(g['cuda_us'], ',.0f')} | {g['auto']} |")
    meta = {"machine": node, "cpu_count": os.cpu_count(), "gpu": gpu_name(),
            "python": platform.python_version(), "date": stamp.isoformat(),
            "transport": args.transport, "workload": workload, "quick": args.quick,
            "strategy": "sma-cross(10,50)", "big_tick_gap_ms": big_tick_gap,
            "note": "on the GPU the set of spots repriced depends on timing (coalescing)"}
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps({"meta": meta, "rows": rows, "gp_bar_close": gp_rows},
                                    indent=2, default=float))
    _plot(rows, json_path.with_suffix(".png"), f"{workload} / {node}")
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
