"""The fitness PNG drawn by the early-started worker process is the one the command's own
process draws, byte for byte, and the worker really is another process."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

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


def test_started_png_is_the_same_png(tmp_path: Path) -> None:
    """`start_fitness` draws while the caller goes on; after its wait the file is the
    in-process one, byte for byte."""
    with PlotWorker(background=True) as worker:
        wait = worker.start_fitness(tmp_path / "bg.png", history(), "12 generations")
        wait()
    with PlotWorker(background=False) as inline:
        done = inline.start_fitness(tmp_path / "fg.png", history(), "12 generations")
        assert (tmp_path / "fg.png").exists()  # drawn before it returned
        done()
    assert (tmp_path / "bg.png").read_bytes() == (tmp_path / "fg.png").read_bytes()


def test_worker_dying_while_drawing_still_gives_the_png(tmp_path: Path) -> None:
    import os
    import signal

    worker = PlotWorker(background=True)
    try:
        pool = worker._pool
        pids = list(pool._processes)
        wait = worker.start_fitness(tmp_path / "late.png", history(), "late")
        for pid in pids:  # before or while it draws: the pool breaks
            os.kill(pid, signal.SIGKILL)
        wait()
    finally:
        worker.close()
    assert not worker.background  # the dead worker was let go
    assert (tmp_path / "late.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
