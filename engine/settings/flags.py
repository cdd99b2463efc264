"""Command-line checks every command shares, without the engine's config: old spellings of
options (`deprecated_alias`) and the numbers of every int and float option (`check_numbers`,
run by run_engine.py before any command's work).

Apart from engine/settings/resolve.py (which re-exports these) so that a command whose
flags stand for no config key (`select`, `price`) reads neither the config's structs nor
msgspec (issue 27: a cold start compiles the bytecode of every module it imports;
benchmarks/results/devbox-2026-11-28f-cold-start-select/README.md).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from engine.errors import UserError


class _DeprecatedAlias(argparse.Action):
    """An old spelling of an option: sets the new option's value, with a one-line warning
    on stderr naming the new spelling."""

    def __init__(self, option_strings: list[str], dest: str, new: str = "", why: str = "",
                 **kw: Any) -> None:
        super().__init__(option_strings, dest, **kw)
        self.new, self.why = new, why

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        import sys

        print(f"warning: {option_string} is deprecated, use {self.new} ({self.why})",
              file=sys.stderr)
        setattr(namespace, self.dest, values)


def deprecated_alias(p: argparse.ArgumentParser, flag: str, dest: str, new: str,
                     why: str, type: Any = None) -> argparse.Action:
    """Keep `flag` working as an old name of `new` (hidden from help); `type` converts
    its value as the new option's does."""
    return p.add_argument(flag, dest=dest, action=_DeprecatedAlias, new=new, why=why,
                          help=argparse.SUPPRESS, default=None, type=type)


#: numeric options that may be negative (everything else is a count, a size, a time, a
#: rate or a cost: a negative value is an error at parse time)
NEGATIVE_OK = frozenset({"field", "interest_rate", "dividend_yield"})
#: integer options that may exceed a C int (epochs, seeds, stream positions)
WIDE_INTS = frozenset({"feed_session", "seed", "skip", "count"})
INT_MAX, WIDE_MAX = 2**31 - 1, 2**63 - 1


def check_number(value: Any, option: str, negative_ok: bool, most: int) -> None:
    """Refuse what no option of this command line means: NaN and infinities, integers
    beyond `most` (numpy and the kernels would overflow), negatives unless `negative_ok`;
    a one-line UserError naming the option."""
    if isinstance(value, float) and not math.isfinite(value):
        raise UserError(f"{option} must be a finite number, got {value}")
    if isinstance(value, int) and abs(value) > most:
        raise UserError(f"{option} must be at most {most:,}, got {value}")
    if value < 0 and not negative_ok:
        raise UserError(f"{option} must be >= 0, got {value}")


def check_numbers(p: argparse.ArgumentParser, command: str, args: argparse.Namespace) -> None:
    """Every int and float option given to a command checked by `check_number`, so a
    bad number is refused the same way by every command, before any work. (After the
    parse, not as an argparse type: a command's own range checks say the same in one
    line with exit 2, and a type error would print the usage as well.)"""
    for action in p._actions:
        if action.type not in (int, float) or not action.option_strings:
            continue
        value = getattr(args, action.dest, None)
        if value is None or value is action.default:
            continue
        dest = action.dest
        negative_ok = dest in NEGATIVE_OK or f"{dest}@{command}" in NEGATIVE_OK
        most = WIDE_MAX if dest in WIDE_INTS else INT_MAX
        for v in value if isinstance(value, list) else [value]:
            check_number(v, action.option_strings[0], negative_ok, most)
