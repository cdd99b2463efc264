"""gpu.compile_cache: the first-compile announcement, numba's disk cache shared between
processes, and the parallel prewarm from a manifest (real subprocesses, real cache dirs)."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


def _tiny(tmp_path: Path, entries: list[Entry] | None = None) -> str:
    """Writes a manifest whose one profile, "tiny", holds `entries` (ENTRY); returns the
    start of a snippet that imports what the snippets here use and names that file `m`."""
    manifest = tmp_path / "manifest.json"
    compile_cache.save_manifest("tiny", entries or [ENTRY], manifest)
    return ("import json\nfrom pathlib import Path\nfrom gpu import compile_cache\n"
            f"m = Path({str(manifest)!r})\n")


def test_second_process_reuses_the_cache_and_compiles_nothing(tmp_path: Path) -> None:
    first = _run(CALL, tmp_path)
    assert int(first.stdout) >= 1
    assert compile_cache.NOTICE in first.stderr
    second = _run(CALL, tmp_path)
    assert int(second.stdout) == 0
    assert compile_cache.NOTICE not in second.stderr


def test_prewarm_fills_the_cache_for_the_next_process(tmp_path: Path) -> None:
    cache = tmp_path / "numba"
    code = (_tiny(tmp_path) + "h = compile_cache.prewarm('tiny', workers=2, path=m)\n"
            "print(json.dumps(None if h is None else h.n_entries))\n"
            "h is None or h.wait()\n")
    assert json.loads(_run(code, cache).stdout) == 1
    assert int(_run(CALL, cache).stdout) == 0  # the worker's machine code is loaded
    assert json.loads(_run(code, cache).stdout) is None  # warm: no worker starts


def test_deferred_prewarm_makes_the_first_call_wait_for_its_worker(tmp_path: Path) -> None:
    code = (_tiny(tmp_path) + "from gpu.indicators import compute as indicators\n"
            "compile_cache.announce_compiles()\n"
            "h = compile_cache.prewarm('tiny', workers=2, path=m)\n"
            "h.defer()\n"
            "assert indicators._bar_error(3, 7, 10.0, 5.0) != 0\n"  # waits, then loads
            "assert all(p.poll() is not None for p in h.procs)\n"
            "print(compile_cache.compiles())\n")
    assert int(_run(code, tmp_path / "numba").stdout) == 0


#: an independent second kernel (no callee shared with ENTRY's)
OTHER = Entry("strategies.gp.rng", "next_u64", "(Array(uint64, 1, 'C'),)", 1.9)


def test_this_process_and_a_worker_take_the_entries_from_one_queue(tmp_path: Path) -> None:
    code = (_tiny(tmp_path, [ENTRY._replace(seconds=2.0), OTHER]) + "import numpy as np\n"
            "import time\n"
            "from gpu.indicators import compute as indicators\n"
            "from strategies.gp import rng\n"
            "compile_cache.announce_compiles()\n"
            "h = compile_cache.prewarm('tiny', workers=1, own_share=True, path=m)\n"
            "assert h.compiles_here\n"
            "h.defer()\n"
            "while h.queue.given.get(0) is None:\n"  # the worker's feeder takes the first
            "    time.sleep(0.01)\n"
            "failed = h.compile_own()\n"
            "own = [e.qualname for e in h.queue.given.get(compile_cache.OWN, [])]\n"
            "workers = [[e.qualname for e in s] for s in h.shares]\n"
            "after_own = compile_cache.compiles()\n"
            "assert indicators._bar_error(3, 7, 10.0, 5.0) != 0\n"  # the worker's: waits, loads
            "rng.next_u64(np.ones(1, np.uint64))\n"  # compiled here already
            "h.wait()\n"
            "print(json.dumps([own, workers, failed, after_own, compile_cache.compiles()]))\n")
    own, workers, failed, after_own, at_end = json.loads(_run(code, tmp_path / "numba").stdout)
    # the longest entry goes to the worker, free first; this process takes the next
    assert workers == [["_bar_error"]] and own == ["next_u64"]
    assert failed == 0 and after_own >= 1
    assert at_end == after_own  # nothing more compiled in this process


def test_a_worker_takes_the_next_entry_while_this_process_is_busy(tmp_path: Path) -> None:
    code = (_tiny(tmp_path, [ENTRY._replace(seconds=2.0), OTHER]) +
            "h = compile_cache.prewarm('tiny', workers=1, own_share=True, path=m,"
            " message=None)\n"
            "h.procs[0].wait(timeout=240)\n"  # this process does other work meanwhile
            "h.compile_own()\n"
            "print(json.dumps([[e.qualname for e in s] for s in h.shares]))\n")
    shares = json.loads(_run(code, tmp_path / "numba").stdout)
    assert shares == [["_bar_error", "next_u64"]]  # the worker compiled both, one by one


def test_first_run_work_comes_before_the_own_share_and_only_with_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse
    import types

    import run_engine

    calls: list[str] = []

    class Handle:
        def __init__(self, own: bool) -> None:
            self.compiles_here = own

        def defer(self) -> None:
            calls.append("defer")

        def compile_own(self) -> int:
            calls.append("compile_own")
            return 0

    def job() -> None:
        calls.append("job")
        raise OSError("no such file")  # the command itself meets it and says so

    module = types.SimpleNamespace(compile_profile=lambda args: "p",
                                   first_run_work=lambda args: job)
    args = argparse.Namespace(quiet=True, command="evolve")
    monkeypatch.setenv("GTE_PREWARM", "1")
    for own, want in ((True, ["defer", "job", "compile_own"]),
                      (False, ["defer", "compile_own"])):
        calls.clear()

        def prewarm(profile: str, own: bool = own, **kw: Any) -> Handle:
            return Handle(own)

        monkeypatch.setattr(compile_cache, "prewarm", prewarm)
        run_engine._first_run_compiles(module, args)
        assert calls == want


def test_plan_gives_the_commands_process_a_share_only_when_cpus_are_few() -> None:
    assert compile_cache.plan(1) == (0, True)  # no worker: prewarm starts nothing
    assert compile_cache.plan(2) == (1, True)
    assert compile_cache.plan(compile_cache.MAX_WORKERS) == (compile_cache.MAX_WORKERS - 1, True)
    assert compile_cache.plan(16) == (compile_cache.MAX_WORKERS, False)


def test_shares_count_a_workers_head_start() -> None:
    entries = [Entry("m", f"f{i}", "(int64,)", s) for i, s in enumerate((3.0, 2.0, 1.0))]
    own, worker = compile_cache._shares(entries, 2, head_start=[0.0, 2.5])
    assert [e.qualname for e in own] == ["f0", "f2"]  # 3 + 1 against 2.5 + 2
    assert [e.qualname for e in worker] == ["f1"]
    assert compile_cache._shares(entries[:1], 2, head_start=[0.0, 5.0])[1] == []


INDEX_CHECK = ("import fnmatch, json, os\nfrom gpu import compile_cache\n"
               "bad = []\n"
               "for p in json.loads(compile_cache.MANIFEST.read_text()):\n"
               "    for e in compile_cache.load_manifest(p):\n"
               "        real = compile_cache.dispatcher(e)._cache._cache_file._index_path\n"
               "        guess = compile_cache.index_guess(e)\n"
               "        if guess is None or os.path.dirname(real) != str(guess.parent) or "
               "not fnmatch.fnmatch(os.path.basename(real), guess.name):\n"
               "            bad.append([e.qualname, real, str(guess)])\n"
               "print(json.dumps(bad))\n")


@pytest.mark.parametrize("user_dir", [True, False], ids=["NUMBA_CACHE_DIR", "in-tree"])
def test_index_guess_is_where_numba_keeps_each_manifest_index(tmp_path: Path,
                                                              user_dir: bool) -> None:
    """The early start's cold check finds numba's index files without importing numba: the
    paths it guesses must be numba's own, under either of the locators this project uses
    (a numba that moves them fails here, not silently in a user's warm run)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    if user_dir:
        env["NUMBA_CACHE_DIR"] = str(tmp_path)
    else:
        env.pop("NUMBA_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", INDEX_CHECK], capture_output=True, text=True,
                         env=env, cwd=REPO, check=True, timeout=300)
    assert json.loads(out.stdout) == []


@pytest.mark.skipif(compile_cache.available_cpus() < 2, reason="no CPU for a worker")
def test_early_workers_import_first_then_compile_the_share_prewarm_sends(
        tmp_path: Path) -> None:
    code = (_tiny(tmp_path, [ENTRY._replace(seconds=2.0), OTHER]) +
            "cold = compile_cache.likely_cold('tiny', m)\n"
            "early = compile_cache.start_early('tiny', m)\n"
            "n_early = None if early is None else len(early.procs)\n"
            "h = compile_cache.prewarm('tiny', path=m, message=None, early=early)\n"
            "h.defer()\n"
            "h.compile_own()\n"
            "h.wait()\n"
            "print(json.dumps([cold, n_early, h.n_entries]))\n")
    cache = tmp_path / "numba"
    cold, n_early, n_entries = json.loads(_run(code, cache).stdout)
    workers, _ = compile_cache.plan(compile_cache.available_cpus())
    assert cold is True and n_early == workers and n_entries == 2
    again = (_tiny(tmp_path, [ENTRY._replace(seconds=2.0), OTHER]) +
             "print(compile_cache.likely_cold('tiny', m), compile_cache.start_early('tiny', m))\n")
    assert _run(again, cache).stdout.split() == ["False", "None"]  # warm: nothing starts
    assert int(_run(CALL, cache).stdout) == 0


@pytest.mark.skipif(compile_cache.available_cpus() < 2, reason="no CPU for a worker")
def test_no_early_worker_when_the_commands_own_process_would_compile_everything(
        tmp_path: Path) -> None:
    """A one-function manifest (as `select`'s) goes to the command's own process where it
    compiles a share (few CPUs): a worker started early would only import."""
    code = (_tiny(tmp_path) + "h = compile_cache.start_early('tiny', m)\n"
            "print(None if h is None else len(h.procs))\n"
            "h is None or h.release()\n")
    _, own = compile_cache.plan(compile_cache.available_cpus())
    assert _run(code, tmp_path / "numba").stdout.strip() == ("None" if own else "1")


@pytest.mark.skipif(compile_cache.available_cpus() < 2, reason="no CPU for a worker")
def test_one_function_gets_a_worker_when_the_commands_process_is_busy_first(
        tmp_path: Path) -> None:
    """`evolve-cpu`'s one evaluator: the command's process parses data and imports
    matplotlib first (`first_run_work`), so a worker compiles it meanwhile, started early
    or by `prewarm`; and it compiles it, not this process."""
    code = (_tiny(tmp_path) + "e = compile_cache.start_early('tiny', m, busy_first=True)\n"
            "n_early = None if e is None else len(e.procs)\n"
            "e is None or e.release()\n"
            "h = compile_cache.prewarm('tiny', workers=1, own_share=True, path=m,"
            " message=None, busy_first=True)\n"
            "h.procs[0].wait(timeout=240)\n"  # this process's own first work
            "h.compile_own()\n"
            "print(json.dumps([n_early, [[x.qualname for x in s] for s in h.shares]]))\n")
    n_early, shares = json.loads(_run(code, tmp_path / "numba").stdout)
    workers, _ = compile_cache.plan(compile_cache.available_cpus())
    assert n_early == min(workers, 1) and shares == [["_bar_error"]]


def test_run_engine_knows_which_commands_have_first_run_work() -> None:
    import importlib

    import run_engine

    have = {name for name in run_engine.COMMANDS
            if hasattr(importlib.import_module(f"engine.commands.{name}"), "first_run_work")}
    assert have == set(run_engine.FIRST_RUN_WORK)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=12)
#: a manifest's profile with a row of any JSON values in its fields
rows = st.fixed_dictionaries({"module": json_values, "qualname": json_values,
                              "signature": json_values, "seconds": json_values})


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.one_of(st.text(max_size=40), st.binary(max_size=40).map(repr),
                      json_values.map(json.dumps),
                      st.dictionaries(st.sampled_from(["tiny", "tiny-cpu", "other"]),
                                      st.lists(rows, max_size=3) | json_values,
                                      max_size=3).map(json.dumps)))
def test_a_malformed_manifest_only_loses_the_head_start(tmp_path: Path, text: str) -> None:
    """Whatever the manifest file holds, reading it and deciding on an early start never
    raise: the command then compiles what it calls, as without a manifest."""
    manifest = tmp_path / "manifest.json"
    manifest.write_text(text)
    profiles = compile_cache.read_manifest(manifest)
    assert all(isinstance(e, Entry) for entries in profiles.values() for e in entries)
    assert compile_cache.likely_cold("tiny", manifest) in (True, False)
    before = os.environ.get("GTE_PREWARM")
    os.environ["GTE_PREWARM"] = "1"  # (the suite turns the early start off)
    try:
        early = compile_cache.start_early("tiny", manifest)
    finally:
        if before is None:
            del os.environ["GTE_PREWARM"]
        else:
            os.environ["GTE_PREWARM"] = before
    if early is not None:  # rows that name a real module file: workers, released here
        early.release()
        for proc in early.procs:
            assert proc.wait(timeout=60) == 0


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
    code = (_tiny(tmp_path) + "h = compile_cache.prewarm('tiny', workers=2, path=m)\n"
            "h.stop()\n"
            "print(all(p.returncode is not None for p in h.procs))\n")
    assert _run(code, tmp_path / "numba").stdout.strip() == "True"
