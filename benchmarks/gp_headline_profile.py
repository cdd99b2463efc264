"""Where the headline `evolve` spends its wall time: section timers around the library calls.

Runs `run_engine.py evolve ...` in this process (twice by default: the first run fills numba's
and the parse caches, the second is the one reported) with a perf_counter wrapper around each
named function, and prints total seconds and calls per section. Import time is measured from
this script's first line; the interpreter's own start is what `time python ...` adds on top.

    python benchmarks/gp_headline_profile.py [--stocks 128 --population 25000 ...] [--json F]
"""

from __future__ import annotations

import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import functools  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from collections import defaultdict  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: (module, attribute path) of each timed section; a missing one is skipped, so the script
#: profiles older and newer layouts of the code alike
SECTIONS = [
    ("engine.commands.evolve", "load_window"),
    ("engine.commands.evolve", "PopulationEvaluator"),
    ("engine.commands.evolve", "evolve"),
    ("engine.commands.evolve", "evaluate_period"),
    ("engine.commands.evolve", "save_strategy"),
    ("engine.commands.evolve", "plot_fitness"),
    ("engine.commands.evolve", "finish_outputs"),
    ("strategies.gp.evolution", "breed"),
    ("strategies.gp.evolution", "tournament"),
    ("strategies.gp.evolution", "start_state"),
    ("strategies.gp.evolution", "HallOfFame.update"),
    ("strategies.gp.representation", "Population.compile"),
    ("strategies.gp.representation", "Population.concat"),
    ("strategies.gp.representation", "Population.take"),
    ("strategies.gp.representation", "Population.node_counts"),
    ("gpu.gp.bitwise", "_check_programs"),
    ("gpu.gp.bitwise", "to_mask_programs"),
    ("gpu.gp.bitwise", "fitness_from_cash"),
    ("gpu.gp.bitwise", "BitwiseEvaluator.population_fitness"),
]


def _wrap(totals: dict[str, list[float]], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def timed(*a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            rec = totals[name]
            rec[0] += time.perf_counter() - t0
            rec[1] += 1

    return timed


#: (owner, attribute, original) of every wrapped function, for `restore`
_WRAPPED: list[tuple[Any, str, Any]] = []


def instrument(totals: dict[str, list[float]]) -> None:
    for mod_name, attr in SECTIONS:
        owner: Any = importlib.import_module(mod_name)
        parts = attr.split(".")
        for p in parts[:-1]:
            owner = getattr(owner, p, None)
        if owner is None or parts[-1] not in vars(owner):
            continue
        original = vars(owner)[parts[-1]]
        if isinstance(original, type):  # a class: time its construction
            owner, name, fn = original, "__init__", vars(original)["__init__"]
            _WRAPPED.append((owner, name, fn))
            setattr(owner, name, _wrap(totals, attr, fn))
            continue
        _WRAPPED.append((owner, parts[-1], original))
        if isinstance(original, staticmethod):
            setattr(owner, parts[-1], staticmethod(_wrap(totals, attr, original.__func__)))
        else:
            setattr(owner, parts[-1], _wrap(totals, attr, original))


def restore() -> None:
    """Undo `instrument`, so the next run is timed afresh."""
    while _WRAPPED:
        owner, name, original = _WRAPPED.pop()
        setattr(owner, name, original)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stocks", type=int, default=128)
    p.add_argument("--population", type=int, default=25000)
    p.add_argument("--generations", type=int, default=50)
    p.add_argument("--train-days", type=int, default=768)
    p.add_argument("--device", default="cuda")
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--json", type=Path)
    p.add_argument("--cprofile", type=Path, help="also write cProfile's top functions of the "
                   "first run (cumulative time) to this text file")
    args = p.parse_args()
    import run_engine

    importlib.import_module("engine.commands.evolve")
    t_imports = time.perf_counter() - T_START
    out_dir = Path(tempfile.mkdtemp())
    cmd = ["evolve", "--stocks", str(args.stocks), "--train-days", str(args.train_days),
           "--population", str(args.population), "--generations", str(args.generations),
           "--seed", "1", "--device", args.device, "--out", str(out_dir / "best.json"),
           "--json", str(out_dir / "run.json"), "--quiet"]
    runs: list[dict[str, Any]] = []
    for _ in range(args.runs):
        totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        instrument(totals)
        prof = None
        if args.cprofile and not runs:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        t0 = time.perf_counter()
        rc = run_engine.main(cmd)
        wall = time.perf_counter() - t0
        if prof is not None:
            import io
            import pstats

            prof.disable()
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(60)
            pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(40)
            args.cprofile.write_text(buf.getvalue())
        rep = json.loads((out_dir / "run.json").read_text())
        gens = rep["generations"]
        runs.append({"rc": rc, "main_seconds": wall,
                     "generations_seconds": sum(g["seconds"] for g in gens),
                     "eval_seconds": sum(g["eval_seconds"] for g in gens),
                     "best_fitness": rep["best"]["fitness"],
                     "sections": {k: {"seconds": v[0], "calls": v[1]}
                                  for k, v in sorted(totals.items(), key=lambda kv: -kv[1][0])}})
        restore()
    result = {"imports_seconds": t_imports, "command": cmd, "runs": runs}
    print(f"imports (from this script's first line): {t_imports:.3f} s")
    for i, r in enumerate(runs):
        print(f"run {i}: main {r['main_seconds']:.3f} s, generations "
              f"{r['generations_seconds']:.3f} s (eval {r['eval_seconds']:.3f} s), "
              f"best {r['best_fitness']!r}")
        for k, v in r["sections"].items():
            print(f"  {k:45s} {v['seconds']:8.3f} s  {v['calls']:5d} calls")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
