"""Cold start: each command as a fresh process with empty caches, then again warm.

"Empty caches": numba's on-disk cache (NUMBA_CACHE_DIR pointed at an empty folder), the
bytecode and the parsed-data cache (TRADING_CACHE_DIR, empty). `--bytecode all` (the
default) points PYTHONPYCACHEPREFIX at an empty folder, so every module's bytecode is
compiled again, the standard library's, numpy's and numba's included; `--bytecode project`
runs a fresh copy of the checkout without its __pycache__ folders, so only the project's
own bytecode is missing, as on a machine where pip installed the packages (pip writes
their bytecode) and the project was just cloned. Either way the runs may write bytecode:
PYTHONDONTWRITEBYTECODE is dropped from their environment, since with it set (as on the
dev VM and the GPU machine) a "warm" run compiles its bytecode again, every module's with
PYTHONPYCACHEPREFIX: warm runs measured 1.5-3 s too slow that way before 2026-11-28. A round
runs a command once cold, then `--warm` times with the caches the cold run left; the table
gives the median cold and warm wall times and their ratio (the issue's goal: within 3x).

    python benchmarks/cold_start.py                       # the devbox commands, 3 rounds
    python benchmarks/cold_start.py --commands headline --repo /path/to/other/checkout
    python benchmarks/cold_start.py --record evolve-cpu   # rewrite gpu/compile_manifest.json
    python benchmarks/cold_start.py --record evolve-cuda:headline   # on the GPU machine
    GTE_PREWARM=0 python benchmarks/cold_start.py         # without the parallel compile

`--repo` runs another checkout's run_engine.py (its own code on its own PYTHONPATH), so
one call on the GPU machine measures main and this branch side by side. `--record PROFILE`
runs PROFILE's command once cold in a subprocess, with prewarm off, and stores the
functions it compiled at top level (gpu.compile_cache's manifest).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import log  # noqa: E402
from feeds.datadir import data_dir  # noqa: E402

SP500 = "sp500_5yr_daily"
GOOG = "lean_goog_option_chain_2015-12-24/goog_option_chain_2015-12-24T1300ET.csv"


def commands(tmp: Path) -> dict[str, list[str]]:
    """Each command's argv (after run_engine.py); outputs go to `tmp`."""
    data = data_dir()
    return {
        "replay-quickstart": ["replay", "--out", str(tmp / "quickstart")],
        "evolve-cpu-small": ["evolve", "--data", str(data / SP500), "--stocks", "16",
                             "--population", "500", "--generations", "5", "--device", "cpu",
                             "--seed", "1", "--out", str(tmp / "small.json")],
        "price": ["price", "--chain", str(data / GOOG), "--iv", "--json", str(tmp / "p.json")],
        "timeseries": ["timeseries", "--data", str(data / SP500), "--symbols", "AAPL,MSFT",
                       "--json", str(tmp / "ts.json")],
        "select": ["select", "--returns", str(_returns_csv(tmp)), "--k", "3",
                   "--json", str(tmp / "sel.json")],
        "evolve-cuda-small": ["evolve", "--data", str(data / SP500), "--stocks", "4",
                              "--train-days", "60", "--test-days", "20", "--population", "64",
                              "--generations", "2", "--device", "cuda", "--seed", "1",
                              "--out", str(tmp / "small_cuda.json")],
        "headline": ["evolve", "--data", str(data / SP500), "--stocks", "128", "--train-days",
                     "768", "--test-days", "256", "--population", "25000", "--generations",
                     "50", "--seed", "1", "--device", "cuda", "--out", str(tmp / "best.json"),
                     "--json", str(tmp / "evolve.json")],
    }


#: the manifest profile each recorded command fills (gpu/compile_manifest.json)
PROFILES = {"evolve-cpu": "evolve-cpu-small", "evolve-cuda": "evolve-cuda-small",
            "replay": "replay-quickstart", "price": "price", "timeseries": "timeseries",
            "select": "select"}
DEFAULT = ["replay-quickstart", "evolve-cpu-small", "price", "timeseries", "select"]


def _returns_csv(tmp: Path) -> Path:
    """24 strategies' daily returns for `select` (seeded, no dates)."""
    import numpy as np

    path = tmp / "returns.csv"
    if not path.exists():
        r = np.random.default_rng(1).normal(0.0, 0.01, (250, 24))
        header = ",".join(f"s{i}" for i in range(r.shape[1]))
        np.savetxt(path, r, delimiter=",", header=header, comments="", fmt="%.6g")
    return path


#: "all": every module's bytecode recompiled; "project": only the checkout's (see above)
BYTECODE = "all"


def _env(caches: Path, repo: Path) -> dict[str, str]:
    prefix = {"PYTHONPYCACHEPREFIX": str(caches / "pycache")} if BYTECODE == "all" else {}
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")}
    return {**env, "NUMBA_CACHE_DIR": str(caches / "numba"), **prefix,
            "TRADING_CACHE_DIR": str(caches / "trading"),
            "PYTHONPATH": os.pathsep.join(p for p in (str(repo), os.environ.get("PYTHONPATH"))
                                          if p),
            "PYTHONUNBUFFERED": "1"}


def timed(argv: list[str], env: dict[str, str], repo: Path) -> tuple[float, str]:
    """Wall seconds of one `run_engine.py` process, and its stderr (raises on failure)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(repo / "run_engine.py"), *argv, "--quiet"],
                          capture_output=True, text=True, env=env, cwd=repo, check=False)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({proc.returncode}): {proc.stderr[-800:]}")
    return seconds, proc.stderr


def measure(name: str, argv: list[str], repo: Path, rounds: int, warm: int) -> dict[str, Any]:
    """`rounds` cold runs (fresh caches each), each followed by `warm` warm runs."""
    cold, warm_runs, said_cold, said_warm, tails = [], [], [], [], []
    original = repo
    for _ in range(rounds):
        caches = Path(tempfile.mkdtemp(prefix="cold-start-"))
        if BYTECODE == "project":  # a fresh copy, no __pycache__: the project's bytecode only
            repo = caches / "checkout"
            shutil.copytree(original, repo, ignore=shutil.ignore_patterns(
                "__pycache__", ".git", ".trees", ".whl", "results"))
        env = _env(caches, repo)
        seconds, err = timed(argv, env, repo)
        cold.append(seconds)
        said_cold.append("compiling" in err)
        tails.append(err.strip().splitlines()[-3:])
        for _ in range(warm):
            seconds, err = timed(argv, env, repo)
            warm_runs.append(seconds)
            said_warm.append("compiling" in err)
        log(f"  {name}: cold {cold[-1]:.2f} s, warm {warm_runs[-warm:]}")
    c, w = statistics.median(cold), statistics.median(warm_runs)
    return {"command": name, "argv": argv, "repo": str(original), "bytecode": BYTECODE,
            "cold_seconds": cold,
            "warm_seconds": warm_runs, "cold_median": c, "warm_median": w, "ratio": c / w,
            "compile_notice_cold": said_cold, "compile_notice_warm": said_warm,
            "cold_stderr_tails": tails}


def record(spec: str, tmp: Path) -> int:
    """Run PROFILE's command cold in a subprocess (prewarm off) and store its compiles;
    `PROFILE:COMMAND` records another command of the table (evolve-cuda:headline)."""
    profile, _, name = spec.partition(":")
    argv = commands(tmp)[name or PROFILES[profile]]
    caches = Path(tempfile.mkdtemp(prefix="cold-start-record-"))
    env = {**_env(caches, REPO), "GTE_PREWARM": "0"}
    return subprocess.run([sys.executable, str(Path(__file__)), "--record-one", profile, "--",
                           *argv, "--quiet"], env=env, cwd=REPO, check=False).returncode


def record_one(profile: str, argv: list[str]) -> int:
    """In this process: run the command under a compile recorder, save the manifest."""
    from numba.core import event

    from gpu import compile_cache

    recorder = event.RecordingListener()
    event.register("numba:compile", recorder)
    import run_engine

    rc = run_engine.main(argv)
    entries = top_level_compiles(recorder.buffer)
    usable = [e for e in entries if compile_cache.dispatcher(e) is not None]
    compile_cache.save_manifest(profile, usable)
    log(f"{profile}: {len(usable)} of {len(entries)} top-level compilations recorded, "
        f"{sum(e.seconds for e in usable):.1f} s")
    return rc


def top_level_compiles(buffer: list[tuple[float, Any]]) -> list[Any]:
    """The outermost `numba:compile` events (a callee compiles inside its caller's)."""
    from gpu.compile_cache import Entry

    depth, starts, out = 0, [], []
    for ts, ev in buffer:
        if ev.is_start:
            depth += 1
            starts.append(ts)
            continue
        depth -= 1
        t0 = starts.pop()
        if depth == 0:
            f = ev.data["dispatcher"].py_func
            out.append(Entry(f.__module__, f.__qualname__, repr(tuple(ev.data["args"])),
                             round(ts - t0, 3)))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--commands", default=",".join(DEFAULT))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warm", type=int, default=2, help="warm runs after each cold run")
    p.add_argument("--repo", type=Path, default=REPO, help="checkout whose run_engine.py runs")
    p.add_argument("--label", default="", help="a name for --repo in the table")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--bytecode", choices=("all", "project"), default="all",
                   help="which bytecode a cold run lacks (see the module doc)")
    p.add_argument("--record", help="record a manifest profile: " + ",".join(PROFILES))
    p.add_argument("--record-one", help=argparse.SUPPRESS)
    args, rest = p.parse_known_args()
    if args.record_one:
        return record_one(args.record_one, [a for a in rest if a != "--"])
    global BYTECODE
    BYTECODE = args.bytecode
    tmp = Path(tempfile.mkdtemp(prefix="cold-start-out-"))
    if args.record:
        return max(record(name, tmp) for name in args.record.split(","))
    table = commands(tmp)
    rows = [measure(name, table[name], args.repo.resolve(), args.rounds, args.warm)
            for name in args.commands.split(",")]
    print(f"{'command':20} {'cold s':>8} {'warm s':>8} {'ratio':>6}  {args.label}")
    for r in rows:
        print(f"{r['command']:20} {r['cold_median']:8.2f} {r['warm_median']:8.2f} "
              f"{r['ratio']:6.1f}")
    if args.json:
        args.json.write_text(json.dumps({"label": args.label, "cpus": os.cpu_count(),
                                         "prewarm": os.environ.get("GTE_PREWARM", "1"),
                                         "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
