"""Output folders are proven writable before the work: a file is made and removed in
them. The permission bits alone said yes to root for /proc and /sys, and the run ended
with an internal error once it had its results (`evolve --png /proc/x.png`)."""

from __future__ import annotations

from pathlib import Path

import pytest

import run_engine
from engine.errors import UserError
from engine.reporting.outputs import check_writable_dir, check_writable_file

#: folders whose permission bits let root write, where no file can be made (procfs, sysfs)
PSEUDO_FOLDERS = [p for p in (Path("/proc"), Path("/sys/kernel")) if p.is_dir()]


@pytest.mark.parametrize("folder", PSEUDO_FOLDERS, ids=str)
def test_a_folder_that_takes_no_file_is_one_line(folder: Path) -> None:
    for check, path in ((check_writable_dir, folder), (check_writable_file, folder / "x.png")):
        with pytest.raises(UserError, match="not writable") as err:
            check(path, "--out")
        assert "\n" not in str(err.value) and str(err.value).startswith("--out ")


def test_a_writable_folder_and_file_pass_and_are_left_as_they_were(tmp_path: Path) -> None:
    out = tmp_path / "new" / "deeper"
    check_writable_dir(out, "--out")
    assert out.is_dir() and list(out.iterdir()) == []  # the probe file is gone
    kept = out / "r.json"
    kept.write_text("{}")
    before = kept.stat()
    check_writable_file(kept, "--json")
    assert kept.read_text() == "{}" and kept.stat().st_mtime_ns == before.st_mtime_ns
    assert sorted(p.name for p in out.iterdir()) == ["r.json"]


@pytest.mark.skipif(not PSEUDO_FOLDERS, reason="no /proc or /sys here")
def test_commands_refuse_such_outputs_before_the_work(
        shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = PSEUDO_FOLDERS[0]
    daily = str(shared_data / "sp500_5yr_daily")
    for argv, option in (
            (["evolve", "--data", daily, "--stocks", "2", "--train-days", "50",
              "--test-days", "10", "--population", "10", "--generations", "1",
              "--device", "cpu", "--out", str(tmp_path / "x.json"),
              "--png", str(folder / "x.png")], "--png"),
            (["replay", "--out", str(folder)], "--out")):
        assert run_engine.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {option} "), err
    assert not (tmp_path / "x.json").exists()  # nothing ran
