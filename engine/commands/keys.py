"""`keys`: write a CURVE server and client key pair for `live --curve` and `feed --curve`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from engine.live.curve_keys import write_keys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="folder for the key files")


def run(args: argparse.Namespace) -> dict[str, Any]:
    files = write_keys(args.out)
    print(f"wrote server and client key pairs to {args.out} (keep *.key_secret private)",
          file=sys.stderr)
    return files
