"""gpu.compile_cache: the first-compile announcement, numba's disk cache shared between
processes, and the parallel prewarm from a manifest (real subprocesses, real cache dirs)."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu import compile_cache
from gpu.compile_cache import Entry

REPO = Path(__file__).resolve().parents[2]

# a small kernel of the project: compiles in about a second
CALL = ("from gpu import compile_cache\n"
        "compile_cache.announce_compiles()\n"
        "from gpu.indicators import compute as indicators\n"
        "assert indicators._bar_error(3, 1, 10.0, 5.0) == 0\n"
        "print(compile_cache.compiles())\n")
ENTRY = Entry("gpu.indicators.compute", "_bar_error", "(int64, int64, float64, float64)", 0.5)


def _run(code: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO),
           "GTE_PREWARM": "1", "GTE_COMPILE_NOTICE": "1"}  # the suite turns both off
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=REPO, check=True, timeout=300)


def test_second_process_reuses_the_cache_and_compiles_nothing(tmp_path: Path) -> None:
    first = _run(CALL, tmp_path)
    assert int(first.stdout) >= 1
    assert compile_cache.NOTICE in first.stderr
    second = _run(CALL, tmp_path)
    assert int(second.stdout) == 0
    assert compile_cache.NOTICE not in second.stderr


def test_prewarm_fills_the_cache_for_the_next_process(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    compile_cache.save_manifest("tiny", [ENTRY], manifest)
    cache = tmp_path / "numba"
    code = ("import json, sys\nfrom pathlib import Path\nfrom gpu import compile_cache\n"
            f"h = compile_cache.prewarm('tiny', workers=2, path=Path({str(manifest)!r}))\n"
            "print(json.dumps(None if h is None else h.n_entries))\n"
            "h is None or h.wait()\n")
    assert json.loads(_run(code, cache).stdout) == 1
    assert int(_run(CALL, cache).stdout) == 0  # the worker's machine code is loaded
    assert json.loads(_run(code, cache).stdout) is None  # warm: no worker starts


def test_deferred_prewarm_makes_the_first_call_wait_for_its_worker(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    compile_cache.save_manifest("tiny", [ENTRY], manifest)
    code = ("from pathlib import Path\nfrom gpu import compile_cache\n"
            "from gpu.indicators import compute as indicators\n"
            "compile_cache.announce_compiles()\n"
            f"h = compile_cache.prewarm('tiny', workers=2, path=Path({str(manifest)!r}))\n"
            "h.defer()\n"
            "assert indicators._bar_error(3, 7, 10.0, 5.0) != 0\n"  # waits, then loads
            "assert all(p.poll() is not None for p in h.procs)\n"
            "print(compile_cache.compiles())\n")
    assert int(_run(code, tmp_path / "numba").stdout) == 0


def test_stale_entries_are_counted_not_raised() -> None:
    stale = [Entry("gpu.indicators.compute", "no_such_kernel", "(int64,)", 1.0),
             Entry("gpu.no_such_module", "f", "(int64,)", 1.0),
             Entry("gpu.indicators.compute", "_bar_error", "(int64,)", 1.0)]  # wrong arity
    assert compile_cache.compile_entries(stale) == 3


def test_shares_balance_and_keep_a_functions_signatures_together() -> None:
    entries = [Entry("m", f"f{i}", "(int64,)", float(i)) for i in range(1, 7)]
    entries.append(Entry("m", "f6", "(float64,)", 1.0))
    shares = compile_cache._shares(entries, 3)
    assert sorted(e for s in shares for e in s) == sorted(entries)
    homes = {i for i, s in enumerate(shares) for e in s if e.qualname == "f6"}
    assert len(homes) == 1
    loads = [sum(e.seconds for e in s) for s in shares]
    assert max(loads) - min(loads) <= 1.0  # 7, 5+2, 4+3 then 1 on the least loaded
    assert len(compile_cache._shares(entries, 1)) == 1


@pytest.mark.parametrize("profile", sorted(json.loads(compile_cache.MANIFEST.read_text())))
def test_committed_manifest_names_real_kernels(profile: str) -> None:
    entries = compile_cache.load_manifest(profile)
    assert entries
    for e in entries:
        disp = compile_cache.dispatcher(e)
        assert disp is not None, e
        # an added or dropped parameter makes the entry stale: re-record the profile
        code = disp.py_func.__code__
        star = 1 if code.co_flags & inspect.CO_VARARGS else 0  # numba packs *args in a Tuple
        assert len(compile_cache.signature(e)) == code.co_argcount + star, e


def test_stop_ends_the_workers_of_a_failed_command(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    compile_cache.save_manifest("tiny", [ENTRY], manifest)
    code = ("from pathlib import Path\nfrom gpu import compile_cache\n"
            f"h = compile_cache.prewarm('tiny', workers=2, path=Path({str(manifest)!r}))\n"
            "h.stop()\n"
            "print(all(p.returncode is not None for p in h.procs))\n")
    assert _run(code, tmp_path / "numba").stdout.strip() == "True"
