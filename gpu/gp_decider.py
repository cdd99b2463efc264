"""Decision codes of a few GP rules for every symbol at one bar close, launched asynchronously.

The live engine's view of the GP interpreter (`gpu.gp_eval`): at each bar close the
strategy hands over one feature row per symbol and polls for the buy/sell codes, so the
event loop never waits on the GPU. On the CPU the codes are computed at once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from gpu.device import quiet_event_polling, resolve_device
from gpu.gp_eval import I8, THREADS_PER_BLOCK, _blocks, _check_programs, _codes_cpu, _codes_kernel
from gpu.terminals import N_TERMINALS

quiet_event_polling()


class AsyncDecider:
    """Decision codes of a few programs for every symbol of one feature row, launched
    asynchronously: `start` queues copies and one kernel on a private stream and records an
    event; `ready` polls it (never blocks); `result` returns the codes once ready.

    `features` is the engine's (n_symbols, 31) float32 matrix. On the CPU `start` computes
    the codes at once and `ready` is immediately true.
    """

    def __init__(self, programs: np.ndarray, lengths: np.ndarray, device: str = "auto") -> None:
        self.programs, self.lengths = _check_programs(programs, lengths)
        self.device = resolve_device(device, "GP strategy")
        self._result: I8 | None = None
        self._event: Any = None
        self._n_symbols = -1
        if self.device == "cuda":
            self._stream = cuda.stream()
            self._d_programs = cuda.to_device(self.programs, stream=self._stream)
            self._d_lengths = cuda.to_device(self.lengths, stream=self._stream)
            self._stream.synchronize()
        # compile (or load) the kernel now, not at the engine's first bar close
        self.start(np.zeros((1, N_TERMINALS), np.float32))
        self.result()

    def _buffers(self, n_symbols: int) -> None:
        n = self.programs.shape[0]
        self._h_panel = cuda.pinned_array((1, N_TERMINALS, n_symbols), np.float32)
        self._h_out = cuda.pinned_array((n, 1, n_symbols), np.int8)
        self._d_panel = cuda.device_array((1, N_TERMINALS, n_symbols), np.float32)
        self._d_out = cuda.device_array((n, 1, n_symbols), np.int8)
        self._n_symbols = n_symbols

    def start(self, features: np.ndarray) -> None:
        feats = np.asarray(features, np.float32)
        if feats.ndim != 2 or feats.shape[1] != N_TERMINALS:
            raise ValueError(f"features must be (n_symbols, {N_TERMINALS}), got {feats.shape}")
        n_symbols = feats.shape[0]
        panel = np.ascontiguousarray(feats.T)[None, :, :]
        if self.device == "cpu" or n_symbols == 0:
            out = np.zeros((self.programs.shape[0], 1, n_symbols), np.int8)
            if n_symbols:
                _codes_cpu(self.programs, self.lengths, panel, 0, 1, out)
            self._result = out[:, 0, :]
            self._event = None
            return
        if n_symbols != self._n_symbols:
            self._buffers(n_symbols)
        self._h_panel[...] = panel
        self._d_panel.copy_to_device(self._h_panel, stream=self._stream)
        n = self.programs.shape[0]
        _codes_kernel[_blocks(n * n_symbols), THREADS_PER_BLOCK, self._stream](
            self._d_programs, self._d_lengths, self._d_panel, 0, 1, self._d_out)
        self._d_out.copy_to_host(self._h_out, stream=self._stream)
        self._event = cuda.event()
        self._event.record(self._stream)
        self._result = None

    def ready(self) -> bool:
        if self.device == "cpu" or self._result is not None:
            return True
        query = getattr(self._event, "query", None)
        # the CUDA simulator runs streams synchronously and its events have no query()
        return True if query is None else bool(query())

    def result(self) -> I8:
        """Codes (n_programs, n_symbols) of the latest `start`; call when `ready()`."""
        if self._result is None:
            if self._event is None:
                raise RuntimeError("AsyncDecider.result() before start()")
            self._event.synchronize()
            self._result = np.array(self._h_out[:, 0, :], np.int8)
        return self._result
