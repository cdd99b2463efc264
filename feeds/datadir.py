"""Where the shared real market data lives (never copied into the repository)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def data_dir() -> Path:
    """`TRADING_DATA_DIR`, else `../shared/data` beside the checkout."""
    env = os.environ.get("TRADING_DATA_DIR")
    return Path(env) if env else (REPO_ROOT.parent / "shared" / "data")
