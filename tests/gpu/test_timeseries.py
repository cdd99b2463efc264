"""gpu.timeseries.analysis and the `timeseries` command: numpy reference, CUDA (simulator)
twin, real BAC."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import run_engine
from gpu.timeseries.analysis import autocorr_fft, lag_statistics, lag_statistics_numpy


def _walk(n: int, seed: int, level: float = 100.0) -> np.ndarray:
    """A random walk with anti-persistent noise (bid-ask bounce) on cents, like tick prices."""
    rng = np.random.default_rng(seed)
    steps = rng.normal(size=n) * 0.01
    bounce = 0.005 * rng.choice([-1.0, 1.0], size=n)
    return level + np.cumsum(steps) + bounce


def _assert_agrees(stats, ref, rtol: float, hurst_atol: float) -> None:
    m, hurst, rho, rho_abs = ref
    np.testing.assert_allclose(stats.mean_abs_change, m[:-1], rtol=rtol, atol=0)
    assert stats.mean_abs_change_next == pytest.approx(m[-1], rel=rtol)
    # ρ is normalised by the lag-0 variance: its natural scale is 1
    np.testing.assert_allclose(stats.autocorr, rho, rtol=0, atol=rtol)
    np.testing.assert_allclose(stats.autocorr_abs, rho_abs, rtol=0, atol=rtol)
    np.testing.assert_allclose(stats.hurst, hurst, rtol=0, atol=hurst_atol)


@pytest.mark.parametrize(("n", "max_lag", "time_tile"), [(3001, 257, 512), (1237, 100, 97),
                                                         (50, 48, 512)])
def test_cpu_float64_matches_numpy(n: int, max_lag: int, time_tile: int) -> None:
    p = _walk(n, seed=n)
    stats = lag_statistics(p, max_lag, device="cpu", time_tile=time_tile)
    _assert_agrees(stats, lag_statistics_numpy(p, max_lag), rtol=1e-9, hurst_atol=1e-9)
    assert stats.lags[0] == 1 and stats.lags[-1] == max_lag and stats.device == "cpu"


def test_cpu_float32_matches_numpy_within_1e_3() -> None:
    p = _walk(20_011, seed=5, level=171.3)  # SPY-like level: the shift by p(0) matters
    stats = lag_statistics(p, 64, device="cpu", precision="float32")
    _assert_agrees(stats, lag_statistics_numpy(p, 64), rtol=1e-3, hurst_atol=1e-3)


def test_lags_up_to_4096() -> None:
    p = _walk(4500, seed=9)
    stats = lag_statistics(p, 4096, device="cpu")
    _assert_agrees(stats, lag_statistics_numpy(p, 4096), rtol=1e-9, hurst_atol=1e-9)


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_cuda_kernel_matches_cpu_twin_and_numpy(precision: str) -> None:
    # several time tiles and lag tiles, a ragged last tile (simulator: tiny sizes)
    p = _walk(301, seed=2)
    gpu = lag_statistics(p, 40, "cuda", precision, time_tile=64, lag_tile=16)
    cpu = lag_statistics(p, 40, "cpu", precision, time_tile=64, lag_tile=16)
    tol = 1e-12 if precision == "float64" else 1e-5
    np.testing.assert_allclose(gpu.mean_abs_change, cpu.mean_abs_change, rtol=tol)
    np.testing.assert_allclose(gpu.autocorr, cpu.autocorr, atol=tol)
    np.testing.assert_allclose(gpu.autocorr_abs, cpu.autocorr_abs, atol=tol)
    _assert_agrees(gpu, lag_statistics_numpy(p, 40),
                   rtol=1e-9 if precision == "float64" else 1e-3,
                   hurst_atol=1e-9 if precision == "float64" else 1e-3)


def test_fft_autocorrelation_agrees_with_direct_sums() -> None:
    p = _walk(2000, seed=4)
    _, _, rho, _ = lag_statistics_numpy(p, 50)
    np.testing.assert_allclose(autocorr_fft(np.diff(p), 50), rho, atol=1e-12)


def test_random_walk_has_hurst_one_half_and_no_autocorrelation() -> None:
    rng = np.random.default_rng(11)
    p = np.cumsum(rng.normal(size=200_000))
    stats = lag_statistics(p, 16, device="cpu")
    assert np.all(np.abs(stats.hurst[:8] - 0.5) < 0.02)
    assert np.all(np.abs(stats.autocorr) < 0.01)


def test_max_lag_bounds_fuzzed() -> None:
    rng = np.random.default_rng(0)
    for _ in range(40):
        n = int(rng.integers(3, 60))
        max_lag = int(rng.integers(-2, n + 3))
        p = _walk(n, seed=n)
        if 1 <= max_lag < n - 1:
            assert lag_statistics(p, max_lag, device="cpu").hurst.shape == (max_lag,)
        else:
            with pytest.raises(ValueError, match="max-lag"):
                lag_statistics(p, max_lag, device="cpu")


def test_non_finite_prices_rejected() -> None:
    rng = np.random.default_rng(1)
    for bad in (np.nan, np.inf, -np.inf):
        p = _walk(100, seed=1)
        p[int(rng.integers(0, 100))] = bad
        with pytest.raises(ValueError, match="finite"):
            lag_statistics(p, 10, device="cpu")


def test_constant_series_gives_nan_not_a_crash() -> None:
    stats = lag_statistics(np.full(100, 5.0), 10, device="cpu")
    assert np.all(np.isnan(stats.hurst)) and np.all(np.isnan(stats.autocorr))


# ---------------------------------------------------------------- command


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = run_engine.main(args)
    return code, capsys.readouterr().err


def test_bac_trades_are_anti_persistent(shared_data: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """All five days of real BAC trades: H(1) < 0.5 and ρ(1) < 0 (bid-ask bounce)."""
    out = tmp_path / "ts.json"
    code, err = _run(["timeseries", "--data",
                      str(shared_data / "lean_ticks_2013-10/equity/usa/tick/bac"),
                      "--max-lag", "8", "--device", "cpu", "--out", str(tmp_path),
                      "--json", str(out)], capsys)
    assert code == 0, err
    res = json.loads(out.read_text())
    assert res["symbols"]["BAC"]["prices"] == 573_620  # data/README: all five days of trades
    h1 = next(r for r in res["hurst"] if r["symbol"] == "BAC" and r["lag"] == 1)["value"]
    rho1 = next(r for r in res["autocorr"] if r["symbol"] == "BAC" and r["lag"] == 1)["value"]
    assert h1 < 0.5
    assert rho1 < 0
    assert (tmp_path / "timeseries_BAC.png").stat().st_size > 10_000


def test_daily_closes_through_the_command(shared_data: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "d.json"
    code, err = _run(["timeseries", "--data", str(shared_data / "sp500_5yr_daily"),
                      "--symbols", "AAPL,XOM", "--max-lag", "30", "--device", "cpu",
                      "--json", str(out)], capsys)
    assert code == 0, err
    res = json.loads(out.read_text())
    assert res["symbols"]["AAPL"]["prices"] == 1259
    assert {r["symbol"] for r in res["autocorr_abs"]} == {"AAPL", "XOM"}
    assert len([r for r in res["hurst"] if r["symbol"] == "XOM"]) == 30


def test_tick_csv_through_the_command_matches_numpy(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    p = _walk(400, seed=3)
    rows = ["ts,symbol,price,size"]
    t0 = 1_381_152_600_000_000_000
    rows += [f"{t0 + i * 1_000_000},XYZ,{float(x)!r},100" for i, x in enumerate(p)]
    csv = tmp_path / "ticks.csv"
    csv.write_text("\n".join(rows) + "\n")
    out = tmp_path / "t.json"
    code, err = _run(["timeseries", "--data", str(csv), "--max-lag", "20", "--device", "cpu",
                      "--json", str(out)], capsys)
    assert code == 0, err
    res = json.loads(out.read_text())
    _, hurst, rho, rho_abs = lag_statistics_numpy(p, 20)
    np.testing.assert_allclose([r["value"] for r in res["hurst"]], hurst, atol=1e-9)
    np.testing.assert_allclose([r["value"] for r in res["autocorr"]], rho, atol=1e-9)
    np.testing.assert_allclose([r["value"] for r in res["autocorr_abs"]], rho_abs, atol=1e-9)
    assert [r["lag"] for r in res["hurst"]] == list(range(1, 21))


@pytest.mark.parametrize("bad", [
    ["--max-lag", "400"],          # ≥ the series length
    ["--max-lag", "0"],
    ["--symbols", "NOPE"],
    ["--device", "cuda", "--max-lag", "5"],  # honoured only where a GPU (or simulator) exists
])
def test_command_user_errors_are_one_line(bad: list[str], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "ticks.csv"
    p = _walk(300, seed=1)
    csv.write_text("ts,symbol,price,size\n" + "".join(
        f"{1_381_152_600_000_000_000 + i},XYZ,{float(x)!r},1\n" for i, x in enumerate(p)))
    code, err = _run(["timeseries", "--data", str(csv), *bad], capsys)
    if bad[:2] == ["--device", "cuda"]:
        from gpu.device import cuda_present

        if cuda_present():
            assert code == 0
            return
    assert code == 2
    assert err.startswith("error:") and err.count("\n") == 1


def test_missing_path_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(["timeseries", "--data", str(tmp_path / "nope"), "--max-lag", "3"], capsys)
    assert code == 2 and "not found" in err


# ---------------------------------------------------------------- real GPU


@pytest.mark.gpu
def test_real_gpu_matches_numpy_at_size() -> None:
    p = _walk(200_003, seed=8, level=171.0)
    ref = lag_statistics_numpy(p, 4096)
    gpu64 = lag_statistics(p, 4096, device="cuda")
    _assert_agrees(gpu64, ref, rtol=1e-9, hurst_atol=1e-9)
    gpu32 = lag_statistics(p, 4096, device="cuda", precision="float32")
    m, hurst, rho, rho_abs = ref
    np.testing.assert_allclose(gpu32.mean_abs_change, m[:-1], rtol=1e-3)
    np.testing.assert_allclose(gpu32.autocorr, rho, atol=1e-3)
    np.testing.assert_allclose(gpu32.autocorr_abs, rho_abs, atol=1e-3)
    np.testing.assert_allclose(gpu32.hurst[:64], hurst[:64], atol=1e-3)


@pytest.mark.gpu
def test_real_gpu_equals_cpu_twin_on_bac(shared_data: Path) -> None:
    from engine.commands.timeseries import price_series

    series, _ = price_series([str(shared_data / "lean_ticks_2013-10/equity/usa/tick/bac")])
    p = series["BAC"]
    gpu = lag_statistics(p, 1024, device="cuda")
    cpu = lag_statistics(p, 1024, device="cpu")
    np.testing.assert_allclose(gpu.mean_abs_change, cpu.mean_abs_change, rtol=1e-12)
    np.testing.assert_allclose(gpu.autocorr, cpu.autocorr, atol=1e-12)
    np.testing.assert_allclose(gpu.autocorr_abs, cpu.autocorr_abs, atol=1e-12)
    assert gpu.hurst[0] < 0.5 and gpu.autocorr[0] < 0


def test_bad_prices_in_a_tick_csv_are_skipped_fuzzed(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(17)
    p = _walk(300, seed=17)
    t0 = 1_381_152_600_000_000_000
    rows = [f"{t0 + i * 1_000},XYZ,{float(x)!r},100" for i, x in enumerate(p)]
    bad_at = sorted(rng.choice(np.arange(300), size=25, replace=False).tolist())
    for i in bad_at:  # a bad price replaces a good one: the clean series is what remains
        rows[i] = f"{t0 + i * 1_000},XYZ,{rng.choice(['nan', '-1.5', '0', 'inf', 'x'])},100"
    csv = tmp_path / "ticks.csv"
    csv.write_text("ts,symbol,price,size\n" + "\n".join(rows) + "\n")
    out = tmp_path / "t.json"
    code, err = _run(["timeseries", "--data", str(csv), "--max-lag", "10", "--device", "cpu",
                      "--json", str(out)], capsys)
    assert code == 0, err
    res = json.loads(out.read_text())
    clean = np.delete(p, bad_at)
    assert res["symbols"]["XYZ"]["prices"] == clean.size
    _, hurst, rho, _ = lag_statistics_numpy(clean, 10)
    np.testing.assert_allclose([r["value"] for r in res["hurst"]], hurst, atol=1e-9)
    np.testing.assert_allclose([r["value"] for r in res["autocorr"]], rho, atol=1e-9)
