"""Genetic programming of trading rules (the GPU GP trading paper), evolved and traded.

Modules: `representation` (flat prefix arrays, infix text, postfix compilation), `init`
(ramped half-and-half), `operators` (crossover, mutation, breeding), `evolution` (the
loop, tournament, elitism, hall of fame), `reference` (plain-Python evaluator for tests),
`window` (data window and indicator panel), `strategy` (GPStrategy, GPEnsemble,
simulate_money), `strategy_file` (JSON files). The evaluators are gpu/gp/core.py (the
arithmetic, written once) and gpu/gp/evaluate.py (CPU numba and CUDA kernels).

Semantics, shared by every evaluator and by the engine replay:

Rules. Strongly typed trees over the 31 terminals of gpu.indicators.catalogue (17 float, 14 bool)
and AND, OR, NOT (bool -> bool), <, > (float, float -> bool). An individual is a buy tree and a
sell tree, both returning bool. A comparison involving NaN is false; a bool terminal is true
iff its value > 0.5 (so a warming-up NaN is false); NOT(false) = true.

Data window. `n_stocks` stocks with a bar on every day of [start, start + train_days +
test_days) (feeds.daily.daily_matrix: the first N complete tickers alphabetically). NaN
policy (feeds/daily.py): rows whose close is missing or <= 0 are dropped, so such a stock is
incomplete in any window containing that day and is not used; missing open/high/low are
repaired from the close and inconsistent high/low widened; those rows are kept. Train = the
first `train_days` days, test = the next `test_days`. The indicator panel is computed once
over the whole window starting at its first day (no earlier data), so indicators warm up
inside the training period; the test period uses the same continuous panel. The panel is
always computed on the CPU (see strategies.gp.window).

Decisions. On day d the trees read panel[d] (the indicators after day d's bar) and any
trade fills at close[d], the float64 close of the DailyMatrix (never the float32 panel), so
money matches the engine to the cent. Decision matrix with a signal s (initially 0), which
is exactly the engine's target signal (GPStrategy: enter_on_from_zero, long_only):
- buy & !sell: if s = 0, s := 1 and buy shares = floor((cash - 1) / close) if that is >= 1,
  cash := cash - (shares * close + 1);
- sell & !buy: if s = 1, s := 0 and, if shares are held, cash := cash + (shares * close - 1);
- otherwise nothing.
A buy that cannot afford one share leaves s = 1 and no position (the engine's phase table
does the same: the next entry needs a 0 -> +1 transition again).

Money. $10,000 per stock at the start of each period (train and test each start flat with
fresh cash), $1 commission per trade by default (`evolve --commission X --slippage-bps Y`:
the paper broker's costs, a fill at close x (1 +/- Y 1e-4) and floor((cash - X) / fill)
shares; see gpu.gp.core.cost_tuple), float64 arithmetic in exactly the order written above
(on the GPU the product shares*close is rounded separately: libdevice dmul_rn, no fused
multiply-add). After the last day whatever is held is sold at the last close (-$1).
ROI = final cash / 10,000 - 1. Buy-and-hold: the same buy at the first day's close and the
same liquidation at the last. Fitness = mean over stocks of (ROI - buy-and-hold ROI),
reduced on the host with numpy in one fixed order, so equal cash gives equal fitness.
"""

from __future__ import annotations

from strategies.gp.representation import GPRule, Population
from strategies.gp.strategy import GPEnsemble, GPStrategy, simulate_money

__all__ = ["GPEnsemble", "GPRule", "GPStrategy", "Population", "simulate_money"]
