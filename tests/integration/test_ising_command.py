"""`run_engine.py ising`: JSON contract, plots, reproducibility, kernel independence, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import run_engine
from engine.commands.ising import parse_temps
from engine.errors import UserError

KEYS = {
    "L", "T", "energy", "energy_err", "magnetization", "magnetization_err", "binder", "binder_err",
}


def run(tmp_path: Path, *extra: str, name: str = "out.json") -> dict:
    path = tmp_path / name
    rc = run_engine.main(["ising", "--device", "cpu", "--json", str(path), *extra])
    assert rc == 0
    return json.loads(path.read_text())


def test_json_contract_plots_and_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(
        tmp_path, "--size", "8", "16", "--temps", "2.1:2.4:0.1", "--sweeps", "640",
        "--replicas", "2", "--out", str(tmp_path / "plots"),
    )
    assert len(out["results"]) == 2 * 4
    for r in out["results"]:
        assert set(r) >= KEYS
        assert r["energy_err"] > 0 and r["magnetization_err"] > 0 and r["tau_magnetization"] >= 0.5
        assert -2.0 <= r["energy"] <= 0.0 and 0.0 <= r["magnetization"] <= 1.0
    assert {"tc", "tc_err", "flips_per_ns"} <= set(out)
    assert out["flips_per_ns"] > 0
    for png in ("binder.png", "magnetization.png"):
        assert (tmp_path / "plots" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    err = capsys.readouterr().err
    assert "sweeps" in err  # the progress bar


def test_same_seed_same_numbers_and_kernels_agree(tmp_path: Path) -> None:
    """Multi-spin and int8 lattices are identical, and so are bit-plane and its int8
    reference (what auto runs), so every number agrees exactly within each pair."""
    args = ("--size", "32", "--temps", "2.2,2.3", "--sweeps", "320", "--seed", "5")
    a = run(tmp_path, *args, "--kernel", "multispin", name="a.json")
    b = run(tmp_path, *args, "--kernel", "int8", name="b.json")
    c = run(tmp_path, *args, "--kernel", "auto", name="c.json")
    for key in ("energy", "magnetization", "binder", "binder_err"):
        assert [r[key] for r in a["results"]] == [r[key] for r in b["results"]]
    assert c["kernels"] == {"bitplane-int8": [32]}
    big = ("--size", "128", "--temps", "2.3", "--sweeps", "40", "--seed", "5")
    e = run(tmp_path, *big, "--kernel", "bitplane", name="e.json")
    f = run(tmp_path, *big, "--kernel", "bitplane-int8", name="f.json")
    for key in ("energy", "magnetization", "binder", "binder_err"):
        assert [r[key] for r in e["results"]] == [r[key] for r in f["results"]]
    d = run(tmp_path, *args[:-1], "6", name="d.json")
    assert [r["energy"] for r in d["results"]] != [r["energy"] for r in a["results"]]


def test_3d_runs(tmp_path: Path) -> None:
    out = run(tmp_path, "--dim", "3", "--size", "4", "6", "--temps", "4.0,5.0", "--sweeps", "320")
    assert out["dim"] == 3 and len(out["results"]) == 4
    low, high = out["results"][0], out["results"][1]
    assert low["magnetization"] > high["magnetization"]


def test_temps_parsing() -> None:
    assert parse_temps("2.2:2.24:0.01") == [2.2, 2.21, 2.22, 2.23, 2.24]
    assert parse_temps("1,2.5") == [1.0, 2.5]


BAD = [
    ["--size", "7"], ["--size", "0"], ["--size", "8", "8"], ["--temps", "2:1:0.1"],
    ["--temps", "a:b:c"], ["--temps", "2.0:2.1:-1"], ["--temps=-1,2"], ["--temps", "nan"],
    ["--temps", ""], ["--sweeps", "5"], ["--therm", "-1"], ["--replicas", "0"],
    ["--kernel", "multispin", "--size", "16"], ["--dim", "3", "--kernel", "multispin"],
    ["--kernel", "bitplane", "--size", "64"],
    ["--field", "inf"], ["--seed", "-1"], ["--temps", "1:100000:0.001"],
]


@pytest.mark.parametrize("case", range(12))
def test_bad_input_is_one_line_and_exit_2(case: int, capsys: pytest.CaptureFixture[str]) -> None:
    """Seeded fuzz: one or two bad options mixed into an otherwise valid command line."""
    rng = np.random.default_rng(case)
    picks = [BAD[i] for i in rng.choice(len(BAD), size=1 + case % 2, replace=False)]
    argv = ["ising", "--device", "cpu", "--size", "8", "--temps", "2.2,2.3", "--sweeps", "64"]
    for p in picks:
        argv += p
    assert run_engine.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")


def test_parse_temps_rejects_garbage() -> None:
    rng = np.random.default_rng(3)
    alphabet = list("0123456789.:,-e ax")
    for _ in range(200):
        text = "".join(rng.choice(alphabet, size=int(rng.integers(1, 10))))
        try:
            temps = parse_temps(text)
        except UserError:
            continue
        assert temps and all(t > 0 and np.isfinite(t) for t in temps)
