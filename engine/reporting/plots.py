"""Plot helpers: the PNGs the commands write, drawn with matplotlib's Agg backend."""

from __future__ import annotations

import datetime as dt
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

NS = 1_000_000_000

if TYPE_CHECKING:
    from engine.trading.replay import ReplayResult
    from feeds.option_chain import OptionChain
    from gpu.subset.search import SubsetResult
    from gpu.timeseries.analysis import LagStatistics
    from strategies.gp.evolution import GenerationStats
    from strategies.gp.islands import IslandsResult
    from strategies.gp.walk_forward import WalkForward
    from strategies.selection import ReturnsTable


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


def plot_statistics(path: Path, symbol: str, stats: LagStatistics) -> None:
    """Log-log figure: m(Δt) with a random walk's slope, H(Δt), |ρ(Δt)| and ρ_abs(Δt)."""
    plt = pyplot()

    lags = stats.lags.astype(float)
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    ax = axes[0]
    m = stats.mean_abs_change
    ax.loglog(lags, m, ".", ms=3, label=r"$\langle|p(t+\Delta t)-p(t)|\rangle$")
    if m[0] > 0:
        ax.loglog(lags, m[0] * np.sqrt(lags), "--", color="grey", lw=0.8, label="slope 1/2")
    ax.set_xlabel(r"$\Delta t$ [ticks]")
    ax.legend(fontsize=8)
    ax = axes[1]
    ax.semilogx(lags, stats.hurst, ".", ms=3)
    ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax.set_xlabel(r"$\Delta t$ [ticks]")
    ax.set_ylabel(r"$H(\Delta t)$")
    ax = axes[2]
    for values, label, color in ((stats.autocorr, r"$\rho(\Delta t)$", "C0"),
                                 (stats.autocorr_abs, r"$\rho_{|\cdot|}(\Delta t)$", "C1")):
        pos, neg = values > 0, values < 0
        ax.loglog(lags[pos], values[pos], ".", ms=3, color=color, label=label + " > 0")
        ax.loglog(lags[neg], -values[neg], "o", ms=3, mfc="none", color=color,
                  label=label + " < 0 (abs)")
    ax.set_xlabel(r"$\Delta t$ [ticks]")
    ax.legend(fontsize=7)
    fig.suptitle(f"{symbol}: {stats.n_prices:,} prices, {stats.precision} on {stats.device}",
                 fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_selection(path: Path, table: ReturnsTable, result: SubsetResult) -> None:
    plt = pyplot()

    corr = table.correlation()
    n = corr.shape[0]
    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    im = ax.imshow(corr, cmap="RdBu_r", vmin=-1, vmax=1)
    for i in result.subset:
        ax.add_patch(plt.Rectangle((-0.5, i - 0.5), n, 1, fill=False, ec="k", lw=0.6))
        ax.add_patch(plt.Rectangle((i - 0.5, -0.5), 1, n, fill=False, ec="k", lw=0.6))
    if n <= 30:
        ax.set_xticks(range(n), table.names, rotation=90, fontsize=7)
        ax.set_yticks(range(n), table.names, fontsize=7)
    fig.colorbar(im, ax=ax, label="correlation of daily returns")
    ax.set_title(f"least-correlated {len(result.subset)} of {n}: distance to I "
                 f"{result.distance:.4f}", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_ising(out: dict[str, Any], directory: Path) -> list[Path]:
    from gpu.ising.stats import onsager_magnetization

    plt = pyplot()

    directory.mkdir(parents=True, exist_ok=True)
    sizes = sorted({r["L"] for r in out["results"]})
    paths = []
    for key, label, name in (
        ("binder", "Binder cumulant U4", "binder.png"),
        ("magnetization", "|m| per spin", "magnetization.png"),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for L in sizes:
            rs = [r for r in out["results"] if r["L"] == L]
            ax.errorbar(
                [r["T"] for r in rs], [r[key] for r in rs], yerr=[r[key + "_err"] for r in rs],
                marker="o", ms=3, capsize=2, label=f"L = {L}",
            )
        if key == "magnetization" and out["dim"] == 2 and out["field"] == 0.0:
            ts = [r["T"] for r in out["results"]]
            grid = np.linspace(min(ts), max(ts), 400)
            ax.plot(grid, onsager_magnetization(grid), "k--", label="exact (Onsager–Yang, L=∞)")
        ax.axvline(
            out["tc_exact"], color="grey", lw=0.8, ls=":", label=f"Tc = {out['tc_exact']:.4f}"
        )
        if key == "binder" and out["tc"] is not None:
            ax.axvspan(out["tc"] - out["tc_err"], out["tc"] + out["tc_err"], color="C3", alpha=0.2,
                       label=f"crossings: {out['tc']:.4f} ± {out['tc_err']:.4f}")
        ax.set_xlabel("temperature T (J = 1)")
        ax.set_ylabel(label)
        ax.set_title(f"{out['dim']}D Ising, {out['sweeps']} sweeps, h = {out['field']}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = directory / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def plot_equity(result: ReplayResult, path: Path, title: str) -> None:
    """Equity and buy-and-hold against bar number (nights, weekends and holidays take no
    room: a tick replay's overnight gaps would otherwise be flat lines across the plot),
    with dates as tick labels; drawdown below."""
    plt = pyplot()

    curve = result.engine.equity_curve
    x = np.arange(len(curve))
    eq = np.asarray([p.equity for p in curve], np.float64)
    bh = np.asarray([p.buy_hold for p in curve], np.float64)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True,
                                   gridspec_kw={"height_ratios": [3, 1]})
    if eq.size:
        ax1.plot(x, eq, lw=1.0, color="tab:blue", label="strategy")
        ax1.plot(x, bh, lw=1.0, color="tab:grey", alpha=0.8, label="buy and hold")
        ax1.legend(loc="best", fontsize=8)
        peak = np.maximum.accumulate(eq)
        ax2.fill_between(x, -(peak - eq) / peak * 100.0, 0.0, color="tab:red", alpha=0.5)
        tz = result.engine.tz
        ticks = np.unique(np.linspace(0, len(curve) - 1, min(8, len(curve))).astype(int))
        ax2.set_xticks(ticks)
        ax2.set_xticklabels(
            [datetime.fromtimestamp(curve[i].ts // NS, UTC).astimezone(tz)
             .strftime("%Y-%m-%d\n%H:%M") for i in ticks], fontsize=7)
    ax1.set_ylabel("equity ($)")
    ax1.set_title(f"Replay: {title}")
    ax1.grid(alpha=0.3)
    ax2.set_ylabel("drawdown (%)")
    ax2.set_xlabel("bar (exchange time; closed-market gaps skipped)")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_islands(path: Path, run: IslandsResult, title: str) -> None:
    """Best fitness per generation, one line per island, and the mean over all."""
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, h in enumerate(run.histories):
        ax.plot([s.generation for s in h], [s.best for s in h], lw=1.0,
                label=f"island {i} best" if len(run.histories) <= 8 else None)
    comb = run.combined_history()
    ax.plot([s.generation for s in comb], [s.mean for s in comb], color="black", ls="--",
            lw=1.0, label="mean, all islands")
    for e in run.epochs[:-1]:
        ax.axvline(e.until - 0.5, color="grey", lw=0.5, ls=":")
    ax.axhline(0.0, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("generation (dotted verticals: migrations)")
    ax.set_ylabel("fitness: mean ROI - buy-and-hold ROI")
    ax.set_title(title, fontsize=9)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=7)
    save(fig, path, dpi=110)


def plot_walk_forward(path: Path, wf: WalkForward, title: str) -> None:
    """The three stitched out-of-sample equity curves of a walk-forward evolution."""
    plt = pyplot()
    dates = np.array(wf.test_dates(), dtype="datetime64[D]")
    fig, ax = plt.subplots(figsize=(9, 4.5))
    labels = {"strategy": "walk-forward (re-evolved each fold)", "buy_hold": "buy-and-hold",
              "static_first_fold": "first fold's rule, held"}
    for name, curve in wf.curves().items():
        ax.plot(dates, curve, label=labels[name], lw=1.2)
    for o in wf.outcomes[1:]:
        ax.axvline(np.datetime64(wf.dates[o.fold.test0], "D"), color="grey", lw=0.5, ls=":")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_ylabel("equity (out of sample, start 1.0)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.autofmt_xdate()
    save(fig, path, dpi=110)
