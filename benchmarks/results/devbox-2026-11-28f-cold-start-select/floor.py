"""The floor of a cold start with bytecode `all`: the interpreter alone (`-c pass`, which
runs this machine's site hooks: the editable install's finder, numba-cuda's redirector)
and with numpy (`-c "import numpy"`), cold (empty PYTHONPYCACHEPREFIX) then warm twice,
in benchmarks/cold_start.py's environment, ROUNDS rounds alternating; writes floor.json.

    python benchmarks/results/devbox-2026-11-28f-cold-start-select/floor.py [ROUNDS]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SNIPPETS = {"interpreter": "pass", "numpy": "import numpy"}


def timed(code: str, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return time.perf_counter() - t0


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    runs: dict[str, dict[str, list[float]]] = {k: {"cold": [], "warm": []} for k in SNIPPETS}
    for _ in range(rounds):
        for name, code in SNIPPETS.items():
            caches = Path(tempfile.mkdtemp(prefix="floor-"))
            env = {k: v for k, v in os.environ.items()
                   if k not in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")}
            env["PYTHONPYCACHEPREFIX"] = str(caches / "pycache")
            runs[name]["cold"].append(timed(code, env))
            runs[name]["warm"] += [timed(code, env), timed(code, env)]
    out = {}
    for name, r in runs.items():
        c, w = statistics.median(r["cold"]), statistics.median(r["warm"])
        out[name] = {**r, "cold_median": c, "warm_median": w, "ratio": c / w}
        print(f"{name:12} cold {c:.3f} s  warm {w:.3f} s  ratio {c / w:.1f}")
    Path(__file__).with_name("floor.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
