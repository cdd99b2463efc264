"""GP strategy files: JSON (msgspec) with the best rule and a hall of fame.

Each tree is stored twice: readable fully-parenthesised infix text and the compiled postfix
op codes the evaluators run (gpu.gp.core). The file also records the terminal-set version
and names, the training (and test) window - symbols, first and last date, days - so that
anyone can replay the same window, and each rule's training fitness.

`read_strategy_file` validates: the JSON schema (unknown fields rejected), format and version,
terminal-set version and names, op codes in range, both forms type-correct and in
agreement. Any problem is one ValueError line naming the file.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np

from gpu.gp.core import N_OPS
from gpu.indicators.catalogue import TERMINAL_SET_VERSION, TERMINALS
from strategies.gp.representation import (
    GPRule,
    parse_infix,
    postfix_to_prefix,
    to_infix,
    tree_to_postfix,
)
from strategies.gp.strategy import GPEnsemble, GPStrategy

FORMAT = "gp-trading-strategy"
VERSION = 1

_STRUCT = {"frozen": True, "kw_only": True, "forbid_unknown_fields": True}


class TreeRecord(msgspec.Struct, **_STRUCT):
    infix: str
    postfix: list[int]


class RuleRecord(msgspec.Struct, **_STRUCT):
    buy: TreeRecord
    sell: TreeRecord
    fitness: float          # training fitness: mean over stocks of ROI - buy-and-hold ROI
    generation: int = 0     # generation that first produced it


class PeriodRecord(msgspec.Struct, **_STRUCT):
    symbols: list[str]
    first_date: str
    last_date: str
    days: int
    roi: float | None = None            # mean ROI over the stocks of the best rule
    roi_buy_hold: float | None = None   # mean buy-and-hold ROI


class StrategyFile(msgspec.Struct, **_STRUCT):
    format: str = FORMAT
    version: int = VERSION
    terminal_set_version: int = TERMINAL_SET_VERSION
    terminals: list[str] = msgspec.field(default_factory=lambda: list(TERMINALS))
    data: str = ""
    train: PeriodRecord | None = None
    test: PeriodRecord | None = None
    seed: int | None = None
    best: RuleRecord  # type: ignore[misc]  # kw_only: msgspec allows it, mypy cannot tell
    hall_of_fame: list[RuleRecord] = msgspec.field(default_factory=list)
    # the costs the rules were evolved (and their ROIs computed) with, for a replay to use:
    # the paper broker's model (engine.trading.broker); files written before they existed had these
    commission: float = 1.0
    slippage_bps: float = 0.0
    #: individuals evaluated to find these rules (population x generations, all islands or
    #: walk-forward folds): the trials of a deflated Sharpe ratio; None = not recorded
    rules_tried: int | None = None

    def rule(self) -> GPRule:
        """The best rule (already validated by read_strategy_file)."""
        return record_rule(self.best)

    def rules(self) -> list[GPRule]:
        """The hall of fame (the best rule alone if the file has none)."""
        return [record_rule(r) for r in self.hall_of_fame] or [self.rule()]


def tree_record(prefix: np.ndarray) -> TreeRecord:
    return TreeRecord(infix=to_infix(prefix),
                      postfix=[int(x) for x in tree_to_postfix(np.asarray(prefix, np.int16))])


def rule_record(rule: GPRule, fitness: float, generation: int = 0) -> RuleRecord:
    return RuleRecord(buy=tree_record(rule.buy), sell=tree_record(rule.sell),
                      fitness=float(fitness), generation=int(generation))


def _tree(rec: TreeRecord, where: str) -> np.ndarray:
    bad = [op for op in rec.postfix if not 0 <= op < N_OPS]
    if bad:
        raise ValueError(f"{where}: op code {bad[0]} out of range 0..{N_OPS - 1}")
    try:
        prefix = parse_infix(rec.infix)
    except ValueError as e:
        raise ValueError(f"{where} infix: {e}") from None
    try:
        compiled = postfix_to_prefix(np.asarray(rec.postfix, np.int16))
    except ValueError as e:
        raise ValueError(f"{where} postfix: {e}") from None
    if not np.array_equal(prefix, compiled):
        raise ValueError(f"{where}: infix and compiled postfix disagree")
    return prefix


def record_rule(rec: RuleRecord, where: str = "rule") -> GPRule:
    try:
        return GPRule(_tree(rec.buy, f"{where} buy"), _tree(rec.sell, f"{where} sell"))
    except ValueError as e:
        msg = str(e)
        raise ValueError(msg if msg.startswith(where) else f"{where}: {msg}") from None


def validate(sf: StrategyFile) -> None:
    """Raise ValueError (one line) unless the decoded file is usable."""
    if sf.format != FORMAT:
        raise ValueError(f"format {sf.format!r}, expected {FORMAT!r}")
    if sf.version != VERSION:
        raise ValueError(f"strategy file version {sf.version}, this program reads {VERSION}")
    if sf.terminal_set_version != TERMINAL_SET_VERSION:
        raise ValueError(f"terminal set version {sf.terminal_set_version}, this program has "
                         f"{TERMINAL_SET_VERSION}: re-evolve the strategy")
    if list(sf.terminals) != list(TERMINALS):
        raise ValueError("terminal names or order differ from gpu.indicators.catalogue.TERMINALS")
    if not (sf.commission >= 0 and sf.slippage_bps >= 0 and np.isfinite(sf.commission)
            and np.isfinite(sf.slippage_bps)):
        raise ValueError(f"commission and slippage_bps must be numbers >= 0, got "
                         f"{sf.commission} and {sf.slippage_bps}")
    record_rule(sf.best, "best")
    for i, r in enumerate(sf.hall_of_fame):
        record_rule(r, f"hall_of_fame[{i}]")


def save_strategy(path: str | Path, sf: StrategyFile) -> None:
    validate(sf)
    Path(path).write_bytes(msgspec.json.format(msgspec.json.encode(sf), indent=2) + b"\n")


def read_strategy_file(path: str | Path) -> StrategyFile:
    """Read and validate a strategy file; ValueError with one line naming the file."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ValueError(f"{p}: cannot read strategy file ({e.strerror or e})") from None
    try:
        sf = msgspec.json.decode(raw, type=StrategyFile)
        validate(sf)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as e:
        line = " ".join(str(e).split())
        raise ValueError(f"{p}: not a valid GP strategy file: {line}") from None
    return sf


def strategy_from_file(path: str | Path, device: str = "auto", ensemble: bool = False,
                       select: str | Path | None = None) -> GPEnsemble:
    """The engine strategy of a file: its best rule, or the hall of fame's majority vote.

    `select`: a `select --json` output naming hall-of-fame columns `hof<i>` (from
    `evolve --returns-out`): the ensemble votes over those rules only.
    """
    sf = read_strategy_file(path)
    name = Path(path).stem
    if select is not None:
        from strategies.gp.returns import hall_of_fame_indices
        from strategies.selection import read_selection

        rules = sf.rules()
        names = read_selection(select)  # its errors name the file
        try:
            chosen = hall_of_fame_indices(names, len(rules))
        except ValueError as e:
            raise ValueError(f"{select}: {e}") from None
        return GPEnsemble([rules[i] for i in chosen], device=device,
                          name=f"gp-ensemble:{name}:select")
    if ensemble:
        return GPEnsemble(sf.rules(), device=device, name=f"gp-ensemble:{name}")
    return GPStrategy(sf.rule(), device=device, name=f"gp:{name}")
