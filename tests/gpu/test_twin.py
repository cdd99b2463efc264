"""gpu.twin: one core compiled for the CPU and CUDA (simulator in CI), and its cache policy."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import numpy as np
import pytest
from numba import cuda, njit

from gpu.twin import compile_twin, flush_stale_caches


def _hypot_scaled(x: float, y: float) -> float:
    return SCALE * math.sqrt(x * x + y * y)  # type: ignore[name-defined]  # noqa: F821


def _sum_of_hypots(x: float, y: float) -> float:
    return _hypot_scaled(x, y) + _hypot_scaled(y, x)


CORE = compile_twin(__name__, (_hypot_scaled, _sum_of_hypots), {"SCALE": 0.5, "math": math})


def test_cpu_backend_matches_plain_python_formula() -> None:
    rng = np.random.default_rng(3)
    for x, y in rng.normal(size=(20, 2)):
        assert CORE.cpu._sum_of_hypots(x, y) == pytest.approx(math.hypot(x, y), rel=1e-15)


def test_cpu_backend_callable_from_njit_driver() -> None:
    f = CORE.cpu._sum_of_hypots

    @njit
    def driver(xs: np.ndarray, ys: np.ndarray, out: np.ndarray) -> None:
        for i in range(xs.shape[0]):
            out[i] = f(xs[i], ys[i])

    xs, ys = np.arange(5.0), np.arange(5.0) + 1
    out = np.empty(5)
    driver(xs, ys, out)
    np.testing.assert_allclose(out, np.hypot(xs, ys), rtol=1e-15)


def test_cuda_backend_matches_cpu_backend() -> None:
    g = CORE.cuda._sum_of_hypots

    @cuda.jit
    def kernel(xs, ys, out):
        i: int = cuda.grid(1)  # type: ignore[call-arg]
        if i < xs.shape[0]:
            out[i] = g(xs[i], ys[i])

    xs, ys = np.linspace(-2, 2, 7), np.linspace(1, 3, 7)
    out = np.zeros(7)
    kernel[1, 32](xs, ys, out)
    expected = [CORE.cpu._sum_of_hypots(a, b) for a, b in zip(xs, ys, strict=True)]
    np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_backend_by_device_name() -> None:
    assert CORE.backend("cpu") is CORE.cpu
    assert CORE.backend("cuda") is CORE.cuda
    with pytest.raises(ValueError, match="resolved"):
        CORE.backend("auto")


def test_duplicate_names_rejected() -> None:
    with pytest.raises(ValueError, match="distinct"):
        compile_twin(__name__, (_hypot_scaled, _hypot_scaled))


def test_flush_removes_only_cache_entries_older_than_the_core(tmp_path: Path) -> None:
    module = tmp_path / "kernels.py"
    core = tmp_path / "kernels_core.py"
    module.write_text("")
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    old_index = cache / "kernels.driver-10.py311.nbi"
    old_data = cache / "kernels.driver-10.py311.1.nbc"
    other = cache / "other.driver-3.py311.nbi"
    for f in (old_index, old_data, other):
        f.write_text("x")
    past = time.time() - 100
    for f in (old_index, old_data, other):
        os.utime(f, (past, past))
    core.write_text("")  # the core is newer than the cache entries
    assert flush_stale_caches(str(module), [str(core)]) == 1
    assert not old_index.exists() and not old_data.exists()
    assert other.exists()  # another module's cache is left alone
    fresh = cache / "kernels.driver-10.py311.nbi"
    fresh.write_text("x")
    assert flush_stale_caches(str(module), [str(core)]) == 0
    assert fresh.exists()


def _scaled_twice(x: float) -> float:
    return _unit(x) * 2.0


def _unit(x: float) -> float:
    return x


def test_backend_constant_replaces_a_core_function_on_that_backend_only() -> None:
    doubled = njit(lambda x: 10.0 * x)
    twin = compile_twin(__name__, (_unit, _scaled_twice), cpu_constants={"_unit": doubled})
    assert twin.cpu._scaled_twice(3.0) == 60.0       # the CPU override is called
    assert twin.cpu._unit is doubled
    assert _scaled_twice(3.0) == 6.0                  # plain Python keeps the core's version


def test_not_ready_answers_of_polled_events_are_kept_out_of_the_log(caplog) -> None:
    import logging

    from gpu.device import quiet_event_polling

    quiet_event_polling()
    quiet_event_polling()  # idempotent
    log = logging.getLogger("numba.cuda.cudadrv.driver")
    with caplog.at_level(logging.ERROR, logger="numba.cuda.cudadrv.driver"):
        log.error("Call to cuEventQuery results in CUDA_ERROR_NOT_READY")
        log.error("Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY"]


def test_cpu_inline_inlines_only_the_named_functions_with_the_same_results() -> None:
    inlined = compile_twin(__name__, (_hypot_scaled, _sum_of_hypots),
                           {"SCALE": 0.5, "math": math}, cpu_inline=["_hypot_scaled"])
    assert inlined.cpu._hypot_scaled.targetoptions["inline"] == "always"
    assert inlined.cpu._sum_of_hypots.targetoptions["inline"] == "never"
    assert CORE.cpu._hypot_scaled.targetoptions["inline"] == "never"
    rng = np.random.default_rng(5)
    for x, y in rng.normal(size=(50, 2)):
        assert inlined.cpu._sum_of_hypots(x, y) == CORE.cpu._sum_of_hypots(x, y)
