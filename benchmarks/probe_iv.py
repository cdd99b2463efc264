"""Where does GPU time go in the chain's implied-vol solve? (diagnostic, GPU machine)

Times `price_params` (one batched repricing: transfer, launch, copy back) and the kernel
alone (CUDA events) for the whole GOOG chain on the default grid, then the full solve.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from feeds.datadir import data_dir  # noqa: E402
from feeds.option_chain import read_chain  # noqa: E402
from gpu.options import core  # noqa: E402
from gpu.options.engines import make_grid, option_params, price_params  # noqa: E402
from gpu.options.implied_vol import implied_vols, quote_mids  # noqa: E402

chain = read_chain(data_dir() / "lean_goog_option_chain_2015-12-24" /
                   "goog_option_chain_2015-12-24T1300ET.csv")
asof = chain.asof_date()
assert asof is not None, "the chain records its snapshot date"
params = option_params(chain.spot, chain.strike, chain.years_to_expiry(asof), 0.25, 0.0,
                       chain.is_call, chain.is_american)
params = params[params[:, core.EXPIRY] > 0]
grid = make_grid("default")
for device in ("cuda", "cpu"):
    price_params(params, grid, device)  # warm-up
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        price_params(params, grid, device)
        ts.append(time.perf_counter() - t0)
    print(f"{device}: price_params {len(params)} options, default grid: "
          f"median {statistics.median(ts) * 1e3:.2f} ms")
if True:
    from numba import cuda

    d_p = cuda.to_device(params)
    d_o = cuda.device_array((len(params), core.N_OUT))
    k, thr = core.fd_kernel(grid.price_steps)  # the engine's solver (GPU_FD_SOLVER)
    e0, e1 = cuda.event(), cuda.event()
    for _ in range(2):
        e0.record()
        k[len(params), thr](d_p, d_o, *grid.kernel_args())
        e1.record()
        e1.synchronize()
    print(f"cuda kernel alone: {cuda.event_elapsed_time(e0, e1):.2f} ms, {thr} threads/option")
mid, status = quote_mids(chain.bid, chain.ask)
base = option_params(chain.spot, chain.strike, chain.years_to_expiry(asof), 0.2, 0.0,
                     chain.is_call, chain.is_american)
for device in ("cuda", "cpu"):
    for rep in range(2):
        it_times: list[float] = []
        last = [time.perf_counter()]

        def progress(it: int, left: int, it_times: list[float] = it_times,
                     last: list[float] = last) -> None:
            now = time.perf_counter()
            it_times.append(now - last[0])
            last[0] = now

        t0 = time.perf_counter()
        res = implied_vols(mid, base, grid=grid, device=device, status=status.copy(),
                           progress=progress)
        print(f"{device} run {rep}: IV solve {time.perf_counter() - t0:.3f} s, "
              f"{res.iterations} iterations, per iteration ms "
              f"{[round(x * 1e3, 1) for x in it_times]}, solved {(res.status == 0).sum()}")
print("np", np.__version__)
