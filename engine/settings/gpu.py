"""The `[gpu]` table of the engine's TOML: GPU, option-worker and CPU-placement knobs.

Design. These knobs were environment variables read where they act
(engine/options/worker_settings.py, gpu/launch.py, gpu/device.py, gpu/options/batch.py,
gpu/gp/decider.py, engine/affinity.py),
some of them inside the GPU worker process, which inherits the engine's environment. They are
now one typed struct with a default per field, so a config file holds them like every other
setting and a bad value is a one-line error when the file is read. The reading sites stay as
they are: `export_env` publishes the file's values to the process environment before the
engine starts (the worker process inherits them), and a variable already set in the
environment is a documented override that wins over the file. Precedence, lowest first:
built-in default < `[gpu]` in the file < environment variable. The variable of each field is
in `ENV` (and in the README's table).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import Literal

import msgspec

#: the largest count taken (the readers parse it into a C-sized integer)
MAX_INT = 2**31 - 1


class GpuSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: spots of an underlying handed to the GPU worker from validation every this many
    #: accepted trades; 0: every tick from the engine's hot loop (OPTION_TAP_EVERY)
    tap_every: int = 8
    #: the worker client writes a request on every k-th held spot; 0: only on demand
    #: (OPTION_REQUEST_EVERY)
    request_every: int = 1
    #: launches in flight per option group, each with its own buffers, stream and event
    #: (OPTION_WORKER_SLOTS)
    worker_slots: int = 2
    #: spacing of a group's launches, as a share of the measured latency; 0: whenever a
    #: slot is free (OPTION_WORKER_SPACING)
    worker_spacing: float = 1.0
    #: price all groups of one grid in one launch (OPTION_WORKER_BATCH)
    worker_batch: bool = False
    #: the worker gives its core away while it only waits on the GPU (OPTION_WORKER_YIELD)
    worker_yield: bool = False
    #: GPU worker processes, one per GPU, sharing the option groups (OPTION_WORKER_GPUS)
    worker_gpus: int = 1
    #: a cProfile of the worker goes to PATH.<pid> at exit; "": none (OPTION_WORKER_PROFILE)
    worker_profile: str = ""
    #: the worker's loop step times go to this path; "": none (OPTION_WORKER_TIMING)
    worker_timing: str = ""
    #: the FD kernel's tridiagonal solver (GPU_FD_SOLVER)
    fd_solver: Literal["lanes", "pcr"] = "lanes"
    #: register cap of the lanes FD kernel, 32..255; 0: no cap (GPU_FD_MAX_REGISTERS)
    fd_max_registers: int = 0
    #: one warp runs an American option's two marches side by side where some row has
    #: two; false: one after the other (GPU_FD_INTERLEAVE)
    fd_interleave: bool = True
    #: pre-bound kernel launches of the option pricer (GPU_OPTIONS_PREBIND)
    options_prebind: bool = True
    #: bound launches as single ctypes calls into the driver; false: numba's launcher
    #: (GPU_RAW_LAUNCH)
    raw_launch: bool = True
    #: event queries as single driver calls; false: numba's (GPU_FAST_EVENT_QUERY)
    fast_event_query: bool = True
    #: an option group's completion read from a flag in host memory that its CUDA graph
    #: writes; false: its event queried (GPU_COMPLETION_FLAG)
    completion_flag: bool = True
    #: a launch slot keeps its group's parameter rows and writes only the new spot; false:
    #: regather every launch (OPTION_BATCH_IN_PLACE)
    batch_in_place: bool = True
    #: rule x symbol decisions of a CPU GP bar close run on the engine's own thread up to
    #: this many; 0: always numba's thread pool (GP_CPU_SERIAL_MAX_DECISIONS)
    gp_cpu_serial_max_decisions: int = 0
    #: CPUs of the engine process, as "2", "2,3" or "4-7"; "": the scheduler's (ENGINE_CPUS)
    engine_cpus: str = ""
    #: CPUs of a replay's feed process (REPLAY_FEED_CPUS)
    feed_cpus: str = ""
    #: CPUs of the GPU worker process (OPTION_WORKER_CPUS)
    worker_cpus: str = ""

    def __post_init__(self) -> None:
        for name, lo, hi in (("tap_every", 0, MAX_INT), ("request_every", 0, MAX_INT),
                             ("gp_cpu_serial_max_decisions", 0, MAX_INT),
                             ("worker_slots", 1, 64), ("worker_gpus", 1, 1024)):
            x = getattr(self, name)
            if not lo <= x <= hi:
                raise ValueError(f"gpu.{name} must be an integer from {lo:,} to {hi:,}, "
                                 f"got {x:,}")
        if self.fd_max_registers != 0 and not 32 <= self.fd_max_registers <= 255:
            raise ValueError(f"gpu.fd_max_registers must be 0 (no cap) or 32..255, got "
                             f"{self.fd_max_registers}")
        if not 0 <= self.worker_spacing < float("inf"):
            raise ValueError(f"gpu.worker_spacing must be a number >= 0, got "
                             f"{self.worker_spacing}")


#: each field's environment variable (the override), as the reading sites name it
ENV: dict[str, str] = {
    "tap_every": "OPTION_TAP_EVERY",
    "request_every": "OPTION_REQUEST_EVERY",
    "worker_slots": "OPTION_WORKER_SLOTS",
    "worker_spacing": "OPTION_WORKER_SPACING",
    "worker_batch": "OPTION_WORKER_BATCH",
    "worker_yield": "OPTION_WORKER_YIELD",
    "worker_gpus": "OPTION_WORKER_GPUS",
    "worker_profile": "OPTION_WORKER_PROFILE",
    "worker_timing": "OPTION_WORKER_TIMING",
    "fd_solver": "GPU_FD_SOLVER",
    "fd_max_registers": "GPU_FD_MAX_REGISTERS",
    "fd_interleave": "GPU_FD_INTERLEAVE",
    "options_prebind": "GPU_OPTIONS_PREBIND",
    "raw_launch": "GPU_RAW_LAUNCH",
    "fast_event_query": "GPU_FAST_EVENT_QUERY",
    "completion_flag": "GPU_COMPLETION_FLAG",
    "batch_in_place": "OPTION_BATCH_IN_PLACE",
    "gp_cpu_serial_max_decisions": "GP_CPU_SERIAL_MAX_DECISIONS",
    "engine_cpus": "ENGINE_CPUS",
    "feed_cpus": "REPLAY_FEED_CPUS",
    "worker_cpus": "OPTION_WORKER_CPUS",
}


def env_text(value: object) -> str:
    """A field's value as its variable spells it (booleans are 0/1, as the readers expect)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def export_env(settings: GpuSettings,
               environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Publish the fields that differ from their defaults to `environ` (the process
    environment by default), except where the variable is already set: the environment
    overrides the file. Returns the variables it set, so a caller can take them back."""
    env = os.environ if environ is None else environ
    default = GpuSettings()
    written: dict[str, str] = {}
    for field, name in ENV.items():
        value = getattr(settings, field)
        if name in env or value == getattr(default, field):
            continue
        env[name] = written[name] = env_text(value)
    return written


def unexport_env(written: dict[str, str],
                 environ: MutableMapping[str, str] | None = None) -> None:
    """Take back what `export_env` set (a test or a caller running several commands)."""
    env = os.environ if environ is None else environ
    for name, value in written.items():
        if env.get(name) == value:
            del env[name]
