"""One launch reprices every option group of a grid that has a new spot, several launches in flight.

The GPU worker process (`engine.options.worker_server`) keeps, per grid, a `BatchPricer` with a few
launch slots. Each slot owns its buffers (mapped host memory for the parameter rows and the
results, so neither needs a copy), its stream and its event. `launch(slot, parts)` gathers
the parameter rows of the groups being repriced (each group's rows with its new spot
already written) into the slot's buffer and prices them all with one kernel, one block per
option across groups: ten groups cost one launch, not ten, and every pending group is
repriced in the same round. With several slots a new launch starts before the previous
one finished, so the GPU is never idle while the host collects results.

Within a launch the rows are ordered longest time to expiry first: blocks are dispatched in
index order, and a long option started last keeps the GPU busy alone at the end of the
launch (the tail); started first it runs alongside the short ones. Each row is priced
independently of the others, so the order (and the batching) leaves every value as the
group's own pricer computes it; `results` returns the rows in the groups' order.

A slot keeps the rows of its last launch. When the next launch in it prices the same
single group with the same key (same expiry columns) and says its new `spot`, only the
spot column is written (102 stores, not a gather of 102 rows): a group's rows change
between repricings only in their spot, and in their times to expiry when the date rolls,
which changes the key. `results_into` writes one group's results straight into a
(3, n) destination (the worker's shared memory) in one pass, no intermediate array.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from gpu.device import fd_solver, resolve_device
from gpu.launch import bind, event_query, event_recorder, graph_launcher, untimed_event
from gpu.options import core
from gpu.options.engines import FdGrid, make_grid


class _Slot:
    """One launch in flight: its buffers, stream, event, and what it priced."""

    def __init__(self, total: int, device: str) -> None:
        self.m = 0  # rows of the current launch
        self.inverse: np.ndarray | None = None  # launch row of each group row, in order
        self.order: np.ndarray | None = None  # group row of each launch row
        self.part_sizes: list[int] = []  # rows of each group of the current launch
        self.go: Any = None  # the pre-bound launch, if any
        #: the pre-bound launch of all `total` rows and the event's record as one CUDA graph
        self.graph: Any = None
        self.key: tuple[Any, ...] | None = None  # the groups whose rows are in place
        if device == "cpu":
            self.params: Any = np.zeros((total, core.N_PARAMS))
            self.out: Any = np.zeros((total, core.N_OUT))
            self.params_host = self.params
            self.out_host = self.out
            self.stream: Any = None
            self.event: Any = None
            self.query: Any = None
            self.record: Any = None
            return
        from numba import cuda

        self.params = cuda.mapped_array((total, core.N_PARAMS), dtype=np.float64)
        self.out = cuda.mapped_array((total, core.N_OUT), dtype=np.float64)
        self.params_host = np.asarray(self.params)  # host views of the same memory
        self.out_host = np.asarray(self.out)
        self.params_host[:] = 0.0
        self.out_host[:] = np.nan
        self.stream = cuda.stream()
        self.event = untimed_event()
        self.query = event_query(self.event)
        self.record = event_recorder(self.event, self.stream)


class BatchPricer:
    """Launch slots pricing the rows of several option groups of one grid together.

    sizes: the option count of each group (a group's rows are passed to `launch`).
    slots: launches that may be in flight at once.
    """

    def __init__(self, sizes: list[int], grid: str | FdGrid, device: str,
                 slots: int = 2, solver: str | None = None) -> None:
        if slots < 1:
            raise ValueError(f"slots must be ≥ 1, got {slots}")
        self.grid = make_grid(grid)
        self.device = resolve_device(device, "option batch repricing")
        self.sizes = list(sizes)
        self.total = max(sum(sizes), 1)
        #: the FD kernel's tridiagonal solver (`gpu.device.fd_solver`: GPU_FD_SOLVER, "lanes")
        self.solver = fd_solver(solver)
        self._args = self.grid.kernel_args()
        self._slots = [_Slot(self.total, self.device) for _ in range(slots)]
        self._busy = [False] * slots
        #: launch order of the rows per (groups, their expiry columns): computed once
        self._orders: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = {}
        self.prebound = False
        #: how bound launches reach the driver: "ctypes", "cuda.core" (numba's), or None
        self.launcher: str | None = None
        #: OPTION_BATCH_IN_PLACE=0: always regather the rows (benchmarks compare both)
        self.in_place = os.environ.get("OPTION_BATCH_IN_PLACE", "1") != "0"
        if self.device == "cuda":
            self._kernel, self._threads = core.fd_kernel(self.grid.price_steps, self.solver)
            self._threads = core.lanes_threads(self._kernel, self._threads,
                                               self.grid.richardson, self.total,
                                               self._compile_once)
            self._bind()

    @property
    def slots(self) -> int:
        return len(self._slots)

    def free_slot(self) -> int | None:
        """A slot with no launch in flight, or None."""
        for i, busy in enumerate(self._busy):
            if not busy:
                return i
        return None

    def _warm_rows(self, s: _Slot) -> tuple[Any, ...]:
        """The launch arguments of slot `s` with rows no group owns (a ladder of calls)."""
        s.params_host[:, :core.N_PARAMS] = np.array(
            [100.0, 100.0, 0.25, 0.2, 0.01, 0.0, 1.0, 0.0])
        s.params_host[:, core.STRIKE] = np.linspace(80.0, 120.0, self.total)
        s.key = None
        return (s.params, s.out, *core.launch_args(self._args))

    def _compile_once(self) -> None:
        """One ordinary launch on the first slot, which compiles (or loads) the kernel."""
        s = self._slots[0]
        self._kernel[self.total, self._threads, s.stream](*self._warm_rows(s))
        s.stream.synchronize()

    def _bind(self) -> None:
        """Pre-bind every slot's launch, kept only where each prices like numba's own
        launch: all slots pre-bound or none, so `prebound` says how every launch goes."""
        bound = []
        for s in self._slots:
            # one ordinary launch compiles (or loads) the kernel and gives the reference
            args = self._warm_rows(s)
            self._kernel[self.total, self._threads, s.stream](*args)
            s.stream.synchronize()
            reference = s.out_host.copy()
            go = bind(self._kernel, args, s.stream, self._threads)
            if go is None:
                return
            s.out_host[:] = np.nan
            go(self.total)
            s.stream.synchronize()
            if not np.array_equal(s.out_host, reference, equal_nan=True):
                return  # the ordinary launch stays for every slot
            bound.append(go)
        for s, go in zip(self._slots, bound, strict=True):
            s.go = go
        self.prebound = True
        self.launcher = getattr(bound[0], "driver", None) if bound else None
        if os.environ.get("GPU_OPTIONS_GRAPH", "1") != "0" and self._capture_graphs():
            self.launcher = f"{self.launcher}+graph"

    def _capture_graphs(self) -> bool:
        """Each slot's launch of all its rows and the event's record captured as one CUDA
        graph (`graph_launcher`: one driver call a launch instead of two), kept for every
        slot or none, and only where a replay prices like the bound launch bit for bit."""
        graphs = []
        for s in self._slots:
            s.go(self.total)
            s.stream.synchronize()
            reference = s.out_host.copy()
            replay = graph_launcher(s.go, self.total, s.event, s.stream)
            if replay is None:
                return False
            s.out_host[:] = np.nan
            replay()
            s.event.synchronize()
            if not (s.query() and np.array_equal(s.out_host, reference, equal_nan=True)):
                return False
            graphs.append(replay)
        for s, replay in zip(self._slots, graphs, strict=True):
            s.graph = replay
        return True

    def _order(self, key: tuple[Any, ...], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        found = self._orders.get(key)
        if found is None:
            if len(self._orders) > 256:  # many distinct sets of groups: keep it bounded
                self._orders.clear()
            order = np.argsort(-rows[:, core.EXPIRY], kind="stable")
            found = (order, np.argsort(order, kind="stable"))
            self._orders[key] = found
        return found

    def launch(self, slot: int, parts: list[np.ndarray], key: tuple[Any, ...],
               spot: float | None = None, spots: list[float] | None = None) -> None:
        """Price the concatenated parameter rows `parts` (one array per group, spot set) in
        `slot`; `key` names the groups and their expiry columns (it selects a cached row
        order: the same key must mean rows with the same expiries). `spot`, with a single
        group, or `spots`, one per part: the rows differ from this slot's previous launch
        of the same key only in their spot columns, so only those are written. Does not
        wait."""
        if self._busy[slot]:
            raise RuntimeError(f"launch slot {slot} is busy")
        s = self._slots[slot]
        in_place = s.key == key and self.in_place
        if spot is not None and len(parts) == 1 and in_place:
            s.params_host[:s.m, core.SPOT] = spot  # the rows are in place: only the spot moved
        elif spots is not None and in_place:
            # each launch row's spot: its group's (rows in launch order, `order`)
            per_row = np.repeat(np.asarray(spots, dtype=np.float64), s.part_sizes)
            s.params_host[:s.m, core.SPOT] = per_row[s.order]
        else:
            rows = parts[0] if len(parts) == 1 else np.concatenate(parts)
            m = rows.shape[0]
            if m > self.total:
                raise ValueError(f"{m} rows exceed the batch's {self.total}")
            s.order, s.inverse = self._order(key, rows)
            np.take(rows, s.order, axis=0, out=s.params_host[:m])
            s.m = m
            s.part_sizes = [len(p) for p in parts]
            s.key = key if (spot is not None and len(parts) == 1) or spots is not None else None
        self._busy[slot] = True
        if self.device == "cpu":
            core.fd_price_batch_cpu(s.params_host[:s.m], s.out_host[:s.m], *self._args)
            return
        if s.graph is not None and s.m == self.total:
            s.graph()  # the launch and the event's record
            return
        if s.go is not None:
            s.go(s.m)
        else:
            self._kernel[s.m, self._threads, s.stream](s.params, s.out,
                                                       *core.launch_args(self._args))
        s.record()

    def done(self, slot: int) -> bool:
        """True once the slot's launch finished (a non-blocking event query)."""
        if not self._busy[slot] or self.device == "cpu":
            return True
        return bool(self._slots[slot].query())

    def wait(self, slot: int) -> None:
        if self._busy[slot] and self.device == "cuda":
            self._slots[slot].event.synchronize()

    def results(self, slot: int) -> np.ndarray:
        """(m, N_OUT) results of the slot's launch in the rows' given order; frees the slot.
        Call only when done()."""
        if not self.done(slot):
            raise RuntimeError("results requested before the launch finished")
        s = self._slots[slot]
        assert s.inverse is not None
        self._busy[slot] = False
        return np.take(s.out_host[:s.m], s.inverse, axis=0)

    def results_by_column(self, slot: int) -> np.ndarray:
        """(N_OUT, m) results of the slot's launch, a row per output (price, delta, gamma)
        with the rows' given order along it: each group's values are contiguous slices;
        frees the slot. Call only when done()."""
        if not self.done(slot):
            raise RuntimeError("results requested before the launch finished")
        s = self._slots[slot]
        assert s.inverse is not None
        self._busy[slot] = False
        return np.take(s.out_host[:s.m].T, s.inverse, axis=1)

    def results_into(self, slot: int, start: int, dest: np.ndarray) -> None:
        """Rows start..start+n (n = dest's columns) of the slot's launch, in the rows' given
        order, written transposed into `dest` (3, n): price, delta, gamma rows. Call only
        when done(); `release` frees the slot once every group's results are out."""
        s = self._slots[slot]
        assert s.inverse is not None
        n = dest.shape[1]
        np.take(s.out_host[:s.m].T, s.inverse[start:start + n], axis=1, out=dest)

    def release(self, slot: int) -> None:
        """Free a finished slot whose results were taken with `results_into` (the caller
        saw done(); not asked again, it is a driver call)."""
        self._busy[slot] = False
