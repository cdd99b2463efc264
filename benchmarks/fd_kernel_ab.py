"""The FD lanes kernel of this tree against another tree's, interleaved in one process.

Loads `--base`'s `gpu/options/core.py` beside this tree's as a second module, compiles both
lanes kernels, and times them launch by launch on the same rows in device memory (each
launch pre-bound, between CUDA events), so a kernel change is measured against the code
before it on the same card in the same minute. Cases: the default grid's reference rows
(American, with dividends) at 1,000 and 100,000 options; the same with one pass and no
Rannacher start; 2 time steps (set-up dominated); expired rows (the launch alone). Each
case also compares the two kernels' prices (max relative difference, prices > 0.01).

    python benchmarks/fd_kernel_ab.py --base /path/to/old/checkout [--repeats 30] [--json PATH]
    NUMBA_ENABLE_CUDASIM=1 python benchmarks/fd_kernel_ab.py --base . --quick  # any machine

A probe of the same comparison (2026-11-28, H200, numba's ordinary launch between the
events) measured the float64 reciprocals of the LU set-up: 100,000 reference options
7,045 -> 4,209 us (`results/h200-2026-11-28/README.md`).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import gpu_name, write_json  # noqa: E402
from benchmarks.options import reference_rows  # noqa: E402
from gpu.launch import bind  # noqa: E402
from gpu.options import core  # noqa: E402
from gpu.options.engines import GRIDS  # noqa: E402


def load_core(tree: Path) -> ModuleType:
    """`tree`'s gpu/options/core.py as a module of its own (its imports resolve here)."""
    spec = importlib.util.spec_from_file_location("base_options_core",
                                                  tree / "gpu" / "options" / "core.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"no gpu/options/core.py under {tree}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Launch:
    """One kernel's pre-bound launch over `params` (rows in device memory)."""

    def __init__(self, module: ModuleType, params: np.ndarray, args: tuple[Any, ...]) -> None:
        from numba import cuda

        self.n = params.shape[0]
        self.kernel = module.fd_lanes_kernel(args[0])
        self.stream = cuda.stream()
        self.d_params = cuda.to_device(params, stream=self.stream)
        self.d_out = cuda.device_array((self.n, core.N_OUT), np.float64, stream=self.stream)
        # a tree from before 2026-11-28 17:30 UTC has no `spot_at` argument
        if "spot_at" in inspect.signature(self.kernel.py_func).parameters:
            args = (*args, 0.0)
        self.args = (self.d_params, self.d_out, *args)
        self.kernel[self.n, core.LANES, self.stream](*self.args)  # compiles, warms
        self.stream.synchronize()
        self.go = bind(self.kernel, self.args, self.stream, core.LANES)
        self.start, self.stop = cuda.event(), cuda.event()

    def time_us(self) -> float:
        from numba import cuda

        self.start.record(self.stream)
        if self.go is not None:
            self.go(self.n)
        else:
            self.kernel[self.n, core.LANES, self.stream](*self.args)
        self.stop.record(self.stream)
        self.stop.synchronize()
        elapsed = getattr(cuda, "event_elapsed_time", None)  # (not in the simulator: 0)
        return float(elapsed(self.start, self.stop)) * 1e3 if elapsed else 0.0

    def prices(self) -> np.ndarray:
        return np.asarray(self.d_out.copy_to_host()[:, core.PRICE])


def cases(quick: bool) -> list[tuple[str, np.ndarray, tuple[Any, ...]]]:
    grid = GRIDS["default"]
    if quick:  # any machine, the simulator included: a handful of rows on a small grid
        grid = grid._replace(price_steps=31, time_steps=2)
    small, big = (reference_rows(4), reference_rows(8)) if quick else (
        reference_rows(1000), reference_rows(100_000))
    expired = small.copy()
    expired[:, core.EXPIRY] = 0.0
    one_pass = grid._replace(rannacher=0, richardson=False)
    return [
        (f"expired rows (the launch alone), {len(small):,}", expired, grid.kernel_args()),
        (f"default grid, {len(small):,}", small, grid.kernel_args()),
        (f"default grid, 2 time steps, {len(small):,}", small,
         grid._replace(time_steps=2).kernel_args()),
        (f"one pass, no Rannacher start, {len(small):,}", small, one_pass.kernel_args()),
        (f"default grid, {len(big):,}", big, grid.kernel_args()),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True, help="the other checkout")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, any machine")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    base = load_core(args.base.resolve())
    rows: list[dict[str, Any]] = []
    print("| case | base µs | this tree µs | price max rel diff |\n|---|---:|---:|---:|")
    for name, params, kargs in cases(args.quick):
        old, new = Launch(base, params, kargs), Launch(core, params, kargs)
        reps = 1 if args.quick else max(3, args.repeats // (10 if len(params) > 10_000 else 1))
        t_old, t_new = [], []
        for _ in range(reps):  # alternating, launch by launch
            t_old.append(old.time_us())
            t_new.append(new.time_us())
        p_old, p_new = old.prices(), new.prices()
        worth = np.abs(p_old) > 0.01
        diff = float(np.max(np.abs(p_new - p_old)[worth] / np.abs(p_old[worth]))) \
            if worth.any() else 0.0
        row = {"case": name, "options": int(params.shape[0]),
               "base_us": statistics.median(t_old), "new_us": statistics.median(t_new),
               "price_max_rel_diff": diff, "prebound": old.go is not None and new.go is not None}
        rows.append(row)
        print(f"| {name} | {row['base_us']:.1f} | {row['new_us']:.1f} | {diff:.1e} |")
    if args.json:
        write_json(args.json, {"gpu": gpu_name(), "base": str(args.base),
                               "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                               "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
