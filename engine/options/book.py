"""The engine's options: `open_option_book` builds the `OptionPricing` implementation for
the configured groups and device.

A group (`OptionGroupConfig`) is the options on one underlying: the product of its strikes,
expiries and rights. Two ways to dispatch the repricings (`dispatch=`):

- "process" (the default on CUDA): GPU worker processes own the pricers
  (`engine.options.worker_options.WorkerOptions`); a spot is written into shared memory.
- "inline" (the default on the CPU): the pricers live in the engine's process
  (`engine.options.in_process.InProcessOptions`), one CUDA stream per group or the CPU
  twin on a worker thread.

With `every_ms` (the config's `options_every_ms`) the groups are repriced on the data's
clock instead (`engine.options.clocked.ClockedOptions`).

Either way (not clocked), while a repricing of a group is in flight only the newest spot
is remembered and launched when it completes, so the newest spot is always priced and
nothing queues, and `drain()` awaits all in-flight work by polling with `asyncio.sleep(0)`.
"""

from __future__ import annotations

from engine.options.clocked import ClockedOptions
from engine.options.group import OptionGroupConfig
from engine.options.in_process import InProcessOptions
from engine.options.protocol import OptionPricing
from engine.options.worker_options import WorkerOptions
from gpu.device import resolve_device

EXCHANGE_TZ = "America/New_York"

DISPATCHES = ("auto", "inline", "process")


def open_option_book(groups: list[OptionGroupConfig], device: str = "auto",
                     timezone: str = EXCHANGE_TZ, dispatch: str = "auto",
                     every_ms: float = 0.0) -> OptionPricing:
    """The option groups' pricing on `device` ("auto", "cpu" or "cuda"): in a worker
    process (`dispatch="process"`, the default on CUDA) or in this one ("inline", the
    default on the CPU); with `every_ms` > 0 on the data's clock, in this process
    (`engine.options.clocked`, dispatch "clocked")."""
    if dispatch not in DISPATCHES:
        raise ValueError(f"dispatch must be one of {DISPATCHES}, got {dispatch!r}")
    resolved = resolve_device(device, "option book")
    if every_ms:
        if dispatch == "process":
            raise ValueError("a clocked option book prices in the engine's process: "
                             "dispatch must be auto or inline")
        return ClockedOptions(list(groups), resolved, timezone, every_ms)
    if dispatch == "auto":
        dispatch = "process" if resolved == "cuda" else "inline"
    if dispatch == "process":
        return WorkerOptions(list(groups), resolved, timezone)
    return InProcessOptions(list(groups), resolved, timezone)
