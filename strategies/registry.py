"""Turn a `--strategy` argument into a Strategy: a built-in name or a strategy file.

- `sma-cross` (10/50 bars), `sma-cross:FAST,SLOW[,long-only]`
- a GP strategy file (`*.json`, written by `run_engine.py evolve`): its best rule, or with
  `#ensemble` after the path (`best.json#ensemble`) the majority vote of its hall of fame,
  with `#ensemble:select=SEL.json` the vote of the rules a `select --json` output chose
- a Python file defining `make_strategy() -> Strategy`
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from strategies.base import Strategy
from strategies.sma_cross import parse_sma_cross

BUILT_IN = ("sma-cross",)


def strategy_from_spec(spec: str, device: str = "auto") -> Strategy:
    if spec.split(":", 1)[0] == "sma-cross":
        return parse_sma_cross(spec)
    base, _, fragment = spec.partition("#")
    select = fragment.removeprefix("ensemble:select=") if fragment.startswith(
        "ensemble:select=") else None
    if fragment not in ("", "ensemble") and not select:
        raise ValueError(f"strategy {spec!r}: after '#' expected 'ensemble' or "
                         f"'ensemble:select=FILE', got {fragment!r}")
    ensemble = bool(fragment)
    path = Path(base)
    if not path.exists():
        raise ValueError(
            f"unknown strategy {spec!r}: not a built-in ({', '.join(BUILT_IN)}) and no such file"
        )
    if path.suffix == ".json":
        from strategies.gp.strategy_file import strategy_from_file

        return strategy_from_file(path, device=device, ensemble=ensemble, select=select)
    if path.suffix == ".py":
        mod_spec = importlib.util.spec_from_file_location(f"user_strategy_{path.stem}", path)
        if mod_spec is None or mod_spec.loader is None:
            raise ValueError(f"cannot import strategy file {path}")
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
        make = getattr(module, "make_strategy", None)
        if make is None:
            raise ValueError(f"strategy file {path} defines no make_strategy()")
        strategy = make()
        if not isinstance(strategy, Strategy):
            raise ValueError(f"make_strategy() in {path} did not return a Strategy")
        return strategy
    raise ValueError(f"strategy file {path}: expected a .json GP strategy or a .py file")
