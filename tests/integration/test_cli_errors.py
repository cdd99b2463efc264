"""Every bad option is one line on stderr and exit code 2, found before any work is wasted.

One parametrized test over the whole class of bad command lines, run in-process through
`run_engine.main` (fast: the synthetic market at a few thousand ticks, tiny files).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pytest

import run_engine

SMALL = ["--ticks", "3000", "--n-symbols", "2", "--device", "cpu"]


def _daily_csv(path: Path) -> Path:
    """Sixty business days of two symbols in the shared S&P file's format."""
    rng = np.random.default_rng(3)
    days = np.busday_offset("2015-01-02", np.arange(60), roll="forward")
    rows = ["date,open,high,low,close,volume,Name"]
    for sym in ("AAA", "BBB"):
        p = 50.0
        for d in days:
            p *= math.exp(rng.normal(0, 0.01))
            rows.append(f"{d},{p:.2f},{p * 1.01:.2f},{p * 0.99:.2f},{p:.2f},1000,{sym}")
    path.write_text("\n".join(rows) + "\n")
    return path


def _cases(tmp: Path) -> list[tuple[list[str], str]]:
    """(argv, a word the one-line error must contain)."""
    daily = _daily_csv(tmp / "daily.csv")
    a_file = tmp / "plain.txt"
    a_file.write_text("x")
    neg = tmp / "neg.toml"
    neg.write_text("[broker]\ncash_per_symbol = -5.0\n")
    syntax = tmp / "syntax.py"
    syntax.write_text("def make_strategy(:\n")
    raises = tmp / "raises.py"
    raises.write_text("def make_strategy():\n    raise RuntimeError('no model file')\n")
    binary = tmp / "chain.csv"
    binary.write_bytes(bytes(range(256)) * 4)
    return [
        (["replay", "--bar-seconds", "0", *SMALL], "bar-seconds"),
        (["replay", "--bar-seconds", "-60", *SMALL], "bar-seconds"),
        (["replay", "--bar-seconds", "nan", *SMALL], "bar-seconds"),
        (["replay", "--session", "foo", *SMALL], "session"),
        (["replay", "--session", "16:00,09:30,10:00", *SMALL], "session"),
        (["replay", "--session", "09:30,25:00,26:00", *SMALL], "session"),
        (["replay", "--commission", "-1", *SMALL], "commission"),
        (["replay", "--commission", "nan", *SMALL], "commission"),
        (["replay", "--slippage-bps", "inf", *SMALL], "slippage"),
        (["replay", "--config", str(neg), *SMALL], "cash_per_symbol"),
        (["replay", "--out", str(a_file / "sub"), *SMALL], "--out"),
        (["replay", "--json", str(a_file / "r.json"), *SMALL], "--json"),
        (["replay", "--strategy", str(syntax), *SMALL], "syntax"),
        (["replay", "--strategy", str(raises), *SMALL], "no model file"),
        (["replay", "--data", str(daily), "--start", "2015-03-01", "--end", "2015-02-01"],
         "after"),
        (["replay", "--data", str(daily), "--start", "2020-01-01"], "no market data"),
        (["replay", "--data", str(daily), "--end", "2010-01-01"], "no market data"),
        (["replay", "--symbols", "AAA", *SMALL], "--symbols"),
        (["replay", "--start", "2015-01-01", *SMALL], "--start"),
        (["replay", "--bogus", *SMALL], "replay"),
        (["evolve", "--elite", "500", "--population", "50", "--out", str(tmp / "b.json"),
          "--data", str(daily)], "--elite"),
        (["evolve", "--data", str(daily)], "--out"),
        (["evolve", "--out", str(a_file / "b.json"), "--data", str(daily)], "--out"),
        (["price", "--chain", str(binary)], str(binary)),
        (["live", "--ticks", "inproc://t", "--orders", "inproc://o", "--journal",
          str(a_file / "j.db"), "--device", "cpu"], "journal"),
        (["price", "--generate", "8", "--iv", "--plot", str(a_file / "s.png"),
          "--device", "cpu"], "--plot"),
        # a mistyped journal must not be created and "reset" while the real one stays killed
        (["journal", "--journal", str(tmp / "typo.db"), "--reset-kill-switch"],
         "no such journal"),
    ]


N_CASES = 27


@pytest.mark.parametrize("i", range(N_CASES))
def test_bad_option_is_one_line_and_exit_2(
        i: int, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cases = _cases(tmp_path)
    assert len(cases) == N_CASES
    argv, word = cases[i]
    try:
        rc = run_engine.main(argv)
    except SystemExit as exc:  # argparse: the command's usage and one error line
        rc = exc.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert rc == 2, (argv, err)
    assert "Traceback" not in err
    lines = [ln for ln in err.strip().splitlines() if "error" in ln]
    assert len(lines) == 1, err
    assert word in lines[0], (word, lines[0])
    if argv[0] == "replay" and "--bogus" in argv:
        assert "usage: run_engine.py replay" in err
    assert not (tmp_path / "best.json").exists()


def test_every_option_has_help_with_its_default() -> None:
    parser = run_engine.build_parser()
    fmt = run_engine.HelpFormatter("x")
    for name in ("replay", "evolve", "price", "live", "feed"):
        sub: argparse.ArgumentParser = parser.command_parsers[name]  # type: ignore[attr-defined]
        for action in sub._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS:
                continue
            assert action.help, (name, action.option_strings)
            text = fmt._get_help_string(action)
            if action.default not in (None, False) and action.nargs != 0:
                assert "default" in text, (name, action.option_strings, text)


def test_top_level_help_speaks_to_users(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_engine.main(["--help"])
    out = capsys.readouterr().out
    assert "backtest" in out and "examples:" in out
    assert "No logic of its own" not in out


def test_price_says_how_many_rows_it_skipped_and_writes_no_unasked_plot(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    chain = tmp_path / "c.csv"
    rows = ["underlying,expiry,strike,right,bid,ask,spot,snapshot_time"]
    for k in (90, 95, 100, 105, 110):
        rows.append(f"X,2016-01-15,{k},C,{max(100 - k, 0) + 2:.2f},"
                    f"{max(100 - k, 0) + 2.5:.2f},100,2015-12-24T16:00:00")
    rows += ["X,notadate,100,C,1,2,100,", "X,2016-01-15,-5,C,1,2,100,",
             "X,2016-01-15,100,Z,1,2,100,"]
    chain.write_text("\n".join(rows) + "\n")
    assert run_engine.main(["price", "--chain", str(chain), "--iv", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "rows skipped as malformed: 3" in out
    assert not list(tmp_path.glob("*.png"))


@pytest.mark.parametrize("value", ["thomas", "", "PCR"])
def test_bad_gpu_setting_is_one_line_and_exit_2(
        value: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU_FD_SOLVER with a value it cannot take: the user's one-line error (exit 2), not
    an "internal error" (exit 1) as when the setting's ValueError reached run_engine."""
    from gpu.device import cuda_present

    if not cuda_present():
        pytest.skip("the setting is read where a CUDA pricer starts: needs CUDA or the simulator")
    monkeypatch.setenv("GPU_FD_SOLVER", value)
    rc = run_engine.main(["price", "--generate", "4", "--device", "cuda", "--price-steps", "20",
                          "--time-steps", "2"])
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = [ln for ln in err.strip().splitlines() if "error" in ln]
    assert lines == [f"error: GPU_FD_SOLVER must be one of lanes, pcr, got {value!r}"], err


def test_price_first_run_work_warms_the_plotting_only_where_a_smile_is_drawn(
        tmp_path: Path) -> None:
    from engine.commands import price

    parser = run_engine.build_parser("price", "run_engine.py")
    base = ["price", "--generate", "4"]
    assert price.first_run_work(parser.parse_args(base)) is None  # no --iv: no smile
    assert price.first_run_work(parser.parse_args([*base, "--iv"])) is None  # nowhere to draw
    assert price.first_run_work(parser.parse_args([*base, "--iv", "--json", "-"])) is None
    job = price.first_run_work(parser.parse_args([*base, "--iv", "--json",
                                                   str(tmp_path / "p.json")]))
    assert job is not None
    job()
    assert list(tmp_path.iterdir()) == []  # drawn in memory: no file written
    assert price.first_run_work(parser.parse_args([*base, "--iv", "--plot",
                                                   str(tmp_path / "s.png")])) is not None
