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


# --- every output path of every command -------------------------------------------------

#: what each command needs besides the output tried ({csv}: daily bars, {returns}: a
#: returns CSV, {tmp}: the test's folder), and its path options that write (or, for the
#: journal command, read) a file or a folder
OUTPUT_BASE = {
    "replay": [], "evolve": ["--data", "{csv}", "--out", "{tmp}/b.json"],
    "price": ["--generate", "4", "--device", "cpu"],
    "select": ["--returns", "{returns}"], "timeseries": ["--data", "{csv}"], "ising": [],
    "keys": ["--out", "{tmp}/keys"], "journal": ["--journal", "{tmp}/none.db"],
    "live": ["--market-data", "tcp://127.0.0.1:1", "--orders", "tcp://127.0.0.1:2",
             "--journal", "{tmp}/j.db"],
    "feed": ["--source", "binance", "--symbols", "btcusdt", "--publish", "tcp://127.0.0.1:1"],
}
OUTPUT_DESTS = {"json", "out", "png", "returns_out", "plot", "record", "status_file",
                "journal"}
#: the word an error line names, where it is not the option itself
SAYS = {("keys", "--out"): "keys", ("journal", "--journal"): "journal",
        ("live", "--journal"): "journal"}


def _output_options() -> list[tuple[str, str]]:
    cases = []
    for command in OUTPUT_BASE:
        sub = run_engine.build_parser(command).command_parsers[command]  # type: ignore[attr-defined]
        for action in sub._actions:
            if action.dest in OUTPUT_DESTS and action.option_strings and action.nargs != 0:
                cases.append((command, action.option_strings[0]))
    return cases


OUTPUT_OPTIONS = _output_options()


def test_the_output_table_covers_every_command() -> None:
    assert {c for c, _ in OUTPUT_OPTIONS} == set(OUTPUT_BASE)
    assert len(OUTPUT_OPTIONS) >= 20


def _inputs(tmp_path: Path) -> dict[str, str]:
    from tests.helpers import daily_csv

    inputs = tmp_path / "inputs"
    inputs.mkdir()
    csv = daily_csv(inputs / "d.csv", 30, seed=1)
    returns = inputs / "r.csv"
    returns.write_text("date,a,b\n" + "".join(
        f"2020-01-{d:02d},{(-1) ** d * 0.01 * d},{0.002 * d}\n" for d in range(1, 21)))
    return {"csv": str(csv), "returns": str(returns), "tmp": str(tmp_path)}


@pytest.mark.parametrize("where", ["under_a_file", "proc"])
@pytest.mark.parametrize(("command", "option"), OUTPUT_OPTIONS,
                         ids=[f"{c}{o}" for c, o in OUTPUT_OPTIONS])
def test_every_output_path_that_takes_no_file_is_one_line_before_the_work(
        command: str, option: str, where: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A path under a regular file (no folder can be made there), and a procfs path that
    the permission bits let root write: exit 2, one line naming the option, nothing
    written, before any simulation, evolution, pricing or connection."""
    if where == "proc" and not PSEUDO_FOLDERS:
        pytest.skip("no /proc or /sys here")
    monkeypatch.chdir(tmp_path)
    fill = _inputs(tmp_path)
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    root = blocker if where == "under_a_file" else PSEUDO_FOLDERS[0]
    argv = [command, *(a.format(**fill) for a in OUTPUT_BASE[command])]
    if option in argv:  # the base's own value of it (evolve --out, live --journal)
        i = argv.index(option)
        del argv[i:i + 2]
    argv += [option, str(root / "x" / "out.file")]
    try:
        rc = run_engine.main(argv)
    except SystemExit as exc:
        rc = int(exc.code or 0)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2, (argv, err)
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert SAYS.get((command, option), option) in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "inputs"]
