"""`select` on a returns file full of clones: it names the distinct behaviours of the input
and warns when the chosen set's largest |correlation| is above 0.9."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import run_engine
from strategies.selection import write_returns


def _clones_csv(path: Path, seed: int = 5) -> tuple[Path, np.ndarray]:
    """Three independent behaviours, the first written four times, the second twice, plus a
    near-clone of the third (correlation ~0.99) and a constant column."""
    rng = np.random.default_rng(seed)
    base = rng.normal(0.0, 0.01, size=(120, 3))
    near = base[:, 2] + rng.normal(0.0, 0.001, size=120)
    cols = [base[:, 0]] * 4 + [base[:, 1]] * 2 + [base[:, 2], near, np.zeros(120)]
    r = np.column_stack(cols)
    write_returns(path, [f"s{i}" for i in range(r.shape[1])], r)
    return path, r


def _distinct_by_loop(r: np.ndarray) -> int:
    """Distinct columns by pairwise comparison in plain Python."""
    seen: list[list[float]] = []
    for j in range(r.shape[1]):
        col = [float(x) for x in r[:, j]]
        if not any(col == other for other in seen):
            seen.append(col)
    return len(seen)


def _select(tmp_path: Path, returns: Path, k: int, capsys: pytest.CaptureFixture[str]
            ) -> tuple[dict, str, str]:
    out = tmp_path / f"sel{k}.json"
    rc = run_engine.main(["select", "--returns", str(returns), "--k", str(k),
                          "--device", "cpu", "--json", str(out)])
    assert rc == 0
    captured = capsys.readouterr()
    return json.loads(out.read_text()), captured.out, captured.err


def test_clones_counted_once_and_warned(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    returns, r = _clones_csv(tmp_path / "clones.csv")
    doc, out, err = _select(tmp_path, returns, 4, capsys)
    want = _distinct_by_loop(r)
    assert want == 5  # three behaviours, one near-clone, one constant column
    assert doc["distinct_behaviours"] == want
    assert f"{want} distinct behaviour" in out
    # 4 of the 8 varying columns: the search must take a clone or the near-clone
    sub = np.corrcoef(r[:, [int(n[1:]) for n in doc["subset"]]], rowvar=False)
    largest = np.max(np.abs(sub[~np.eye(4, dtype=bool)]))
    assert largest > 0.9
    assert doc["largest_abs_correlation"] == pytest.approx(largest, abs=1e-12)
    assert doc["warning"] and "near-clones" in doc["warning"]
    assert "warning:" in err and "near-clones" in err


def test_no_warning_for_different_strategies(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    returns, r = _clones_csv(tmp_path / "clones.csv")
    doc, _out, err = _select(tmp_path, returns, 3, capsys)
    sub = np.corrcoef(r[:, [int(n[1:]) for n in doc["subset"]]], rowvar=False)
    assert np.max(np.abs(sub[~np.eye(3, dtype=bool)])) < 0.9
    assert doc["warning"] is None
    assert "warning" not in err
    assert doc["distinct_behaviours"] == _distinct_by_loop(r)
