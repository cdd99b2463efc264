"""Pre-bound CUDA launches: numba's per-call argument typing and marshalling done once.

A numba kernel call types every argument and turns it into ctypes values on each launch
(tens of microseconds of Python on the host). Where the arguments never change (the same
device or mapped arrays, the same scalars) they can be prepared once and only the driver
launch kept: `bind` returns `go(grid)`, one driver call per launch. It uses numba-cuda's
internals (0.30.x), so it returns None wherever they do not fit (the simulator, an
unexpected dispatcher, arguments numba would write back) and callers check one bound
launch against an ordinary one before they trust it.

Where the driver library loads, a bound launch goes further (GPU_RAW_LAUNCH=0 keeps
numba's launcher): the kernel's parameter block (the `void*` array `cuLaunchKernel`
takes) is built once from numba's prepared arguments and every launch is one `ctypes`
call into libcuda, skipping cuda.core's per-call conversion of each argument. Event
record, query and wait go the same way (`event_recorder`, `event_query`, `event_waiter`).
"""

from __future__ import annotations

import ctypes
import logging
import os
import weakref
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)

Launcher = Callable[[int], None]


def prebind_enabled() -> bool:
    """GPU_OPTIONS_PREBIND=0 switches pre-bound launches off (benchmarks compare both)."""
    return (os.environ.get("GPU_OPTIONS_PREBIND", "1") != "0"
            and os.environ.get("NUMBA_ENABLE_CUDASIM", "0") != "1")


def bind(kernel: Any, args: Sequence[Any], stream: Any, block: int) -> Launcher | None:
    """`go(grid)` launching `kernel[grid, block, stream](*args)` without numba's per-call
    work, or None. The kernel must have been launched once with arguments of these types
    (so it is compiled); `args` must stay alive and unchanged while `go` is used."""
    if not prebind_enabled():
        return None
    try:
        import numba.cuda.dispatcher

        nd: Any = numba.cuda.dispatcher  # internals mypy's stubs do not list

        overloads = getattr(kernel, "overloads", {})
        kern = None
        if len(overloads) == 1:
            kern = next(iter(overloads.values()))
        else:  # the overload these arguments select
            key = tuple(kernel.typeof_pyval(a) for a in args)
            kern = overloads.get(key)
        if kern is None:
            return None
        retr: list[Any] = []
        kernelargs: list[Any] = []
        for ty, val in zip(kern.argument_types, args, strict=True):
            kern._prepare_args(ty, val, stream, retr, kernelargs)
        if retr or kern.debug:
            return None  # write-backs or debug checks need numba's own launch
        raw = _raw_launcher(kern, kernelargs, stream, block)
        if raw is not None:
            return raw
        coop = "is_cooperative" if nd.CUDA_CORE_GE_1_0 else "cooperative_launch"
        func = kern._codelibrary.get_cufunc().kernel
        launch, make_config = nd.launch, nd.LaunchConfig
        cooperative = kern.cooperative
        configs: dict[int, Any] = {}

        def go(grid: int) -> None:
            config = configs.get(grid)
            if config is None:  # one config per grid size, made once
                config = make_config(grid=grid, block=block, shmem_size=0,
                                     **{coop: cooperative})
                configs[grid] = config
            launch(stream, config, func, *kernelargs)

        go.driver = "cuda.core"  # type: ignore[attr-defined]
        return go
    except Exception as exc:  # noqa: BLE001 - any internals mismatch: the ordinary path
        log.warning("CUDA launch not pre-bound (%s)", exc)
        return None


CUDA_SUCCESS, CUDA_ERROR_NOT_READY = 0, 600


class _LibCuda:
    """The few driver entry points a launch needs, with their C signatures (loaded once)."""

    def __init__(self) -> None:
        lib = ctypes.CDLL("libcuda.so.1")
        u, p = ctypes.c_uint, ctypes.c_void_p
        self.launch = lib.cuLaunchKernel
        self.launch.argtypes = [p, u, u, u, u, u, u, u, p, p, p]
        self.launch.restype = ctypes.c_int
        self.record = lib.cuEventRecord
        self.record.argtypes = [p, p]
        self.record.restype = ctypes.c_int
        self.query = lib.cuEventQuery
        self.query.argtypes = [p]
        self.query.restype = ctypes.c_int
        # ctypes releases the GIL for the call: other threads run while it blocks
        self.synchronize = lib.cuEventSynchronize
        self.synchronize.argtypes = [p]
        self.synchronize.restype = ctypes.c_int
        # CUDA graphs: a launch and its event's record replayed as one driver call
        self.graphs = all(hasattr(lib, name) for name in (
            "cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuGraphInstantiateWithFlags",
            "cuGraphLaunch", "cuEventRecordWithFlags", "cuGraphDestroy", "cuGraphExecDestroy"))
        if self.graphs:
            self.begin_capture = lib.cuStreamBeginCapture_v2
            self.begin_capture.argtypes = [p, ctypes.c_int]
            self.end_capture = lib.cuStreamEndCapture
            self.end_capture.argtypes = [p, ctypes.POINTER(p)]
            self.instantiate = lib.cuGraphInstantiateWithFlags
            self.instantiate.argtypes = [ctypes.POINTER(p), p, ctypes.c_ulonglong]
            self.graph_launch = lib.cuGraphLaunch
            self.graph_launch.argtypes = [p, p]
            self.record_with_flags = lib.cuEventRecordWithFlags
            self.record_with_flags.argtypes = [p, p, ctypes.c_uint]
            self.graph_destroy = lib.cuGraphDestroy
            self.graph_destroy.argtypes = [p]
            self.graph_exec_destroy = lib.cuGraphExecDestroy
            self.graph_exec_destroy.argtypes = [p]
        self.copy_to_device = lib.cuMemcpyHtoDAsync_v2
        self.copy_to_device.argtypes = [ctypes.c_uint64, p, ctypes.c_size_t, p]
        self.copy_to_device.restype = ctypes.c_int
        self.kernel_function = getattr(lib, "cuKernelGetFunction", None)
        if self.kernel_function is not None:
            self.kernel_function.argtypes = [ctypes.POINTER(p), p]
            self.kernel_function.restype = ctypes.c_int


_libcuda: list[_LibCuda | None] = []


def _driver() -> _LibCuda | None:
    """libcuda through ctypes, or None (no driver library, the simulator, switched off)."""
    if os.environ.get("GPU_RAW_LAUNCH", "1") == "0" or \
            os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1":
        return None
    if not _libcuda:
        try:
            _libcuda.append(_LibCuda())
        except (OSError, AttributeError) as exc:
            log.warning("libcuda not loadable through ctypes (%s): numba's launcher", exc)
            _libcuda.append(None)
    return _libcuda[0]


def _address(handle: Any) -> int | None:
    """The raw value of a driver handle (cuda.bindings objects convert with int())."""
    try:
        return int(handle)
    except (TypeError, ValueError):
        value = getattr(handle, "value", None)
        return int(value) if isinstance(value, int) else None


def _function_address(lib: _LibCuda, handle: Any) -> int | None:
    """A CUfunction for cuLaunchKernel: numba's handle is a CUkernel (library-loaded code,
    turned into the current context's function) or already a CUfunction."""
    addr = _address(handle)
    if addr is None:
        return None
    kind = type(handle).__name__
    if kind == "CUfunction":
        return addr
    if kind != "CUkernel" or lib.kernel_function is None:
        return None
    func = ctypes.c_void_p()
    if lib.kernel_function(ctypes.byref(func), addr) != CUDA_SUCCESS or not func.value:
        return None
    return func.value


def _raw_launcher(kern: Any, kernelargs: list[Any], stream: Any, block: int
                  ) -> Launcher | None:
    """`go(grid)` as one ctypes call to cuLaunchKernel with a parameter block built once
    from numba's prepared arguments (ctypes scalars as they are; plain integers, numba's
    array fields, as intptr_t, as cuda.core passes them), or None."""
    lib = _driver()
    if lib is None:
        return None
    func = _function_address(lib, kern._codelibrary.get_cufunc().handle)
    hstream = _address(getattr(stream, "handle", None)) or 0
    if func is None or not hstream:
        return None
    holders: list[Any] = []
    for arg in kernelargs:
        if isinstance(arg, ctypes._SimpleCData):
            holders.append(arg)
        elif isinstance(arg, int):
            holders.append(ctypes.c_ssize_t(arg))
        else:
            return None  # a kind of argument this block does not know how to pass
    params = (ctypes.c_void_p * max(len(holders), 1))(
        *[ctypes.addressof(h) for h in holders])
    launch = lib.launch

    def go(grid: int) -> None:
        code = launch(func, grid, 1, 1, block, 1, 1, 0, hstream, params, None)
        if code != CUDA_SUCCESS:
            raise RuntimeError(f"cuLaunchKernel failed with CUDA error {code}")

    go.keep_alive = (holders, params, kernelargs)  # type: ignore[attr-defined]
    go.driver = "ctypes"  # type: ignore[attr-defined]
    go.func = func  # type: ignore[attr-defined]
    go.param_block = params  # type: ignore[attr-defined]
    # the prepared values, in the kernel's argument order: a ctypes scalar changed in
    # place is what the next launch passes (`kernel_node_updater` for a graph's)
    go.scalars = holders  # type: ignore[attr-defined]
    return go


def event_recorder(event: Any, stream: Any) -> Callable[[], None]:
    """`record()` = `event.record(stream)`, as one ctypes driver call where it can be."""
    lib = _driver()
    hevent = _address(getattr(event, "handle", None)) if lib is not None else None
    hstream = _address(getattr(stream, "handle", None)) if lib is not None else None
    if lib is None or not hevent or not hstream:
        return lambda: event.record(stream)
    record = lib.record

    def fast() -> None:
        code = record(hevent, hstream)
        if code != CUDA_SUCCESS:
            raise RuntimeError(f"cuEventRecord failed with CUDA error {code}")

    return fast


def host_to_device_copier(device_array: Any, host_array: Any, stream: Any
                          ) -> Callable[[], None]:
    """`copy()` = `device_array.copy_to_device(host_array, stream=stream)` for a fixed
    pair of contiguous arrays of one size, as one ctypes driver call where it can be
    (the host array should be pinned, so the copy is truly asynchronous)."""
    lib = _driver()
    nbytes = int(host_array.nbytes)
    hstream = _address(getattr(stream, "handle", None)) if lib is not None else None
    try:
        dptr = int(device_array.device_ctypes_pointer.value or 0)
        hptr = int(host_array.ctypes.data)
        same = (nbytes == int(device_array.nbytes) and host_array.flags.c_contiguous
                and device_array.is_c_contiguous())
    except AttributeError:
        dptr = hptr = 0
        same = False
    if lib is None or not hstream or not dptr or not same:
        return lambda: device_array.copy_to_device(host_array, stream=stream)
    copy = lib.copy_to_device

    def fast() -> None:
        code = copy(dptr, hptr, nbytes, hstream)
        if code != CUDA_SUCCESS:
            raise RuntimeError(f"cuMemcpyHtoDAsync failed with CUDA error {code}")

    fast.keep_alive = (device_array, host_array)  # type: ignore[attr-defined]
    return fast


def event_query(event: Any) -> Callable[[], bool]:
    """A cheap `event.query()`: numba's raises (and logs) an error for every not-ready
    answer, some microseconds a poll; this asks the driver directly and compares codes.
    The CUDA simulator's events have no query (its launches are synchronous): always True.
    GPU_FAST_EVENT_QUERY=0 keeps numba's query."""
    query = getattr(event, "query", None)
    if query is None:
        return lambda: True
    if os.environ.get("GPU_FAST_EVENT_QUERY", "1") == "0":  # numba's (benchmarks compare)
        return lambda: bool(query())
    lib = _driver()
    hevent = _address(getattr(event, "handle", None)) if lib is not None else None
    if lib is not None and hevent:
        cu_query = lib.query

        def raw() -> bool:
            code = cu_query(hevent)
            if code == CUDA_SUCCESS:
                return True
            if code == CUDA_ERROR_NOT_READY:
                return False
            return bool(query())  # numba's query raises the driver's error

        return raw
    try:
        from cuda.bindings import driver as binding

        handle = event.handle
        fn = binding.cuEventQuery
        success = binding.CUresult.CUDA_SUCCESS
        not_ready = binding.CUresult.CUDA_ERROR_NOT_READY
        fn(handle)  # the handle is the driver's: this must not raise
    except Exception:  # noqa: BLE001 - another binding: numba's query
        return lambda: bool(query())

    def fast() -> bool:
        code = fn(handle)[0]
        if code == success:
            return True
        if code == not_ready:
            return False
        return bool(query())  # numba's query raises the driver's error

    return fast


def event_waiter(event: Any) -> Callable[[], None]:
    """`wait()`: block the calling thread until `event` has happened, with the GIL
    released for the whole wait (one ctypes call to cuEventSynchronize), so the process's
    other threads run meanwhile (a journal writer, a feed thread), and no CPU is spent
    spinning. Polling `event_query` lets go of the GIL at each poll as well (a ctypes
    call), so this did not cure a replay's feed thread starving next to GPU bar closes
    (measured: benchmarks/results/h200-2026-11-28/README.md); a feed process does
    (`engine.trading.replay.feed_transport`). Elsewhere (no driver library, the
    simulator) numba's `event.synchronize()`."""
    lib = _driver()
    hevent = _address(getattr(event, "handle", None)) if lib is not None else None
    if lib is None or not hevent:
        return lambda: event.synchronize()
    synchronize = lib.synchronize

    def wait() -> None:
        if synchronize(hevent) != CUDA_SUCCESS:
            event.synchronize()  # numba's: raises the driver's error (or waits, if it can)

    return wait


#: cuStreamBeginCapture's mode that lets other threads use the driver meanwhile
CAPTURE_MODE_RELAXED = 2
#: cuEventRecordWithFlags' flag that makes a captured record a node of the graph
EVENT_RECORD_EXTERNAL = 1


def graph_launcher(go: Launcher, grid: int, event: Any, stream: Any
                   ) -> Callable[[], None] | None:
    """`launch()`: the bound launch `go(grid)` followed by `event`'s record, captured once
    into a CUDA graph and replayed as one cuGraphLaunch (one driver call where there were
    two); None where the driver library, or its graph entry points, are not reached, or
    the capture fails (the caller keeps its bound launch). The launch's arguments are
    captured by value, so they must stay as `go` holds them. The graph and its executable
    are destroyed with `launch` (`launch.release`, a weakref.finalize)."""
    lib = _driver()
    hstream = _address(getattr(stream, "handle", None)) if lib is not None else None
    hevent = _address(getattr(event, "handle", None)) if lib is not None else None
    if lib is None or not hstream or not hevent or not lib.graphs:
        return None
    graph, graph_exec = ctypes.c_void_p(), ctypes.c_void_p()
    if lib.begin_capture(hstream, CAPTURE_MODE_RELAXED) != CUDA_SUCCESS:
        return None
    recorded: int | None = None
    try:
        go(grid)
        recorded = lib.record_with_flags(hevent, hstream, EVENT_RECORD_EXTERNAL)
    except Exception as exc:  # noqa: BLE001 - a launch refused under capture: no graph
        log.warning("a CUDA graph capture failed (%s): the bound launch stays", exc)
    finally:  # the stream must leave capture mode whatever happened
        ended = lib.end_capture(hstream, ctypes.byref(graph))
    hgraph = graph.value
    if recorded != CUDA_SUCCESS or ended != CUDA_SUCCESS or not hgraph:
        if hgraph:
            lib.graph_destroy(hgraph)
        return None
    made = lib.instantiate(ctypes.byref(graph_exec), hgraph, 0)
    hexec = graph_exec.value
    if made != CUDA_SUCCESS or not hexec:
        lib.graph_destroy(hgraph)
        return None
    replay = lib.graph_launch

    def launch() -> None:
        code = replay(hexec, hstream)
        if code != CUDA_SUCCESS:
            raise RuntimeError(f"cuGraphLaunch failed with CUDA error {code}")

    launch.handles = (hexec, hgraph)  # type: ignore[attr-defined]
    release = weakref.finalize(launch, _destroy_graph, lib, hexec, hgraph)
    # at the interpreter's exit the context goes with the process (and may be gone)
    release.atexit = False
    launch.release = release  # type: ignore[attr-defined]
    return launch


def _destroy_graph(lib: _LibCuda, graph_exec: int, graph: int) -> None:
    """A replayed graph's driver objects, freed when its launcher is collected (error
    codes are ignored: nothing can be done about them in a finalizer)."""
    lib.graph_exec_destroy(graph_exec)
    lib.graph_destroy(graph)


def untimed_event() -> Any:
    """A CUDA event without timing (cheaper to record and query); the simulator's Event
    takes no arguments."""
    from numba import cuda

    try:
        return cuda.event(timing=False)  # type: ignore[call-arg]
    except TypeError:
        return cuda.event()


_signal_kernels: list[Any] = []


def _signal_kernel() -> Any:
    """A one-thread kernel counting its launches in device memory and writing the count
    into a flag in mapped host memory (built on first use: importing this module must not
    import numba)."""
    if not _signal_kernels:
        from numba import cuda

        @cuda.jit(cache=True)
        def signal_done(count: Any, flag: Any) -> None:
            done = count[0] + 1
            count[0] = done
            flag[0] = done

        _signal_kernels.append(signal_done)
    return _signal_kernels[0]


class CompletionFlag:
    """Completion seen by reading host memory: a one-thread kernel launched after the
    work on the same stream writes the launch count into a mapped flag, so `seen()` is a
    memory read (about 0.1 µs) instead of an event query (a driver call, 1.7 µs on the
    H200's host) and is true as soon as that write lands. The work's own writes are
    visible first: the signal kernel starts only after the work kernel has completed.
    `arm()` before each launch; only for launches replayed in order on one stream."""

    def __init__(self, stream: Any) -> None:
        import numpy as np
        from numba import cuda

        kernel = _signal_kernel()
        self.count = cuda.to_device(np.zeros(1, np.int64), stream=stream)
        self.flag = cuda.mapped_array(1, dtype=np.int64)
        self.host = np.asarray(self.flag)  # a host view of the mapped word
        self.host[0] = 0
        args = (self.count, self.flag)
        kernel[1, 1, stream](*args)  # compiles, or loads
        stream.synchronize()
        self.expected = int(self.host[0])
        self.go = bind(kernel, args, stream, 1)

    def arm(self) -> None:
        self.expected += 1

    def seen(self) -> bool:
        return bool(self.host[0] >= self.expected)


def completion_flag(stream: Any) -> CompletionFlag | None:
    """A `CompletionFlag` on `stream`, or None where its launch cannot be pre-bound (the
    simulator, GPU_COMPLETION_FLAG=0: benchmarks compare both)."""
    if not prebind_enabled() or os.environ.get("GPU_COMPLETION_FLAG", "1") == "0":
        return None
    flag = CompletionFlag(stream)
    return flag if flag.go is not None else None


class _KernelNodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h): a graph's kernel node as the driver gives it."""

    _fields_ = [("func", ctypes.c_void_p), ("grid_x", ctypes.c_uint), ("grid_y", ctypes.c_uint),
                ("grid_z", ctypes.c_uint), ("block_x", ctypes.c_uint),
                ("block_y", ctypes.c_uint), ("block_z", ctypes.c_uint),
                ("shared_bytes", ctypes.c_uint), ("kernel_params", ctypes.c_void_p),
                ("extra", ctypes.c_void_p), ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


#: CUgraphNodeType of a kernel node
GRAPH_NODE_KERNEL = 0


def kernel_node_updater(launch: Any, go: Any) -> Callable[[], None] | None:
    """`update()`: the graph replayed by `launch` (`graph_launcher`) takes its kernel node
    of `go`'s function (a raw bound launch, `_raw_launcher`) again from `go`'s parameter
    block, so a scalar changed in place (`go.scalars`) reaches the next replay: one
    cuGraphExecKernelNodeSetParams (1.4 µs on the H200's host, 2026-11-28). None where the
    driver's entry points, the launch's graph or the node are not found."""
    lib = _driver()
    handles = getattr(launch, "handles", None)
    func, block = getattr(go, "func", None), getattr(go, "param_block", None)
    if lib is None or handles is None or func is None or block is None:
        return None
    raw = ctypes.CDLL("libcuda.so.1")
    names = ("cuGraphGetNodes", "cuGraphNodeGetType", "cuGraphKernelNodeGetParams_v2",
             "cuGraphExecKernelNodeSetParams_v2")
    if not all(hasattr(raw, name) for name in names):
        return None
    p = ctypes.c_void_p
    get_nodes, node_type = raw.cuGraphGetNodes, raw.cuGraphNodeGetType
    get_nodes.argtypes = [p, ctypes.POINTER(p), ctypes.POINTER(ctypes.c_size_t)]
    node_type.argtypes = [p, ctypes.POINTER(ctypes.c_int)]
    get_params = raw.cuGraphKernelNodeGetParams_v2
    get_params.argtypes = [p, ctypes.POINTER(_KernelNodeParams)]
    set_params = raw.cuGraphExecKernelNodeSetParams_v2
    set_params.argtypes = [p, p, ctypes.POINTER(_KernelNodeParams)]
    hexec, hgraph = handles
    count = ctypes.c_size_t(0)
    if get_nodes(hgraph, None, ctypes.byref(count)) != CUDA_SUCCESS:
        return None
    nodes = (p * count.value)()
    if get_nodes(hgraph, nodes, ctypes.byref(count)) != CUDA_SUCCESS:
        return None
    kind, params = ctypes.c_int(), _KernelNodeParams()
    for node in nodes:
        if (node_type(node, ctypes.byref(kind)) == CUDA_SUCCESS
                and kind.value == GRAPH_NODE_KERNEL
                and get_params(node, ctypes.byref(params)) == CUDA_SUCCESS
                and params.func == func):
            break
    else:
        return None
    params.kernel_params = ctypes.cast(block, p).value
    params.extra = None
    hnode = p(node)

    def update() -> None:
        code = set_params(hexec, hnode, ctypes.byref(params))
        if code != CUDA_SUCCESS:
            raise RuntimeError(f"cuGraphExecKernelNodeSetParams failed with CUDA error {code}")

    update.keep_alive = (launch, go, params)  # type: ignore[attr-defined]
    return update
