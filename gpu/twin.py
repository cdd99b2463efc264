"""One way to write a kernel twice: a core of plain functions compiled for the CPU and CUDA.

A kernel module keeps its arithmetic in plain Python functions (the *core*) that call one
another by name and read module-level constants. `compile_twin` compiles that core twice:

- `twin.cpu.NAME`: `numba.njit(cache=True)` functions, callable from the module's CPU
  drivers (`@njit` loops, usually `prange`) and from Python;
- `twin.cuda.NAME`: `numba.cuda.jit(device=True)` functions, callable from the module's
  CUDA kernels.

numba resolves a callee through the caller's globals at compile time, so each backend gets
its own namespace in which every core name points at that backend's compiled function.
The constants (and modules such as `math`) that the core reads are passed explicitly, so a
core never sees half of another backend.

Cache policy (the only one in `gpu/`): CPU functions are cached on disk; CUDA kernels are
cached on disk on a real GPU and never under the simulator. numba keys a cache entry on the
source file of the function it compiled, but a *driver* (a kernel or `@njit` loop in the
module that calls the core) inlines the core, whose file may be another one. Call
`flush_stale_caches(module_file, core_files)` once at import of the driver module: every
cache index of that module older than one of its core files is deleted, so an edit of the
core is never hidden by stale machine code, and fresh checkouts are unaffected.

Example (a two-function core)::

    def scaled(x, k):
        return SCALE * x * k

    def twice(x):
        return scaled(x, 2.0)

    core = compile_twin(__name__, (scaled, twice), {"SCALE": 0.5})
    core.cpu.twice(3.0)          # 3.0, from machine code
    # in a @cuda.jit kernel: out[i] = TWICE_GPU(x[i]) with TWICE_GPU = core.cuda.twice
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from numba import cuda, njit


class Backend:
    """The compiled functions of one backend, as attributes named like the core's."""

    def __init__(self, namespace: dict[str, Any], names: Iterable[str]) -> None:
        self._names = tuple(names)
        for name in self._names:
            setattr(self, name, namespace[name])

    def __getattr__(self, name: str) -> Any:  # pragma: no cover - only for mypy's sake
        raise AttributeError(f"no compiled core function {name!r}")

    @property
    def names(self) -> tuple[str, ...]:
        return self._names


class Twin:
    """A core compiled for both backends: `.cpu` (njit) and `.cuda` (CUDA device functions)."""

    def __init__(self, cpu: Backend, gpu: Backend) -> None:
        self.cpu = cpu
        self.cuda = gpu

    def backend(self, device: str) -> Backend:
        """The backend for a resolved device name ('cpu' or 'cuda')."""
        if device == "cpu":
            return self.cpu
        if device == "cuda":
            return self.cuda
        raise ValueError(f"device must be resolved to 'cpu' or 'cuda', not {device!r}")


def _namespace(
    module_name: str,
    functions: Iterable[Callable[..., Any]],
    constants: Mapping[str, Any],
    overrides: Mapping[str, Any],
    decorate: Callable[[Callable[..., Any]], Any],
) -> dict[str, Any]:
    # __name__ lets numba's disk cache rebuild a function's environment from the module.
    ns: dict[str, Any] = {k: v for k, v in constants.items() if not k.startswith("__")}
    ns["__name__"] = module_name
    for f in functions:
        if f.__name__ in overrides:
            ns[f.__name__] = overrides[f.__name__]
            continue
        clone = types.FunctionType(f.__code__, ns, f.__name__, f.__defaults__, f.__closure__)
        clone.__qualname__ = f.__qualname__
        ns[f.__name__] = decorate(clone)
    return ns


def compile_twin(
    module_name: str,
    functions: Iterable[Callable[..., Any]],
    constants: Mapping[str, Any] | None = None,
    *,
    cpu_constants: Mapping[str, Any] | None = None,
    cuda_constants: Mapping[str, Any] | None = None,
    fastmath: bool = False,
    cpu_inline: Iterable[str] = (),
) -> Twin:
    """Compile a core of plain functions for the CPU and for CUDA (see the module docstring).

    numba compiles lazily, so the order of `functions` does not matter: any function may
    call any other of the core by name. `constants` are the globals the core reads
    (numbers, tuples, modules such as `math`); `vars(core_module)` passes all of a core
    module's globals (dunder names are dropped; `module_name` names the namespace).
    `cpu_constants` / `cuda_constants` add or replace names for one backend only, for the
    rare callee that must differ (an already compiled function of another core, or a
    libdevice intrinsic such as `dmul_rn`); such a name replaces a core function of the
    same name on that backend (the core's plain version stays the reference in Python).

    `cpu_inline`: the names of the CPU functions numba inlines into their callers
    (`inline="always"`) instead of compiling each one by one and linking it. Same machine
    arithmetic (no fastmath, so no reordering), and less compile time for small functions
    with one or two call sites (the options pricer's: 1 s of a cold `price`); a function
    called from many places or with `*args` (which numba cannot inline) is better left out.
    """
    functions = tuple(functions)
    consts = dict(constants or {})
    names = [f.__name__ for f in functions]
    if len(set(names)) != len(names):
        raise ValueError(f"core functions must have distinct names: {names}")
    cpu_only, cuda_only = dict(cpu_constants or {}), dict(cuda_constants or {})
    # nogil: a CPU driver may run the core on a worker thread beside the event loop
    inlined = set(cpu_inline)
    cpu_ns = _namespace(
        module_name,
        functions,
        {**consts, **cpu_only},
        cpu_only,
        lambda f: njit(cache=True, nogil=True, fastmath=fastmath,
                       inline="always" if f.__name__ in inlined else "never")(f),
    )
    gpu_ns = _namespace(
        module_name,
        functions,
        {**consts, **cuda_only},
        cuda_only,
        lambda f: cuda.jit(device=True, fastmath=fastmath)(f),
    )
    return Twin(Backend(cpu_ns, names), Backend(gpu_ns, names))


def cuda_kernel_cache() -> bool:
    """Whether CUDA kernels may be cached on disk: yes on a real GPU, never in the simulator."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") != "1"


def flush_stale_caches(module_file: str, core_files: Iterable[str]) -> int:
    """Delete the numba cache entries of `module_file` older than any of `core_files`.

    numba writes `<stem>.<qualname>-<line>.py<ver>.nbi` index files (plus `.nbc` data) to
    `__pycache__` beside the module (or to NUMBA_CACHE_DIR). Returns how many index files
    were removed (their data files go with them).
    """
    newest_core = max((os.path.getmtime(f) for f in core_files), default=0.0)
    module = Path(module_file)
    dirs = [module.parent / "__pycache__"]
    cache_dir = os.environ.get("NUMBA_CACHE_DIR")
    if cache_dir:
        dirs.append(Path(cache_dir))
    removed = 0
    for directory in dirs:
        if not directory.is_dir():
            continue
        for index in directory.rglob(f"{module.stem}.*.nbi"):
            try:
                if index.stat().st_mtime >= newest_core:
                    continue
                prefix = index.name[: -len(".nbi")]
                for data in index.parent.glob(prefix + "*.nbc"):
                    data.unlink(missing_ok=True)
                index.unlink(missing_ok=True)
                removed += 1
            except OSError:  # another process flushed or rewrote it first
                continue
    return removed
