"""Helpers every benchmark script shares: progress lines, timing medians, the device
choice, the GPU's name, settings scoped to a block and the JSON result file.

Scripts run as `python benchmarks/NAME.py`: each puts the repository root on `sys.path`
first, then imports `benchmarks.common` like the project's packages.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gpu.device import DeviceUnavailable, resolve_device


def log(message: str) -> None:
    """A progress line on stderr (stdout holds the result table)."""
    print(message, file=sys.stderr, flush=True)


def median_seconds(run: Callable[[], Any], repeats: int, warmup: bool = True) -> float:
    """Median wall time of `repeats` calls of `run`, after one untimed call (compilation,
    caches, first touch) unless `warmup` is False."""
    if warmup:
        run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def device_or_none(choice: str, what: str) -> str | None:
    """The device `choice` resolves to, or None (the reason logged) when it is absent."""
    try:
        return resolve_device(choice, what)
    except DeviceUnavailable as e:
        log(f"error: {e}")
        return None


def gpu_name() -> str:
    """The current CUDA device's name."""
    from numba import cuda

    name = getattr(cuda.get_current_device(), "name", "numba's CUDA simulator")
    return name.decode() if isinstance(name, bytes) else str(name)


@contextlib.contextmanager
def scoped_env(env: dict[str, str]) -> Iterator[None]:
    """Set environment variables for a block (child processes started in it inherit them)
    and put back what was there before."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def write_json(path: Path, result: Any, **dumps: Any) -> None:
    """Write the result file (its folder created), and say where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=dumps.pop("indent", 2), **dumps))
    log(f"wrote {path}")


def write_tree_runs(path: Path, args: Any, runs: dict[str, Any], summary: Any) -> None:
    """The result file of a GPU benchmark over code trees (`alternate_trees`): the card,
    the command's arguments, every tree's runs, the summary and the time."""
    from datetime import UTC, datetime

    write_json(path, {"gpu": gpu_name(), "args": vars(args), "runs": runs, "summary": summary,
                      "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}, default=str)


def alternate_trees(script: str, roots: list[Path], rounds: int, worker_args: list[str],
                    env: dict[str, str] | None = None
                    ) -> Iterator[tuple[int, Path, dict[str, Any]]]:
    """Run `script --worker ROOT *worker_args` once per code tree and round, the trees in
    turn (reversed every other round, so a machine's drift moves them alike), each a fresh
    process with ROOT first on its path; yields (round, root, the JSON the worker printed
    last)."""
    import subprocess

    base = dict(os.environ if env is None else env)
    for k in range(rounds):
        for root in (roots if k % 2 == 0 else roots[::-1]):
            # the tree first; a path the caller set (installed wheels, say) after it
            path = os.pathsep.join(p for p in (str(root), base.get("PYTHONPATH", "")) if p)
            r = subprocess.run([sys.executable, script, "--worker", str(root), *worker_args],
                               capture_output=True, text=True,
                               env={**base, "PYTHONPATH": path})
            if r.returncode != 0:  # the worker's own last words, one line
                last = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
                raise SystemExit(f"{Path(script).name}: the run of {root} failed: {last}")
            yield k, root, json.loads(r.stdout.strip().splitlines()[-1])
