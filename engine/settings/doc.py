"""examples/engine.toml from the config structs: every key, its default and its comment.

Design. The documentation of a setting lives once, as the `#:` comment above its field in
its struct (engine/settings/config.py, engine/settings/gpu.py, ...). `render()` walks EngineConfig
and writes each table with every field at its default, the comment above it, so the
example file cannot say something the code does not. Tables of a list or a map of structs
(`[[options]]`, `[instruments.SYMBOL]`) have no default entry: they are written commented
out, with example values for their required fields. tests/engine/test_settings_path.py
checks that the committed file names every field of every struct and loads to the
defaults; when it fails, regenerate: `python -m engine.settings.doc > examples/engine.toml`.
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from typing import Any, get_args, get_origin, get_type_hints

import msgspec

from engine.settings.config import EngineConfig

HEADER = """\
# The engine's settings: every key with its default (engine/settings/config.py and the structs it
# holds). Pass a file like this one to replay or live with --config FILE.toml; give only
# the keys you change. Unknown keys are an error.
#
# Precedence, lowest first: built-in default < this file < a command-line flag given
# (a flag not given never overrides the file). The [gpu] keys are exported to their
# environment variables (README: "Settings"); a variable already set in the environment
# overrides the file.
#
# Generated from the structs' comments: python -m engine.settings.doc > examples/engine.toml
"""

#: example values of the required fields of list/map tables (they have no default)
EXAMPLES: dict[str, Any] = {
    "underlying": "SPY", "strikes": [160.0, 165.0, 170.0], "expiries": [30, 60],
    "multiplier": 1.0, "tick_size": 0.01,
}


def field_comments(cls: type) -> dict[str, list[str]]:
    """The `#:` comment lines above each field of a struct's class body."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    out: dict[str, list[str]] = {}
    pending: list[str] = []
    for line in lines[1:]:
        text = line.strip()
        if text.startswith("#:"):
            pending.append(text[2:].strip())
            continue
        m = re.match(r"([A-Za-z_]\w*)\s*:", text)
        if m and m.group(1) in getattr(cls, "__struct_fields__", ()):
            out[m.group(1)] = pending
        pending = []
    return out


def toml_value(value: Any) -> str:
    """A default in TOML syntax."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }" \
            if value else "{}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def _element(cls: type, name: str) -> type | None:
    """The struct type of a list or dict field's elements, else None."""
    hint = get_type_hints(cls).get(name)
    if get_origin(hint) in (list, dict, tuple):
        args = get_args(hint)
        inner = args[-1] if args else None
        if isinstance(inner, type) and issubclass(inner, msgspec.Struct):
            return inner
    return None


def _fields(obj: msgspec.Struct | None, cls: type, prefix: str = "") -> list[str]:
    """`key = default` lines with their comments; `prefix` comments them out."""
    comments = field_comments(cls)
    out = []
    for f in msgspec.structs.fields(cls):
        if obj is not None and (isinstance(getattr(obj, f.name), msgspec.Struct)
                                or _element(cls, f.name) is not None):
            continue  # a table of its own, written after the plain keys
        out += [f"# {c}" if c else "#" for c in comments.get(f.name, [])]
        if f.default is not msgspec.NODEFAULT:
            value = f.default
        elif f.default_factory is not msgspec.NODEFAULT:
            value = f.default_factory()
        else:
            value = EXAMPLES[f.name]
        out.append(f"{prefix}{f.name} = {toml_value(value)}")
    return out


def render() -> str:
    """The whole example file."""
    cfg = EngineConfig()
    lines = [HEADER] + _fields(cfg, EngineConfig, "")
    tables: list[tuple[str, msgspec.Struct]] = []
    repeated: list[tuple[str, type, bool]] = []
    for name in EngineConfig.__struct_fields__:
        value = getattr(cfg, name)
        element = _element(EngineConfig, name)
        if isinstance(value, msgspec.Struct):
            tables.append((name, value))
        elif element is not None:
            repeated.append((name, element, isinstance(value, dict)))
    for name, value in tables:
        lines += ["", f"[{name}]"] + _fields(value, type(value))
    comments = field_comments(EngineConfig)
    for name, element, is_map in repeated:
        head = f"[{name}.SYMBOL]" if is_map else f"[[{name}]]"
        lines += [""] + [f"# {c}" if c else "#" for c in comments.get(name, [])]
        lines += ["# (none by default; one table per entry, for example:)", f"# {head}"]
        lines += _fields(None, element, "# ")
    return "\n".join(lines) + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
