"""The process entry (`python run_engine.py`, the `gte` console command) freezes what the
command left out of the cyclic garbage collector before the interpreter exits (its final
collections walked every object numba made: 0.3-0.7 s of each command's exit), and
nothing a command writes is lost on the way out: results on stdout through a pipe, files,
exit codes and one-line errors. `main` called inside a longer-lived process leaves the
collector alone. Each check runs a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np

from strategies.selection import write_returns

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    # this checkout first, and whatever else the test process was given (site folders)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=180, check=False)


def _returns(tmp_path: Path) -> Path:
    path = tmp_path / "returns.csv"
    r = np.random.default_rng(3).normal(0.0, 0.01, (120, 12))
    write_returns(path, [f"s{i}" for i in range(12)], r)
    return path


def test_results_on_a_pipe_and_in_files_survive_the_exit(tmp_path: Path) -> None:
    returns = _returns(tmp_path)
    piped = _run([str(ROOT / "run_engine.py"), "select", "--returns", str(returns), "--k",
                  "3", "--device", "cpu", "--json", "-"], tmp_path)
    assert piped.returncode == 0, piped.stderr
    doc = json.loads(piped.stdout)
    assert doc["k"] == 3 and len(doc["subset"]) == 3
    out = tmp_path / "replay"
    ran = _run([str(ROOT / "run_engine.py"), "replay", "--ticks", "3000", "--n-symbols",
                "2", "--device", "cpu", "--out", str(out), "--json",
                str(tmp_path / "r.json")], tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert json.loads((tmp_path / "r.json").read_text())["ticks"] > 0
    assert sorted(p.name for p in out.iterdir())  # its report files are all there


def test_errors_keep_their_exit_code_and_line(tmp_path: Path) -> None:
    bad = _run([str(ROOT / "run_engine.py"), "select", "--returns",
                str(tmp_path / "missing.csv"), "--k", "3", "--quiet"], tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "missing.csv" in bad.stderr, bad.stderr
    usage = _run([str(ROOT / "run_engine.py"), "select", "--k", "x"], tmp_path)
    assert usage.returncode == 2 and "invalid" in usage.stderr


def test_entry_freezes_and_main_does_not(tmp_path: Path) -> None:
    returns = _returns(tmp_path)
    argv = ["select", "--returns", str(returns), "--k", "2", "--device", "cpu", "--json",
            str(tmp_path / "s.json")]
    code = ("import gc, sys, run_engine\n"
            f"sys.argv = ['run_engine.py', *{argv!r}]\n"
            "before = gc.get_freeze_count()\n"
            "rc = run_engine.{fn}()\n"
            "print(rc, before, gc.get_freeze_count())\n")
    for fn, frozen in (("entry", True), ("main", False)):
        r = _run(["-c", code.replace("{fn}", fn)], tmp_path)
        assert r.returncode == 0, r.stderr
        rc, before, after = (int(x) for x in r.stdout.split()[-3:])
        assert rc == 0 and before == 0
        assert (after > 0) is frozen, (fn, after)


def test_the_console_command_is_the_entry() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["gte"] == "run_engine:entry"
