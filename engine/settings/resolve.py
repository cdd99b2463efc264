"""One settings path: built-in default < config file < command-line flag.

Design. A command's flag that stands for a config key is declared with `config_option`: its
argparse default is None, so a flag the user did not give is None and never replaces the
file's value (before, `--device`'s default "auto" was copied over `device = "cpu"` of the
TOML). The flag remembers its key (dotted: `broker.commission`) in the parser's defaults
(`args.config_keys`), so `settings(args)` can load the file and lay every flag given over
it with one function, `merge`, that rebuilds the frozen msgspec structs and validates the
result (a bad value names its flag, one line). Help shows the built-in default as
"(default: X)", 0 included, and says the file may set it.

A command adds a setting in three steps: a field (with its default) in a struct of
engine/settings/config.py, `config_option(p, "--flag", key="table.field", help=...)` in the
command's `add_arguments`, and `cfg = settings(args)` in its `run`. Never give such a flag
an argparse default: the struct's default is the one default.

The device and the fill model are resolved here, once, against the data (`resolve_device`,
`resolve_fill`): an impossible choice (`--device cuda` without a GPU, `--fill next-tick` on
daily bars) is a one-line error instead of a silent replacement.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar

import msgspec

from engine.errors import UserError
from engine.settings.config import EngineConfig, load_config

T = TypeVar("T", bound=msgspec.Struct)

#: where a parser's flag -> config key map lives (a parser default: it reaches args)
CONFIG_KEYS = "config_keys"
#: where the flag spelling of each config key lives (for error messages)
FLAG_NAMES = "config_flag_names"


def default_of(key: str, root: msgspec.Struct | None = None) -> Any:
    """The built-in default of a dotted config key (`broker.commission`)."""
    obj: Any = EngineConfig() if root is None else root
    for part in key.split("."):
        if not hasattr(obj, part):
            raise KeyError(f"no config key {key!r}")
        obj = getattr(obj, part)
    return obj


def show(value: Any) -> str:
    """A default as help shows it: 0 and "" too (an empty string reads as "")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == "":
        return '""'
    return str(value)


def config_option(p: argparse.ArgumentParser | Any, *flags: str, key: str, help: str,
                  **kw: Any) -> argparse.Action:
    """Declare a flag that overrides config key `key` when given (see the module doc)."""
    if "default" in kw:
        raise ValueError(f"{flags[0]}: a config flag has no argparse default (the struct's)")
    action = p.add_argument(*flags, default=None, help=(
        f"{help} (default: {show(default_of(key))}, or the config file's `{key}`)"), **kw)
    # an argument group shares its parser's defaults through its container
    owner = getattr(p, "_defaults", None)
    if owner is None:
        raise TypeError("config_option needs a parser or an argument group")
    keys = owner.setdefault(CONFIG_KEYS, {})
    keys[action.dest] = key
    owner.setdefault(FLAG_NAMES, {})[key] = flags[0]
    return action


def flags_given(args: argparse.Namespace) -> dict[str, Any]:
    """The config keys of the flags given on the command line, with their values."""
    keys: dict[str, str] = getattr(args, CONFIG_KEYS, None) or {}
    return {key: getattr(args, dest) for dest, key in keys.items()
            if getattr(args, dest, None) is not None}


def merge(cfg: T, values: Mapping[str, Any], flags: Mapping[str, str] | None = None) -> T:
    """`cfg` with the dotted keys of `values` replaced (None: not given, kept), nested
    structs rebuilt, and the whole validated again (each struct's __post_init__). A bad
    value is a UserError naming its flag (from `flags`, key -> "--flag") or its key."""
    given = {k: v for k, v in values.items() if v is not None}
    if not given:
        return cfg
    try:
        out = _replace(cfg, given)
        # replace() runs no __post_init__: a round trip through convert() does
        return msgspec.convert(msgspec.to_builtins(out), type(out))
    except (ValueError, TypeError, msgspec.ValidationError) as exc:
        raise UserError(_name_the_flag(str(exc), given, flags or {})) from None


def _replace(cfg: T, values: Mapping[str, Any]) -> T:
    """`msgspec.structs.replace` over dotted keys, nested structs rebuilt (unvalidated)."""
    nested: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for key, value in values.items():
        head, _, rest = key.partition(".")
        if head not in cfg.__struct_fields__:
            raise KeyError(f"no config key {key!r} in {type(cfg).__name__}")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            top[head] = value
    for head, sub in nested.items():
        top[head] = _replace(getattr(cfg, head), sub)
    return msgspec.structs.replace(cfg, **top)


def _name_the_flag(text: str, values: Mapping[str, Any], flags: Mapping[str, str]) -> str:
    """msgspec's message (`... - at `$.broker``) with the option that set the bad value."""
    for key in values:
        field = key.rpartition(".")[2]
        if field in text:
            return f"{flags.get(key, key)}: {text}"
    return text


def settings(args: argparse.Namespace, over_file: Mapping[str, Any] | None = None
             ) -> EngineConfig:
    """The engine config of a command: the built-in defaults, the `--config` file over
    them, `over_file` (settings of lower rank than a flag, such as the costs a GP strategy
    file records) over the file, and every flag given over all of it."""
    cfg = load_config(getattr(args, "config", None))
    if over_file:
        cfg = merge(cfg, over_file)
    return merge(cfg, flags_given(args), getattr(args, FLAG_NAMES, None))


def resolve_device(choice: str, what: str = "engine",
                   args: argparse.Namespace | None = None) -> str:
    """Check the device setting once, where the command starts: `cuda` without a GPU is
    a one-line error now, not deep in a kernel, naming where the choice came from (the
    flag, or the config file when `args` shows no --device). Returns the choice itself
    ("auto" stays "auto": a GP strategy times both backends under it)."""
    from gpu.device import DeviceUnavailable
    from gpu.device import resolve_device as backend_of

    try:
        backend_of(choice, what)
    except DeviceUnavailable as exc:
        if args is not None and getattr(args, "device", None) is None:
            why = str(exc).split(" but ", 1)[-1]  # gpu.device names the flag; this is the file
            raise UserError(f"device = {choice!r} in the config file "
                            f"{getattr(args, 'config', None)}: {why}") from None
        raise
    return choice


DataKind = Literal["bars", "ticks"]

#: fill models that apply to each kind of data (`auto` resolved to the first)
FILLS: dict[str, tuple[str, ...]] = {
    "bars": ("next-open", "signal-close"),
    "ticks": ("next-tick", "next-open", "signal-close"),
}


def data_kind(paths: Sequence[str]) -> DataKind:
    """"bars" when every --data path holds bars (daily files), else "ticks" (LEAN ticks,
    tick CSVs, recordings, the synthetic market: time bars are built from their trades)."""
    if not paths:
        return "ticks"
    from feeds.sources import detect_format

    kinds = set()
    for path in paths:
        try:
            kinds.add(detect_format(path))
        except ValueError as exc:
            raise UserError(str(exc)) from None
    return "bars" if all(k in ("daily", "bars") for k in kinds) else "ticks"


def resolve_fill(fill: str, kind: DataKind, option: str = "--fill") -> str:
    """The fill model that will run on `kind` data: `auto` becomes next-open on bars and
    next-tick on ticks, `bar-close` (the old name) signal-close; a model the data cannot
    give is a one-line error (next-tick on daily bars: there is no trade after a close)."""
    if fill == "bar-close":
        fill = "signal-close"
    if fill == "auto":
        return FILLS[kind][0]
    if fill not in FILLS[kind]:
        raise UserError(
            f"{option} {fill} cannot apply to {kind} data: "
            + ("daily bars have no trade after a bar's close; use next-open or signal-close"
               if kind == "bars" else f"use one of {', '.join(FILLS[kind])}"))
    return fill

