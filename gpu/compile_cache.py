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
  them; the command then loads them from the cache. With few CPUs the command's own
  process compiles a share too (`plan`): it would otherwise only wait, while a worker in
  its place costs its start. Only entries whose cache index is
  missing are compiled, so a warm run starts no process. A manifest entry that no longer
  matches the code (renamed function, other signature) costs a wasted compile at worst:
  the command compiles what it really calls itself, as without a manifest.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.abc
import importlib.util
import json
import math
import os
import sys
import threading
import time
import types
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TextIO

if TYPE_CHECKING:  # imported where a worker starts: a run that starts none never loads it
    import subprocess

MANIFEST = Path(__file__).with_name("compile_manifest.json")
NOTICE = "compiling kernels (first run; cached afterwards)…"
#: more workers than this buys little: the longest single compile bounds the wall time
MAX_WORKERS = 8
#: seconds from a worker's start to its first compile: Python, numba's and the project's
#: imports and numba's CPU target set-up (2-core dev VM, 2026-11-28: 2.5-4.2 s in a cold
#: run beside the command's own imports; 1.2-1.7 s alone)
WORKER_START = 1.2


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
    which test compiles first depends on the order they run in). In a process that has
    not imported numba, the listener is installed when numba is imported: this call does
    not import it (a command that imports its kernels only when it runs them compiled,
    `select`'s search, then starts without numba: issue 27's cold start)."""
    if "numba" not in sys.modules:
        _AfterImport.install("numba", lambda: announce_compiles(message, stream))
        return
    listener = _installed()
    listener.message = None if os.environ.get("GTE_COMPILE_NOTICE", "1") == "0" else message
    listener.stream = stream or sys.stderr


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls `then()` right after the first import of module `name` has run (an import
    hook on `sys.meta_path` that finds nothing itself: the other finders find the module,
    and its loader's `exec_module` is wrapped for this one load)."""

    def __init__(self, name: str, then: Callable[[], object]) -> None:
        self.name, self.then = name, then

    @classmethod
    def install(cls, name: str, then: Callable[[], object]) -> None:
        for finder in sys.meta_path:  # one hook per module: the newest `then` wins
            if isinstance(finder, cls) and finder.name == name:
                finder.then = then
                return
        sys.meta_path.insert(0, cls(name, then))

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = None if spec is None else spec.loader
        if loader is not None and hasattr(loader, "exec_module"):
            run = loader.exec_module

            def exec_module(module: types.ModuleType) -> None:
                run(module)
                self.then()

            loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def silence_announcement() -> None:
    """Drop a pending announcement (its line has been said another way)."""
    if _listener is not None:
        _listener.message = None


def compiles() -> int:
    """How many compilations this process has started since the listener was installed."""
    return _installed().compiles


# --------------------------------------------------------------------------- manifest
def read_manifest(path: Path = MANIFEST) -> dict[str, list[Entry]]:
    """Every recorded profile. A missing or malformed file reads as none: the manifest only
    buys a head start, so a broken one must not stop a command (each then compiles what
    it calls, as without a manifest)."""
    try:
        data = json.loads(path.read_text())
        return {str(profile): [Entry(str(r["module"]), str(r["qualname"]), str(r["signature"]),
                                     float(r["seconds"])) for r in rows]
                for profile, rows in data.items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


def load_manifest(profile: str, path: Path = MANIFEST) -> list[Entry]:
    """The recorded top-level compilations of `profile` (empty if none recorded)."""
    return read_manifest(path).get(profile, [])


def command_profiles(command: str, path: Path = MANIFEST) -> list[list[Entry]]:
    """The entries of each profile `command` may compile: "evolve" has "evolve-cpu" and
    "evolve-cuda", "select" has "select"."""
    return [entries for profile, entries in read_manifest(path).items()
            if profile == command or profile.startswith(command + "-")]


def save_manifest(profile: str, entries: Iterable[Entry], path: Path = MANIFEST) -> None:
    """Replace `profile`'s entries in the manifest (other profiles are kept); a profile
    with none (its command compiles nothing at top level: `select`'s small search) is
    dropped."""
    data = json.loads(path.read_text()) if path.is_file() else {}
    data[profile] = [e._asdict() for e in entries]
    if not data[profile]:
        del data[profile]
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
class _Queue:
    """Manifest entries, a function's signatures together (two processes writing one
    function's cache index could drop an entry), longest first, handed out one group at a
    time to whoever is free: each worker's feeder thread and the command's own process.
    So nobody waits while another has work left, however long each start or the
    command's own first work takes (static shares rest on estimates of both)."""

    def __init__(self, groups: Iterable[list[Entry]]) -> None:
        self._groups = deque(groups)
        self._lock = threading.Lock()
        #: the entries each taker got (worker k, or OWN for the command's process)
        self.given: dict[int, list[Entry]] = {}

    def take(self, who: int) -> list[Entry] | None:
        """The next group for `who` (None when all are given out)."""
        with self._lock:
            if not self._groups:
                return None
            group = self._groups.popleft()
            self.given.setdefault(who, []).extend(group)
            return group

    def put_back(self, who: int, group: list[Entry]) -> None:
        """A group a worker could not take (it died): for the others."""
        with self._lock:
            self._groups.appendleft(group)
            mine = self.given.get(who, [])
            self.given[who] = [e for e in mine if e not in group]

    def clear(self) -> None:
        with self._lock:
            self._groups.clear()


#: the command's own process as a taker of `_Queue`
OWN = -1


class Prewarm:
    """Worker processes compiling manifest entries into numba's disk cache: fixed shares
    (`shares`, `own`), or with `queue` groups handed out as each one is free (the command's
    process taking its part in `compile_own`)."""

    def __init__(self, procs: Sequence[subprocess.Popen[bytes]],
                 shares: Sequence[Sequence[Entry]], own: Sequence[Entry] = (),
                 queue: _Queue | None = None) -> None:
        self.procs = list(procs)
        self.shares = [list(s) for s in shares]
        #: the command's own process's share (`compile_own`)
        self.own = list(own)
        self.queue = queue
        self.n_entries = sum(len(s) for s in shares) + len(self.own) + (
            sum(len(g) for g in queue._groups) if queue is not None else 0)
        self._feeders = [threading.Thread(target=_feed, args=(proc, k, queue), daemon=True,
                                          name=f"prewarm-feed-{k}")
                         for k, proc in enumerate(self.procs)] if queue is not None else []
        for t in self._feeders:
            t.start()

    @property
    def compiles_here(self) -> bool:
        """Whether the command's own process compiles a part (`compile_own`)."""
        return bool(self.own) or self.queue is not None

    def compile_own(self) -> int:
        """Compile this process's share now, while the workers compile theirs (compiled
        lazily instead, a call of a worker's function in between would wait for the whole
        worker and leave this process's compiles for after it); with a queue, take groups
        until none is left, then make each function a worker took wait for that worker
        (`defer`). Returns the failures."""
        own, self.own = self.own, []
        failed = compile_entries(own)
        if self.queue is not None:
            while (group := self.queue.take(OWN)) is not None:
                failed += compile_entries(group)
            for k, proc in enumerate(self.procs):
                self.shares.append(self.queue.given.get(k, []))
                _defer_share(self.queue.given.get(k, []), proc)
        return failed

    def wait(self) -> None:
        """Block until every worker has finished (a failed worker is only a lost head start)."""
        for t in self._feeders:
            t.join()
        for p in self.procs:
            p.wait()

    def stop(self) -> None:
        """End the workers still running (the command failed: their work is not needed).
        numba writes a cache file under a temporary name and renames it, so a worker ended
        mid-write leaves no torn entry."""
        if self.queue is not None:
            self.queue.clear()
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        self.wait()

    def defer(self) -> None:
        """Let the command run on while the workers compile: the first call of a manifest
        function waits for the worker compiling it, then loads it from the disk cache. So
        the command's own work (reading data, compiling CUDA kernels, which the manifest
        does not hold) overlaps the workers'. A manifest function compiled as another
        function's callee does not wait (it is compiled in-process, as without prewarm).
        With a queue, who compiles what is known once it is empty (`compile_own`)."""
        if self.queue is not None:
            return
        for proc, share in zip(self.procs, self.shares, strict=True):
            _defer_share(share, proc)


def _defer_share(share: Iterable[Entry], proc: subprocess.Popen[bytes]) -> None:
    for entry in share:
        disp = dispatcher(entry)
        if disp is not None and "_compile_for_args" not in vars(disp):
            _wait_for(disp, proc)


def _feed(proc: subprocess.Popen[bytes], k: int, queue: _Queue) -> None:
    """Worker k's feeder thread: one group at a time, the next once it says it is done;
    then its stdin is closed and it exits. A worker that dies loses only its group in
    flight (compiled on call)."""
    assert proc.stdin is not None and proc.stdout is not None
    try:
        while (group := queue.take(k)) is not None:
            try:
                proc.stdin.write((json.dumps([e._asdict() for e in group]) + "\n").encode())
                proc.stdin.flush()
            except OSError:
                queue.put_back(k, group)
                return
            if not proc.stdout.readline():
                return
    finally:
        with contextlib.suppress(OSError):
            proc.stdin.close()


def _wait_for(disp: Any, proc: subprocess.Popen[bytes]) -> None:
    """Make `disp`'s next compilation from a call wait for `proc` first (numba's dispatcher
    looks `_compile_for_args` up on the instance when a call's types miss)."""
    original = disp._compile_for_args

    def compile_after_worker(*args: Any, **kws: Any) -> Any:
        proc.wait()
        vars(disp).pop("_compile_for_args", None)  # back to the class's method
        return original(*args, **kws)

    disp._compile_for_args = compile_after_worker


def _groups(entries: Iterable[Entry]) -> list[list[Entry]]:
    """Each function's entries together, the longest compile first."""
    groups: dict[tuple[str, str], list[Entry]] = {}
    for e in entries:
        groups.setdefault((e.module, e.qualname), []).append(e)
    return sorted(groups.values(), key=lambda g: -sum(e.seconds for e in g))


def _shares(entries: Sequence[Entry], n: int,
            head_start: Sequence[float] = ()) -> list[list[Entry]]:
    """Longest first, each to the least loaded of `n` compilers; a function's signatures
    stay together (two processes writing one function's cache index could drop an entry).
    `head_start[k]`: seconds compiler k is busy before its first entry (a worker's start).
    Shares are returned in compiler order; a compiler may get none."""
    loads = [head_start[k] if k < len(head_start) else 0.0 for k in range(n)]
    shares: list[list[Entry]] = [[] for _ in range(n)]
    for group in _groups(entries):
        k = loads.index(min(loads))
        shares[k].extend(group)
        loads[k] += sum(e.seconds for e in group)
    return shares


def plan(cpus: int) -> tuple[int, bool]:
    """(worker processes, whether the command's own process compiles a share) for `cpus`.
    With CPUs to spare (more than MAX_WORKERS) the command's process keeps to its own work
    (reading data, CUDA kernels) while MAX_WORKERS workers compile. With fewer, a worker
    in place of the command's process would cost a CPU a worker's start (WORKER_START
    seconds of imports and numba's set-up) while that process only waits: so it takes a
    share (`Prewarm.compile_own`)."""
    if cpus > MAX_WORKERS:
        return MAX_WORKERS, False
    return cpus - 1, True


def available_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


# --------------------------------------------------------------------------- early start
def index_guess(entry: Entry, root: Path | None = None) -> Path | None:
    """Where numba's cache index of `entry` would be, found without importing numba (a
    glob pattern's directory and name), or None where that cannot be told. Mirrors numba's
    locators: NUMBA_CACHE_DIR/<folder>_<sha1 of the folder's path>, else the module's
    __pycache__ when writable; the index is <module>.<qualname>-<line>.py<version>.nbi
    (tests/gpu/test_compile_cache.py checks this against numba's own path)."""
    root = root or Path(__file__).resolve().parent.parent
    source = root.joinpath(*entry.module.split(".")).with_suffix(".py")
    if not source.is_file():
        return None
    folder = str(source.parent)
    user_dir = os.environ.get("NUMBA_CACHE_DIR", "")
    if user_dir:
        digest = hashlib.sha1(folder.encode()).hexdigest()
        cache = Path(os.path.abspath(user_dir)) / f"{source.parent.name}_{digest}"
    elif os.access(folder, os.W_OK):
        cache = source.parent / "__pycache__"
    else:
        return None
    name = f"{entry.module.rsplit('.', 1)[-1]}.{entry.qualname}".replace("<", "").replace(
        ">", "")
    return cache / f"{name}-*.py{sys.version_info[0]}{sys.version_info[1]}.nbi"


def likely_cold(command: str, path: Path = MANIFEST) -> bool:
    """Whether numba's cache lacks a function every profile of `command` compiles ("evolve"
    has two, "evolve-cpu" and "evolve-cuda"): then workers are worth starting before the
    command's own imports. Unknown locations count as cached (the ordinary start remains)."""
    profiles = command_profiles(command, path)
    if not profiles:
        return False
    common = set.intersection(*({(e.module, e.qualname) for e in entries}
                                for entries in profiles))
    for module, qualname in sorted(common):
        pattern = index_guess(Entry(module, qualname, "", 0.0))
        if pattern is not None and not any(pattern.parent.glob(pattern.name)):
            return True
    return False


class EarlyWorkers:
    """Worker processes started before the command is parsed: they import numba and the
    manifest's modules (about 1.5 s each) while the command's process imports its own, and
    wait on stdin for their share, which `prewarm` sends once it knows what is missing."""

    def __init__(self, procs: Sequence[subprocess.Popen[bytes]], own: bool) -> None:
        self.procs = list(procs)
        self.own = own
        self.started = time.monotonic()
        self.sent = False

    def head_start(self) -> float:
        """Seconds of a worker's start still ahead of it."""
        return max(0.0, WORKER_START - (time.monotonic() - self.started))

    def send(self, shares: Sequence[Sequence[Entry]]
             ) -> list[tuple[subprocess.Popen[bytes], list[Entry]]]:
        """Give worker k shares[k] (none beyond them: those exit); the workers with work,
        with their shares. Sent once; later calls send nothing."""
        busy: list[tuple[subprocess.Popen[bytes], list[Entry]]] = []
        if self.sent:
            return busy
        self.sent = True
        for k, proc in enumerate(self.procs):
            share = shares[k] if k < len(shares) else []
            assert proc.stdin is not None
            try:
                proc.stdin.write((json.dumps([e._asdict() for e in share]) + "\n").encode())
                proc.stdin.close()
            except OSError:  # a worker that died at start: its share is compiled on call
                continue
            if share:
                busy.append((proc, list(share)))
        return busy

    def release(self) -> None:
        """Nothing to compile after all: every worker exits after its imports."""
        self.send([])


def start_early(command: str, path: Path = MANIFEST, busy_first: bool = False
                ) -> EarlyWorkers | None:
    """Start up to `plan(available_cpus())` workers now when `command` looks cold (see
    `likely_cold`), before the command's module is imported; None otherwise, when no worker
    would get a share, or when GTE_PREWARM=0 or numba's JIT is off. `busy_first`: the
    command's process has work of its own before it compiles (`first_run_work`), so even
    one function is worth a worker (see `prewarm`)."""
    if os.environ.get("GTE_PREWARM", "1") == "0" or os.environ.get("NUMBA_DISABLE_JIT") == "1":
        return None
    try:
        if not likely_cold(command, path):
            return None
    except (OSError, ValueError):  # an odd name in the manifest: the ordinary start remains
        return None
    workers, own = plan(available_cpus())
    profiles = command_profiles(command, path)
    # as many as the shares would keep busy with everything missing: a command whose
    # manifest is one function (select) compiles it here, and a worker would only import
    head = [math.inf if busy_first else 0.0] * own + [WORKER_START] * workers
    workers = min(sum(1 for share in _shares(entries, own + workers, head)[own:] if share)
                  for entries in profiles)
    if workers < 1:
        return None
    modules = sorted({e.module for entries in profiles for e in entries})
    return EarlyWorkers(_spawn(workers, modules), own)


def _spawn(n: int, modules: Sequence[str] = ()) -> list[subprocess.Popen[bytes]]:
    if n < 1:  # (a warm run, or a command with nothing in the manifest: no import either)
        return []
    import subprocess

    return [subprocess.Popen([sys.executable, "-m", "gpu.compile_cache", *modules],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": _pythonpath()})
            for _ in range(n)]


def prewarm(profile: str, workers: int | None = None, message: str | None = NOTICE,
            path: Path = MANIFEST, own_share: bool | None = None,
            early: EarlyWorkers | None = None, busy_first: bool = False) -> Prewarm | None:
    """Start compiling `profile`'s uncached manifest entries in worker processes.

    `workers`/`own_share`: how many worker processes, and whether this process compiles a
    part itself (`Prewarm.compile_own`); by default `plan(available_cpus())`, and no own
    part when `workers` is given. With an own part the entries are handed out from a queue
    as each compiler is free (`_Queue`); without, each worker gets a fixed share at once.
    `early`: workers already started (`start_early`), given their work here (or
    released). None (nothing started) when the manifest has no such entries, when no
    worker would get an entry, or when numba's disk cache is off. `busy_first`: this
    process does work of its own first (`first_run_work`: parsing data, importing
    matplotlib), so a worker compiles meanwhile even where the manifest holds one function
    (without, this process would compile it itself, after that work: `evolve-cpu`'s one
    evaluator on the 2-core VM). `message` is written on
    stderr when workers start (then the in-process announcement is dropped)."""
    if early is not None:
        workers, own, head = len(early.procs), early.own, early.head_start()
    elif workers is None:
        workers, own = plan(available_cpus())
        head = WORKER_START
    else:
        own, head = bool(own_share), WORKER_START
    workers = min(MAX_WORKERS, workers)
    missing = []
    if workers >= 1 and os.environ.get("NUMBA_DISABLE_JIT") != "1":
        for entry in load_manifest(profile, path):
            disp = dispatcher(entry)
            if disp is not None and not is_cached(disp):
                missing.append(entry)
    if own and missing:
        handle = _queued(_groups(missing), workers, early, busy_first)
    else:
        handle = _shared(missing, workers, head, early)
    if handle is not None and message:
        n = len(handle.procs)
        print(f"{message} ({len(missing)} in {n} process{'es' if n > 1 else ''}"
              f"{' and this one' if handle.compiles_here else ''})", file=sys.stderr,
              flush=True)
        silence_announcement()
    return handle


def _queued(groups: list[list[Entry]], workers: int, early: EarlyWorkers | None,
            busy_first: bool = False) -> Prewarm | None:
    """Workers fed from a queue this process takes from too; without early workers, at most
    one fewer than the groups (a worker's start is not worth the one group this process
    would otherwise compile straight away), or one a group when this process is
    `busy_first`."""
    if early is None:
        procs = _spawn(min(workers, len(groups) - (0 if busy_first else 1)))
    else:
        early.sent = True
        procs = early.procs
    if not procs:
        return None
    return Prewarm(procs, [], queue=_Queue(groups))


def _shared(missing: list[Entry], workers: int, head: float, early: EarlyWorkers | None
            ) -> Prewarm | None:
    """Workers with fixed shares (the longest first to the least loaded), sent at once."""
    shares = _shares(missing, workers, [head] * workers)
    if early is None:
        early = EarlyWorkers(_spawn(sum(1 for s in shares if s)), False)
        shares = [s for s in shares if s]
    busy = early.send(shares)
    if not busy:  # nothing for a worker: this process compiles what it calls, as it goes
        return None
    return Prewarm([p for p, _ in busy], [s for _, s in busy])


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


def _worker(modules: Sequence[str]) -> int:
    from gpu import warm_start

    warm_start.skip_blas_probe()  # 0.35 s of scipy.linalg a worker; nothing here needs it
    for name in modules:  # an early worker's imports, done while its share is decided
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    for line in sys.stdin:  # a share at a time ("done" after each: the feeder sends more)
        rows = json.loads(line) if line.strip() else []
        compile_entries(Entry(r["module"], r["qualname"], r["signature"], r["seconds"])
                        for r in rows)
        with contextlib.suppress(OSError):  # a parent that left reads nothing more
            print("done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(_worker(sys.argv[1:]))
