"""numba's CUDA simulator against the tests' speed-ups of it (tests/cuda_simulator.py), side by
side: the FD kernels at the tests' tiny sizes, one launch at a time, rounds interleaved.

Runs the simulator whatever the machine (NUMBA_ENABLE_CUDASIM=1 is set here). Each round
launches every case under numba's own simulator and then with the speed-ups installed, at
a pytest-like stack depth (`--depth` frames: numba's shared-array lookup reads the whole
stack), and checks the two give the same values bit for bit. Prints the median seconds a
launch and their ratio per case.

    python benchmarks/cuda_simulator.py [--repeat 5] [--depth 60] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before numba is imported

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import log, write_json  # noqa: E402


def cases() -> dict[str, Callable[[], np.ndarray]]:
    """name -> one launch returning its outputs (sizes of the tests under the simulator)."""
    from numba import cuda

    from gpu.options import core
    from gpu.options.engines import make_grid, option_params
    from tests.gpu.option_rows import random_params

    def launch(steps: int, solver: str, split: bool, grid: Any, rows: np.ndarray
               ) -> Callable[[], np.ndarray]:
        kernel, threads = core.fd_kernel(steps, solver, split_passes=split)

        def run() -> np.ndarray:
            d_out = cuda.device_array((len(rows), core.N_OUT))
            kernel[len(rows), threads](cuda.to_device(rows), d_out,
                                                 *core.launch_args(grid.kernel_args()))
            return d_out.copy_to_host()

        return run

    three = option_params(100.0, [90.0, 100.0, 110.0], [0.05, 0.5, 1.0], 0.25, 0.01,
                          [True, False, True], True)
    seed16 = make_grid("seed", price_steps=16, time_steps=3)
    default40 = make_grid("default", price_steps=40, time_steps=3)
    default70 = make_grid("default", price_steps=70, time_steps=3, rannacher=2)
    two = random_params(4, seed=40)[[1, 3]]
    return {
        "lanes, seed 16x3, 3 American options (test_option_batch)":
            launch(16, "lanes", False, seed16, three),
        "lanes split, default 40x3, 2 options (test_fd_solvers)":
            launch(40, "lanes", True, default40, two),
        "pcr, 96 threads, default 70x3, 2 options (test_fd_solvers)":
            launch(70, "pcr", False, default70, two),
    }


def at_depth(depth: int, f: Callable[[], Any]) -> Any:
    return f() if depth == 0 else at_depth(depth - 1, f)


def measure(repeat: int, depth: int) -> list[dict[str, Any]]:
    from tests import cuda_simulator

    todo = cases()
    times: dict[str, dict[str, list[float]]] = {k: {"numba": [], "tests": []} for k in todo}
    for name, run in todo.items():  # first launches (jit set-up) untimed
        cuda_simulator.uninstall()
        want = at_depth(depth, run)
        cuda_simulator.install()
        if not np.array_equal(at_depth(depth, run), want):
            raise SystemExit(f"{name}: the speed-ups changed the values")
    for r in range(repeat):
        for name, run in todo.items():
            for which in ("numba", "tests"):
                (cuda_simulator.install if which == "tests" else cuda_simulator.uninstall)()
                t0 = time.perf_counter()
                at_depth(depth, run)
                times[name][which].append(time.perf_counter() - t0)
        log(f"round {r + 1}/{repeat} done")
    cuda_simulator.uninstall()
    rows = []
    for name, t in times.items():
        numba_s, tests_s = float(np.median(t["numba"])), float(np.median(t["tests"]))
        rows.append({"case": name, "numba_s": numba_s, "tests_s": tests_s,
                     "ratio": numba_s / tests_s, "numba_all": t["numba"],
                     "tests_all": t["tests"]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="interleaved rounds")
    ap.add_argument("--depth", type=int, default=60, help="extra stack frames a launch")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    rows = measure(args.repeat, args.depth)
    print(f"{'case':62s} {'numba s':>8s} {'tests s':>8s} {'ratio':>6s}")
    for row in rows:
        print(f"{row['case']:62s} {row['numba_s']:8.3f} {row['tests_s']:8.3f} "
              f"{row['ratio']:6.1f}")
    if args.json is not None:
        write_json(args.json, {"repeat": args.repeat, "depth": args.depth,
                               "load_average": os.getloadavg(), "cases": rows})


if __name__ == "__main__":
    main()
