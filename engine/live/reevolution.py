"""Re-evolution inside the engine: the traded GP rule is evolved again in a background
process and swapped at a session boundary (`Engine.session_hook`).

Replay (`replay --walk-forward TRAIN,TEST`, `WalkForwardSessions`): the engine reads the
whole history of the folds once. When the data has passed the last day of a fold's
training window, the fold's evolution is submitted to the worker process
(strategies/gp/reevolve.py) with the fold's seed (seed + k) and its training days; at the
session boundary before the fold's first test day the engine takes the result (waiting for
it there if it is not done: a replay runs faster than any evolution, and a rule evolved on
data the engine has not yet seen would be look-ahead) and swaps the rule in.

What the new rule may do, and why the fold boundary closes positions: `evolve
--walk-forward` trades every fold's test window from a fresh $10,000 per stock, flat at its
start and liquidated at its last close, and compounds the folds. To give its
`walk_forward.oos_roi` to the cent, the replay does the same at each fold boundary: after
the fold's last bar the engine closes every position at that close (as its end of data
does), the fold's ROI is the engine's equity then over the fold's starting equity, every
account is re-based to the broker's cash per symbol, buy-and-hold starts again at the new
fold's first close, every signal starts at 0, and the indicator bank is re-warmed on the
new rule's training days (the rule was evolved on indicators that start on its training
window's first day; NVI, PVI and the EMAs carry that day). The engine's equity curve is
stitched afterwards (fold k's points times the compounded return of folds 0..k-1), so the
report's `roi` is `walk_forward.oos_roi`. The live daemon swaps with positions carried
over instead (LiveReevolution): there the phase table decides what the new rule may do.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import logging
import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from datetime import time as dtime
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
import numpy as np

from engine.errors import UserError
from engine.live.journal import Journal
from engine.settings.reevolve import ReevolveSettings, at_seconds
from engine.trading.core import Engine
from engine.trading.stats import EquityPoint
from feeds.datadir import data_dir
from gpu.indicators.compute import IndicatorBank
from strategies.gp.evolution import EvolutionConfig
from strategies.gp.reevolve import (
    AsOfJob,
    BudgetExceeded,
    EvolveJob,
    Reevolver,
    RuleText,
    RuleVersion,
    renumbered,
)
from strategies.gp.strategy import SwappableGP
from strategies.gp.walk_forward import Fold, compound, fold_seed

NS = 1_000_000_000
log = logging.getLogger("live")


def iso_ns(ts: int) -> str:
    return datetime.fromtimestamp(ts / NS, UTC).isoformat().replace("+00:00", "Z")


@dataclass
class FoldResult:
    """One fold as the engine traded it: equity (all accounts) at its start and after its
    last close's liquidation, buy-and-hold's likewise, its first and last bar times."""

    fold: Fold
    version: RuleVersion
    equity_start: float
    first_ts: int = -1
    last_ts: int = -1
    equity_end: float = math.nan
    buy_hold_end: float = math.nan
    #: the broker's fills before the fold and after its liquidation
    fills_start: int = 0
    fills_end: int = 0

    @property
    def test_roi(self) -> float:
        return self.equity_end / self.equity_start - 1.0

    @property
    def test_roi_buy_hold(self) -> float:
        return self.buy_hold_end / self.equity_start - 1.0


class WalkForwardSessions:
    """The session hook of a walk-forward replay (see the module docstring)."""

    def __init__(self, history: Any, folds: list[Fold], config: EvolutionConfig,
                 strategy: SwappableGP, reevolver: Reevolver, *, ensemble: int = 1,
                 costs: tuple[float, float, float], device: str = "cpu") -> None:
        self.history = history            # a DailyMatrix: dates, symbols, OHLCV
        self.dates = [str(d)[:10] for d in history.dates]
        self.day = {d: i for i, d in enumerate(self.dates)}
        self.folds = folds
        self.config = config
        self.strategy = strategy
        self.reevolver = reevolver
        self.ensemble = ensemble
        self.costs = costs
        self.device = device
        self.jobs: dict[int, cf.Future[RuleVersion]] = {}
        self.asked_at: dict[int, int] = {}
        self.versions: list[RuleVersion] = []
        self.results: list[FoldResult] = []
        #: seconds the engine waited at a swap for an evolution still running
        self.waited = 0.0
        #: each account's cash at the first fold's start (every fold starts from it)
        self._parts: list[float] = []

    # ------------------------------------------------------------------ the hook
    async def new_session(self, engine: Engine, last_ts: int, next_ts: int) -> None:
        last = self.day.get(engine.local_date(last_ts).isoformat())
        nxt = self.day.get(engine.local_date(next_ts).isoformat())
        if last is not None:
            for f in self.folds:
                if f.train1 - 1 == last and f.index not in self.jobs:
                    self._submit(f, last_ts)
            active = self.results[-1] if self.results else None
            if active is not None and active.fold.test1 - 1 == last:
                self._close_fold(engine, active, last_ts)
        if nxt is not None:
            for f in self.folds:
                if f.test0 == nxt:
                    await self._open_fold(engine, f, next_ts)

    def _submit(self, f: Fold, ts: int) -> None:
        """The fold's training days are all in: its evolution starts in the worker."""
        config = msgspec.structs.replace(self.config, seed=fold_seed(self.config.seed, f))
        job = EvolveJob.of_days(self.history, f.train0, f.train1, config=config,
                                ensemble=self.ensemble, costs=self.costs, device=self.device)
        self.jobs[f.index] = self.reevolver.submit(job)
        self.asked_at[f.index] = ts

    async def _open_fold(self, engine: Engine, f: Fold, ts: int) -> None:
        fut = self.jobs.get(f.index)
        if fut is None:  # the data began after the fold's training window ended
            self._submit(f, ts)
            fut = self.jobs[f.index]
        t0 = time.perf_counter()
        try:
            evolved = await asyncio.wrap_future(fut)
        except Exception as exc:
            raise UserError(f"walk-forward fold {f.index + 1}: its evolution failed: "
                            f"{type(exc).__name__}: {exc}") from None
        self.waited += time.perf_counter() - t0
        version = renumbered(evolved, len(self.versions) + 1, iso_ns(self.asked_at[f.index]),
                             f"fold {f.index}")
        self.versions.append(version)
        self._rebase(engine)
        self._rewarm(engine, f)
        self.strategy.swap(version.gp_rules(), flat=True)
        self.results.append(FoldResult(f, version, engine.broker.equity(), first_ts=ts,
                                       fills_start=len(engine.broker.fills)))

    # ------------------------------------------------------------------ fold boundaries
    def _close_fold(self, engine: Engine, r: FoldResult, ts: int) -> None:
        """The fold's last close: everything is sold there, as evolve's fold ends."""
        point = engine.close_positions(ts)
        r.last_ts, r.equity_end, r.buy_hold_end = ts, point.equity, point.buy_hold
        r.fills_end = len(engine.broker.fills)

    def finish(self, engine: Engine) -> None:
        """After the replay: the last fold ended with the data (`Engine.finish` sold it)."""
        if not self.results or not engine.equity_curve:
            raise UserError("walk-forward replay traded no fold")
        r = self.results[-1]
        if math.isnan(r.equity_end):
            end = engine.equity_curve[-1]
            r.last_ts, r.equity_end, r.buy_hold_end = end.ts, end.equity, end.buy_hold
            r.fills_end = len(engine.broker.fills)

    def _rebase(self, engine: Engine) -> None:
        """Every symbol's part of the account back to what it held at the first fold's
        start (flat then: its starting cash), buy-and-hold bought afresh."""
        broker = engine.broker
        if not self._parts:
            self._parts = [a.cash for a in broker.accounts]
        for a, part in zip(broker.accounts, self._parts, strict=True):
            if a.position != 0.0:
                raise RuntimeError("a walk-forward fold starts with a position held")
            a.cash = part
        first = engine.bars.first_price
        first[:] = [math.nan] * len(first)
        for i in range(len(first)):
            engine.refresh_flag(i)
        engine.decisions.signal[:] = 0

    def _rewarm(self, engine: Engine, f: Fold) -> None:
        """The indicator bank as if the engine had started on the fold's first training
        day (the bars it already received there, from the same data)."""
        m = self.history
        bank = IndicatorBank(engine.bank.n_symbols)
        idx = np.asarray([engine.sym_index[s] for s in m.symbols], np.int32)
        for d in range(f.train0, f.train1):
            bank.update(idx, *(np.ascontiguousarray(getattr(m, k)[d], np.float64)
                               for k in ("open", "high", "low", "close", "volume")))
        engine.bank = bank

    # ------------------------------------------------------------------ the record
    def stitch(self, engine: Engine) -> None:
        """Fold k's equity points times the compounded return of the folds before it (the
        strategy's and buy-and-hold's), so the curve is the stitched out-of-sample one."""
        scale, bh_scale, k = 1.0, 1.0, 0
        out: list[EquityPoint] = []
        for p in engine.equity_curve:
            while k < len(self.results) - 1 and p.ts > self.results[k].last_ts:
                scale *= 1.0 + self.results[k].test_roi
                bh_scale *= 1.0 + self.results[k].test_roi_buy_hold
                k += 1
            out.append(EquityPoint(p.ts, p.equity * scale, p.gross * scale,
                                   p.buy_hold * bh_scale))
        engine.equity_curve[:] = out

    @property
    def oos_roi(self) -> float:
        return compound([r.test_roi for r in self.results])

    @property
    def oos_roi_buy_hold(self) -> float:
        return compound([r.test_roi_buy_hold for r in self.results])

    def fold_rows(self) -> list[dict[str, Any]]:
        rows = []
        for r in self.results:
            f, v = r.fold, r.version
            rows.append({
                "fold": f.index, "seed": v.seed, "rule_version": v.version,
                "train_start": self.dates[f.train0], "train_end": self.dates[f.train1 - 1],
                "test_start": self.dates[f.test0], "test_end": self.dates[f.test1 - 1],
                "train_days": f.train1 - f.train0, "test_days": f.test1 - f.test0,
                "test_roi": r.test_roi, "test_roi_buy_hold": r.test_roi_buy_hold,
                "test_excess": r.test_roi - r.test_roi_buy_hold,
                "equity_start": r.equity_start, "equity_end": r.equity_end,
                "test_fills": r.fills_end - r.fills_start,
                "train_fitness": v.fitness,
                "rules": [{"buy": t.buy, "sell": t.sell} for t in v.rules],
            })
        return rows



# --------------------------------------------------------------------------- live
class LiveReevolution:
    """The live daemon's daily re-evolution: started in the worker process when data time
    passes `[reevolve] at` (`poll`, after every batch: an integer compare until then),
    swapped in at the next session boundary once it is done (`new_session`), with the
    positions carried over: the new rule continues from each symbol's signal, and its
    decisions go through the phase table like any other. A failure, or an evolution past
    its `gpu_seconds` budget, keeps the rule in use; it is logged and counted in the
    status. Every adopted version goes into the journal (`rule_versions`), in the batch's
    transaction, so a restart resumes with the rule the daemon traded. What a restart does
    not keep: an evolution still running or done but not yet adopted (it is evolved again
    at the next `at`), and the schedule, which starts again from the first data time after
    the restart (an `at` that passed while the daemon was down is not made up)."""

    def __init__(self, settings: ReevolveSettings, strategy: SwappableGP, journal: Journal,
                 current: RuleVersion, timezone: str, symbols: list[str],
                 costs: tuple[float, float, float], reevolver: Reevolver | None = None
                 ) -> None:
        self.settings = settings
        self.strategy = strategy
        self.journal = journal
        self.current = current
        self.tz = ZoneInfo(timezone)
        self.symbols = list(settings.symbols or symbols)
        self.costs = costs
        self.reevolver = reevolver or Reevolver()
        self.at_s = at_seconds(settings.at)
        self.next_due: int | None = None
        self.running: cf.Future[RuleVersion] | None = None
        self._started_wall = 0.0
        self._asked_at = 0
        self.ready: RuleVersion | None = None
        self.counts = {"started": 0, "adopted": 0, "failed": 0, "over_budget": 0}
        self.last_error = ""
        if not journal.rule_versions():  # the rule the daemon starts with: version 1
            journal.record_rule_version(current.version, 0, current.as_dict())

    # ------------------------------------------------------------------ schedule
    def due_after(self, ts: int) -> int:
        """The first `at` on the exchange's clock strictly after `ts` (ns)."""
        local = datetime.fromtimestamp(ts / NS, UTC).astimezone(self.tz)
        day = local.date()
        for _ in range(3):
            due = datetime.combine(day, dtime(self.at_s // 3600, self.at_s // 60 % 60),
                                   tzinfo=self.tz)
            due_ns = int(due.timestamp()) * NS
            if due_ns > ts:
                return due_ns
            day += timedelta(days=1)
        raise AssertionError("no re-evolution time in three days")

    def poll(self, now: int) -> None:
        """Data time is `now` (ns): start an evolution that is due, collect one that
        finished. Never waits."""
        if now > 0:
            if self.next_due is None:
                self.next_due = self.due_after(now)
            elif now >= self.next_due:
                if self.running is None:
                    self._start(self.next_due)
                else:
                    log.warning("re-evolution due at %s while the last one still runs: "
                                "skipped", iso_ns(self.next_due))
                self.next_due = self.due_after(now)
        fut = self.running
        if fut is None:
            return
        if fut.done():
            self.running = None
            self._collect(fut)
        elif self._past_hard_limit():
            self.running = None
            self.reevolver.restart()
            self._failed("over_budget", f"no result {time.monotonic() - self._started_wall:.0f}"
                                        f" s after it started (gpu_seconds "
                                        f"{self.settings.gpu_seconds:g})")

    def _past_hard_limit(self) -> bool:
        """An evolution that could not check its own budget (a hung device)."""
        budget = self.settings.gpu_seconds
        return bool(budget) and time.monotonic() - self._started_wall > budget + 60.0

    def _start(self, due: int) -> None:
        s = self.settings
        version = self.current.version + 1
        as_of = datetime.fromtimestamp(due / NS, UTC).astimezone(self.tz).date().isoformat()
        config = EvolutionConfig(population=s.population, generations=s.generations,
                                 seed=s.seed + version,
                                 elite=min(max(1, s.population // 500), s.population - 1))
        job = AsOfJob(data=s.data or str(data_dir() / "sp500_5yr_daily"),
                      symbols=self.symbols, as_of=as_of, train_days=s.train_days,
                      config=config, ensemble=s.ensemble, costs=self.costs,
                      device=s.device, budget_seconds=s.gpu_seconds)
        self.running = self.reevolver.submit(job)
        self._started_wall = time.monotonic()
        self._asked_at = due
        self.counts["started"] += 1
        log.info("re-evolution started: %d x %d on %d days up to %s (seed %d)",
                 s.population, s.generations, s.train_days, as_of, config.seed)

    def _collect(self, fut: cf.Future[RuleVersion]) -> None:
        try:
            evolved = fut.result()
        except BudgetExceeded as exc:
            self._failed("over_budget", str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - any failure keeps the rule in use
            self._failed("failed", f"{type(exc).__name__}: {exc}")
            return
        self.ready = renumbered(evolved, self.current.version + 1, iso_ns(self._asked_at),
                                "reevolve")
        log.info("re-evolution done: %s; swapped in at the next session",
                 self.ready.describe())

    def _failed(self, kind: str, why: str) -> None:
        self.counts[kind] += 1
        self.last_error = why
        log.error("re-evolution %s: %s; keeping %s", kind.replace("_", " "), why,
                  self.current.describe())

    # ------------------------------------------------------------------ the swap
    async def new_session(self, engine: Engine, last_ts: int, next_ts: int) -> None:
        # in data order: a batch spanning days starts the schedule on its first day
        self.poll(last_ts)
        self.poll(next_ts)
        new = self.ready
        if new is None:
            return
        self.ready = None
        self.strategy.swap(new.gp_rules(), flat=False)
        self.journal.record_rule_version(new.version, next_ts, new.as_dict())
        self.current = new
        self.counts["adopted"] += 1
        log.info("session %s: trading %s", engine.local_date(next_ts).isoformat(),
                 new.describe())

    def status(self) -> dict[str, Any]:
        c = self.current
        return {
            "rule": {"version": c.version, "origin": c.origin, "train_start": c.train_start,
                     "train_end": c.train_end, "seed": c.seed, "fitness": c.fitness,
                     "rules": [{"buy": r.buy, "sell": r.sell} for r in c.rules]},
            "reevolution": {
                "at": self.settings.at, "timezone": str(self.tz),
                "next_at": iso_ns(self.next_due) if self.next_due is not None else None,
                "running": self.running is not None,
                "waiting_for_session": self.ready.version if self.ready else None,
                **self.counts, "last_error": self.last_error or None},
        }

    def close(self) -> None:
        self.reevolver.close()


def initial_version(strategy: Any, spec: str) -> RuleVersion:
    """Version 1: the rules of the GP strategy file the daemon was started with."""
    from strategies.gp.strategy_file import read_strategy_file

    sf = read_strategy_file(spec.partition("#")[0])
    rules = getattr(strategy, "rules", None) or [sf.rule()]
    train = sf.train
    return RuleVersion(
        version=1, rules=[RuleText(r.buy_infix, r.sell_infix) for r in rules],
        train_start=train.first_date if train else "", train_end=train.last_date if train
        else "", seed=sf.seed or 0, fitness=sf.best.fitness,
        symbols=list(train.symbols) if train else [], origin="file")
