"""The option worker's settings, from the environment (OPTION_*), checked on the engine's
side before the worker starts: a mistyped value is one line to the user, not a traceback
from the worker process. How the defaults were chosen:
benchmarks/results/h200-2026-11-23-between-ticks/README.md."""

from __future__ import annotations

import math
import os
import sys

from engine.errors import UserError

#: launches in flight per batch (OPTION_WORKER_SLOTS), and whether groups of one grid share
#: a launch (OPTION_WORKER_BATCH=1; default one launch per group; `worker_server`)
SLOTS_ENV, BATCH_ENV = "OPTION_WORKER_SLOTS", "OPTION_WORKER_BATCH"
#: OPTION_WORKER_YIELD=1: while only waiting on the GPU, the worker gives its core away
YIELD_ENV = "OPTION_WORKER_YIELD"
#: OPTION_WORKER_SPACING: while launches are in flight, the next waits this fraction of a
#: slot's share of the measured latency (1: evenly spaced repricings; 0: whenever a slot is
#: free and a newer spot is waiting)
SPACING_ENV = "OPTION_WORKER_SPACING"
#: OPTION_WORKER_PROFILE=PATH: the worker runs under cProfile and writes PATH.<pid> at exit
PROFILE_ENV = "OPTION_WORKER_PROFILE"
#: OPTION_WORKER_TIMING=PATH: the worker times its loop's steps (a clock read around each,
#: far lighter than cProfile) and writes PATH.<pid> (JSON) at exit
TIMING_ENV = "OPTION_WORKER_TIMING"
DEFAULT_SLOTS = 2
DEFAULT_SPACING = 1.0
#: OPTION_REQUEST_EVERY: 1 (the default) a request on every tick; 0 requests only on
#: demand; k >= 2 on demand and every k-th held tick
REQUEST_EVERY_ENV = "OPTION_REQUEST_EVERY"
DEFAULT_REQUEST_EVERY = 1
#: OPTION_TAP_EVERY: every how many accepted trades of an underlying the engine hands its
#: spot over from validation (`engine.trading.core.Engine`,
#: `feeds.validation.Validator.tap_trades`);
#: 0: every tick from the engine's hot loop instead
TAP_EVERY_ENV = "OPTION_TAP_EVERY"
DEFAULT_TAP_EVERY = 8
#: OPTION_WORKER_GPUS: how many GPU worker processes share the option groups (default 1)
GPUS_ENV = "OPTION_WORKER_GPUS"


def request_every() -> int:
    """How many held ticks make a request written anyway, from OPTION_REQUEST_EVERY (an
    integer >= 0). 1, the default: every tick writes its request. 0: none, requests go
    only on demand. k >= 2: every k-th tick held while the worker wanted none is written
    too, so a recent spot is already waiting when the worker gets ready. (The H200
    replays behind the default: benchmarks/results/h200-2026-11-23-between-ticks.)"""
    return count_from_env(REQUEST_EVERY_ENV, DEFAULT_REQUEST_EVERY) or sys.maxsize


def count_from_env(name: str, default: int, minimum: int = 0) -> int:
    """An integer >= `minimum` from the environment variable `name` (`default` when
    unset); any other text is the user's one-line error."""
    raw = os.environ.get(name, str(default))
    try:
        count = int(raw)
    except ValueError:
        count = minimum - 1
    if count < minimum or str(count) != raw.strip():
        raise UserError(f"{name} must be an integer >= {minimum}, got {raw!r}")
    return count


def tap_every() -> int:
    """OPTION_TAP_EVERY (an integer >= 0): every how many accepted trades of an underlying
    the engine hands its spot to the worker from validation, while a batch is still being
    received; the batch's newest spot goes right after validation. 0: every tick from
    the engine's hot loop, which feeds the worker only while a batch is applied (the
    receive and the validation of a batch took 65 % of a SPY replay's time on the dev
    machine, the hot loop 23 %)."""
    return count_from_env(TAP_EVERY_ENV, DEFAULT_TAP_EVERY)


def worker_gpus() -> int:
    """OPTION_WORKER_GPUS, an integer >= 1 (default 1): one worker process per GPU."""
    return count_from_env(GPUS_ENV, 1, minimum=1)


def worker_settings() -> tuple[int, float]:
    """OPTION_WORKER_SLOTS (an integer, at least 1) and OPTION_WORKER_SPACING (a number,
    at least 0), with OPTION_WORKER_BATCH and OPTION_WORKER_YIELD checked (0 or 1) and
    GPU_FD_SOLVER (lanes or pcr) and GPU_FD_MAX_REGISTERS; the
    client checks them before it starts the worker, so a mistyped value is one line to
    the user, not a traceback from the worker process."""
    # anything but "1" read as off: "true" would be too
    for flag in (BATCH_ENV, YIELD_ENV):
        if os.environ.get(flag, "0") not in ("0", "1"):
            raise UserError(f"{flag} must be 0 or 1, got {os.environ[flag]!r}")
    from gpu.device import SettingError, fd_max_registers, fd_solver

    try:  # GPU_FD_SOLVER, GPU_FD_MAX_REGISTERS: read where the pricers start, in the worker
        fd_solver()
        fd_max_registers()
    except SettingError as exc:
        raise UserError(str(exc)) from None
    raw_slots = os.environ.get(SLOTS_ENV, str(DEFAULT_SLOTS))
    raw_spacing = os.environ.get(SPACING_ENV, str(DEFAULT_SPACING))
    try:
        slots = int(raw_slots)
    except ValueError:
        slots = 0
    if slots < 1:
        raise UserError(f"{SLOTS_ENV} must be an integer >= 1, got {raw_slots!r}")
    try:
        spacing = float(raw_spacing)
    except ValueError:
        spacing = math.nan
    if not (spacing >= 0 and math.isfinite(spacing)):
        raise UserError(f"{SPACING_ENV} must be a number >= 0, got {raw_spacing!r}")
    return slots, spacing
