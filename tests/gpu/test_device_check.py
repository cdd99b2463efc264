"""gpu.device.cuda_present: numba's answer (`numba.cuda.is_available()`), given without
importing numba where numba's own check must fail at its first step (no CUDA driver
library loads). Each case runs in a fresh interpreter, as a command's start does; on the
GPU machine the same cases check the answer where the driver is present."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHECK = """
import json, sys
from gpu import device
quick = device._no_cuda_driver()
present = device.cuda_present()
imported = "numba" in sys.modules
try:
    from numba import cuda
    numba_says = bool(cuda.is_available())
except Exception:
    numba_says = False
print(json.dumps({"quick": quick, "present": present, "numba_imported": imported,
                  "numba_says": numba_says}))
"""


def _check(tmp_path: Path, **settings: str) -> dict[str, bool]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_ENABLE_CUDASIM", "NUMBA_DISABLE_CUDA")}
    env.update(PYTHONPATH=str(ROOT), **settings)
    r = subprocess.run([sys.executable, "-c", CHECK], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    answer: dict[str, bool] = json.loads(r.stdout.strip().splitlines()[-1])
    return answer


@pytest.mark.parametrize("settings", [{}, {"NUMBA_ENABLE_CUDASIM": "1"},
                                      {"NUMBA_ENABLE_CUDASIM": "0"},
                                      {"NUMBA_DISABLE_CUDA": "1"}],
                         ids=["plain", "simulator", "simulator-off", "cuda-disabled"])
def test_the_answer_is_numbas(settings: dict[str, str], tmp_path: Path) -> None:
    a = _check(tmp_path, **settings)
    assert a["present"] == a["numba_says"], a
    if a["quick"]:  # answered without numba: no driver, and numba agrees
        assert not a["present"] and not a["numba_imported"], a
    if settings.get("NUMBA_ENABLE_CUDASIM") == "1":
        assert a["present"] and not a["quick"], a
    if settings.get("NUMBA_DISABLE_CUDA") == "1":
        assert not a["present"] and not a["quick"], a  # numba decides: the switch is set


def test_no_driver_means_no_numba_import(tmp_path: Path) -> None:
    """On a machine without the CUDA driver library (the dev VM; CI), the check imports
    neither numba nor numba.cuda; where the library loads, numba answers."""
    a = _check(tmp_path)
    if not a["quick"]:
        pytest.skip("a CUDA driver library loads here: numba answers (checked above)")
    assert a == {"quick": True, "present": False, "numba_imported": False,
                 "numba_says": False}


def test_a_numba_config_file_leaves_the_answer_to_numba(tmp_path: Path) -> None:
    """numba reads its settings from .numba_config.yaml in the working folder too: with
    one there the quick answer is never given."""
    (tmp_path / ".numba_config.yaml").write_text("enable_cudasim: 1\n")
    a = _check(tmp_path)
    assert not a["quick"] and a["present"] == a["numba_says"], a
