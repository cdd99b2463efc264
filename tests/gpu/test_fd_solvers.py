"""The FD kernel's tridiagonal solvers: the lanes kernel (Thomas sweeps carried across a
warp's lanes) against the float64 CPU twin and the PCR kernel; the solver setting.

No QuantLib here, so the real-GPU tests run on the GPU machine's image too."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.device import FD_SOLVERS, SettingError, cuda_present, fd_max_registers, fd_solver
from gpu.options import core
from gpu.options.engines import OptionGroupPricer, make_grid, option_params, price_params
from tests.gpu.option_rows import random_params, reprice_at

needs_cuda = pytest.mark.skipif(not cuda_present(), reason="no CUDA device or simulator")


@needs_cuda
@pytest.mark.parametrize(("price_steps", "time_steps", "rannacher"),
                         [(20, 4, 0), (40, 3, 1), (70, 3, 2), (200, 2, 1)])
def test_lanes_solver_matches_cpu_twin_across_rows_per_lane(
        price_steps: int, time_steps: int, rannacher: int) -> None:
    """The lanes kernel with 1, 2, 3 and 7 rows per lane (21, 41, 71 and 201 nodes: rows
    past node N are padding; at 7 rows a lane the operator's coefficients no longer fit
    the shared memory set aside and are computed each phase), American and European puts
    and calls, both grid domains, with and without a Rannacher start, against the float64
    Thomas twin and the PCR kernel."""
    for base in ("seed", "default"):
        grid = make_grid(base, price_steps=price_steps, time_steps=time_steps,
                         rannacher=rannacher)
        params = random_params(4, seed=price_steps)[1 if base == "seed" else 2:][:2]
        lanes = np.empty((2, core.N_OUT))
        pcr = np.empty((2, core.N_OUT))
        from numba import cuda

        for (kernel, threads), out in ((core.fd_kernel(price_steps, "lanes"), lanes),
                                       (core.fd_kernel(price_steps, "pcr"), pcr)):
            d_out = cuda.device_array((2, core.N_OUT))
            kernel[2, threads](cuda.to_device(params), d_out,
                  *core.launch_args(grid.kernel_args()))
            out[:] = d_out.copy_to_host()
        assert core.rows_per_lane(price_steps) == -(-(price_steps + 1) // 32)
        cpu = price_params(params, grid, "cpu")
        for got in (lanes, pcr):
            np.testing.assert_allclose(got[:, core.PRICE], cpu.price, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(got[:, core.DELTA], cpu.delta, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(got[:, core.GAMMA], cpu.gamma, rtol=1e-3, atol=1e-4)


@needs_cuda
@pytest.mark.parametrize(("price_steps", "time_steps"), [(40, 3), (70, 4)])
def test_split_passes_price_like_one_warp(price_steps: int, time_steps: int) -> None:
    """Two warps per option (the Richardson marches side by side), one warp with both
    marches interleaved in its steps, and one warp marching them one after the other give
    the same values bit for bit, for American rows (two marches; 3 steps: a coarse march
    of one step, all Rannacher) and European ones in the same launch (one march), and the
    float64 twin's to float32 rounding."""
    from numba import cuda

    grid = make_grid("default", price_steps=price_steps, time_steps=time_steps)
    assert grid.richardson and not core.split_passes(False, 4)
    params = random_params(4, seed=price_steps)  # rows 2, 3 American, 0, 1 European
    params[:, core.DIVIDEND] = 0.03  # so the American call is exercised early too
    outs = []
    for split, interleave in ((False, False), (False, True), (True, True)):
        kernel, threads = core.fd_kernel(price_steps, "lanes", split_passes=split,
                                         interleave=interleave)
        assert threads == core.LANES * (2 if split else 1)
        d_out = cuda.device_array((4, core.N_OUT))
        kernel[4, threads](cuda.to_device(params), d_out,
                  *core.launch_args(grid.kernel_args()))
        outs.append(d_out.copy_to_host())
    np.testing.assert_array_equal(outs[1], outs[0])
    np.testing.assert_array_equal(outs[2], outs[0])
    cpu = price_params(params, grid, "cpu")
    np.testing.assert_allclose(outs[1][:, core.PRICE], cpu.price, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(outs[1][:, core.DELTA], cpu.delta, rtol=1e-4, atol=1e-4)


@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.sampled_from([-0.01, 0.0, 0.03]),
                          st.sampled_from([-0.02, 0.0, 0.04])), min_size=0, max_size=12),
       st.booleans())
@settings(max_examples=200, deadline=None)
def test_two_marches_is_any_row_marched_twice(
        rows: list[tuple[bool, bool, float, float]], richardson: bool) -> None:
    """`two_marches` (the host's choice of the interleaving kernel) is true exactly when
    some row would be marched twice (`time_passes` of its early exercise), for calls and
    puts, American or not, with rates and yields of either sign, and no rows."""
    params = option_params(np.full(len(rows), 100.0), np.full(len(rows), 100.0),
                           np.full(len(rows), 0.5), np.full(len(rows), 0.2),
                           np.array([r[2] for r in rows]), np.array([r[0] for r in rows]),
                           np.array([r[1] for r in rows]))
    params[:, core.DIVIDEND] = [r[3] for r in rows]
    want = any(core.time_passes(richardson, core.early_exercise(c, a, r, q), 40) == 2
               for c, a, r, q in rows)
    assert core.two_marches(params, richardson) == want


@pytest.mark.gpu
def test_real_gpu_interleaved_marches_price_bit_for_bit_like_one_after_the_other() -> None:
    """On a real GPU, 1,000 reference rows (American with dividends, some European) in
    one-warp launches: the kernel interleaving an option's two marches gives the values
    of the kernel marching them one after the other bit for bit, and a group pricer of
    European rows only takes the kernel without the interleaving."""
    from numba import cuda

    from benchmarks.options import reference_rows

    grid = make_grid("default")
    params = reference_rows(1000)
    outs = []
    for interleave in (False, True):
        kernel, threads = core.fd_kernel(grid.price_steps, "lanes", interleave=interleave)
        d_out = cuda.device_array((1000, core.N_OUT))
        kernel[1000, threads](cuda.to_device(params), d_out,
                              *core.launch_args(grid.kernel_args()))
        outs.append(d_out.copy_to_host())
    assert core.two_marches(params, grid.richardson)
    assert outs[0] is not outs[1] and np.isfinite(outs[0]).all()
    np.testing.assert_array_equal(outs[1], outs[0])
    european = params.copy()
    european[:, core.IS_AMERICAN] = 0.0
    group = OptionGroupPricer(european, grid, "cuda")
    assert group._kernel is core.fd_kernel(grid.price_steps, "lanes", interleave=False)[0]


@pytest.mark.gpu
def test_real_gpu_group_pricer_values_equal_the_one_shot_path() -> None:
    """On a real GPU the group pricer (a pre-bound launch and its event's record replayed
    as one CUDA graph, mapped rows, the event polled) gives the one-shot path's values bit
    for bit, polled or waited for, launch after launch with new spots (the default grid's
    kernel: two marches, American rows)."""
    params = random_params(2000, seed=31)
    pricer = OptionGroupPricer(params, "default", "cuda")
    # the launch, the completion flag's signal and the event's record replayed as one
    # CUDA graph; done() reads the flag; a new spot is the kernel node's `spot_at`
    assert pricer.launcher == "ctypes+graph+flag", pricer.launcher
    assert pricer._update_node is not None and not pricer._spot_in_rows
    for k, spot in enumerate((95.0, 104.0, 99.5)):
        got, rows = reprice_at(pricer, spot, wait=k == 1)
        want = price_params(rows, "default", "cuda")
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
        assert not pricer.in_flight


@pytest.mark.gpu
def test_real_gpu_group_splits_its_marches_only_while_every_option_is_resident() -> None:
    """A group gets two warps an option exactly when the device holds all of its options'
    two-warp blocks at once (the compiled kernel's occupancy times the SMs), one warp
    past that; split or not, the values are bit for bit those of a one-warp launch
    (SPLIT_PASSES_MAX_OPTIONS = 0), and the one-shot path chooses the same way."""
    grid = make_grid("default")
    OptionGroupPricer(random_params(4, seed=8), grid, "cuda")  # compiles the kernel
    resident = core.resident_split_options(core.fd_kernel(grid.price_steps)[0])
    assert resident >= 100  # any data-centre GPU holds a hundred options' blocks
    for n, threads in ((resident, 2 * core.LANES), (resident + 1, core.LANES)):
        params = random_params(n, seed=n)
        pricer = OptionGroupPricer(params, grid, "cuda")
        assert pricer._threads == threads
        got, rows = reprice_at(pricer, 101.0, wait=False)
        try:
            core.SPLIT_PASSES_MAX_OPTIONS = 0
            one_warp = OptionGroupPricer(params, grid, "cuda")
            assert one_warp._threads == core.LANES
            want, _ = reprice_at(one_warp, 101.0, wait=True)
        finally:
            core.SPLIT_PASSES_MAX_OPTIONS = None
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
        assert core.split_passes(True, n, core.fd_kernel(grid.price_steps)[0]) == (
            threads == 2 * core.LANES)


def test_split_passes_bound_and_its_override() -> None:
    """Without a compiled kernel to ask (or in the simulator) a launch keeps one warp an
    option; SPLIT_PASSES_MAX_OPTIONS overrides the bound; a grid without Richardson
    extrapolation never splits (it has one march)."""
    assert core.SPLIT_PASSES_MAX_OPTIONS is None
    assert not core.split_passes(True, 1)
    assert not core.split_passes(True, 1, object())
    try:
        core.SPLIT_PASSES_MAX_OPTIONS = 10
        assert core.split_passes(True, 10) and not core.split_passes(True, 11)
        assert not core.split_passes(False, 1)
    finally:
        core.SPLIT_PASSES_MAX_OPTIONS = None


@pytest.mark.gpu
def test_real_gpu_completion_flag_and_spot_parameter_price_as_the_rows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """done() read from the completion flag (host memory) gives, launch after launch with
    new spots (the graph's kernel node updated with each) and polled as tightly as Python
    can, the values the event-polled pricer (GPU_COMPLETION_FLAG=0) gives for the same
    spot, bit for bit: the flag is never seen before the repricing's own writes; and a
    pricer writing the spot into every row (numba's launcher) gives the same values."""
    params = random_params(1000, seed=44)
    flagged = OptionGroupPricer(params, "default", "cuda")
    monkeypatch.setenv("GPU_COMPLETION_FLAG", "0")
    evented = OptionGroupPricer(params, "default", "cuda")
    # numba's own launcher, bound: its `spot_at` cannot change, so spots go into the rows
    monkeypatch.setenv("GPU_RAW_LAUNCH", "0")
    in_rows = OptionGroupPricer(params, "default", "cuda")
    assert flagged.launcher == "ctypes+graph+flag" and evented.launcher == "ctypes+graph"
    assert in_rows._spot_in_rows and not flagged._spot_in_rows
    spots = np.random.default_rng(9).uniform(80.0, 120.0, 200)
    for k, spot in enumerate(spots):
        got, _ = reprice_at(flagged, float(spot), wait=False)
        want, _ = reprice_at(evented, float(spot), wait=False)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
        if k % 20 == 0:  # the spot in every row instead of the launch's parameter
            rowed, _ = reprice_at(in_rows, float(spot), wait=False)
            for a, b in zip(got, rowed, strict=True):
                np.testing.assert_array_equal(a, b)


_SPOT_PRICERS: dict[str, OptionGroupPricer] = {}


@needs_cuda
@settings(max_examples=200, deadline=None)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                 st.integers(-10**30, 10**30).map(float)),
       st.sampled_from(["cpu", "cuda"]))
def test_any_spot_is_taken_or_refused_in_one_line(spot: float, device: str) -> None:
    """set_spot with any float (NaN, infinities, zero, negatives, subnormals, huge): a
    positive finite spot is what `rows()` then prices, on the CPU (written into each row)
    and on CUDA (the launch's `spot_at`); anything else is a one-line ValueError that
    leaves the group's spot as it was."""
    pricer = _SPOT_PRICERS.get(device)
    if pricer is None:
        pricer = _SPOT_PRICERS[device] = OptionGroupPricer(random_params(3, seed=2), "seed",
                                                          device)
    pricer.set_spot(100.0)
    try:
        pricer.set_spot(spot)
    except ValueError as exc:
        assert not (spot > 0 and np.isfinite(spot))
        assert "\n" not in str(exc) and str(exc).startswith("spot must be a positive")
        assert (pricer.rows()[:, core.SPOT] == 100.0).all()
        return
    assert spot > 0 and np.isfinite(spot)
    assert (pricer.rows()[:, core.SPOT] == spot).all()


def test_bad_fd_solver_setting_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in ("thomas", "", "LANES"):
        monkeypatch.setenv("GPU_FD_SOLVER", bad)
        with pytest.raises(SettingError, match="GPU_FD_SOLVER must be one of lanes, pcr"):
            fd_solver()
    monkeypatch.delenv("GPU_FD_SOLVER")
    assert fd_solver() == "lanes"
    with pytest.raises(SettingError, match="GPU_FD_SOLVER"):
        OptionGroupPricer(random_params(2, seed=1), "seed", "cpu", solver="cr")


def test_bad_fd_register_cap_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in ("-1", "1", "31", "256", "many", "", "128.0"):
        monkeypatch.setenv("GPU_FD_MAX_REGISTERS", bad)
        with pytest.raises(SettingError, match=r"GPU_FD_MAX_REGISTERS must be 0 \(no cap\)"):
            fd_max_registers()
    for good, cap in (("0", 0), ("32", 32), ("128", 128), ("255", 255)):
        monkeypatch.setenv("GPU_FD_MAX_REGISTERS", good)
        assert fd_max_registers() == cap
    monkeypatch.delenv("GPU_FD_MAX_REGISTERS")
    assert fd_max_registers() == 0


@pytest.mark.gpu
@pytest.mark.parametrize("solver", FD_SOLVERS)
def test_real_gpu_group_pricer_through_mapped_memory(solver: str) -> None:
    params = random_params(1000, seed=3)
    pricer = OptionGroupPricer(params, "seed", "cuda", solver=solver)
    assert pricer.solver == solver
    pricer.set_spot(101.5)
    pricer.launch()
    while not pricer.done():
        pass
    got = pricer.results()
    params[:, core.SPOT] = 101.5
    want = price_params(params, "seed", "cpu")
    worth = want.price > 0.01
    assert np.max(np.abs(got.price - want.price)[worth] / want.price[worth]) <= 1e-4


@pytest.mark.gpu
def test_real_gpu_register_capped_lanes_kernel_prices_the_same(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU_FD_MAX_REGISTERS=128 builds a capped lanes kernel (its own compilation) whose
    values equal the uncapped kernel's to float32 rounding, and the float64 twin's."""
    from numba import cuda

    params = random_params(1000, seed=8)
    grid = make_grid("seed")
    kernels = {}
    for cap in ("0", "128"):
        monkeypatch.setenv("GPU_FD_MAX_REGISTERS", cap)
        kernels[cap] = core.fd_lanes_kernel(grid.price_steps)
    assert kernels["0"] is not kernels["128"]
    outs = {}
    for cap, kernel in kernels.items():
        d_out = cuda.device_array((len(params), core.N_OUT))
        kernel[len(params), core.LANES](cuda.to_device(params), d_out,
                  *core.launch_args(grid.kernel_args()))
        outs[cap] = d_out.copy_to_host()
    regs = next(iter(kernels["128"].overloads.values()))._codelibrary.get_cufunc().attrs.regs
    assert regs <= 128
    np.testing.assert_allclose(outs["128"], outs["0"], rtol=1e-5, atol=1e-6)
    want = price_params(params, grid, "cpu")
    worth = want.price > 0.01
    rel = np.abs(outs["128"][:, core.PRICE] - want.price)[worth] / want.price[worth]
    assert np.max(rel) <= 1e-4


@pytest.mark.gpu
def test_real_gpu_lanes_kernels_agree_with_float64_and_pcr() -> None:
    """2,000 options (American and European puts and calls, spots 50-150) on every grid:
    the lanes kernel through warp shuffles and through shared memory, and the PCR kernel,
    against the float64 Thomas twin (the bounds of the PCR kernel's own test)."""
    from numba import cuda

    rng = np.random.default_rng(21)
    n = 2000
    params = option_params(rng.uniform(50, 150, n), 100.0, rng.uniform(0.02, 2.0, n), 0.25,
                           0.05, rng.random(n) < 0.5, rng.random(n) < 0.5)
    for name in ("seed", "default", "fine"):
        grid = make_grid(name)
        cpu = price_params(params, grid, "cpu")
        worth = cpu.price > 0.01
        kernels = [core.fd_kernel(grid.price_steps, "pcr"),
                   (core.fd_lanes_kernel(grid.price_steps, shuffle=True), core.LANES),
                   (core.fd_lanes_kernel(grid.price_steps, shuffle=False), core.LANES)]
        for kernel, threads in kernels:
            d_out = cuda.device_array((n, core.N_OUT))
            kernel[n, threads](cuda.to_device(params), d_out,
                  *core.launch_args(grid.kernel_args()))
            got = d_out.copy_to_host()
            rel = np.abs(got[:, core.PRICE] - cpu.price)[worth] / cpu.price[worth]
            assert np.max(rel) <= (1e-4 if name == "seed" else 1e-3), (name, threads)
            assert np.max(np.abs(got[:, core.DELTA] - cpu.delta)) <= 1e-3, (name, threads)


@needs_cuda
@pytest.mark.parametrize("seed", [5, 6])
def test_group_pricer_follows_every_parameter_change(seed: int) -> None:
    """A seeded sequence of spot writes, date rolls (set_expiry), vol changes and per-row
    spots (set_column) on a CUDA group (its rows in device memory, copied after each
    change) must price exactly as the same rows
    written out in full and priced by the one-shot path, and `rows()` must show them (a
    spot from set_spot is the launch's `spot_at` on CUDA, not written into `params`)."""
    grid = make_grid("seed", price_steps=16, time_steps=3)
    rng = np.random.default_rng(seed)
    rows = random_params(4, seed=seed)
    rows[:, core.SPOT] = rng.uniform(80.0, 120.0, 4)  # mixed spots
    pricer = OptionGroupPricer(rows, grid, "cuda")
    model = rows.copy()
    for step in range(8):
        # first the rows as built, then a vol change, then any moves
        move = rng.integers(5) if step > 1 else (3, 4)[step]
        if move == 0:
            spot = float(rng.uniform(80.0, 120.0))
            pricer.set_spot(spot)
            model[:, core.SPOT] = spot
        elif move == 1:
            expiry = rng.uniform(0.0, 1.0, 4)
            pricer.set_expiry(expiry)
            model[:, core.EXPIRY] = expiry
        elif move == 2:
            spots = rng.uniform(80.0, 120.0, 4)
            pricer.set_column(core.SPOT, spots)
            model[:, core.SPOT] = spots
        elif move == 4:  # any other column: copied to the device rows before the launch
            vols = rng.uniform(0.1, 0.6, 4)
            pricer.set_column(core.VOL, vols)
            model[:, core.VOL] = vols
        pricer.launch()
        pricer.wait()
        got = pricer.results()
        want = price_params(model, grid, "cuda")
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(pricer.rows(), model)
        if move == 1:  # the columns set_spot does not touch are in `params` itself
            np.testing.assert_array_equal(pricer.params[:, core.EXPIRY], expiry)


@pytest.mark.gpu
def test_real_gpu_graphs_go_with_their_pricers_and_a_failed_capture_is_harmless() -> None:
    """A group pricer's CUDA graph is destroyed when the pricer is collected (fifty made
    and dropped, the driver's objects freed each time), and a launch that raises while
    its stream is captured leaves no graph and the stream usable: the pricer's own launch
    still gives the one-shot path's values bit for bit."""
    import gc

    from gpu.launch import graph_launcher

    params = random_params(200, seed=41)
    releases = []
    for _ in range(50):
        pricer = OptionGroupPricer(params, "seed", "cuda")
        assert pricer.launcher == "ctypes+graph+flag", pricer.launcher
        releases.append(pricer._bound.release)
        del pricer
    gc.collect()
    assert not any(r.alive for r in releases)

    pricer = OptionGroupPricer(params, "seed", "cuda")

    def refused(grid: int) -> None:
        raise RuntimeError("refused under capture")

    assert graph_launcher(refused, pricer.n, pricer._event, pricer._stream) is None
    got, rows = reprice_at(pricer, 101.0, wait=True)
    want = price_params(rows, "seed", "cuda")
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([0.0, -0.0, 1e-300, -1e-300, 1e30, -1e30, 2.0, -2.0]))


@given(column=st.integers(-3, core.N_PARAMS + 2), value=FLOATS,
       device=st.sampled_from(["cpu", "cuda"] if cuda_present() else ["cpu"]))
@settings(max_examples=60, deadline=None)
def test_set_column_takes_sensible_rows_or_one_line_and_nothing_changes(
        column: int, value: float, device: str) -> None:
    """Any float into any column (and columns out of range) of a group: the rows stay
    sensible (`check_params`) and the next launch prices what `rows()` shows, or the call
    is a one-line ValueError that leaves every row as it was; `params` cannot be written
    around `set_column` (on CUDA the kernel reads a device copy)."""
    rows = random_params(4, seed=3)
    pricer = OptionGroupPricer(rows, make_grid("seed", price_steps=16, time_steps=2), device)
    with pytest.raises(ValueError):
        pricer.params[0, core.VOL] = 0.5  # read-only
    before = pricer.rows()
    try:
        pricer.set_column(column, value)
    except ValueError as exc:
        assert "\n" not in str(exc)
        np.testing.assert_array_equal(pricer.rows(), before)
        return
    assert 0 <= column < core.N_PARAMS
    after = pricer.rows()
    assert (after[:, column] == value).all()
    pricer.launch()
    pricer.wait()
    got = pricer.results()
    want = price_params(after, pricer.grid, device)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
        assert np.isfinite(a).all()  # accepted rows have finite values and greeks


def test_set_column_rejects_values_that_do_not_fit_the_rows() -> None:
    """Values of the wrong length, not numbers, or out of range (a vol of 11, a vol that
    would divide the grid by ~0): one line, the rows unchanged."""
    pricer = OptionGroupPricer(random_params(4, seed=4), make_grid("seed", price_steps=16,
                                                                    time_steps=2), "cpu")
    before = pricer.rows()
    for bad in ([0.2, 0.3], "abc", [[0.1] * 4] * 2, None, 11.0, 1e-300):
        with pytest.raises(ValueError) as info:
            pricer.set_column(core.VOL, bad)  # type: ignore[arg-type]
        assert "\n" not in str(info.value)
        np.testing.assert_array_equal(pricer.rows(), before)
    with pytest.raises(ValueError, match="column must be an integer"):
        pricer.set_column(True, 0.2)
