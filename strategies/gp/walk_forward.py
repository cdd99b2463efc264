"""Walk-forward evolution: evolve on a training window, trade the result on the days after it.

A plan `TRAIN,TEST[,STEP]` (trading days) cuts the data's history into folds. Fold k trains
on days [k x STEP, k x STEP + TRAIN) (rolling) or [0, TRAIN + k x STEP) (anchored: the
window grows from the data's first day), then tests on the next TEST days; STEP defaults to
TEST, so the test windows tile the history after the first training window. Folds that
would run past the data are not made.

Out of sample, honestly:
- a fold's task first cuts the prices to [its training window's first day, its test
  window's last day], so neither its evolution nor its test can read a later day (a test
  perturbs the prices after a fold and finds the fold unchanged), and its evolution
  evaluates only training days;
- its indicator panel is computed on that cut, starting with the training window as
  `evolve`'s does, so the test window starts with indicators warmed through training, and a
  fold is exactly `evolve --symbols ... --start TRAIN_START --train-days TRAIN --test-days
  TEST --seed SEED + k` (tested), whose strategy file a `replay --window test` reproduces
  to the cent (the panel's start matters: NVI, PVI and the EMAs carry their first day);
- fold k evolves with seed = base seed + k, so the run is reproducible and folds may run
  in any order, serially or side by side on a Dask cluster, with identical results.

Money: each fold's test window trades the evaluator's model (gpu.gp.core) with the run's
costs: each stock its own $10,000 account, flat at the start of the window and closed at
its last close; fills at the close that produced the signal. The rule traded is the fold's
best, or the majority vote of its hall of fame's top K (`ensemble`, GPEnsemble's vote). The
benchmark is buy-and-hold of the same stocks over the same window with the same costs.

Turnover (per fold): the value traded at the close, buys and sells, over the window's
starting equity (2.0: the whole equity bought and sold once).

Stitching: the out-of-sample equity compounds, each fold starting with the equity the last
one ended with, so `oos_roi` = prod(1 + test_roi) - 1; the daily returns of all test
windows, one after another, feed the statistics against buy-and-hold
(strategies.relative_stats), with trials = every rule evaluated in every fold. Beside them
runs the first fold's rule held static over all test windows: what re-evolving bought.

Stocks: those complete over the whole history (feeds.daily.daily_matrix), chosen knowing
that they trade throughout: a survivorship bias the summary states.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import numpy.typing as npt

from feeds.daily import DailyMatrix
from gpu.gp.core import DEFAULT_COSTS
from gpu.gp.evaluate import PopulationEvaluator
from gpu.indicators.compute import compute_panel
from strategies.gp.evolution import Champion, EvolutionConfig, evolve
from strategies.gp.representation import GPRule
from strategies.gp.returns import PeriodTrading, trade_period
from strategies.relative_stats import RelativeStats, relative_stats

if TYPE_CHECKING:
    from distributed import Client

F64 = npt.NDArray[np.float64]


# --------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class Fold:
    """Day indices of one fold: train [train0, train1), test [test0, test1)."""

    index: int
    train0: int
    train1: int
    test0: int
    test1: int


@dataclass(frozen=True)
class WalkForwardPlan:
    train_days: int
    test_days: int
    step: int
    anchored: bool = False

    @staticmethod
    def parse(text: str, anchored: bool = False) -> WalkForwardPlan:
        """`TRAIN,TEST[,STEP]` in trading days; ValueError (one line) otherwise."""
        parts = [p.strip() for p in text.split(",")]
        if len(parts) not in (2, 3):
            raise ValueError(f"--walk-forward takes TRAIN,TEST[,STEP] trading days, got {text!r}")
        try:
            numbers = [int(p) for p in parts]
        except ValueError:
            raise ValueError(f"--walk-forward takes whole numbers of trading days "
                             f"TRAIN,TEST[,STEP], got {text!r}") from None
        train, test = numbers[0], numbers[1]
        step = numbers[2] if len(numbers) == 3 else test
        if train < 2 or test < 2 or step < 1:
            raise ValueError(f"--walk-forward needs TRAIN >= 2, TEST >= 2 and STEP >= 1 "
                             f"trading days, got {text!r}")
        return WalkForwardPlan(train, test, step, anchored)

    def folds(self, n_days: int) -> list[Fold]:
        """Every fold whose test window ends inside `n_days`; ValueError if none does."""
        out = []
        k = 0
        while True:
            end = self.train_days + k * self.step
            train0 = 0 if self.anchored else k * self.step
            if end + self.test_days > n_days:
                break
            out.append(Fold(k, train0, end, end, end + self.test_days))
            k += 1
        if not out:
            raise ValueError(f"--walk-forward {self.train_days},{self.test_days}: the data "
                             f"has {n_days} trading days, {self.train_days + self.test_days} "
                             f"needed for one fold")
        return out

    def describe(self) -> str:
        kind = "anchored (growing from the first day)" if self.anchored else "rolling"
        return (f"{self.train_days}-day {kind} training windows, {self.test_days}-day test "
                f"windows, step {self.step}")


# --------------------------------------------------------------------------- one fold
@dataclass(frozen=True)
class History:
    """What every fold reads: the whole history's daily OHLCV (days x stocks, float64) of
    stocks that trade on every day of it, and the costs."""

    open: F64
    high: F64
    low: F64
    close: F64
    volume: F64
    costs: tuple[float, float, float] = DEFAULT_COSTS

    @staticmethod
    def of(m: DailyMatrix, costs: tuple[float, float, float] = DEFAULT_COSTS) -> History:
        def f64(a: npt.ArrayLike) -> F64:
            return np.ascontiguousarray(a, np.float64)

        return History(f64(m.open), f64(m.high), f64(m.low), f64(m.close), f64(m.volume),
                       costs)

    def cut(self, day0: int, day1: int) -> tuple[npt.NDArray[np.float32], F64]:
        """(indicator panel, closes) of days [day0, day1) alone, the panel starting at day0."""
        sl = slice(day0, day1)
        panel = compute_panel(self.open[sl], self.high[sl], self.low[sl], self.close[sl],
                              self.volume[sl], device="cpu")
        return panel, np.ascontiguousarray(self.close[sl])


@dataclass
class FoldOutcome:
    fold: Fold
    seed: int
    hall_of_fame: list[Champion]
    chosen: list[GPRule]           # the rule traded (the best, or the top K voted)
    train: PeriodTrading           # the chosen rule(s) over the training window
    test: PeriodTrading            # ... and out of sample
    rules_tried: int               # population x generations
    device: str
    seconds: float

    @property
    def train_excess(self) -> float:
        return self.train.roi - self.train.roi_buy_hold

    @property
    def test_excess(self) -> float:
        return self.test.roi - self.test.roi_buy_hold


def fold_seed(base: int, fold: Fold) -> int:
    return base + fold.index


def run_fold(history: History, config: EvolutionConfig, fold: Fold, ensemble: int,
             device: str) -> FoldOutcome:
    """Evolve on the fold's training days, trade its choice on its test days (a Dask task:
    a pure function of its arguments)."""
    from strategies.gp.islands import _apply_thread_share

    t0 = time.perf_counter()
    _apply_thread_share()
    # nothing after the test window exists for this fold; day 0 is its first training day
    panel, close = history.cut(fold.train0, fold.test1)
    train_days, test_end = fold.train1 - fold.train0, fold.test1 - fold.train0
    evaluator = PopulationEvaluator(panel, close, 0, train_days, device, costs=history.costs)
    result = evolve(evaluator, msgspec.structs.replace(config, seed=fold_seed(config.seed, fold)))
    chosen = [c.rule for c in result.hall_of_fame[:ensemble]]
    train = trade_period(chosen, panel, close, 0, train_days, history.costs)
    test = trade_period(chosen, panel, close, train_days, test_end, history.costs)
    return FoldOutcome(fold, fold_seed(config.seed, fold), result.hall_of_fame, chosen, train,
                       test, config.population * config.generations, evaluator.device,
                       time.perf_counter() - t0)


def trade_static(history: History, rules: Sequence[GPRule], fold: Fold) -> PeriodTrading:
    """`rules` (the first fold's choice) over another fold's test window, as that fold's
    own rule trades it (the same indicator panel)."""
    panel, close = history.cut(fold.train0, fold.test1)
    return trade_period(rules, panel, close, fold.test0 - fold.train0,
                        fold.test1 - fold.train0, history.costs)


# --------------------------------------------------------------------------- running folds
Progress = Callable[[FoldOutcome, int, int, float], None]


def run_folds(history: History, config: EvolutionConfig, folds: Sequence[Fold], ensemble: int,
              device: str, client: Client | None = None, progress: Progress | None = None
              ) -> list[FoldOutcome]:
    """Every fold, one after the other, or side by side on `client`'s cluster; in fold
    order. `progress(outcome, done, total, elapsed_seconds)` after each fold finishes."""
    t0 = time.perf_counter()
    out: dict[int, FoldOutcome] = {}

    def finished(o: FoldOutcome) -> None:
        out[o.fold.index] = o
        if progress is not None:
            progress(o, len(out), len(folds), time.perf_counter() - t0)

    if client is None:
        for f in folds:
            finished(run_fold(history, config, f, ensemble, device))
    else:
        from distributed import as_completed

        data = client.scatter(history, broadcast=True)
        futures = [client.submit(run_fold, data, config, f, ensemble, device, pure=False)
                   for f in folds]
        try:
            for fut in as_completed(futures):
                finished(fut.result())
        finally:
            client.cancel(futures)
            client.cancel(data)
    return [out[f.index] for f in folds]


def eta_line(o: FoldOutcome, done: int, total: int, elapsed: float) -> str:
    """One progress line: fold i/n, its result and the time left at the pace so far."""
    left = elapsed / done * (total - done)
    return (f"fold {o.fold.index + 1}/{total} done ({done}/{total}): train excess "
            f"{o.train_excess:+.2%}, test excess {o.test_excess:+.2%}, {o.seconds:.1f} s on "
            f"{o.device}; elapsed {elapsed:.1f} s, ETA {left:.1f} s")


# --------------------------------------------------------------------------- stitching
@dataclass
class WalkForward:
    """The folds' outcomes stitched into one out-of-sample record."""

    plan: WalkForwardPlan
    outcomes: list[FoldOutcome]
    static: list[PeriodTrading]        # the first fold's rule over every test window
    dates: list[str]                   # the whole history's dates (YYYY-MM-DD)
    ensemble: int
    costs: tuple[float, float, float]
    commission: float
    slippage_bps: float

    @property
    def rules_tried(self) -> int:
        return sum(o.rules_tried for o in self.outcomes)

    @property
    def oos_roi(self) -> float:
        return compound([o.test.roi for o in self.outcomes])

    @property
    def oos_roi_buy_hold(self) -> float:
        return compound([o.test.roi_buy_hold for o in self.outcomes])

    @property
    def oos_roi_static(self) -> float:
        return compound([s.roi for s in self.static])

    def daily(self) -> tuple[F64, F64, F64]:
        """Stitched daily returns: (strategy, buy-and-hold, first fold's rule static)."""
        return (np.concatenate([o.test.returns for o in self.outcomes]),
                np.concatenate([o.test.buy_hold_returns for o in self.outcomes]),
                np.concatenate([s.returns for s in self.static]))

    def test_dates(self) -> list[str]:
        return [self.dates[d] for o in self.outcomes for d in range(o.fold.test0, o.fold.test1)]

    def stats(self, seed: int = 0) -> RelativeStats:
        strategy, buy_hold, _ = self.daily()
        return relative_stats(strategy, buy_hold, trials=max(1, self.rules_tried), seed=seed)

    def curves(self) -> dict[str, list[float]]:
        """Equity (start 1.0) after each out-of-sample day of the three stitched curves."""
        return {name: np.cumprod(1.0 + r).tolist()
                for name, r in zip(("strategy", "buy_hold", "static_first_fold"), self.daily(),
                                   strict=True)}

    def fold_rows(self) -> list[dict[str, Any]]:
        rows = []
        for o, s in zip(self.outcomes, self.static, strict=True):
            f = o.fold
            rows.append({
                "fold": f.index, "seed": o.seed,
                "train_start": self.dates[f.train0], "train_end": self.dates[f.train1 - 1],
                "test_start": self.dates[f.test0], "test_end": self.dates[f.test1 - 1],
                "train_days": f.train1 - f.train0, "test_days": f.test1 - f.test0,
                "train_roi": o.train.roi, "train_roi_buy_hold": o.train.roi_buy_hold,
                "train_excess": o.train_excess,
                "test_roi": o.test.roi, "test_roi_buy_hold": o.test.roi_buy_hold,
                "test_excess": o.test_excess, "test_roi_static": s.roi,
                "test_fills": o.test.fills, "turnover": o.test.turnover,
                "rules": [{"buy": r.buy_infix, "sell": r.sell_infix} for r in o.chosen],
                "train_fitness": o.hall_of_fame[0].fitness,
            })
        return rows

    def description(self) -> str:
        c = self.commission
        traded = ("best rule" if self.ensemble == 1
                  else f"majority vote of the top {self.ensemble} rules")
        return (f"{len(self.outcomes)} folds: {self.plan.describe()}; each test window "
                f"trades the {traded} of its fold, each stock its own $10,000 account, "
                f"flat at the window's start and closed at its last close, folds "
                f"compounded; fills at the signal's close; "
                f"costs ${c:g} a trade and {self.slippage_bps:g} bp slippage; benchmark "
                f"buy-and-hold of the same stocks with the same costs; stocks complete over "
                f"the whole history (chosen knowing they survive it)")

    def report(self, stats: RelativeStats) -> dict[str, Any]:
        """JSON-ready; a function of the data, options and seed alone (timings are not in
        it: the same seed gives the same report byte for byte)."""
        return {
            "train_days": self.plan.train_days, "test_days": self.plan.test_days,
            "step": self.plan.step, "anchored": self.plan.anchored, "ensemble": self.ensemble,
            "commission": self.commission, "slippage_bps": self.slippage_bps,
            "fill_model": "signal-close",
            "folds": self.fold_rows(),
            "oos_roi": self.oos_roi, "oos_roi_buy_hold": self.oos_roi_buy_hold,
            "oos_roi_static_first_fold": self.oos_roi_static,
            "rules_tried": self.rules_tried,
            "oos_stats": stats.as_dict(),
            "summary": self.description(),
            "curve": {"dates": self.test_dates(), **self.curves()},
        }


def compound(rois: Sequence[float]) -> float:
    """prod(1 + roi) - 1, multiplied in order (as math.prod does)."""
    return math.prod(1.0 + r for r in rois) - 1.0


def stitch(plan: WalkForwardPlan, history: History, outcomes: list[FoldOutcome],
           dates: list[str], ensemble: int, commission: float, slippage_bps: float
           ) -> WalkForward:
    first = outcomes[0].chosen
    static = [trade_static(history, first, o.fold) for o in outcomes]
    return WalkForward(plan, outcomes, static, dates, ensemble, history.costs, commission,
                       slippage_bps)


# --------------------------------------------------------------------------- output
def short(text: str, width: int = 44) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def fold_table(wf: WalkForward) -> list[str]:
    """The per-fold table (stdout)."""
    lines = [f"{'fold':>4}  {'train':<23}  {'test':<23}  {'trn exc':>8}  {'test ROI':>8}  "
             f"{'B&H ROI':>8}  {'test exc':>8}  {'turnov':>6}  rule (buy | sell)"]
    for r in wf.fold_rows():
        rule = r["rules"][0]
        more = f" (+{len(r['rules']) - 1} voting)" if len(r["rules"]) > 1 else ""
        lines.append(
            f"{r['fold'] + 1:>4}  {r['train_start']}..{r['train_end']}  "
            f"{r['test_start']}..{r['test_end']}  {r['train_excess']:>+8.2%}  "
            f"{r['test_roi']:>+8.2%}  {r['test_roi_buy_hold']:>+8.2%}  "
            f"{r['test_excess']:>+8.2%}  {r['turnover']:>6.2f}  "
            f"{short(rule['buy'])} | {short(rule['sell'])}{more}")
    return lines
