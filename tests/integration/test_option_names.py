"""One meaning per option name across every command (issue 25, part 4).

Every command's argparse parser is built in-process, as run_engine.py builds it. An option
name taken by two or more commands must be in SHARED, the names that truly mean the same
thing wherever they appear (each with that one meaning, read from the help texts), and
must set the same dest everywhere. Before the renames this failed on `--session` (replay's
trading schedule, feed's stream id), `--rate` (feed's messages per second, price's
risk-free interest rate) and `--max-seconds` (live and feed stop after that long; select
refuses a search estimated to take longer). The old spellings stay as deprecated aliases
(hidden from help, one warning line on stderr), which the first test leaves out: they are
tested below.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import pytest

import run_engine
from engine.settings.flags import _DeprecatedAlias

#: option names used by several commands with one meaning everywhere
SHARED: dict[str, str] = {
    "-h": "show the command's help", "--help": "show the command's help",
    "-v": "debug logging", "--verbose": "debug logging",
    "-q": "warnings and errors only", "--quiet": "warnings and errors only",
    "--json": "write the results as JSON (- for stdout)",
    "--config": "engine TOML config file",
    "--data": "market data files or folders to read",
    "--symbols": "comma-separated symbols to keep (or subscribe to)",
    "--start": "first date YYYY-MM-DD of the data", "--end": "last date YYYY-MM-DD",
    "--device": "where GPU-capable work runs: auto, cpu or cuda",
    "--seed": "random seed (Philox key for ising)",
    "--out": "where the command's outputs are written (folder, or evolve's strategy file)",
    "--plot": "PNG file of the command's plot",
    "--strategy": "built-in strategy name or strategy file",
    "--ticks": "synthetic market: number of ticks",
    "--n-symbols": "synthetic market: number of symbols",
    "--quotes": "also read LEAN quote ticks",
    "--commission": "$ per trade", "--slippage-bps": "fill price moved against, bps",
    "--walk-forward": "TRAIN,TEST(,STEP) trading days of walk-forward evolution",
    "--anchored": "walk-forward training windows grow from the first day",
    "--generations": "GP populations evaluated", "--population": "GP individuals per generation",
    "--ensemble": "vote of the top K rules", "--stocks": "stocks to evolve over",
    "--journal": "the live daemon's SQLite journal",
    "--curve": "CURVE keys folder (from `keys`)",
    "--allow-remote": "allow a tcp endpoint beyond loopback without --curve",
    "--max-seconds": "stop after this long (0 = until SIGTERM)",
}


def _options(include_deprecated: bool = False) -> dict[str, dict[str, argparse.Action]]:
    """option string -> {command: action}, every command's parser built as run_engine's."""
    parser = run_engine.build_parser()
    found: dict[str, dict[str, argparse.Action]] = defaultdict(dict)
    for command, sub in parser.command_parsers.items():  # type: ignore[attr-defined]
        for action in sub._actions:
            if isinstance(action, _DeprecatedAlias) and not include_deprecated:
                continue
            for flag in action.option_strings:
                found[flag][command] = action
    return found


def test_every_command_is_checked() -> None:
    parser = run_engine.build_parser()
    assert set(parser.command_parsers) == set(run_engine.COMMANDS) == {  # type: ignore[attr-defined]
        "replay", "live", "journal", "keys", "feed", "evolve", "timeseries", "select",
        "ising", "price"}


def test_an_option_name_has_one_meaning_across_commands() -> None:
    options = _options()
    clashes = {flag: sorted(by) for flag, by in options.items()
               if len(by) > 1 and flag not in SHARED}
    assert not clashes, f"option names used by several commands, not in SHARED: {clashes}"
    for flag, by in options.items():
        dests = {cmd: a.dest for cmd, a in by.items()}
        assert len(set(dests.values())) == 1, f"{flag} sets different dests: {dests}"


def test_the_shared_list_names_only_shared_options() -> None:
    options = _options()
    assert {f for f in SHARED if len(options.get(f, {})) < 2} == set()


@pytest.mark.parametrize(("flag", "command"), [
    ("--session", "replay"), ("--feed-session", "feed"),
    ("--rate", "feed"), ("--interest-rate", "price"),
    ("--max-seconds", "live"), ("--max-seconds", "feed"),
    ("--max-search-seconds", "select"),
])
def test_the_renamed_options_belong_where_they_mean_it(flag: str, command: str) -> None:
    by = _options()[flag]
    assert command in by
    if flag != "--max-seconds":
        assert set(by) == {command}


# --- the old spellings: deprecated aliases with one warning line ---------------------------

ALIASES = [  # command, old, new, value, dest, parsed, rest of a parse-able line
    ("feed", "--session", "--feed-session", "4", "feed_session", 4,
     ["--publish", "tcp://127.0.0.1:1"]),
    ("price", "--rate", "--interest-rate", "0.02", "interest_rate", 0.02, ["--generate", "4"]),
    ("select", "--max-seconds", "--max-search-seconds", "5", "max_search_seconds", 5.0,
     ["--returns", "r.csv"]),
]


@pytest.mark.parametrize(("command", "old", "new", "value", "dest", "parsed", "rest"), ALIASES,
                         ids=[f"{c}{o}" for c, o, *_ in ALIASES])
def test_an_old_spelling_still_works_with_one_warning_line(
        command: str, old: str, new: str, value: str, dest: str, parsed: object,
        rest: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    p = run_engine.build_parser(command)
    assert getattr(p.parse_args([command, *rest, new, value]), dest) == parsed
    assert capsys.readouterr().err == ""
    assert getattr(p.parse_args([command, *rest, old, value]), dest) == parsed
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"warning: {old} is deprecated, use {new} ")
    default = p.parse_args([command, *rest])
    assert getattr(default, dest) == p.command_parsers[command].get_default(dest)  # type: ignore[attr-defined]
    text = p.command_parsers[command].format_help()  # type: ignore[attr-defined]
    assert new in text and f"{old} " not in text and f"{old}\n" not in text


def _run(argv: list[str]) -> int:
    try:
        return run_engine.main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def test_feed_session_alias_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    """Through main: the warning, then the command's own one-line refusal (a non-loopback
    endpoint without --curve), nothing bound."""
    rc = _run(["feed", "--publish", "tcp://0.0.0.0:1", "--session", "4"])
    lines = capsys.readouterr().err.splitlines()
    assert rc == 2 and len(lines) == 2, lines
    assert lines[0].startswith("warning: --session is deprecated, use --feed-session")
    assert lines[1].startswith("error:")


def test_select_max_seconds_alias_is_still_checked(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    rc = _run(["select", "--returns", str(tmp_path / "r.csv"), "--max-seconds", "0"])
    lines = capsys.readouterr().err.splitlines()
    assert rc == 2 and len(lines) == 2, lines
    assert lines[0].startswith("warning: --max-seconds is deprecated")
    assert lines[1] == "error: --max-search-seconds must be positive, got 0.0"


def test_price_rate_alias_is_still_checked(capsys: pytest.CaptureFixture[str]) -> None:
    rc = _run(["price", "--generate", "4", "--device", "cpu", "--rate", "nan"])
    lines = capsys.readouterr().err.splitlines()
    assert rc == 2 and len(lines) == 2, lines
    assert lines[0].startswith("warning: --rate is deprecated, use --interest-rate")
    assert "--interest-rate" in lines[1] and "finite" in lines[1]
