"""The CPU pricer compiled as one function (its core inlined by numba, gpu.twin's
`cpu_inline`) computes bit for bit what the same code computes with every callee compiled
on its own, on the real GOOG chain: the inlining only cuts a cold `price`'s compile time."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from feeds.option_chain import read_chain
from gpu.options import core
from gpu.options.engines import make_grid, option_params

GOOG = "lean_goog_option_chain_2015-12-24/goog_option_chain_2015-12-24T1300ET.csv"


def _goog_rows(data: Path, every: int) -> np.ndarray:
    """Every `every`-th contract of the GOOG chain at vols across 0.05-1.2, expired rows
    and zero vols included (the pricer's analytic branch)."""
    chain = read_chain(data / GOOG)
    asof = chain.asof_date()
    assert asof is not None
    n = len(chain)
    vols = np.linspace(0.05, 1.2, n)
    vols[::50] = 0.0
    rows = option_params(chain.spot, chain.strike, chain.years_to_expiry(asof), vols, 0.01,
                         chain.is_call, chain.is_american, 0.005)
    return np.ascontiguousarray(rows[::every])


def test_inlined_pricer_equals_its_callees_compiled_apart(shared_data: Path) -> None:
    rows = _goog_rows(shared_data, 5)
    assert (rows[:, core.EXPIRY] <= 0).any() and (rows[:, core.VOL] == 0).any()
    for grid in ("default", "seed"):
        args = make_grid(grid).kernel_args()
        inlined = np.full((rows.shape[0], core.N_OUT), np.nan)
        core.fd_price_batch_cpu(rows, inlined, *args)
        # the same loop run by Python: each core function it calls is compiled on its own
        apart = np.full_like(inlined, np.nan)
        core._fd_price_range.py_func(0, rows.shape[0], rows, apart, *args)
        core._analytic_range.py_func(0, rows.shape[0], rows, apart)
        assert np.array_equal(inlined, apart, equal_nan=True), grid
        serial = np.full_like(inlined, np.nan)
        core.fd_price_batch_cpu_serial(rows, serial, *args)
        assert np.array_equal(inlined, serial, equal_nan=True), grid


def test_inlined_core_is_all_but_the_shared_black_scholes() -> None:
    inlined = {name for name in core._twin.cpu.names
               if getattr(core._twin.cpu, name).targetoptions.get("inline") == "always"}
    assert inlined == set(core._twin.cpu.names) - {"bs_price_greeks"}
    assert core._march_cpu.targetoptions["inline"] == "always"
    assert core._fd_price_range.targetoptions.get("inline", "never") == "never"
