"""A CPU bar close of a GP strategy: on the calling thread against numba's thread pool.

`gpu.gp.decider` evaluates small bar closes serially (`_codes_day_serial_cpu`) and large
ones with a prange over the programs (`_codes_cpu`). In the engine, bar closes are apart:
between two of them the event loop does other work (here `--gap-us` of Python busy work,
default 400 µs, about what a 128-symbol daily bar event costs besides the strategy), long
enough for the pool's threads to sleep, so each prange pays their wake-up. The script times
both at each size with the gap between calls and once back to back, and prints where the
pool starts to pay (what GP_CPU_SERIAL_MAX_DECISIONS=256 picks in the last column).

    python benchmarks/gp_cpu_decider.py [--rounds 201] [--gap-us 400] [--json PATH]
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import log, write_json  # noqa: E402

SIZES = [(1, 128), (1, 1000), (2, 128), (4, 128), (8, 128), (16, 128), (50, 128),
         (4, 1000), (16, 1000), (50, 1000)]


def _busy(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    x = 0
    while time.perf_counter() < end:
        x += 1


def main() -> None:
    import numba

    from gpu.gp.decider import cpu_serial_pays
    from gpu.gp.evaluate import _codes_cpu, _codes_day_serial_cpu
    from strategies.gp.init import ramped_half_and_half
    from strategies.gp.strategy import GPEnsemble

    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=201)
    ap.add_argument("--gap-us", type=float, default=400.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    for n_programs, n_symbols in SIZES:
        pop = ramped_half_and_half(n_programs, np.random.default_rng(n_programs), 2, 6)
        decider = GPEnsemble([pop.rule(i) for i in range(n_programs)], device="cpu")._decider
        programs, lengths = decider.programs, decider.lengths
        day = np.random.default_rng(0).normal(size=(31, n_symbols)).astype(np.float32)
        out = np.zeros((n_programs, 1, n_symbols), np.int8)
        out_serial = np.zeros((n_programs, n_symbols), np.int8)
        ways = {
            "serial": functools.partial(_codes_day_serial_cpu, programs, lengths, day,
                                        out_serial),
            "pool": functools.partial(_codes_cpu, programs, lengths, day[None], 0, 1, out),
        }
        row: dict[str, Any] = {"programs": n_programs, "symbols": n_symbols,
                               "rule_picks": "serial" if cpu_serial_pays(
                                   n_programs, n_symbols, 256) else "pool"}
        for gap in (args.gap_us, 0.0):
            samples: dict[str, list[float]] = {k: [] for k in ways}
            for f in ways.values():
                f()  # compile / warm
            for _ in range(args.rounds):
                for name, f in ways.items():  # interleaved: the same machine state for both
                    _busy(gap)
                    t0 = time.perf_counter()
                    f()
                    samples[name].append(time.perf_counter() - t0)
            tag = "apart" if gap else "back_to_back"
            for name, s in samples.items():
                row[f"{name}_{tag}_us"] = statistics.median(s) * 1e6
        if not np.array_equal(out[:, 0, :], out_serial):
            raise SystemExit(f"serial and pool codes differ at {n_programs} x {n_symbols}")
        rows.append(row)
        log(f"  {row}")
    print(f"\nnumba threads {numba.get_num_threads()}, threading layer "
          f"{numba.threading_layer()}, gap {args.gap_us:.0f} µs, {os.cpu_count()} cores")
    print("| programs x symbols | serial µs | pool µs (apart) | pool µs (back to back) | "
          "faster apart | rule picks |")
    print("|---|---:|---:|---:|---|---|")
    for r in rows:
        faster = "serial" if r["serial_apart_us"] <= r["pool_apart_us"] else "pool"
        print(f"| {r['programs']} x {r['symbols']} | {r['serial_apart_us']:.1f} | "
              f"{r['pool_apart_us']:.1f} | {r['pool_back_to_back_us']:.1f} | {faster} | "
              f"{r['rule_picks']} |")
    if args.json:
        write_json(args.json, {"benchmark": "gp_cpu_decider", "machine": platform.node(),
                               "cores": os.cpu_count(), "threads": numba.get_num_threads(),
                               "threading_layer": numba.threading_layer(),
                               "gap_us": args.gap_us,
                               "date": datetime.now(UTC).isoformat(timespec="seconds"),
                               "rows": rows})


if __name__ == "__main__":
    main()
