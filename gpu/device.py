"""Device selection shared by every kernel module.

`auto` means CUDA when numba sees a GPU (or the CUDA simulator), else the CPU twin, with one
log line saying which. Asking for CUDA where there is none is an error, never a silent
fallback.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from typing import Literal

Resolved = Literal["cpu", "cuda"]

log = logging.getLogger(__name__)
_announced: set[str] = set()


class SettingError(ValueError):
    """A GPU setting from the environment holds a value it cannot take: the user's
    one-line error (run_engine prints it as such), not a bug."""


#: the FD kernel's tridiagonal solvers: "lanes" (the default) or "pcr" (before)
FD_SOLVERS = ("lanes", "pcr")


def fd_solver(choice: str | None = None) -> str:
    """The FD kernel's solver: `choice`, else the GPU_FD_SOLVER setting, else "lanes"."""
    name = choice if choice is not None else os.environ.get("GPU_FD_SOLVER", "lanes")
    if name not in FD_SOLVERS:
        raise SettingError(
            f"GPU_FD_SOLVER must be one of {', '.join(FD_SOLVERS)}, got {name!r}")
    return name


def fd_max_registers() -> int:
    """GPU_FD_MAX_REGISTERS: a per-thread register cap for the lanes kernel (0, the
    default: none, the compiler's choice). Fewer registers let more options' warps reside
    on an SM at once, at the cost of spills: which wins depends on the launch's size
    (benchmarks/fd_solvers.py --caps; measured:
    benchmarks/results/h200-2026-11-23-session7/README.md)."""
    raw = os.environ.get("GPU_FD_MAX_REGISTERS", "0")
    try:
        cap = int(raw)
    except ValueError:
        cap = -1
    if cap != 0 and not 32 <= cap <= 255:
        raise SettingError(
            f"GPU_FD_MAX_REGISTERS must be 0 (no cap) or 32..255, got {raw!r}")
    return cap


class DeviceUnavailable(RuntimeError):
    """CUDA was requested explicitly but no CUDA device (nor the simulator) is present."""


def cuda_simulated() -> bool:
    """True when numba's CUDA simulator stands in for the GPU (tests in CI)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"


def cuda_present() -> bool:
    """Whether numba finds a CUDA GPU (or its simulator): `numba.cuda.is_available()`, and
    False where numba-cuda cannot be imported.

    Where no CUDA driver library loads, the answer is False without importing numba.cuda
    (0.7 s of a cold process on the 2-core dev VM, and numba with it: issue 27, a cold
    `select` spent 1.4 s on them; benchmarks/results/devbox-2026-11-28f-cold-start-select/
    README.md): numba's own check loads the same library first and, failing, says False
    (`_no_cuda_driver`). Wherever numba might answer otherwise (a driver library loads,
    the simulator or a CUDA switch is set, a .numba_config.yaml could set them, another
    platform), numba answers."""
    if _no_cuda_driver():
        return False
    try:
        from numba import cuda
    except Exception:  # numba-cuda missing or broken: behave as a machine without a GPU
        return False
    try:
        return bool(cuda.is_available())
    except Exception:
        return False


#: the CUDA driver library's names and folders, as numba-cuda 0.30 looks for it on Linux
#: (numba/cuda/cudadrv/driver.py, `locate_driver_and_loader`): the names on the loader's
#: own search path first, then in these folders
_DRIVER_NAMES = ("libcuda.so", "libcuda.so.1")
_DRIVER_FOLDERS = ("/usr/lib", "/usr/lib64")
#: numba settings that change its answer (simulator on, CUDA off): when any is set, or
#: its config file may set them, numba decides
_NUMBA_SWITCHES = ("NUMBA_ENABLE_CUDASIM", "NUMBA_DISABLE_CUDA")


def _no_cuda_driver() -> bool:
    """True only where numba's check must fail at its first step: on Linux, with none of
    numba's CUDA switches set (nor a .numba_config.yaml in the working folder, which numba
    reads them from), no candidate of the driver library loads. Loading one is what numba
    does next anyway, so a library found here costs nothing extra."""
    if not sys.platform.startswith("linux") or os.path.isfile(".numba_config.yaml"):
        return False
    if any(os.environ.get(name, "0") not in ("", "0") for name in _NUMBA_SWITCHES):
        return False
    candidates = [*_DRIVER_NAMES, *(os.path.join(folder, name)
                                    for folder in _DRIVER_FOLDERS for name in _DRIVER_NAMES)]
    for path in candidates:
        try:
            ctypes.CDLL(path)
        except OSError:
            continue
        return False
    return True


def resolve_device(device: str, what: str = "kernel") -> Resolved:
    """Turn a user's `--device` choice into the backend that will run `what`."""
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}: expected auto, cpu or cuda")
    if device == "cpu":
        return "cpu"
    if device == "cuda":
        if not cuda_present():
            raise DeviceUnavailable(
                f"--device cuda requested for {what}, but numba finds no CUDA GPU on this machine"
            )
        return "cuda"
    chosen: Resolved = "cuda" if cuda_present() else "cpu"
    if what not in _announced:
        _announced.add(what)
        sim = " (numba CUDA simulator)" if chosen == "cuda" and cuda_simulated() else ""
        log.info("%s runs on %s%s", what, chosen, sim)
    return chosen


class _EventNotReadyFilter(logging.Filter):
    """Drops numba's ERROR record for cuEventQuery's CUDA_ERROR_NOT_READY: polling an event
    that has not fired yet is the normal, non-blocking way to ask whether work is done."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "CUDA_ERROR_NOT_READY" not in record.getMessage()


_NOT_READY_FILTER = _EventNotReadyFilter()


def quiet_event_polling() -> None:
    """Keep numba's driver log free of the not-ready answers of polled events (idempotent)."""
    driver_log = logging.getLogger("numba.cuda.cudadrv.driver")
    if _NOT_READY_FILTER not in driver_log.filters:
        driver_log.addFilter(_NOT_READY_FILTER)
