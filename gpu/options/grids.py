"""The finite-difference grids of the option pricer: their names, settings and limits.

No numba here: the engine's settings name and check a grid (an option group's `grid`,
`price_steps`, `time_steps`) without importing the kernels (`gpu.options.core`), which a
command that prices nothing then never loads (issue 27: a cold `select` spent 1.4 s of its
2.3 s importing numba through the option-group config; benchmarks/results/
devbox-2026-11-28f-cold-start-select/README.md). The pricing engines take these grids
(`gpu.options.engines.FdPricingEngine`).

The grids, by design (their accuracy on the American reference portfolio, measured per
grid by benchmarks/options.py, is in the README's "Option pricing accuracy" and in
benchmarks/results/devbox-2026-11-25-options-accuracy/):
- seed: the seed paper's grid, kept to reproduce it, not for quotes: S in [0, 3K] with
  150 steps and Δt = 0.02 year, so a one-week option gets one time step and a few nodes
  across its spread, and a long volatile one runs off the domain. Its time error is that
  of a handful of Crank–Nicolson steps (for a linear scheme the product of CN steps does
  not depend on their order, so grading the steps does not help a European option).
- default: uniform in S over the strike and the spot ± 5.5σ√T in log price (capped at
  ×6), 160 nodes: the same nodes per standard deviation for every expiry; fixed 40 steps
  (T does not set the resolution, σ√T does); Richardson extrapolation of American options
  (their time error is first order).
- fine: the same design with 512 nodes and 128 steps (cap ×10).
GRIDS lists them from the coarsest to the finest, and a named grid is never less accurate
than a coarser one on the reference (tests/gpu/test_options_dividends.py).
"""

from __future__ import annotations

from typing import Any, NamedTuple

# -- grid domains ---------------------------------------------------------------------------
#: S_lo = 0, S_hi = max(smax_mult·K, 2·S0), strike on a node (the seed's S_max = 3K).
DOMAIN_STRIKE_MULTIPLE = 0
#: S in [min(K,S0)·e^(−h), max(K,S0)·e^(h)], h = min(width·σ√T, ln smax_mult), strike on a node.
DOMAIN_LOG_WIDTH = 1

#: most PCR levels a block can need: 2^10 = 1024 nodes = the largest CUDA block.
MAX_LEVELS = 10
MAX_NODES = 1 << MAX_LEVELS


def threads_per_option(price_steps: int) -> int:
    """Block size for `price_steps`: the N+1 nodes rounded up to a whole warp."""
    nodes = price_steps + 1
    if price_steps < 4 or nodes > MAX_NODES:
        raise ValueError(f"price_steps must be in [4, {MAX_NODES - 1}], got {price_steps}")
    return (nodes + 31) // 32 * 32


class FdGrid(NamedTuple):
    """Finite-difference settings of a repricing (the same for every option of a launch).

    price_steps: N, the grid has N+1 nodes and one CUDA thread per node (N ≤ 1023).
    dt_target: years per time step when `time_steps` is 0 (steps = ⌈T/Δt⌉).
    time_steps: a fixed number of time steps whatever T (0 = use dt_target).
    min_steps: at least this many steps.
    rannacher: the first `rannacher` Crank–Nicolson steps are each replaced by two fully
      implicit half steps (damps the payoff kink; keeps second order in time).
    domain: DOMAIN_STRIKE_MULTIPLE (S in [0, max(smax_mult·K, 2·S0)]) or
      DOMAIN_LOG_WIDTH (K and S0 ± width·σ√T in log price, capped at ×smax_mult).
    compact: fourth-order compact differences in S (False: plain central differences).
    smooth: fourth-order smoothing of the payoff kink at the strike.
    richardson: an option that can be exercised early is marched twice in the same kernel
      block, over M_c = ⌊M/2⌋ and over the grid's M time steps, and its node values are
      extrapolated: V = V_M + w·(V_M − V_c), w = M_c/(M − M_c) (= 1 for even M:
      V = 2·V(Δt) − V(2Δt)); see `core.time_passes`. The projection onto the payoff makes
      an American price's time error first order in Δt (European Crank–Nicolson is second
      order), so the extrapolation removes the leading error for half a march more work;
      European options (and calls never exercised early) keep the single march, as does
      an option with a single time step.
    """

    name: str
    price_steps: int
    dt_target: float
    time_steps: int
    min_steps: int
    rannacher: int
    domain: int
    smax_mult: float
    width: float
    compact: bool = True
    smooth: bool = True
    richardson: bool = False

    def kernel_args(
        self,
    ) -> tuple[int, float, int, int, int, int, float, float, bool, bool, bool]:
        # exact Python types, so the CUDA kernel is compiled once
        return (
            int(self.price_steps),
            float(self.dt_target),
            int(self.time_steps),
            int(self.min_steps),
            int(self.rannacher),
            int(self.domain),
            float(self.smax_mult),
            float(self.width),
            bool(self.compact),
            bool(self.smooth),
            bool(self.richardson),
        )


GRIDS: dict[str, FdGrid] = {
    # the seed paper's grid, kept to reproduce it, not for quotes: 150 price steps on
    # [0, 3K], Δt = 0.02 year, plain CN start (a one-week option gets one time step and a
    # handful of nodes across its spread; a two-year volatile one runs off the domain)
    "seed": FdGrid("seed", 150, 0.02, 0, 1, 0, DOMAIN_STRIKE_MULTIPLE, 3.0, 0.0),
    # 160 nodes over K and S0 ± 5.5σ√T (capped at ×6): the same relative resolution for a
    # one-week and a two-year option; 40 steps with one Rannacher step, and American rows
    # extrapolated with a 20-step pass (Richardson): the American time error is first
    # order, and cancelling it costs fewer steps than halving Δt twice. From a sweep on
    # the reference (2026-11-25, CPU twin): 192 nodes over ±6σ√T, 48 steps: RRMSE 5.8e-5;
    # 160 over ±5.5σ√T, 40 steps: 7.2e-5 for five rows per lane instead of six and 60
    # marched steps instead of 72 (32 steps: 9.8e-5). Fewer nodes over a narrower span
    # (96 over ±3.5σ√T: 7.3e-5) fit the reference but miss 0.1 % on a two-year σ = 0.5
    # call at 4× the spot, where the ×6 cap spreads the uniform nodes thin
    "default": FdGrid("default", 159, 0.0, 40, 1, 1, DOMAIN_LOG_WIDTH, 6.0, 5.5,
                      richardson=True),
    # the same design at about twice the resolution in S and 2.7 times in time
    "fine": FdGrid("fine", 511, 0.0, 128, 1, 1, DOMAIN_LOG_WIDTH, 10.0, 6.0,
                   richardson=True),
}


def make_grid(
    grid: str | FdGrid = "default",
    *,
    price_steps: int | None = None,
    time_steps: int | None = None,
    rannacher: int | None = None,
) -> FdGrid:
    """A named grid, optionally with its price or time step count overridden."""
    if isinstance(grid, FdGrid):
        g = grid
    else:
        if grid not in GRIDS:
            raise ValueError(f"unknown grid {grid!r}: expected one of {', '.join(GRIDS)}")
        g = GRIDS[grid]
    changes: dict[str, Any] = {}
    if price_steps is not None:
        threads_per_option(price_steps)  # validates the range
        changes["price_steps"] = price_steps
    if time_steps is not None:
        if time_steps < 1:
            raise ValueError(f"time_steps must be ≥ 1, got {time_steps}")
        changes["time_steps"] = time_steps
    if rannacher is not None:
        if rannacher < 0:
            raise ValueError(f"rannacher must be ≥ 0, got {rannacher}")
        changes["rannacher"] = rannacher
    if changes:
        g = g._replace(name=f"{g.name}*", **changes)
    threads_per_option(g.price_steps)
    return g
