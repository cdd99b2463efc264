"""What `gpu.threads.run_chunks` costs against numba's parallel runtime, per thread count.

`run_chunks` hands contiguous chunks of a loop to Python threads (each chunk one call of a
compiled nogil range function); numba's `prange` hands them to its own threading layer.
The first is cheaper to compile (numba optimises a `parallel=True` loop body twice), the
second cheaper to call. For 1, 2, 4, ... up to numba's thread count this prints the median
time of:
- handing out empty chunks (`run_chunks` over a no-op) against an empty `prange` loop;
- one generation's breeding of `--children` children (`strategies.gp.operators`), the two
  ways `gpu.threads.parallel_range` can run it: numba's `prange` over one chunk a thread,
  and `run_chunks` (the same children, bit for bit).

    python benchmarks/thread_chunks.py [--children 25000] [--repeats 40] [--json PATH]

A probe of the same comparison (2026-11-28, the H200 host's 16 cores; `prange` over every
child rather than one chunk a thread): 16 empty chunks 0.42 ms, breeding 25,000 children
3.04 ms on `prange` against 4.07 ms in chunks (`results/h200-2026-11-28/README.md`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numba
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import median_seconds, write_json  # noqa: E402
from gpu.threads import chunk_lo, run_chunks  # noqa: E402
from strategies.gp.init import ramped_half_and_half  # noqa: E402
from strategies.gp.operators import _breed_range  # noqa: E402
from strategies.gp.rng import child_seeds  # noqa: E402


@numba.njit(nogil=True, cache=True)
def _touch(lo: int, hi: int, a: Any) -> None:
    for i in range(lo, hi):
        a[i] += 1.0


@numba.njit(cache=True, parallel=True)
def _breed_parallel(chunks: int, n: int, *args: Any) -> None:
    """`_breed_range` in `chunks` contiguous chunks on numba's parallel runtime: the way
    `strategies.gp.operators.breed` ran on many-core machines before 2026-11-28."""
    for k in numba.prange(chunks):
        _breed_range(chunk_lo(k, chunks, n), chunk_lo(k + 1, chunks, n), *args)


@numba.njit(parallel=True, cache=True)
def _touch_prange(a: Any) -> None:
    for i in numba.prange(a.shape[0]):
        a[i] += 1.0


def median_ms(run: Callable[[], None], repeats: int) -> float:
    return median_seconds(run, repeats) * 1e3


def breeding(n: int) -> tuple[Callable[[], None], Callable[[], None], Callable[[], bool]]:
    """The two ways `parallel_range` can breed a generation: numba's prange over one chunk
    per thread (`_breed_parallel`), and `run_chunks` over `_breed_range`; and a check that
    both bred the same children."""
    rng = np.random.default_rng(1)
    parents = ramped_half_and_half(n, rng)
    rec, don = rng.integers(0, n, n), rng.integers(0, n, n)
    seeds = child_seeds(rng, n)
    shape = parents.ops.shape
    outs = [(np.zeros(shape, np.int16), np.zeros(shape, np.int16), np.zeros((n, 2), np.int16))
            for _ in range(2)]
    args = (parents.ops, parents.sizes, parents.lengths, rec, don, seeds, 0.9, 0.1, 0.1, 0.1,
            8, 4)

    def on_prange() -> None:
        _breed_parallel(max(1, min(numba.get_num_threads(), n)), n, *args, *outs[0])

    def on_threads() -> None:
        run_chunks(_breed_range, n, *args, *outs[1])

    def same() -> bool:
        return all(np.array_equal(a, b) for a, b in zip(outs[0], outs[1], strict=True))

    return on_prange, on_threads, same


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--children", type=int, default=25_000)
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, any machine")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    n = 256 if args.quick else args.children
    repeats = 3 if args.quick else args.repeats
    most = numba.get_num_threads()
    counts = sorted({1, most, *(k for k in (2, 4, 8, 16, 32, 64) if k <= most)})
    on_prange, on_threads, same = breeding(n)
    empty = np.zeros(n)
    rows: list[dict[str, Any]] = []
    print("| threads | empty chunks ms | empty prange ms | breeding, prange ms | "
          "breeding, chunks ms |\n|---:|---:|---:|---:|---:|")
    for k in counts:
        numba.set_num_threads(k)
        row = {"threads": k,
               "empty_chunks_ms": median_ms(lambda: run_chunks(_touch, n, empty, min_chunk=1),
                                            repeats),
               "empty_prange_ms": median_ms(lambda: _touch_prange(empty), repeats),
               "breed_prange_ms": median_ms(on_prange, repeats),
               "breed_chunks_ms": median_ms(on_threads, repeats),
               "same_children": same()}
        rows.append(row)
        print(f"| {k} | {row['empty_chunks_ms']:.3f} | {row['empty_prange_ms']:.3f} | "
              f"{row['breed_prange_ms']:.2f} | {row['breed_chunks_ms']:.2f} |")
    numba.set_num_threads(most)
    if args.json:
        write_json(args.json, {"children": n, "cores": most, "rows": rows,
                               "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")})
    return 0 if all(r["same_children"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
