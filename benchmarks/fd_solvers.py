"""The FD kernel's two tridiagonal solvers side by side: PCR blocks against Thomas lanes.

`pcr`: one block per option, one thread per grid node, parallel cyclic reduction (the
kernel every option group used until now). `lanes`: one 32-thread block per option, each
lane owning consecutive rows, Thomas's sweeps carried across lanes by scans through warp
shuffles (`gpu.options.core.fd_lanes_kernel`); the same through shared memory and
barriers (as in the CUDA simulator); and the lanes kernel under register caps. For each
grid and group size the script times one launch until the host sees it finish (median of
`--repeats`, the kernels alternating in the same process) and compares each kernel's
values with the float64 CPU twin.

    python benchmarks/fd_solvers.py [--repeats 30] [--json PATH]

Prints a table and writes JSON with machine and date.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import gpu_name, log, write_json  # noqa: E402
from benchmarks.fd_occupancy import big_rows  # noqa: E402

SIZES = (102, 1_000, 10_000)


def rows_of(n: int) -> np.ndarray:
    """`n` American puts and calls over 50 strikes and 10 expiries (the 10 x 1,000 case's
    rows, cut or repeated to `n`), spot 97."""
    rows = big_rows()
    reps = -(-n // len(rows))
    return np.ascontiguousarray(np.concatenate([rows] * reps)[:n])


def compare(got: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    scale = np.maximum(np.abs(ref), 1e-2)
    return {f"{name}_max_rel": float(np.max(np.abs(got[:, i] - ref[:, i]) / scale[:, i]))
            for i, name in enumerate(("price", "delta", "gamma"))}


def main() -> None:
    from numba import cuda

    from gpu.options import core
    from gpu.options.engines import make_grid

    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--grids", default="seed,default")
    ap.add_argument("--caps", type=lambda t: [int(c) for c in t.split(",") if c],
                    default=[128, 96], help="register caps of extra lanes rows")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    table: list[dict[str, Any]] = []
    for grid_name in args.grids.split(","):
        grid = make_grid(grid_name)
        gargs = core.launch_args(grid.kernel_args())
        jit: Any = cuda.jit  # (the simulator's stub has no max_registers)
        lanes_source = core._make_fd_lanes_kernel(core.rows_per_lane(grid.price_steps),
                                                  True)
        kernels = {
            "pcr": (core.fd_price_kernel(), core.threads_per_option(grid.price_steps)),
            "lanes": (core.fd_lanes_kernel(grid.price_steps), core.LANES),
            # the lanes exchanging through shared memory and barriers (the simulator's)
            "lanes, shared memory": (core.fd_lanes_kernel(grid.price_steps, shuffle=False),
                                     core.LANES),
            # the same kernel with fewer registers: more resident blocks, maybe spills
            **{f"lanes, {cap} regs": (jit(max_registers=cap)(lanes_source), core.LANES)
               for cap in args.caps},
        }
        for n in SIZES:
            rows = rows_of(n)
            ref = np.empty((n, core.N_OUT))
            core.fd_price_batch_cpu(rows, ref, *gargs)
            d_rows = cuda.to_device(rows)
            outs = {k: cuda.device_array((n, core.N_OUT)) for k in kernels}
            for name, (kern, block) in kernels.items():  # compile and warm
                kern[n, block](d_rows, outs[name], *gargs)
            cuda.synchronize()
            times: dict[str, list[float]] = {k: [] for k in kernels}
            for _ in range(args.repeats):
                for name, (kern, block) in kernels.items():
                    t = time.perf_counter()
                    kern[n, block](d_rows, outs[name], *gargs)
                    cuda.synchronize()
                    times[name].append(time.perf_counter() - t)
            for name, (kern, block) in kernels.items():
                got = outs[name].copy_to_host()
                fn = next(iter(kern.overloads.values()))._codelibrary.get_cufunc()
                row = {"grid": grid_name, "options": n, "solver": name,
                       "us_p50": float(np.median(times[name]) * 1e6),
                       "us_min": float(np.min(times[name]) * 1e6),
                       "block": block, "regs": int(fn.attrs.regs),
                       "local_bytes": int(fn.attrs.local), **compare(got, ref)}
                table.append(row)
                log(f"  {row}")
    print("\n| grid | options | solver | µs p50 | PCR / this | regs | local B | "
          "price / delta max rel. err vs float64 |")
    print("|---|---:|---|---:|---:|---:|---:|---|")
    for r in table:
        pcr = next(p for p in table if p["grid"] == r["grid"] and p["options"] == r["options"]
                   and p["solver"] == "pcr")
        print(f"| {r['grid']} | {r['options']:,} | {r['solver']} | {r['us_p50']:.0f} | "
              f"{pcr['us_p50'] / r['us_p50']:.2f} | {r['regs']} | {r['local_bytes']} | "
              f"{r['price_max_rel']:.1e} / {r['delta_max_rel']:.1e} |")
    if args.json:
        write_json(args.json, {"machine": gpu_name(), "date": datetime.now(UTC).isoformat(),
                               "repeats": args.repeats, "rows": table})


if __name__ == "__main__":
    main()
