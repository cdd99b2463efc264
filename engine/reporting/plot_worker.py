"""A fitness plot drawn by a process started early, so matplotlib's import overlaps the work.

Importing matplotlib and drawing the first figure cost about a second of a short command
such as the headline `evolve` (measured: benchmarks/results/h200-2026-11-23-gp/README.md).
`PlotWorker()` spawns one process at the start of a command, which imports matplotlib
while the command evolves; `fitness(...)` then only sends the numbers and waits for the
PNG. The command still returns only once the file is written. Where no core is free for
the worker (fewer than 4), or the process cannot start or dies, the plot is drawn in the
caller's process exactly as before.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Protocol


class _Stats(Protocol):
    generation: int
    best: float
    mean: float


def in_background() -> bool:
    """Whether `PlotWorker()` draws in a process of its own here (a core to spare for it)."""
    return (os.cpu_count() or 1) >= 4


def warm() -> None:
    """The slow imports and the first figure: the worker's initializer, or a caller's own
    head start where the plot is drawn in its process (`evolve`'s first run)."""
    from engine.reporting import plots

    plots.pyplot().figure().clear()


def _plot_fitness(path: Path, rows: list[SimpleNamespace], title: str) -> None:
    from engine.reporting.plots import plot_fitness

    plot_fitness(path, rows, title)  # type: ignore[arg-type]


class PlotWorker:
    """One background plotting process (see module doc); `close()` when done."""

    def __init__(self, background: bool | None = None) -> None:
        if background is None:
            background = in_background()
        self._pool: Any = None
        if not background:
            return
        try:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=warm)
            self._pool.submit(int)  # start the process now, not at the first plot
        except (OSError, RuntimeError, ValueError):
            self._pool = None

    @property
    def background(self) -> bool:
        return self._pool is not None

    def fitness(self, path: Path, history: Sequence[_Stats], title: str) -> None:
        """engine.reporting.plots.plot_fitness of best and mean fitness per generation; returns once
        the PNG is written."""
        self.start_fitness(path, history, title)()

    def start_fitness(self, path: Path, history: Sequence[_Stats], title: str
                      ) -> Callable[[], None]:
        """The same PNG, drawn while the caller goes on: returns the wait for it (call it
        before the command ends; it raises what drawing raised). In the caller's process
        the PNG is drawn before this returns."""
        rows = [SimpleNamespace(generation=s.generation, best=s.best, mean=s.mean)
                for s in history]
        if self._pool is not None:
            from concurrent.futures.process import BrokenProcessPool

            try:
                job = self._pool.submit(_plot_fitness, path, rows, title)
            except (BrokenProcessPool, OSError, RuntimeError):
                self.close()
            else:
                def wait() -> None:
                    try:
                        job.result()
                    except (BrokenProcessPool, OSError):  # the worker died: drawn here
                        self.close()
                        _plot_fitness(path, rows, title)
                return wait
        _plot_fitness(path, rows, title)
        return lambda: None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> PlotWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
