"""The PCR FD kernel's resources and a 10 x 1,000-option launch under register limits.

(The PCR kernel, GPU_FD_SOLVER=pcr; `benchmarks/fd_solvers.py` measures the lanes kernel,
the default, under register caps beside it.)

Prints the kernel's registers per thread, local and shared memory per block (numba's
compiled attributes), the resident blocks per SM they allow, and the median time of one
launch of the 10 x 1,000 case's 10,000 rows (seed grid) compiled with each register cap,
each checked bit for bit against the uncapped kernel.

    python benchmarks/fd_occupancy.py [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import gpu_name, log, write_json  # noqa: E402


def big_rows() -> np.ndarray:
    from gpu.options.engines import option_params

    strikes = np.geomspace(5, 400, 50)
    expiries = np.array([7, 14, 30, 60, 90, 120, 180, 270, 365, 730]) / 365.0
    k, t = np.meshgrid(strikes, expiries)
    one = option_params(100.0, k.ravel(), t.ravel(), 0.25, 0.02, False, True)
    rows = np.concatenate([one, one] * 5)
    rows[::2, 5] = 1.0  # calls and puts
    rows[:, 0] = 97.0
    return rows[np.argsort(-rows[:, 2], kind="stable")]


def main() -> None:
    from numba import cuda

    from gpu.options import core
    from gpu.options.engines import make_grid

    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    grid = make_grid("seed")
    gargs = core.launch_args(grid.kernel_args())
    rows = big_rows()
    d_rows = cuda.to_device(rows)
    block = core.threads_per_option(grid.price_steps)
    out_rows: list[dict[str, Any]] = []
    ref = None
    for cap in (None, 32, 40, 48, 64, 80):
        opts = {} if cap is None else {"max_registers": cap}
        kern = cuda.jit(**opts)(core._fd_price_kernel)
        d_out = cuda.device_array((len(rows), core.N_OUT))
        kern[len(rows), block](d_rows, d_out, *gargs)
        cuda.synchronize()
        times = []
        for _ in range(20):
            t = time.perf_counter()
            kern[len(rows), block](d_rows, d_out, *gargs)
            cuda.synchronize()
            times.append(time.perf_counter() - t)
        got = d_out.copy_to_host()
        if ref is None:
            ref = got
        fn = next(iter(kern.overloads.values()))._codelibrary.get_cufunc()
        regs, local, shared = fn.attrs.regs, fn.attrs.local, fn.attrs.shared
        row = {"max_registers": cap, "regs": regs, "local_bytes": local,
               "shared_bytes": shared,
               "blocks_per_sm_by_regs": 65536 // max(regs * block, 1),
               "blocks_per_sm_by_shared": (228 * 1024) // max(shared + 1024, 1),
               "ms_p50": float(np.median(times) * 1e3),
               "bit_identical": bool(np.array_equal(got, ref, equal_nan=True))}
        out_rows.append(row)
        log(f"  {row}")
    if args.json:
        write_json(args.json, {"gpu": gpu_name(), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                   time.gmtime()), "block": block, "options": len(rows), "rows": out_rows})


if __name__ == "__main__":
    main()
