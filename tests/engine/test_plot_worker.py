"""The fitness PNG drawn by the early-started worker process is the one the command's own
process draws, byte for byte, and the worker really is another process; the process
started before a command's imports is adopted by its worker or stopped."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.reporting import plot_worker
from engine.reporting.plot_worker import PlotWorker


def history() -> list[SimpleNamespace]:
    return [SimpleNamespace(generation=g, best=0.1 * g, mean=0.05 * g - 0.2) for g in range(12)]


def test_background_png_equals_in_process_png(tmp_path: Path) -> None:
    with PlotWorker(background=True) as worker:
        assert worker.background
        worker.fitness(tmp_path / "bg.png", history(), "12 generations")
    with PlotWorker(background=False) as inline:
        assert not inline.background
        inline.fitness(tmp_path / "fg.png", history(), "12 generations")
    bg, fg = (tmp_path / "bg.png").read_bytes(), (tmp_path / "fg.png").read_bytes()
    assert bg[:8] == b"\x89PNG\r\n\x1a\n" and len(bg) > 5000
    assert bg == fg


def test_closed_worker_still_plots(tmp_path: Path) -> None:
    worker = PlotWorker(background=True)
    worker.close()  # as after a dead worker: the plot is drawn in this process
    worker.fitness(tmp_path / "after.png", history(), "after close")
    assert (tmp_path / "after.png").stat().st_size > 5000


def test_early_worker_is_adopted_or_released(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The process `start_early` starts before a command's imports is the one its
    `PlotWorker` then draws in; a command that draws in its own process, or never gets
    to draw, leaves no process behind."""
    monkeypatch.setattr(plot_worker, "in_background", lambda: True)
    assert plot_worker.start_early()
    early = plot_worker._early
    assert early is not None
    assert plot_worker.start_early() and plot_worker._early is early  # one process only
    with PlotWorker() as worker:
        assert worker._pool is early and plot_worker._early is None
        worker.fitness(tmp_path / "early.png", history(), "12 generations")
    assert (tmp_path / "early.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_worker.start_early()
    with PlotWorker(background=False) as inline:  # islands: drawn here, the early one stops
        assert not inline.background and plot_worker._early is None
    assert plot_worker.start_early()
    plot_worker.release_early()
    assert plot_worker._early is None
    plot_worker.release_early()  # nothing started: a no-op
    monkeypatch.setattr(plot_worker, "in_background", lambda: False)
    assert not plot_worker.start_early() and plot_worker._early is None


@pytest.mark.parametrize(("argv", "started"), [
    (["evolve", "--out", "b.json"], True),
    (["-q", "evolve", "--stocks", "4"], True),
    (["evolve", "--help"], False),
    (["evolve", "-h"], False),
    (["evolve", "--islands", "4"], False),
    (["evolve", "--islands=4"], False),
    (["evolve", "--scheduler", "tcp://127.0.0.1:1"], False),
    (["evolve", "--walk-forward", "256,64"], False),
    (["replay"], False),
    ([], False),
])
def test_which_command_lines_start_the_early_worker(argv: list[str], started: bool,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import run_engine

    monkeypatch.setattr(plot_worker, "in_background", lambda: True)
    command = next((a for a in argv if a in run_engine.COMMANDS), None)
    try:
        assert run_engine._early_plot_worker(command, argv) is started
        assert (plot_worker._early is not None) is started
    finally:
        plot_worker.release_early()
