"""Dependencies that fit: the base install is lean, every dependency the project names is
pinned in constraints.txt (the versions CI tested), and a command whose optional part is
missing says which extra to install."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_constraints_pin_every_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {_name(r) for r in project["dependencies"]}
    for reqs in project["optional-dependencies"].values():
        names |= {_name(r) for r in reqs}
    names.discard(project["name"])
    pinned = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pinned[name.lower().replace("_", "-")] = version
    assert not [n for n in names if n not in pinned], "unpinned"
    assert all(re.fullmatch(r"[\w.+!-]+", v) for v in pinned.values())
    assert "-c constraints.txt" in (ROOT / ".ci" / "run").read_text()


def test_base_install_is_lean() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {_name(r) for r in project["dependencies"]}
    assert not base & {"dask", "distributed", "bokeh", "pandas", "pyarrow"}
    extras = project["optional-dependencies"]
    assert {"islands", "report", "parquet", "dev"} <= set(extras)
    assert any("islands" in r and "report" in r and "parquet" in r for r in extras["dev"])


def _without(module: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    code = (f"import sys; sys.modules[{module!r}] = None\n"
            "import run_engine\n"
            f"sys.exit(run_engine.main({argv!r}))\n")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_a_missing_extra_is_one_line_naming_it(tmp_path: Path) -> None:
    from tests.helpers import daily_csv

    data = daily_csv(tmp_path / "d.csv", 40, seed=1)
    pq = tmp_path / "t.parquet"
    pq.write_bytes(b"PAR1")
    for module, extra, argv in (
        ("distributed", "islands",
         ["evolve", "--data", str(data), "--stocks", "2", "--train-days", "20",
          "--test-days", "10", "--population", "8", "--generations", "1", "--islands", "2",
          "--device", "cpu", "--out", str(tmp_path / "b.json")]),
        ("pyarrow", "parquet", ["replay", "--data", str(pq), "--device", "cpu"]),
    ):
        done = _without(module, argv)
        assert done.returncode == 2, done.stderr[-1500:]
        lines = [x for x in done.stderr.splitlines() if x.startswith("error")]
        assert len(lines) == 1 and f"[{extra}]" in lines[0], done.stderr[-1500:]
