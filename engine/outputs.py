"""Output paths checked before the work, so an unwritable one fails at once.

An unwritable `--out` or `--json` is refused with one line, not after minutes of computing.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.errors import UserError


def check_writable_dir(path: Path, option: str) -> None:
    """Create `path` (and parents) if needed and make sure a file can be written in it."""
    try:
        if path.exists() and not path.is_dir():
            raise UserError(f"{option} {path}: exists and is not a folder")
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{option} {path}: cannot create the folder: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UserError(f"{option} {path}: folder is not writable")


def check_writable_file(path: Path, option: str) -> None:
    """Make sure `path` can be written (its folder is created if needed)."""
    if path.is_dir():
        raise UserError(f"{option} {path}: is a folder, expected a file path")
    check_writable_dir(path.parent if str(path.parent) else Path("."), option)
    if path.exists() and not os.access(path, os.W_OK):
        raise UserError(f"{option} {path}: file is not writable")
