"""Command-line habits (issue 25, part 4) and its silent results.

The silent results first, through the command line only (they ran against the code before
the fix): `evolve --out existing.csv` overwrote a data file, `feed --rate -5` ran at full
speed, `feed --publish tcp://0.0.0.0:...` bound every interface without CURVE. Then the
habits: --version, -v/-q anywhere, `--json -`, one meaning per option name (live's
--market-data), outputs never overwrite another kind of file, bad numbers of every
command's options refused in one line, and the installed console command.

Most run in-process through `run_engine.main` (fast); a few spawn the real command.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

import run_engine
from tests.helpers import daily_csv
from tests.live_procs import free_port

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--ticks", "3000", "--n-symbols", "2", "--device", "cpu"]


def _main(argv: list[str]) -> int:
    try:
        return run_engine.main(argv)
    except SystemExit as exc:  # argparse: usage and one error line
        return int(exc.code or 0)


def _error_line(err: str) -> str:
    """The one line of a user error; fails on none, several, or a traceback."""
    lines = [ln for ln in err.splitlines() if "error" in ln]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# --- the silent results -------------------------------------------------------------------

def test_evolve_out_never_overwrites_a_data_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = daily_csv(tmp_path / "existing.csv", 120, seed=4)
    before = data.read_bytes()
    rc = _main(["evolve", "--data", str(data), "--stocks", "3", "--train-days", "60",
                "--test-days", "20", "--population", "20", "--generations", "1",
                "--device", "cpu", "--quiet", "--out", str(data)])
    line = _error_line(capsys.readouterr().err)
    assert rc == 2 and "--out" in line and "not a strategy file" in line
    assert data.read_bytes() == before  # the data file is intact


def test_feed_negative_rate_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    rc = _main(["feed", "--publish", f"tcp://127.0.0.1:{free_port()}", "--rate", "-5",
                "--wait", "0.2", *SMALL[:4]])
    line = _error_line(capsys.readouterr().err)
    assert rc == 2 and "--rate" in line  # before: it ran (at full speed) or timed out


@pytest.mark.parametrize("rate", ["nan", "inf", "-0.5"])
def test_feed_non_finite_rate_is_an_error(rate: str, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    rc = _main(["feed", "--publish", f"tcp://127.0.0.1:{free_port()}", "--rate", rate,
                "--wait", "0.2"])
    assert rc == 2 and "--rate" in _error_line(capsys.readouterr().err)


@pytest.mark.parametrize("endpoint", ["tcp://0.0.0.0:{port}", "tcp://*:{port}"])
def test_feed_follows_lives_rule_for_remote_endpoints(
        endpoint: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = _main(["feed", "--publish", endpoint.format(port=free_port()), "--wait", "0.2",
                *SMALL[:4]])
    line = _error_line(capsys.readouterr().err)
    assert rc == 2 and "loopback" in line and "--curve" in line


def test_feed_allow_remote_opts_in(capsys: pytest.CaptureFixture[str]) -> None:
    """With --allow-remote the bind goes ahead (it then waits for a subscriber, here in
    vain: the error is that one, not the endpoint's)."""
    rc = _main(["feed", "--publish", f"tcp://0.0.0.0:{free_port()}", "--allow-remote",
                "--wait", "0.2", *SMALL[:4]])
    line = _error_line(capsys.readouterr().err)
    assert rc == 2 and "loopback" not in line


# --- habits ------------------------------------------------------------------------------

def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(["--version"]) == 0
    out = capsys.readouterr().out.split()
    assert out[0] == "run_engine.py" and out[1][0].isdigit()


@pytest.mark.parametrize(("argv", "verbose", "quiet"), [
    (["-v", "replay"], True, False), (["replay", "-v"], True, False),
    (["-q", "replay"], False, True), (["replay", "--quiet"], False, True),
    (["replay", "--ticks", "10", "-q", "--seed", "3"], False, True),
    (["replay"], False, False),
])
def test_verbosity_anywhere_on_the_line(argv: list[str], verbose: bool, quiet: bool) -> None:
    args = run_engine.build_parser("replay").parse_args(argv)
    assert (args.verbose, args.quiet) == (verbose, quiet)


def test_quiet_drops_progress_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                    ) -> None:
    argv = ["replay", "--ticks", "300000", "--n-symbols", "2", "--device", "cpu"]
    assert _main(argv) == 0
    assert "... " in capsys.readouterr().err  # progress every 100k ticks
    assert _main(["-q", *argv]) == 0
    assert "... " not in capsys.readouterr().err


def test_json_dash_writes_json_to_stdout_and_the_summary_to_stderr(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert _main(["replay", *SMALL, "--json", "-"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["ticks"] == 3000 and "replay of" in captured.err
    assert not (tmp_path / "-").exists()


def test_json_never_overwrites_a_file_that_is_not_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = daily_csv(tmp_path / "d.csv", 30, seed=1)
    before = data.read_bytes()
    assert _main(["replay", *SMALL, "--json", str(data)]) == 2
    assert "not a JSON results file" in _error_line(capsys.readouterr().err)
    assert data.read_bytes() == before
    strategy = tmp_path / "best.json"  # JSON, but evolve's strategy file: not results
    strategy.write_text('{"format": "gp-trading-strategy", "version": 1}')
    assert _main(["replay", *SMALL, "--json", str(strategy)]) == 2
    assert "not a JSON results file" in _error_line(capsys.readouterr().err)
    assert json.loads(strategy.read_text())["format"] == "gp-trading-strategy"
    old = tmp_path / "old.json"
    old.write_text('{"a": 1}')  # its own kind: replaced
    assert _main(["replay", *SMALL, "--json", str(old)]) == 0
    assert json.loads(old.read_text())["ticks"] == 3000


@pytest.mark.parametrize(("argv", "option"), [
    (["price", "--generate", "8", "--device", "cpu", "--plot", "{csv}"], "--plot"),
    (["select", "--returns", "{csv}", "--plot", "{csv}"], "--plot"),
    (["evolve", "--out", "{json}", "--data", "{csv}"], "--out"),
    (["evolve", "--out", "{tmp}/b.json", "--png", "{csv}", "--data", "{csv}"], "--png"),
    (["evolve", "--out", "{tmp}/b.json", "--returns-out", "{csv}", "--data", "{csv}"],
     "--returns-out"),
    (["feed", "--source", "binance", "--symbols", "btcusdt", "--publish",
      "tcp://127.0.0.1:1", "--record", "{csv}"], "--record"),
])
def test_no_output_overwrites_another_kind_of_file(
        argv: list[str], option: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    csv = daily_csv(tmp_path / "d.csv", 30, seed=1)
    other_json = tmp_path / "other.json"
    other_json.write_text('{"not": "a strategy"}')
    before = csv.read_bytes(), other_json.read_bytes()
    argv = [a.format(csv=csv, json=other_json, tmp=tmp_path) for a in argv]
    assert _main(argv) == 2
    line = _error_line(capsys.readouterr().err)
    assert option in line and "never overwritten" in line, line
    assert (csv.read_bytes(), other_json.read_bytes()) == before


def test_live_market_data_is_one_name_and_ticks_a_deprecated_alias(
        capsys: pytest.CaptureFixture[str]) -> None:
    p = run_engine.build_parser("live")
    base = ["live", "--orders", "tcp://127.0.0.1:1", "--journal", "j.db"]
    for flag in ("--market-data", "--ticks-endpoint"):
        assert p.parse_args([*base, flag, "tcp://127.0.0.1:2"]).ticks == "tcp://127.0.0.1:2"
    assert "deprecated" not in capsys.readouterr().err
    assert p.parse_args([*base, "--ticks", "tcp://127.0.0.1:2"]).ticks == "tcp://127.0.0.1:2"
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and "--ticks is deprecated, use --market-data" in warning[0]
    text = p.command_parsers["live"].format_help()  # type: ignore[attr-defined]
    assert "--market-data" in text and "--ticks " not in text and "--ticks\n" not in text


def test_live_without_market_data_is_one_line(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    rc = _main(["live", "--orders", "tcp://127.0.0.1:1", "--journal", str(tmp_path / "j.db")])
    assert rc == 2 and "--market-data" in _error_line(capsys.readouterr().err)


# --- every command's numeric options: bad values are one line, exit 2 ---------------------

BAD_NUMBERS = {int: ["-3", "99999999999999999999999", "2.5", "abc", ""],
               float: ["-1.5", "nan", "inf", "-inf", "abc", ""]}
#: the command line each command needs besides the option tried
BASE = {
    "replay": [], "evolve": ["--out", "{tmp}/b.json"], "price": ["--generate", "4"],
    "live": ["--market-data", "tcp://127.0.0.1:1", "--orders", "tcp://127.0.0.1:2",
             "--journal", "{tmp}/j.db"],
    "feed": ["--publish", "tcp://127.0.0.1:1"], "timeseries": ["--data", "{tmp}/none.csv"],
    "select": ["--returns", "{tmp}/none.csv"], "ising": [],
}


def _numeric_cases() -> list[tuple[str, str, str]]:
    from engine.settings.flags import NEGATIVE_OK

    cases = []
    for command in BASE:
        sub = run_engine.build_parser(command).command_parsers[command]  # type: ignore[attr-defined]
        for action in sub._actions:
            if (action.type not in (int, float) or not action.option_strings
                    or action.help == argparse.SUPPRESS):  # a deprecated alias: its new name
                continue
            for bad in BAD_NUMBERS[action.type]:
                negative_ok = (action.dest in NEGATIVE_OK
                               or f"{action.dest}@{command}" in NEGATIVE_OK)
                if bad.startswith("-") and bad != "-inf" and negative_ok:
                    continue
                cases.append((command, action.option_strings[0], bad))
    return cases


NUMERIC_CASES = _numeric_cases()


@pytest.mark.parametrize(("command", "option", "bad"), NUMERIC_CASES,
                         ids=[f"{c}{o}={b}" for c, o, b in NUMERIC_CASES])
def test_bad_number_of_every_option_is_one_line_exit_2(
        command: str, option: str, bad: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    argv = [command, *(a.format(tmp=tmp_path) for a in BASE[command]), f"{option}={bad}"]
    rc = _main(argv)
    err = capsys.readouterr().err
    assert rc == 2, (argv, err)
    assert option in _error_line(err), err
    assert not list(tmp_path.iterdir()), "a refused command wrote nothing"


def test_the_numeric_table_covers_every_command() -> None:
    assert {c for c, _, _ in NUMERIC_CASES} == set(BASE)
    assert len(NUMERIC_CASES) > 250


# --- help and the console command ---------------------------------------------------------

def test_help_shows_every_default_including_zero() -> None:
    fmt = run_engine.HelpFormatter("x")
    parser = run_engine.build_parser()
    for name, sub in parser.command_parsers.items():  # type: ignore[attr-defined]
        for action in sub._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS:
                continue
            d = action.default
            if d is None or d is False or d == [] or action.nargs == 0:
                continue
            assert "default" in fmt._get_help_string(action), (name, action.option_strings)
    rate = next(a for a in parser.command_parsers["feed"]._actions  # type: ignore[attr-defined]
                if a.dest == "rate")
    assert "(default: %(default)s)" in fmt._get_help_string(rate)  # 0.0 was hidden


def test_console_command_is_installed() -> None:
    """`pip install -e .` installs `gte`, the same command line as run_engine.py."""
    exe = Path(sys.executable).parent / "gte"
    if not exe.exists():
        pytest.skip("the console command is not installed here: pip install -e .")
    r = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("gte ")
    r = subprocess.run([str(exe), "feed", "--publish", "tcp://127.0.0.1:1", "--rate", "-1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip() == "error: --rate must be >= 0, got -1.0"
