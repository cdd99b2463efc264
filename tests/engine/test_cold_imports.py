"""What a command that needs no kernel imports: no numba, no numba.cuda (issue 27, goal 3).

A cold process compiles the bytecode of every module it imports; numba and numba.cuda
were 1.4 s of a cold `select`'s 2.3 s on the 2-core dev VM, reached through the engine's
config (the option groups' settings imported the pricing engines), the subset search's
kernels and the GPU check (benchmarks/results/devbox-2026-11-28f-cold-start-select/).
Each check runs a fresh interpreter and reads its `sys.modules` at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from strategies.selection import write_returns

ROOT = Path(__file__).resolve().parents[2]

HEAVY = ("numba", "numba.cuda", "llvmlite")


def _loaded_after(code: str, tmp_path: Path) -> list[str]:
    """The heavy modules a fresh interpreter holds after running `code` (cwd `tmp_path`,
    without the CUDA simulator: this is the start of a user's command)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = str(ROOT)
    report = ("\nimport json as _json, sys as _sys\n"
              f"print(_json.dumps(sorted(m for m in _sys.modules if m in {HEAVY!r})))\n")
    r = subprocess.run([sys.executable, "-c", code + report], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    loaded: list[str] = json.loads(r.stdout.strip().splitlines()[-1])
    return loaded


def test_the_select_command_module_imports_no_numba(tmp_path: Path) -> None:
    assert _loaded_after("import engine.commands.select", tmp_path) == []


def test_a_small_select_runs_without_numba(tmp_path: Path) -> None:
    """The whole command, through run_engine, on a search small enough to run
    uncompiled (24 strategies, k = 3: the cold-start benchmark's); on the CPU, so the
    answer does not depend on this machine's GPU."""
    returns = tmp_path / "returns.csv"
    r = np.random.default_rng(1).normal(0.0, 0.01, (250, 24))
    write_returns(returns, [f"s{i}" for i in range(24)], r)
    code = ("import run_engine\n"
            f"rc = run_engine.main(['select', '--returns', {str(returns)!r}, '--k', '3', "
            f"'--device', 'cpu', '--json', {str(tmp_path / 'sel.json')!r}])\n"
            "assert rc == 0, rc\n")
    assert _loaded_after(code, tmp_path) == []
    doc = json.loads((tmp_path / "sel.json").read_text())
    assert doc["k"] == 3 and len(doc["subset"]) == 3


def test_the_engine_config_checks_option_groups_without_the_pricing_code(
        tmp_path: Path) -> None:
    """A config with an option group (grid, step counts, the clock) is read and checked,
    and a bad grid is refused, without importing the pricing engines or numba."""
    good = tmp_path / "good.toml"
    good.write_text('options_every_ms = 100\n\n[[options]]\nunderlying = "AAPL"\n'
                    'strikes = [100.0]\nexpiries = [30]\ngrid = "fine"\nprice_steps = 200\n')
    bad = tmp_path / "bad.toml"
    bad.write_text('[[options]]\nunderlying = "AAPL"\nstrikes = [100.0]\nexpiries = [30]\n'
                   'grid = "coarse"\n')
    code = ("from engine.errors import UserError\n"
            "from engine.settings.config import load_config\n"
            f"cfg = load_config({str(good)!r})\n"
            "assert cfg.options[0].grid == 'fine' and cfg.options_every_ms == 100\n"
            "try:\n"
            f"    load_config({str(bad)!r})\n"
            "except UserError as e:\n"
            "    assert 'grid must be one of' in str(e), e\n"
            "else:\n"
            "    raise AssertionError('a bad grid was accepted')\n"
            "import sys\n"
            "assert 'gpu.options.engines' not in sys.modules\n")
    assert _loaded_after(code, tmp_path) == []


@pytest.mark.parametrize("module", ["engine.settings.resolve", "engine.settings.flags",
                                    "gpu.subset.search", "strategies.selection",
                                    "feeds.validation", "gpu.options.grids",
                                    "engine.options.config"])
def test_light_modules_stay_light(module: str, tmp_path: Path) -> None:
    assert _loaded_after(f"import {module}", tmp_path) == []
