"""Where a GP bar close's GPU round trip goes, and what a launch without the panel copy gives.

A bar close on CUDA (`gpu.gp.decider.AsyncDecider`) fills a pinned panel, copies it to the
device, launches the decision-code kernel, records an event and polls it; the codes land in
mapped host memory. This script times each of those steps on their own and, side by side
in the same process:

- `cpu`: the CPU twin's whole bar close (the number CUDA has to meet);
- `copy` (today's path): pinned panel -> device copy, launch, event;
- `mapped`: the kernel reads the panel straight from mapped host memory (no copy), each
  thread first loading its stock's 31 features into registers (`gpu.gp.evaluate`'s
  `_codes_rows_kernel`);
- `empty`: an empty kernel's launch -> completion seen by the host, the floor of any
  round trip through a launch.

    python benchmarks/gp_round_trip.py [--rounds 201] [--json PATH]

Prints a table of medians (µs) per (rules x symbols) and writes JSON with machine and date.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402

from benchmarks.common import gpu_name, log, median_seconds  # noqa: E402

SIZES = [(1, 128), (1, 1000), (50, 128), (50, 1000)]


def _median_us(step: Any, rounds: int) -> float:
    return median_seconds(step, rounds) * 1e6


def breakdown(decider: Any, feats: np.ndarray, rounds: int) -> dict[str, float]:
    """Median µs of each step of today's CUDA bar close, timed one by one (each step's
    clock reads included, so the parts add up to a little more than the whole)."""
    decider._bar_close(feats)
    if decider._launch is None:  # no pre-bound launch (the simulator): nothing to split
        return {}
    parts: dict[str, list[int]] = {k: [] for k in
                                   ("fill", "copy", "launch", "record", "wait", "result")}
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        decider._h_panel[...] = feats
        t1 = time.perf_counter_ns()
        decider._copy()
        t2 = time.perf_counter_ns()
        decider._launch(decider._grid)
        t3 = time.perf_counter_ns()
        decider._record()
        t4 = time.perf_counter_ns()
        while not decider._query():
            pass
        t5 = time.perf_counter_ns()
        np.array(decider._h_out[:, 0, :], np.int8)
        t6 = time.perf_counter_ns()
        for k, a, b in (("fill", t0, t1), ("copy", t1, t2), ("launch", t2, t3),
                        ("record", t3, t4), ("wait", t4, t5), ("result", t5, t6)):
            parts[k].append(b - a)
    return {k: statistics.median(v) / 1e3 for k, v in parts.items()}


def _empty(out: Any) -> None:
    """One store, so the launch is not optimised away (module level: the simulator swaps
    only module globals)."""
    if cuda.threadIdx.x == 0 and cuda.blockIdx.x == 0:
        out[0] = 1


def empty_round_trip_us(rounds: int) -> float:
    """An empty kernel: ctypes launch, event record, spin on the event query."""
    from numba import cuda

    from gpu.launch import bind, event_query, event_recorder, untimed_event

    empty = cuda.jit(_empty)
    stream = cuda.stream()
    out = cuda.mapped_array(1, np.int32)
    empty[1, 128, stream](out)
    stream.synchronize()
    go = bind(empty, (out,), stream, 128) or (lambda grid: empty[grid, 128, stream](out))
    event = untimed_event()
    record, query = event_recorder(event, stream), event_query(event)

    def step() -> None:
        go(1)
        record()
        while not query():
            pass

    return _median_us(step, rounds)


def _ptx_loads() -> int | None:
    """Global loads in the compiled mapped kernel's PTX (None where there is no PTX)."""
    from gpu.gp.evaluate import _codes_rows_kernel

    try:
        asm = _codes_rows_kernel.inspect_asm()
    except Exception:  # noqa: BLE001 - the simulator compiles nothing
        return None
    text = "\n".join(asm.values()) if isinstance(asm, dict) else str(asm)
    return text.count("ld.global")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=201)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    from gpu.gp.decider import AsyncDecider
    from strategies.gp.init import ramped_half_and_half
    from strategies.gp.representation import rules_programs

    rows: list[dict[str, Any]] = []
    floor = empty_round_trip_us(args.rounds)
    log(f"empty kernel round trip {floor:.1f} us")
    for n_rules, n_symbols in SIZES:
        pop = ramped_half_and_half(n_rules, np.random.default_rng(n_rules), 2, 6)
        programs, lengths = rules_programs([pop.rule(i) for i in range(n_rules)])
        rng = np.random.default_rng(0)
        cpu = AsyncDecider(programs, lengths, "cpu")
        copy = AsyncDecider(programs, lengths, "cuda", panel="copy")
        mapped = AsyncDecider(programs, lengths, "cuda", panel="mapped")
        agree = True
        for _ in range(20):  # the same codes on every backend, on fresh features
            f = rng.normal(size=(n_symbols, 31)).astype(np.float32)
            want = cpu._bar_close(f)
            agree &= bool(np.array_equal(copy._bar_close(f), want))
            agree &= bool(np.array_equal(mapped._bar_close(f), want))
        feats = rng.normal(size=(n_symbols, 31)).astype(np.float32)
        row: dict[str, Any] = {"rules": n_rules, "symbols": n_symbols, "codes_agree": agree}
        # interleaved rounds: a slow moment of the host hits every variant alike
        times: dict[str, list[float]] = {"cpu": [], "copy": [], "mapped": []}
        for _ in range(5):
            for name, dec in (("cpu", cpu), ("copy", copy), ("mapped", mapped)):
                times[name].append(_median_us(lambda d=dec, f=feats: d._bar_close(f),
                                              args.rounds // 5))
        row.update({f"{k}_us": statistics.median(v) for k, v in times.items()})
        row["copy_steps_us"] = breakdown(copy, feats, args.rounds)
        row["empty_kernel_us"] = floor
        rows.append(row)
        log(f"{n_rules} x {n_symbols}: {row}")

    print(f"\nGP bar close (median µs; {gpu_name()})")
    print(f"{'rules x symbols':>16} {'CPU twin':>9} {'copy':>7} {'mapped':>7}  agree  "
          "copy path: fill copy launch record wait result")
    for r in rows:
        s = r["copy_steps_us"] or {k: float("nan") for k in
                                   ("fill", "copy", "launch", "record", "wait", "result")}
        print(f"{r['rules']:>6} x {r['symbols']:<7} {r['cpu_us']:9.1f} {r['copy_us']:7.1f} "
              f"{r['mapped_us']:7.1f}  {str(r['codes_agree']):5}  "
              + " ".join(f"{s[k]:.1f}" for k in ("fill", "copy", "launch", "record", "wait",
                                                  "result")))
    print(f"empty kernel launch -> completion seen: {floor:.1f} µs")
    loads = _ptx_loads()
    print(f"mapped kernel PTX: {loads} global loads (31 or more: the feature loop unrolled)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "benchmark": "gp_round_trip", "machine": platform.node(), "gpu": gpu_name(),
            "date": datetime.now(UTC).isoformat(timespec="seconds"), "rows": rows,
            "empty_kernel_us": floor, "mapped_kernel_ptx_global_loads": loads}, indent=1))


if __name__ == "__main__":
    main()
