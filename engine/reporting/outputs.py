"""Output paths checked before the work, so an unwritable one fails at once.

An unwritable `--out` or `--json` is refused with one line, not after minutes of computing.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
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
    # access(2) answers from the permission bits, and root passes them all: a file made
    # and removed is the only proof (/proc, /sys, a read-only bind mount said yes)
    try:
        fd, probe = tempfile.mkstemp(dir=path, prefix=".write-check-")
    except OSError as exc:
        raise UserError(f"{option} {path}: folder is not writable: {exc.strerror}") from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


def check_writable_file(path: Path, option: str) -> None:
    """Make sure `path` can be written (its folder is created if needed)."""
    if path.is_dir():
        raise UserError(f"{option} {path}: is a folder, expected a file path")
    check_writable_dir(path.parent if str(path.parent) else Path("."), option)
    if path.exists() and not os.access(path, os.W_OK):
        raise UserError(f"{option} {path}: file is not writable")


#: what an output file of each kind starts with, or how it reads (see `check_own_kind`)
OUTPUT_KINDS = ("json", "strategy", "png", "returns-csv", "gzip")


def check_own_kind(path: Path, kind: str, option: str) -> None:
    """Refuse to overwrite an existing file that is not an output of `kind`: an output
    option never destroys another file (`evolve --out data.csv` replaced a data file).

    An empty file, or none, is fine. Kinds: "json" (a JSON document other than a strategy
    file), "strategy" (a GP
    strategy file of `evolve`), "png", "returns-csv" (daily returns of a hall of fame:
    a header of `date` and `hof<k>` columns), "gzip" (a feed recording, appended to)."""
    if kind not in OUTPUT_KINDS:
        raise ValueError(f"unknown output kind {kind!r}")
    try:
        if not path.is_file() or path.stat().st_size == 0:
            return
        with path.open("rb") as fh:
            head = fh.read(1 << 16)
    except OSError:
        return  # unreadable: check_writable_file says why, if it matters
    if not _is_kind(path, head, kind):
        what = {"json": "a JSON results file", "strategy": "a strategy file written by evolve",
                "png": "a PNG image", "returns-csv": "a returns CSV written by evolve",
                "gzip": "a gzip feed recording"}[kind]
        raise UserError(f"{option} {path}: exists and is not {what}; it is never "
                        "overwritten: choose another path or remove it")


def _is_kind(path: Path, head: bytes, kind: str) -> bool:
    """Whether the file (its first bytes `head`) is an output of `kind`."""
    if kind == "png":
        return head.startswith(b"\x89PNG\r\n\x1a\n")
    if kind == "gzip":
        return head.startswith(b"\x1f\x8b")
    if kind == "returns-csv":
        header = head.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
        cols = [c.strip() for c in header.split(",")]
        return bool(cols) and all(c == "date" or (c.startswith("hof") and c[3:].isascii()
                                                    and c[3:].isdigit())
                                  for c in cols)
    import json

    try:
        doc = json.loads(path.read_text())
    except (ValueError, OSError, UnicodeDecodeError):
        return False
    strategy = isinstance(doc, dict) and doc.get("format") == "gp-trading-strategy"
    # a results JSON never replaces a strategy file (`--json best.json`), nor the reverse
    return strategy if kind == "strategy" else not strategy
