"""Decision codes of a few GP rules for every symbol at one bar close, launched asynchronously.

The live engine's view of the GP interpreter (`gpu.gp.evaluate`): at each bar close the
strategy hands over one feature row per symbol and polls for the buy/sell codes, so the
event loop never waits on the GPU. On the CPU the codes are computed at once, in numba's
thread pool, or on the calling thread up to GP_CPU_SERIAL_MAX_DECISIONS decisions
(`cpu_serial_max_decisions`).

On CUDA a bar close is one contiguous copy of the engine's (n_symbols, 31) feature matrix
into a pinned buffer, then either one copy of it to the device or none (the kernel reads
the features straight from mapped host memory, `panel="mapped"`), one pre-bound launch
(`gpu.launch.bind`: numba's per-call argument typing done once per symbol count) writing
the codes straight into mapped host memory (no copy back), and one reused event polled
through the driver (`gpu.launch.event_query`); copy, launch and event record are each one
ctypes call into the driver (`gpu.launch`). CUDA is faster from 1,000 symbols or a
50-rule ensemble. At 1 rule x 128 symbols it is not, and cannot be through a launch: an
empty kernel's launch until its completion is seen by the host takes as long as the CPU
twin's whole bar close (`benchmarks/gp_round_trip.py` splits the round trip; measured:
benchmarks/results/h200-2026-11-23-session3/README.md).

`--device auto` does not mean "the GPU whenever there is one": for a few rules over a few
symbols a launch, two copies and the event polling cost more than the CPU twin's whole
evaluation. With `device="auto"` on a machine with a GPU, `choose_backend(n_symbols)` times
one bar close on the CPU and on CUDA (with the features copied and read from mapped memory,
when `panel="auto"`) at the strategy's real size (n_rules x n_symbols), each after an idle
gap like an engine's between bar closes (`CALIBRATION_GAP_S`), keeps the fastest,
logs the measurement, and remembers it per size for the process (`BREAK_EVEN`), so the
measurement is paid once.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from typing import Any

import numpy as np
from numba import cuda

from gpu.device import Resolved, quiet_event_polling, resolve_device
from gpu.gp.evaluate import (
    I8,
    THREADS_PER_BLOCK,
    _blocks,
    _check_programs,
    _codes_cpu,
    _codes_day_serial_cpu,
    _codes_rows_kernel,
)
from gpu.indicators.catalogue import N_TERMINALS
from gpu.launch import (
    bind,
    event_query,
    event_recorder,
    event_waiter,
    host_to_device_copier,
    untimed_event,
)

quiet_event_polling()


def _nothing() -> None:
    """The panel copy of a kernel that reads mapped host memory."""

log = logging.getLogger(__name__)

#: measured bar-close times per (n_programs, n_symbols): the break-even this process keeps
BREAK_EVEN: dict[tuple[int, int], dict[str, Any]] = {}
#: timed bar closes per backend (after one warm-up each); the median decides
CALIBRATION_ROUNDS = 7
#: idle before each timed bar close, as an engine idles between bar closes (a replay's are
#: about a millisecond apart at 128 symbols, a live engine's a bar length): numba's pool
#: threads have gone back to sleep and the CPU twin's prange pays their wake-up, which
#: bar closes timed back to back never see (1 rule x 128 symbols on the H200: 18 us back to
#: back, against 570 us a CPU bar close in the replay and 284 us an overlapped CUDA one;
#: benchmarks/results/h200-2026-11-28/README.md)
CALIBRATION_GAP_S = 0.002
PANEL_MODES = ("auto", "copy", "mapped")
#: GP_CPU_SERIAL_MAX_DECISIONS: on the CPU, bar closes of at most this many program x
#: symbol decisions run on the calling thread (`_codes_day_serial_cpu`), larger ones in
#: numba's thread pool (`_codes_cpu`, a prange over the programs); 0, the default: always
#: the pool. See `cpu_serial_max_decisions` for what each costs.
SERIAL_ENV = "GP_CPU_SERIAL_MAX_DECISIONS"


def cpu_serial_max_decisions() -> int:
    """GP_CPU_SERIAL_MAX_DECISIONS (an integer >= 0; default 0).

    A trade-off. Between two bar closes the pool's threads sleep, so on its own the calling
    thread beats the pool for small closes (up to about 2 x 128 decisions); but in a
    backtest with the replay's feed as a thread of the engine's process (`--transport
    inproc`, the default) a serial close shares the GIL with the feed and the replay's wall
    time grows. So a backtest keeps the pool; a live engine (its feed always another
    process), where a bar close's latency matters and the wall time does not, can set 256.
    Measured: benchmarks/results/h200-2026-11-23-session7/README.md
    (benchmarks/gp_cpu_decider.py, benchmarks/gp_replay.py)."""
    from gpu.device import SettingError

    raw = os.environ.get(SERIAL_ENV, "0")
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise SettingError(f"{SERIAL_ENV} must be an integer >= 0, got {raw!r}")
    return value


def cpu_serial_pays(n_programs: int, n_symbols: int, max_decisions: int) -> bool:
    """Whether a CPU bar close of n_programs x n_symbols runs on the calling thread: between
    two bar closes the pool's threads go to sleep, so a prange first wakes them, which can
    cost more than a small evaluation."""
    return n_programs * n_symbols <= max_decisions


def mapped_panel_pays(n_programs: int, n_symbols: int) -> bool:
    """Whether the kernel should read the features from mapped host memory rather than
    from a device copy, where no calibration chose (`choose_backend`): every thread reads
    its stock's 31 features over the bus, so a stock's row crosses it once per program.
    It pays for one rule over a few hundred symbols (benchmarks/gp_round_trip.py; measured:
    benchmarks/results/h200-2026-11-23-session3/README.md)."""
    return n_programs == 1 and n_symbols <= 256


class AsyncDecider:
    """Decision codes of a few programs for every symbol of one feature row, launched
    asynchronously: `start` queues copies and one kernel on a private stream and records an
    event; `ready` polls it (never blocks); `result` returns the codes once ready.

    `features` is the engine's (n_symbols, 31) float32 matrix. On the CPU `start` computes
    the codes at once and `ready` is immediately true.
    """

    def __init__(self, programs: np.ndarray, lengths: np.ndarray, device: str = "auto",
                 prebind: bool = True, panel: str = "auto") -> None:
        self.programs, self.lengths = _check_programs(programs, lengths)
        #: pre-bound launches (False: numba's ordinary launch, for comparison)
        self.prebind = prebind
        if panel not in PANEL_MODES:
            raise ValueError(f"panel must be one of {PANEL_MODES}, got {panel!r}")
        #: how the features reach the GPU: "copy" (pinned panel copied to the device),
        #: "mapped" (the kernel reads mapped host memory), "auto" (`mapped_panel_pays`)
        self.panel = panel
        self.requested = device
        #: CPU bar closes of at most this many decisions skip the thread pool
        self.serial_max = cpu_serial_max_decisions()
        self.device: Resolved = resolve_device(device, "GP strategy")
        self._cuda_ready = self.device == "cuda"
        #: the measurement behind an automatic choice (None: the device was not "auto")
        self.calibration: dict[str, Any] | None = None
        self._result: I8 | None = None
        self._event: Any = None
        self._query: Any = None
        self._wait: Any = None
        self._launch: Any = None
        self._pending = False  # a CUDA launch whose codes were not taken yet
        self._n_symbols = -1
        self._buffers_for: tuple[int, str] = (-1, "")
        if self.device == "cuda":
            self._stream = cuda.stream()
            self._d_programs = cuda.to_device(self.programs, stream=self._stream)
            self._d_lengths = cuda.to_device(self.lengths, stream=self._stream)
            self._stream.synchronize()
            self._event = untimed_event()
            self._query = event_query(self._event)
            self._wait = event_waiter(self._event)
        # compile (or load) the kernel now, not at the engine's first bar close
        self.start(np.zeros((1, N_TERMINALS), np.float32))
        self.result()

    def choose_backend(self, n_symbols: int) -> Resolved:
        """With device "auto" and a GPU: run on the backend that closes a bar of
        `n_symbols` faster (measured once per size and process, logged); returns it."""
        if self.requested != "auto" or not self._cuda_ready or n_symbols < 1:
            return self.device
        key = (int(self.programs.shape[0]), int(n_symbols))
        if key not in BREAK_EVEN:
            rng = np.random.default_rng(0)
            feats = rng.normal(size=(n_symbols, N_TERMINALS)).astype(np.float32)
            times: dict[str, float] = {}
            codes: dict[str, I8] = {}
            requested_panel = self.panel
            # on CUDA both ways the features can travel when the panel is "auto"
            modes = ("copy", "mapped") if requested_panel == "auto" else (requested_panel,)
            candidates: list[tuple[Resolved, str]] = [("cpu", requested_panel)]
            candidates += [("cuda", m) for m in modes]
            for backend, mode in candidates:
                name = backend if backend == "cpu" else f"cuda_{mode}"
                self.device, self.panel = backend, mode
                codes[name] = self._bar_close(feats)  # warm-up (and buffers)
                samples = []
                for _ in range(CALIBRATION_ROUNDS):
                    time.sleep(CALIBRATION_GAP_S)
                    t0 = time.perf_counter()
                    self._bar_close(feats)
                    samples.append(time.perf_counter() - t0)
                times[name] = statistics.median(samples)
            best_cuda = min((n for n in times if n != "cpu"), key=times.__getitem__)
            times["cuda"] = times[best_cuda]
            choice: Resolved = "cuda" if times["cuda"] < times["cpu"] else "cpu"
            BREAK_EVEN[key] = {
                "n_programs": key[0], "n_symbols": key[1], "gap_ms": CALIBRATION_GAP_S * 1e3,
                "cpu_us": times["cpu"] * 1e6,
                "cuda_us": times["cuda"] * 1e6, "choice": choice,
                "panel": best_cuda.removeprefix("cuda_"),
                **{f"{n}_us": t * 1e6 for n, t in times.items() if n.startswith("cuda_")},
                "codes_agree": all(np.array_equal(codes["cpu"], c) for c in codes.values()),
            }
            log.info("GP strategy: %d rules x %d symbols, a bar close takes %.0f us on the "
                     "CPU and %.0f us on CUDA (features %s): runs on %s", key[0], key[1],
                     times["cpu"] * 1e6, times["cuda"] * 1e6, BREAK_EVEN[key]["panel"],
                     choice)
        self.calibration = BREAK_EVEN[key]
        self.device = self.calibration["choice"]
        self.panel = self.calibration["panel"]
        return self.device

    def _bar_close(self, features: np.ndarray) -> I8:
        """One bar close as the engine pays for it: start, poll until ready, result."""
        self.start(features)
        while not self.ready():
            pass
        return self.result().copy()

    def _buffers(self, n_symbols: int) -> None:
        """Buffers for `n_symbols` and the launch bound to them: the feature matrix in
        mapped host memory read by the kernel (`mapped_panel_pays`) or in pinned memory
        copied to the device, codes written straight into mapped host memory (no copy
        back), one reused event; the launch pre-bound (gpu/launch.py) where it codes like
        numba's. The kernel takes the engine's (n_symbols, 31) layout as it is, so filling
        the buffer is one contiguous copy (a transpose cost more; measured:
        benchmarks/results/h200-2026-11-23-session3/README.md)."""
        n = self.programs.shape[0]
        self._mapped = (self.panel == "mapped"
                        or (self.panel == "auto" and mapped_panel_pays(n, n_symbols)))
        self._d_out = cuda.mapped_array((n, 1, n_symbols), np.int8)
        self._h_out = np.asarray(self._d_out)
        self._n_symbols = n_symbols
        self._buffers_for = (n_symbols, self.panel)
        self._grid = _blocks(n * n_symbols)
        self._launch = None
        self._record = event_recorder(self._event, self._stream)
        shape = (n_symbols, N_TERMINALS)
        if self._mapped:
            # the kernel reads the features over the bus: no copy to queue
            mapped = cuda.mapped_array(shape, np.float32)
            self._h_panel = np.asarray(mapped)
            self._args: tuple[Any, ...] = (self._d_programs, self._d_lengths, mapped,
                                           self._d_out)
            self._copy = _nothing
        else:
            self._h_panel = cuda.pinned_array(shape, np.float32)
            self._d_panel = cuda.device_array(shape, np.float32)
            self._args = (self._d_programs, self._d_lengths, self._d_panel, self._d_out)
            # the panel's copy as a single driver call where it can be
            self._copy = host_to_device_copier(self._d_panel, self._h_panel, self._stream)
        self._kernel = _codes_rows_kernel
        if not self.prebind:
            return
        self._h_panel[...] = np.random.default_rng(1).normal(size=self._h_panel.shape)
        self._copy_ordinary()
        self._kernel[self._grid, THREADS_PER_BLOCK, self._stream](*self._args)
        self._stream.synchronize()
        reference = self._h_out.copy()
        go = bind(self._kernel, self._args, self._stream, THREADS_PER_BLOCK)
        if go is None:
            return
        self._h_out[...] = -1
        go(self._grid)
        self._stream.synchronize()
        if np.array_equal(self._h_out, reference):
            self._launch = go

    def _copy_ordinary(self) -> None:
        if not self._mapped:
            self._d_panel.copy_to_device(self._h_panel, stream=self._stream)

    def start(self, features: np.ndarray) -> None:
        feats = np.asarray(features, np.float32)
        if feats.ndim != 2 or feats.shape[1] != N_TERMINALS:
            raise ValueError(f"features must be (n_symbols, {N_TERMINALS}), got {feats.shape}")
        n_symbols = feats.shape[0]
        if self.device == "cpu" or n_symbols == 0:
            out = np.zeros((self.programs.shape[0], 1, n_symbols), np.int8)
            if n_symbols:
                day = np.ascontiguousarray(feats.T)
                if cpu_serial_pays(self.programs.shape[0], n_symbols, self.serial_max):
                    _codes_day_serial_cpu(self.programs, self.lengths, day, out[:, 0, :])
                else:
                    _codes_cpu(self.programs, self.lengths, day[None, :, :], 0, 1, out)
            self._result = out[:, 0, :]
            self._pending = False
            return
        if self._pending and self._result is None:
            # the previous bar's copy and launch may still read the pinned panel and write
            # the mapped codes (a caller that started again without taking the codes, e.g.
            # a cancelled bar close): let them finish before the buffers are reused or freed
            self._event.synchronize()
        if (n_symbols, self.panel) != self._buffers_for:
            self._buffers(n_symbols)
        self._h_panel[...] = feats
        if self._launch is not None:
            self._copy()
            self._launch(self._grid)
            self._record()
        else:  # numba's ordinary path throughout (the comparison, or no binding)
            self._copy_ordinary()
            self._kernel[self._grid, THREADS_PER_BLOCK, self._stream](*self._args)
            self._event.record(self._stream)
        self._result = None
        self._pending = True

    def ready(self) -> bool:
        if self.device == "cpu" or self._result is not None:
            return True
        return bool(self._query())

    def wait(self) -> None:
        """Block until the latest `start`'s codes are ready, with the GIL released while
        the GPU works (`gpu.launch.event_waiter`): no CPU spent polling, and the process's
        other threads run meanwhile."""
        if self.ready():
            return
        self._wait()

    def result(self) -> I8:
        """Codes (n_programs, n_symbols) of the latest `start`; waits (`wait`) where
        they are not ready."""
        if self._result is None:
            if not self._pending:
                raise RuntimeError("AsyncDecider.result() before start()")
            self._wait()
            self._result = np.array(self._h_out[:, 0, :], np.int8)
        return self._result
