"""A command's first run: say when kernels compile, and compile them in parallel processes.

numba compiles a kernel the first time a process calls it and keeps the machine code in its
on-disk cache (`cache=True` everywhere in this project, see gpu/twin.py): every later run
loads it in milliseconds. With empty caches a run compiles everything it calls, one
function after another under numba's global compiler lock, which was most of a cold run's
wall time (about 75 of the 86 s of a small CPU `evolve` on the 2-core devbox).

Two things here:

- `announce_compiles`: a numba event listener that writes one progress line on stderr
  the first time this process compiles anything ("compiling GP kernels (first run; cached
  afterwards)…"), so a slow first run says why; a warm run prints nothing. It also counts
  compilations (`compiles`), which is how the tests check that a second process reuses
  the first one's cache and compiles nothing.
- `prewarm`: the functions a command compiles at top level (a committed manifest,
  `compile_manifest.json`, recorded by `benchmarks/cold_start.py --record`) are compiled by
  worker processes, several at once, into the same on-disk cache before the command calls
  them; the command then loads them from the cache. Only entries whose cache index is
  missing are compiled, so a warm run starts no process. A manifest entry that no longer
  matches the code (renamed function, other signature) costs a wasted compile at worst:
  the command compiles what it really calls itself, as without a manifest.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TextIO

MANIFEST = Path(__file__).with_name("compile_manifest.json")
NOTICE = "compiling kernels (first run; cached afterwards)…"
#: more workers than this buys little: the longest single compile bounds the wall time
MAX_WORKERS = 8


class Entry(NamedTuple):
    """One top-level compilation: `module.qualname` for `signature` (repr of numba types)."""

    module: str
    qualname: str
    signature: str
    seconds: float


class _Listener:
    """numba `numba:compile` listener: counts compilations, announces the first one."""

    def __init__(self) -> None:
        self.compiles = 0
        self.message: str | None = None
        self.stream: TextIO = sys.stderr

    def notify(self, event: Any) -> None:
        if not event.is_start:
            return
        self.compiles += 1
        if self.message is not None:
            print(self.message, file=self.stream, flush=True)
            self.message = None


_listener: _Listener | None = None


def _installed() -> _Listener:
    global _listener
    if _listener is None:
        from numba.core import event

        listener = _Listener()
        event.register("numba:compile", _as_numba_listener(listener))
        _listener = listener
    return _listener


def _as_numba_listener(listener: _Listener) -> Any:
    from numba.core import event

    class Forward(event.Listener):
        def on_start(self, ev: Any) -> None:
            listener.notify(ev)

        def on_end(self, ev: Any) -> None:
            pass

    return Forward()


def announce_compiles(message: str = NOTICE, stream: TextIO | None = None) -> None:
    """Write `message` once on `stream` (stderr) when this process first compiles a kernel
    (a cache miss; loading from numba's disk cache is silent). GTE_COMPILE_NOTICE=0 keeps
    it quiet (the test suite's setting: its one-line-error checks read stderr whole, and
    which test compiles first depends on the order they run in)."""
    listener = _installed()
    listener.message = None if os.environ.get("GTE_COMPILE_NOTICE", "1") == "0" else message
    listener.stream = stream or sys.stderr


def silence_announcement() -> None:
    """Drop a pending announcement (its line has been said another way)."""
    if _listener is not None:
        _listener.message = None


def compiles() -> int:
    """How many compilations this process has started since the listener was installed."""
    return _installed().compiles


# --------------------------------------------------------------------------- manifest
def load_manifest(profile: str, path: Path = MANIFEST) -> list[Entry]:
    """The recorded top-level compilations of `profile` (empty if none recorded)."""
    if not path.is_file():
        return []
    rows = json.loads(path.read_text()).get(profile, [])
    return [Entry(r["module"], r["qualname"], r["signature"], float(r["seconds"])) for r in rows]


def save_manifest(profile: str, entries: Iterable[Entry], path: Path = MANIFEST) -> None:
    """Replace `profile`'s entries in the manifest (other profiles are kept)."""
    data = json.loads(path.read_text()) if path.is_file() else {}
    data[profile] = [e._asdict() for e in entries]
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def dispatcher(entry: Entry) -> Any | None:
    """The numba dispatcher an entry names, or None where the code no longer has it."""
    try:
        obj: Any = importlib.import_module(entry.module)
        for part in entry.qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    return obj if hasattr(obj, "compile") and hasattr(obj, "py_func") else None


def signature(entry: Entry) -> tuple[Any, ...]:
    """The argument types of an entry, rebuilt from their repr in numba's types module."""
    from numba.core import types

    value = eval(entry.signature, {"__builtins__": {}}, dict(vars(types)))  # noqa: S307
    return tuple(value)


def is_cached(disp: Any) -> bool:
    """Whether numba's disk cache holds an index for `disp` (any signature)."""
    cache_file = getattr(getattr(disp, "_cache", None), "_cache_file", None)
    index = getattr(cache_file, "_index_path", None)
    return index is not None and os.path.isfile(index)


# --------------------------------------------------------------------------- prewarm
class Prewarm:
    """Worker processes compiling manifest entries into numba's disk cache."""

    def __init__(self, procs: Sequence[subprocess.Popen[bytes]],
                 shares: Sequence[Sequence[Entry]]) -> None:
        self.procs = list(procs)
        self.shares = [list(s) for s in shares]
        self.n_entries = sum(len(s) for s in shares)

    def wait(self) -> None:
        """Block until every worker has finished (a failed worker is only a lost head start)."""
        for p in self.procs:
            p.wait()

    def stop(self) -> None:
        """End the workers still running (the command failed: their work is not needed).
        numba writes a cache file under a temporary name and renames it, so a worker ended
        mid-write leaves no torn entry."""
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        self.wait()

    def defer(self) -> None:
        """Let the command run on while the workers compile: the first call of a manifest
        function waits for the worker compiling it, then loads it from the disk cache. So
        the command's own work (reading data, compiling CUDA kernels, which the manifest
        does not hold) overlaps the workers'. A manifest function compiled as another
        function's callee does not wait (it is compiled in-process, as without prewarm)."""
        for proc, share in zip(self.procs, self.shares, strict=True):
            for entry in share:
                disp = dispatcher(entry)
                if disp is not None and "_compile_for_args" not in vars(disp):
                    _wait_for(disp, proc)


def _wait_for(disp: Any, proc: subprocess.Popen[bytes]) -> None:
    """Make `disp`'s next compilation from a call wait for `proc` first (numba's dispatcher
    looks `_compile_for_args` up on the instance when a call's types miss)."""
    original = disp._compile_for_args

    def compile_after_worker(*args: Any, **kws: Any) -> Any:
        proc.wait()
        vars(disp).pop("_compile_for_args", None)  # back to the class's method
        return original(*args, **kws)

    disp._compile_for_args = compile_after_worker


def _shares(entries: Sequence[Entry], n: int) -> list[list[Entry]]:
    """Longest first, each to the least loaded worker; a function's signatures stay
    together (two processes writing one function's cache index could drop an entry)."""
    groups: dict[tuple[str, str], list[Entry]] = {}
    for e in entries:
        groups.setdefault((e.module, e.qualname), []).append(e)
    loads = [0.0] * n
    shares: list[list[Entry]] = [[] for _ in range(n)]
    for group in sorted(groups.values(), key=lambda g: -sum(e.seconds for e in g)):
        k = loads.index(min(loads))
        shares[k].extend(group)
        loads[k] += sum(e.seconds for e in group)
    return [s for s in shares if s]


def available_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def prewarm(profile: str, workers: int | None = None, message: str | None = NOTICE,
            path: Path = MANIFEST) -> Prewarm | None:
    """Start compiling `profile`'s uncached manifest entries in worker processes.

    None (nothing started) when the manifest has no such entries, when fewer than two CPUs
    are free for workers, or when numba's disk cache is off. `message` is written on stderr
    when workers start (then the in-process announcement is dropped)."""
    n = min(MAX_WORKERS, workers if workers is not None else available_cpus())
    if n < 2 or os.environ.get("NUMBA_DISABLE_JIT") == "1":
        return None
    missing = []
    for entry in load_manifest(profile, path):
        disp = dispatcher(entry)
        if disp is not None and not is_cached(disp):
            missing.append(entry)
    if not missing:
        return None
    shares = _shares(missing, n)
    procs = [subprocess.Popen([sys.executable, "-m", "gpu.compile_cache"],
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              env={**os.environ, "PYTHONPATH": _pythonpath()})
             for _ in shares]
    for proc, share in zip(procs, shares, strict=True):
        assert proc.stdin is not None
        proc.stdin.write(json.dumps([e._asdict() for e in share]).encode())
        proc.stdin.close()
    if message:
        print(f"{message} ({len(missing)} in {len(procs)} processes)", file=sys.stderr,
              flush=True)
        silence_announcement()
    return Prewarm(procs, shares)


def _pythonpath() -> str:
    """The worker imports this checkout's packages, wherever the parent found them."""
    root = str(Path(__file__).resolve().parent.parent)
    rest = os.environ.get("PYTHONPATH", "")
    return root + (os.pathsep + rest if rest else "")


def compile_entries(entries: Iterable[Entry]) -> int:
    """Compile each entry into the disk cache; returns how many could not be compiled."""
    failed = 0
    for entry in entries:
        disp = dispatcher(entry)
        try:
            if disp is None:
                raise LookupError("no such function")
            disp.compile(signature(entry))
        except Exception as e:  # noqa: BLE001 - a stale entry only loses its head start
            failed += 1
            print(f"prewarm: {entry.module}.{entry.qualname}{entry.signature}: {e}",
                  file=sys.stderr)
    return failed


def _worker() -> int:
    rows = json.loads(sys.stdin.read())
    compile_entries(Entry(r["module"], r["qualname"], r["signature"], r["seconds"])
                    for r in rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(_worker())
