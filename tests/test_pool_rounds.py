"""`between_ticks.py --pool` against the tables the deleted per-session pooling scripts wrote.

The fourth and fifth sessions' `pooled.md` came from `pool_session4.py` and
`pool_session5.py` (their own code, run on the same JSON files); the maintained pooling
(`benchmarks/pool_rounds.py`) must give the same cells for the same files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.pool_rounds import pooled_table

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"

#: (folder, files pooled, {old column name: new column name})
CASES = [
    ("h200-2026-11-23-session4", ("run2.json", "run4.json"),
     {"ratio median [range]": "ratio median [range]",
      "repricings median [range]": "repricings median [range]",
      "both goals": "SPY: with >= 100k repricings", "p50 µs": "p50 µs", "p99 µs": "p99 µs"}),
    ("h200-2026-11-23-session5", ("run1.json", "full_speed.json", "ten_6rounds.json"),
     {"rounds": "rounds", "ratio median [range]": "ratio median [range]",
      "ratio goal met": "ratio goal met",
      "repricings median [range]": "repricings median [range]",
      "longest newer-spot wait per file, data ms": "longest newer-spot wait per file, data ms"}),
]


def _cells(table: str) -> dict[str, dict[str, str]]:
    """Per row name, its cells by column name (the first column names the row)."""
    lines = [ln for ln in table.splitlines() if ln.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    out = {}
    for ln in lines[2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        out[cells[0]] = dict(zip(head[1:], cells[1:], strict=True))
    return out


@pytest.mark.parametrize(("folder", "files", "columns"), CASES, ids=[c[0] for c in CASES])
def test_pool_matches_the_session_scripts(folder: str, files: tuple[str, ...],
                                          columns: dict[str, str]) -> None:
    old = _cells((RESULTS / folder / "pooled.md").read_text())
    new = _cells(pooled_table([RESULTS / folder / f for f in files]))
    assert set(new) == set(old)
    for row, cells in old.items():
        for old_col, new_col in columns.items():
            assert new[row][new_col] == cells[old_col], (row, old_col)
