"""Option pricing on a real GPU without QuantLib (which the GPU machine's image lacks, so
`test_options_kernel.py` is skipped there whole): float32 against float64, and the one-shot
workspace of `price_params` and `FdPricingEngine.price` against numba's ordinary launch."""

from __future__ import annotations

import numpy as np
import pytest

from gpu.options.engines import option_params, price_params


@pytest.mark.gpu
def test_real_gpu_seed_grid_float32_within_1e4_of_float64() -> None:
    rng = np.random.default_rng(21)
    n = 2000
    params = option_params(rng.uniform(50, 150, n), 100.0, 0.3, 0.25, 0.05,
                           rng.random(n) < 0.5, rng.random(n) < 0.3)
    gpu = price_params(params, "seed", "cuda")
    cpu = price_params(params, "seed", "cpu")
    worth = cpu.price > 0.01
    assert np.max(np.abs(gpu.price - cpu.price)[worth] / cpu.price[worth]) <= 1e-4
    assert np.max(np.abs(gpu.delta - cpu.delta)) <= 1e-4
    for name in ("default", "fine"):
        g = price_params(params, name, "cuda").price
        c = price_params(params, name, "cpu").price
        assert np.max(np.abs(g - c)[worth] / c[worth]) <= 1e-3


@pytest.mark.gpu
def test_real_gpu_one_shot_workspace_equals_the_ordinary_launch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`price_params` on CUDA reuses a mapped workspace (pre-bound launch, no copies):
    bit for bit numba's ordinary launch with device arrays, at sizes that make it grow,
    after a larger call (stale rows past n), and from threads pricing at once (one takes
    the workspace, the others the ordinary path)."""
    from concurrent.futures import ThreadPoolExecutor

    from gpu.options import engines

    rng = np.random.default_rng(5)

    def rows(n: int) -> np.ndarray:
        return option_params(rng.uniform(60, 140, n), rng.uniform(80, 120, n),
                             rng.uniform(0.02, 2.0, n), rng.uniform(0.1, 0.8, n),
                             rng.uniform(0, 0.06, n), rng.random(n) < 0.5,
                             rng.random(n) < 0.7, rng.uniform(0, 0.04, n))

    cases = [rows(n) for n in (3, 1500, 5000, 700)]
    got = [price_params(p, "default", "cuda") for p in cases]
    assert engines._mapped_batches, "the workspace was not used"
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(lambda p: price_params(p, "default", "cuda"), cases * 2))
    monkeypatch.setattr(engines, "MAPPED_BATCH_MAX_ROWS", 0)
    for i, p in enumerate(cases):
        want = price_params(p, "default", "cuda")
        for values in (got[i], threaded[i], threaded[i + len(cases)]):
            for field in ("price", "delta", "gamma"):
                np.testing.assert_array_equal(getattr(values, field), getattr(want, field))


@pytest.mark.gpu
def test_real_gpu_engine_one_pass_rows_equal_the_ordinary_launch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`FdPricingEngine.price` on CUDA (rows built, checked and launched a chunk at a
    time into the mapped workspace, whose launches for one-march and two-march rows share
    it): bit for bit numba's ordinary launch of numpy's rows, alternating European-only
    and American batches of growing sizes, after a batch refused in its third chunk, then
    from threads at once."""
    from concurrent.futures import ThreadPoolExecutor

    from gpu.options import engines
    from gpu.options.engines import FdPricingEngine, contract_rows
    from gpu.options.instruments import MarketInputs, OptionContracts

    rng = np.random.default_rng(11)

    def batch(n: int, american: bool) -> tuple[OptionContracts, MarketInputs]:
        contracts = OptionContracts.of(rng.uniform(80, 120, n), rng.uniform(0.02, 2.0, n),
                                       rng.random(n) < 0.5, american & (rng.random(n) < 0.7))
        return contracts, MarketInputs(rng.uniform(60, 140, n), rng.uniform(0.1, 0.8, n),
                                       rng.uniform(0, 0.06, n), rng.uniform(0, 0.04, n))

    cases = [batch(n, american) for n, american in
             ((3, True), (1500, False), (5000, True), (700, False), (10_000, True))]
    engine = FdPricingEngine("default", "cuda")
    got = [engine.price(c, m) for c, m in cases]
    # a bad row in a later chunk (earlier chunks already launched): numpy's one line
    c, m = cases[2]
    vols = np.array(m.vol, dtype=float)
    vols[4500] = 1e-12
    one_line = r"^vol must be 0 or at least 1e-08, got 1e-12 \(1 rows\)$"
    with pytest.raises(ValueError, match=one_line):
        engine.price(c, MarketInputs(m.spot, vols, m.rate, m.dividend_yield))
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(lambda cm: engine.price(*cm), cases * 2))
    monkeypatch.setattr(engines, "MAPPED_BATCH_MAX_ROWS", 0)
    for i, (c, m) in enumerate(cases):
        want = price_params(contract_rows(c, m), "default", "cuda")
        for values in (got[i], threaded[i], threaded[i + len(cases)]):
            for field in ("price", "delta", "gamma"):
                np.testing.assert_array_equal(getattr(values, field), getattr(want, field))
