"""A replay's feed transport under "auto": a process of its own (ipc) when the strategy's
bar closes run on the GPU, else a thread of the engine's process (inproc); an explicit
choice always stands. Under the CUDA simulator a GP strategy on "cuda" counts as on the GPU
(the device the replay asked for, which is what decides on a real one)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.trading.replay import feed_transport
from gpu.device import cuda_present
from strategies.gp.init import ramped_half_and_half
from strategies.gp.representation import GPRule
from strategies.gp.strategy import GPEnsemble, SwappableGP
from strategies.registry import strategy_from_spec


def _rules(n: int) -> list[GPRule]:
    pop = ramped_half_and_half(n, np.random.default_rng(2), 2, 4)
    return [pop.rule(i) for i in range(n)]


@pytest.mark.parametrize("choice", ["inproc", "ipc", "tcp"])
def test_an_explicit_transport_stands_whatever_the_strategy(choice: str) -> None:
    assert feed_transport(choice, GPEnsemble(_rules(2), device="cpu"), 8) == choice
    assert feed_transport(choice, strategy_from_spec("sma-cross"), 8) == choice


def test_auto_keeps_the_feed_in_process_for_cpu_strategies() -> None:
    assert feed_transport("auto", strategy_from_spec("sma-cross"), 8) == "inproc"
    assert feed_transport("auto", GPEnsemble(_rules(3), device="cpu"), 8) == "inproc"
    assert feed_transport("auto", SwappableGP(device="cpu"), 8) == "inproc"
    assert feed_transport("auto", SwappableGP(device="auto"), 8) == "inproc"


@pytest.mark.skipif(not cuda_present(), reason="no CUDA device or simulator")
def test_auto_gives_a_gpu_strategy_a_feed_process() -> None:
    assert feed_transport("auto", GPEnsemble(_rules(3), device="cuda"), 8) == "ipc"
    # before its first rule a re-evolving strategy follows the device asked for
    assert feed_transport("auto", SwappableGP(device="cuda"), 8) == "ipc"
    swapped = SwappableGP(device="cpu")
    swapped.reset(["A", "B"])
    swapped.swap(_rules(2))
    assert feed_transport("auto", swapped, 2) == "inproc"
