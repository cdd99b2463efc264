"""Plot helpers: the PNGs the commands write, drawn with matplotlib's Agg backend."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from feeds.option_chain import OptionChain
    from strategies.gp.evolution import GenerationStats


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display needed), imported on first use."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path, dpi: int = 120) -> None:
    """Write a figure to `path` (folders made as needed) and free it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)


def plot_fitness(path: Path, history: list[GenerationStats], title: str) -> None:
    """Best and mean fitness per generation of one evolution."""
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()
    gens = [s.generation for s in history]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(gens, [s.best for s in history], label="best")
    ax.plot(gens, [s.mean for s in history], label="mean")
    ax.axhline(0.0, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("generation")
    ax.set_ylabel("fitness: mean ROI - buy-and-hold ROI")
    ax.set_title(title, fontsize=9)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend()
    save(fig, path, dpi=110)


def plot_smile(
    chain: OptionChain,
    iv: np.ndarray,
    ok: np.ndarray,
    spot: np.ndarray,
    path: Path,
    asof: dt.date,
) -> None:
    """Implied volatility against strike, one line per expiry (out-of-the-money side)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 5.5))
    expiries = [e for e in np.unique(chain.expiry) if ((chain.expiry == e) & ok).any()]
    cmap = plt.get_cmap("viridis", max(len(expiries), 2))
    # the smile is read off the out-of-the-money side (puts below spot, calls above), whose
    # quotes carry the time value; in-the-money contracts are shown faintly
    otm = np.where(chain.is_call, chain.strike >= spot, chain.strike <= spot)
    for j, e in enumerate(expiries):
        m = (chain.expiry == e) & ok
        line = m & otm
        order = np.argsort(chain.strike[line])
        ax.plot(chain.strike[line][order], iv[line][order], marker="o", ms=2.5, lw=1.0,
                color=cmap(j), label=str(e))
        ax.plot(chain.strike[m & ~otm], iv[m & ~otm], ls="none", marker="x", ms=2.5,
                color=cmap(j), alpha=0.35)
    if ok.any():
        top = float(np.nanpercentile(iv[ok & otm], 98)) if (ok & otm).any() else 1.0
        ax.set_ylim(0.0, max(top * 1.1, 0.1))
    if ok.any():
        ax.axvline(float(np.median(spot)), color="grey", lw=0.6, ls="--")
    names = ", ".join(sorted(set(chain.underlying)))
    ax.set_title(f"{names} implied volatility by expiry, as of {asof} (x: in the money)")
    ax.set_xlabel("strike")
    ax.set_ylabel("implied volatility (per year)")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    save(fig, path)
