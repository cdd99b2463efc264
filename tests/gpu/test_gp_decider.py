"""The GP bar-close decider: its CUDA path (mapped codes, reused event) against the twin."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

from gpu.device import cuda_present
from gpu.gp.decider import AsyncDecider
from gpu.indicators.catalogue import N_FLOAT
from strategies.gp.init import ramped_half_and_half
from strategies.gp.representation import rules_programs


def programs(n: int) -> tuple[np.ndarray, np.ndarray]:
    pop = ramped_half_and_half(n, np.random.default_rng(n), 2, 5)
    return rules_programs([pop.rule(i) for i in range(n)])


@pytest.mark.skipif(not cuda_present(), reason="no CUDA device or simulator")
def test_cuda_decider_codes_equal_the_cpu_twin_across_sizes_and_switches() -> None:
    progs, lengths = programs(4)
    cpu = AsyncDecider(progs, lengths, "cpu")
    fast = AsyncDecider(progs, lengths, "cuda")
    plain = AsyncDecider(progs, lengths, "cuda", prebind=False)
    rng = np.random.default_rng(3)
    for n_symbols in (5, 5, 17, 3):  # a new size rebuilds the buffers (and the binding)
        feats = rng.normal(size=(n_symbols, 31)).astype(np.float32)
        want = cpu._bar_close(feats)
        np.testing.assert_array_equal(fast._bar_close(feats), want)
        np.testing.assert_array_equal(plain._bar_close(feats), want)
    # the calibration switches one decider between backends: both keep working
    fast.device = "cpu"
    np.testing.assert_array_equal(fast._bar_close(feats), want)
    fast.device = "cuda"
    np.testing.assert_array_equal(fast._bar_close(feats), want)


@pytest.mark.skipif(not cuda_present(), reason="no CUDA device or simulator")
@pytest.mark.parametrize("n_rules", [1, 3])
def test_features_read_from_mapped_memory_give_the_twins_codes(n_rules: int) -> None:
    """The kernel that reads the features straight from mapped host memory (no copy)
    against the CPU twin and the copying kernel, over fresh features at every bar close
    (a stale panel would repeat the previous codes) and a change of size."""
    progs, lengths = programs(n_rules)
    cpu = AsyncDecider(progs, lengths, "cpu")
    mapped = AsyncDecider(progs, lengths, "cuda", panel="mapped")
    copied = AsyncDecider(progs, lengths, "cuda", panel="copy")
    auto = AsyncDecider(progs, lengths, "cuda")
    rng = np.random.default_rng(11)
    for n_symbols in (7, 7, 7, 130, 2):
        feats = rng.normal(size=(n_symbols, 31)).astype(np.float32)
        feats[:, N_FLOAT:] = rng.random(size=(n_symbols, 31 - N_FLOAT)) > 0.5  # booleans
        want = cpu._bar_close(feats)
        np.testing.assert_array_equal(mapped._bar_close(feats), want)
        np.testing.assert_array_equal(copied._bar_close(feats), want)
        np.testing.assert_array_equal(auto._bar_close(feats), want)
    assert mapped._mapped and not copied._mapped
    assert auto._mapped == (n_rules == 1)  # mapped_panel_pays
    with pytest.raises(ValueError, match="panel must be one of"):
        AsyncDecider(progs, lengths, "cpu", panel="zero-copy")


@pytest.mark.parametrize("n_rules", [1, 2, 5])
def test_cpu_bar_close_on_the_calling_thread_and_in_the_pool_match_the_reference(
        n_rules: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both CPU ways of a bar close (serially on the calling thread, and numba's thread pool
    over the rules) against the plain-Python tree walker, with NaNs and boolean terminals
    in the features, with GP_CPU_SERIAL_MAX_DECISIONS either side of the sizes."""
    from gpu.gp import decider as gp_decider
    from strategies.gp.reference import eval_tree

    pop = ramped_half_and_half(n_rules, np.random.default_rng(40 + n_rules), 2, 5)
    rules = [pop.rule(i) for i in range(n_rules)]
    progs, lengths = rules_programs(rules)
    rng = np.random.default_rng(9)
    for n_symbols in (1, 13, 64):
        feats = rng.normal(size=(n_symbols, 31)).astype(np.float32)
        feats[:, N_FLOAT:] = rng.random(size=(n_symbols, 31 - N_FLOAT)) > 0.5
        feats[rng.random(size=feats.shape) < 0.05] = np.nan
        want = np.array([[eval_tree(r.buy, feats[s]) | (eval_tree(r.sell, feats[s]) << 1)
                          for s in range(n_symbols)] for r in rules], np.int8)
        for serial_max in (0, 10_000):  # 0 (the default): always the thread pool
            monkeypatch.setenv("GP_CPU_SERIAL_MAX_DECISIONS", str(serial_max))
            decider = AsyncDecider(progs, lengths, "cpu")
            serial = gp_decider.cpu_serial_pays(n_rules, n_symbols, decider.serial_max)
            assert serial == (serial_max > 0)
            np.testing.assert_array_equal(decider._bar_close(feats), want,
                                          err_msg=f"serial={serial}, {n_symbols} symbols")


def test_bad_serial_setting_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu.device import SettingError
    from gpu.gp.decider import cpu_serial_max_decisions

    progs, lengths = programs(1)
    for bad in ("-1", "many", "", "2.5"):
        monkeypatch.setenv("GP_CPU_SERIAL_MAX_DECISIONS", bad)
        with pytest.raises(SettingError, match="GP_CPU_SERIAL_MAX_DECISIONS must be an "
                                               "integer >= 0"):
            AsyncDecider(progs, lengths, "cpu")
    monkeypatch.setenv("GP_CPU_SERIAL_MAX_DECISIONS", "256")
    assert cpu_serial_max_decisions() == 256
    monkeypatch.delenv("GP_CPU_SERIAL_MAX_DECISIONS")
    assert AsyncDecider(progs, lengths, "cpu").serial_max == 0


def _other_thread_ran_during(wait: Callable[[], None]) -> tuple[bool, int, float]:
    """Whether a second Python thread got the GIL while `wait` ran on this one, with
    CPython's switch interval at 10 s: the GIL then changes hands only where its holder
    releases it, so a waiting thread that holds it leaves the other none. Returns (ran,
    the other thread's steps in the window, the window's seconds)."""
    steps: list[float] = []
    stop = threading.Event()

    def other() -> None:
        while not stop.is_set():
            steps.append(time.perf_counter())
            time.sleep(0)  # releases the GIL: this thread never keeps it for long

    saved = sys.getswitchinterval()
    thread = threading.Thread(target=other)
    thread.start()
    try:
        sys.setswitchinterval(10.0)
        time.sleep(0.01)  # the other thread is running
        t0 = time.perf_counter()
        wait()
        t1 = time.perf_counter()
    finally:
        sys.setswitchinterval(saved)
        stop.set()
        thread.join()
    inside = sum(t0 < t < t1 for t in steps)
    return inside > 0, inside, t1 - t0


@pytest.mark.gpu
def test_waiting_for_the_gpu_leaves_the_gil_to_other_threads() -> None:
    """A bar close waiting for its launch (`AsyncDecider.wait`) lets a thread of the same
    process run meanwhile. The codes are the CPU twin's, waited for or polled.

    Polling is no control for the GIL: each poll is a ctypes call into the driver, which
    lets go of the GIL too, and on the H200 (2026-11-28) the other thread ran as often while
    polled as while waited (1 and 1 steps). The inproc feed's starvation next to GPU bar
    closes is a matter of how the GIL changes hands, not of who holds it while waiting: a
    replay of a GPU strategy puts its feed in a process of its own
    (`engine.trading.replay.feed_transport`)."""
    progs, lengths = programs(64)
    cpu = AsyncDecider(progs, lengths, "cpu")
    gpu_decider = AsyncDecider(progs, lengths, "cuda")
    rng = np.random.default_rng(5)
    for n_symbols in (50_000, 200_000, 800_000, 3_200_000):  # until a wait lasts 2 ms
        feats = rng.normal(size=(n_symbols, 31)).astype(np.float32)
        want = cpu._bar_close(feats)

        def polled() -> None:
            while not gpu_decider.ready():
                pass

        gpu_decider.start(feats)
        if gpu_decider.ready():
            continue
        _other_thread_ran_during(polled)
        np.testing.assert_array_equal(gpu_decider.result(), want)
        gpu_decider.start(feats)
        if gpu_decider.ready():
            continue
        waited_ran, _, window = _other_thread_ran_during(gpu_decider.wait)
        np.testing.assert_array_equal(gpu_decider.result(), want)
        if window < 0.002:  # too short a wait to tell (the other thread needs a wake-up)
            continue
        assert waited_ran, f"the other thread never ran while the GPU was awaited {window:.4f} s"
        return
    pytest.skip("no wait lasted 2 ms")
