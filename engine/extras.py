"""Optional parts of the install (pyproject.toml's extras) and the one-line error a command
gives when the part it needs is missing.

The base install runs replay, live, feed, evolve on one machine, price, ising, timeseries
and select. `[islands]`: Dask (distributed, bokeh's dashboard) for `evolve --islands`,
`--scheduler` and `--workers`; `[report]`: pandas for the Python API's DataFrames
(`engine.backtest`); `[parquet]`: pyarrow for Parquet market data.
"""

from __future__ import annotations

import importlib

from engine.errors import UserError

PACKAGE = "gpu-trading-engine"


def require(module: str, extra: str, what: str) -> None:
    """Import `module` or raise the UserError that names the extra to install."""
    try:
        importlib.import_module(module)
    except ImportError:
        raise UserError(f"{what} needs {module.split('.')[0]}, which is not installed: "
                        f"pip install '{PACKAGE}[{extra}]'") from None
