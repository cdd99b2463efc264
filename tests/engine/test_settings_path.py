"""One settings path (issue 28, item 1): built-in default < config file < flag given.

The two reproduced bugs first (they use only the command line, so they ran against the
code before the fix): `device = "cpu"` in a replay's TOML reached the engine as "auto"
(the flag's default was copied over it), `live` never read `cfg.device`, and `--fill
next-tick` on daily bars silently ran next-open. Then the precedence table over a sample
of keys of every section, the `[gpu]` table and its environment overrides, and the help.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import run_engine
from tests.helpers import daily_csv

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--ticks", "3000", "--n-symbols", "2"]


def _parse(*argv: str) -> argparse.Namespace:
    return run_engine.build_parser(argv[0]).parse_args(list(argv))


def _replay_config(*argv: str) -> Any:
    """The EngineConfig a `replay` command line hands the engine."""
    from engine.commands.replay import _config

    return _config(_parse("replay", *argv), None)


def _toml(tmp_path: Path, text: str, name: str = "c.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _no_gpu_env() -> dict[str, str]:
    """This process's environment without the CUDA simulator: `cuda` is then impossible
    on a machine without a GPU (the device check must say so)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _has_real_gpu() -> bool:
    code = "from gpu.device import cuda_present; print(cuda_present())"
    r = subprocess.run([sys.executable, "-c", code], env=_no_gpu_env(), cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    return r.stdout.strip() == "True"


# --- the reproduced bugs ------------------------------------------------------------------

def test_replay_device_from_the_file_reaches_the_engine(tmp_path: Path) -> None:
    cfg = _replay_config("--config", _toml(tmp_path, 'device = "cpu"\n'), *SMALL)
    assert cfg.device == "cpu"  # was "auto": --device's default replaced the file's


def test_replay_device_flag_still_wins_over_the_file(tmp_path: Path) -> None:
    cfg = _replay_config("--config", _toml(tmp_path, 'device = "cuda"\n'), "--device", "cpu",
                         *SMALL)
    assert cfg.device == "cpu"


@pytest.mark.slow
def test_live_reads_the_device_of_its_config(tmp_path: Path) -> None:
    """`device = "cuda"` in live's TOML on a machine without a GPU: one line, exit 2 (before
    the fix the daemon ignored the setting and ran on the CPU until --max-seconds)."""
    if _has_real_gpu():
        pytest.skip("needs a machine without a GPU: cuda is possible here")
    with socket.socket() as s1, socket.socket() as s2:
        s1.bind(("127.0.0.1", 0))
        s2.bind(("127.0.0.1", 0))
        ports = s1.getsockname()[1], s2.getsockname()[1]
    r = subprocess.run(
        [sys.executable, str(ROOT / "run_engine.py"), "live", "--ticks",
         f"tcp://127.0.0.1:{ports[0]}", "--orders", f"tcp://127.0.0.1:{ports[1]}",
         "--journal", str(tmp_path / "j.db"), "--max-seconds", "1",
         "--config", _toml(tmp_path, 'device = "cuda"\n')],
        env=_no_gpu_env(), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.returncode == 2, r.stderr
    assert len(errors) == 1 and "CUDA" in errors[0] and "Traceback" not in r.stderr
    assert "config file" in errors[0]  # the choice came from the file, not a flag


def test_fill_next_tick_on_daily_bars_is_an_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = daily_csv(tmp_path / "d.csv", 80, seed=2)
    rc = run_engine.main(["replay", "--data", str(data), "--fill", "next-tick",
                          "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2, err  # was 0: it ran next-open and the report named next-open
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "--fill next-tick" in lines[0] and "bars" in lines[0]


def test_fill_next_tick_from_the_file_on_daily_bars_names_the_key(tmp_path: Path) -> None:
    from engine.errors import UserError

    data = daily_csv(tmp_path / "d.csv", 80, seed=2)
    with pytest.raises(UserError, match="broker.fill next-tick"):
        _replay_config("--data", str(data),
                       "--config", _toml(tmp_path, '[broker]\nfill = "next-tick"\n'))


@pytest.mark.parametrize(("fill", "kind", "resolved"), [
    ("auto", "bars", "next-open"), ("auto", "ticks", "next-tick"),
    ("bar-close", "bars", "signal-close"), ("signal-close", "ticks", "signal-close"),
    ("next-open", "ticks", "next-open"), ("next-open", "bars", "next-open"),
])
def test_fill_is_resolved_once_against_the_data(fill: str, kind: Any, resolved: str) -> None:
    from engine.settings.resolve import resolve_fill

    assert resolve_fill(fill, kind) == resolved


def test_the_resolved_fill_reaches_the_engine(tmp_path: Path) -> None:
    data = daily_csv(tmp_path / "d.csv", 80, seed=2)
    assert _replay_config("--data", str(data)).broker.fill == "next-open"
    assert _replay_config(*SMALL).broker.fill == "next-tick"


# --- precedence: default < file < flag -----------------------------------------------------

#: (flag, config key, TOML line(s) setting the key, the file's value, a flag's value)
PRECEDENCE = [
    ("--device", "device", 'device = "cpu"', "cpu", "auto"),
    ("--transport", "transport", 'transport = "ipc"', "ipc", "tcp"),
    ("--bar-seconds", "bar_seconds", "bar_seconds = 30.0", 30.0, 5.0),
    ("--session", "session", 'session = "extended"', "extended", "regular"),
    ("--commission", "broker.commission", "[broker]\ncommission = 2.5", 2.5, 0.0),
    ("--slippage-bps", "broker.slippage_bps", "[broker]\nslippage_bps = 3.0", 3.0, 7.0),
    ("--fill", "broker.fill", '[broker]\nfill = "signal-close"', "signal-close", "next-tick"),
]


def _value(cfg: Any, key: str) -> Any:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


@pytest.mark.parametrize(("flag", "key", "toml", "in_file", "on_line"), PRECEDENCE)
def test_precedence_default_file_flag(tmp_path: Path, flag: str, key: str, toml: str,
                                      in_file: Any, on_line: Any) -> None:
    from engine.settings.resolve import default_of

    path = _toml(tmp_path, toml + "\n")
    default = _value(_replay_config(*SMALL), key)
    if key != "broker.fill":  # the fill is resolved against the data: auto -> next-tick
        assert default == default_of(key)
    assert _value(_replay_config("--config", path, *SMALL), key) == in_file
    assert _value(_replay_config("--config", path, flag, str(on_line), *SMALL), key) == on_line
    # a flag not given leaves other keys of the file alone too
    other = _replay_config("--config", _toml(tmp_path, 'timezone = "Europe/London"\n'
                                             + toml + "\n", "o.toml"), flag, str(on_line),
                           *SMALL)
    assert other.timezone == "Europe/London" and _value(other, key) == on_line


def test_precedence_across_sections_in_one_merge(tmp_path: Path) -> None:
    """Keys of several tables ([broker], [live], [risk], [gpu], top level) merged at once:
    a flag only replaces its own key; the file's others stay."""
    from engine.settings.config import load_config
    from engine.settings.resolve import merge

    path = _toml(tmp_path, "bar_seconds = 30.0\n[broker]\ncommission = 2.0\nslippage_bps = 4.0\n"
                           "[live]\nsnapshot_every_bars = 7\n[risk]\nmax_position = 50.0\n"
                           "[gpu]\ntap_every = 3\nfd_solver = \"pcr\"\n")
    cfg = load_config(path)
    out = merge(cfg, {"broker.commission": 0.5, "gpu.tap_every": None, "live.snapshot_every_bars":
                      9, "risk.max_daily_loss": 100.0, "device": None})
    assert (out.broker.commission, out.broker.slippage_bps) == (0.5, 4.0)
    assert (out.live.snapshot_every_bars, out.risk.max_position, out.risk.max_daily_loss) == (
        9, 50.0, 100.0)
    assert (out.gpu.tap_every, out.gpu.fd_solver, out.bar_seconds, out.device) == (
        3, "pcr", 30.0, "auto")


@pytest.mark.parametrize(("values", "word"), [
    ({"broker.commission": -1.0}, "commission"),
    ({"bar_seconds": float("nan")}, "bar_seconds"),
    ({"live.snapshot_every_bars": 0}, "snapshot_every_bars"),
    ({"gpu.worker_slots": 0}, "worker_slots"),
    ({"gpu.fd_max_registers": 7}, "fd_max_registers"),
])
def test_merge_validates_like_the_file(values: dict[str, Any], word: str) -> None:
    from engine.errors import UserError
    from engine.settings.config import EngineConfig
    from engine.settings.resolve import merge

    with pytest.raises(UserError, match=word):
        merge(EngineConfig(), values)


@pytest.mark.parametrize("value", [-1.0, -1e-9, 60_000.001, 1e300, float("inf"), float("-inf"),
                                   float("nan")])
def test_commit_within_ms_outside_0_to_a_minute_is_one_line(value: float,
                                                            tmp_path: Path) -> None:
    """[live] commit_within_ms bounds the input a kill -9 may cost: a negative, NaN,
    infinite or over-a-minute value is refused in the file and in a merge alike."""
    from engine.errors import UserError
    from engine.settings.config import EngineConfig, load_config
    from engine.settings.resolve import merge

    with pytest.raises(UserError, match="commit_within_ms"):
        merge(EngineConfig(), {"live.commit_within_ms": value})
    with pytest.raises(UserError, match="commit_within_ms"):
        load_config(_toml(tmp_path, f"[live]\ncommit_within_ms = {value!r}\n"))


@pytest.mark.parametrize("value", [0.0, 0.5, 2.0, 60_000.0])
def test_commit_within_ms_in_range_is_taken(value: float) -> None:
    from engine.settings.config import EngineConfig
    from engine.settings.resolve import merge

    assert merge(EngineConfig(), {"live.commit_within_ms": value}).live.commit_within_ms == value


def test_a_config_flag_cannot_carry_an_argparse_default() -> None:
    from engine.settings.resolve import config_option

    with pytest.raises(ValueError, match="no argparse default"):
        config_option(argparse.ArgumentParser(), "--x", key="device", default="cpu", help="x")


# --- [gpu]: typed, in the file, environment variables as overrides ------------------------

def test_gpu_table_is_exported_and_the_environment_wins(tmp_path: Path) -> None:
    from engine.settings.config import load_config
    from engine.settings.gpu import ENV, export_env, unexport_env

    gpu = load_config(_toml(tmp_path, "[gpu]\ntap_every = 3\nworker_batch = true\n"
                                      "fd_solver = \"pcr\"\nworker_slots = 2\n")).gpu
    env = {"GPU_FD_SOLVER": "lanes"}  # set by the user: an override
    written = export_env(gpu, env)
    assert written == {"OPTION_TAP_EVERY": "3", "OPTION_WORKER_BATCH": "1"}  # slots: default
    assert env["GPU_FD_SOLVER"] == "lanes"
    unexport_env(written, env)
    assert env == {"GPU_FD_SOLVER": "lanes"}
    assert len(ENV) == len(set(ENV.values())) == len(type(gpu).__struct_fields__)


def test_gpu_table_reaches_the_reading_sites(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The modules that read the knobs see the file's values (the GPU worker inherits
    the same environment)."""

    from engine.options.worker_settings import tap_every, worker_settings
    from engine.settings.config import load_config
    from engine.settings.gpu import ENV, export_env
    from gpu.device import fd_max_registers, fd_solver
    from gpu.gp.decider import cpu_serial_max_decisions

    for name in ENV.values():
        monkeypatch.delenv(name, raising=False)
    gpu = load_config(_toml(tmp_path, "[gpu]\ntap_every = 0\nworker_slots = 3\n"
                                      "worker_spacing = 0.5\nfd_solver = \"pcr\"\n"
                                      "fd_max_registers = 128\n"
                                      "gp_cpu_serial_max_decisions = 256\n")).gpu
    written = export_env(gpu)
    try:
        assert tap_every() == 0 and worker_settings() == (3, 0.5)
        assert (fd_solver(), fd_max_registers(), cpu_serial_max_decisions()) == (
            "pcr", 128, 256)
    finally:
        for name in written:
            os.environ.pop(name, None)


def test_gpu_defaults_equal_the_reading_sites_defaults(monkeypatch: pytest.MonkeyPatch) -> None:

    from engine.options.worker_settings import tap_every, worker_gpus, worker_settings
    from engine.settings.gpu import ENV, GpuSettings
    from gpu.device import fd_max_registers, fd_solver
    from gpu.gp.decider import cpu_serial_max_decisions

    for name in ENV.values():
        monkeypatch.delenv(name, raising=False)
    d = GpuSettings()
    assert (tap_every(), worker_settings(), worker_gpus()) == (
        d.tap_every, (d.worker_slots, d.worker_spacing), d.worker_gpus)
    assert (fd_solver(), fd_max_registers(), cpu_serial_max_decisions()) == (
        d.fd_solver, d.fd_max_registers, d.gp_cpu_serial_max_decisions)


def test_bad_gpu_key_in_the_file_is_one_line(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    rc = run_engine.main(["replay", "--config", _toml(tmp_path, "[gpu]\nworker_slots = 0\n"),
                          *SMALL, "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "worker_slots" in err, err


# --- help shows the effective default ------------------------------------------------------

def _help(command: str) -> str:
    parser = run_engine.build_parser(command)
    sub = parser.command_parsers[command]  # type: ignore[attr-defined]
    return " ".join(sub.format_help().split())


def test_help_shows_the_config_default_and_zero() -> None:
    text = _help("replay")
    assert "(default: auto, or the config file's `device`)" in text
    assert "(default: 0.0, or the config file's `broker.slippage_bps`)" in text
    assert "(default: 1.0, or the config file's `broker.commission`)" in text
    feed = _help("feed")
    assert "(default: 0.0)" in feed and "(default: 0)" in feed  # --rate, --skip


# --- examples/engine.toml documents every key ---------------------------------------------

def _struct_fields(cls: type, prefix: str, out: dict[str, type]) -> dict[str, type]:
    """Every config key (dotted, `options.strikes` for list tables) -> its struct."""
    import msgspec

    from engine.settings.doc import _element

    for f in msgspec.structs.fields(cls):
        key = f"{prefix}{f.name}"
        element = _element(cls, f.name)
        if isinstance(f.default, msgspec.Struct):
            _struct_fields(type(f.default), key + ".", out)
        elif element is not None:
            _struct_fields(element, key + ".", out)
        else:
            out[key] = cls
    return out


def test_example_toml_names_every_key_of_every_struct() -> None:
    """The example cannot drift: a field added to any config struct without a line in
    examples/engine.toml fails here (regenerate: python -m engine.settings.doc)."""
    from engine.settings.config import EngineConfig

    text = (ROOT / "examples" / "engine.toml").read_text()
    table = ""
    named: set[str] = set()
    for line in text.splitlines():
        bare = line.lstrip("# ").strip()
        head = re.fullmatch(r"\[\[?([\w.]+?)(?:\.SYMBOL)?\]\]?", bare)
        if head:
            table = head.group(1) + "."
            continue
        m = re.match(r"(\w+) = ", bare)
        if m:
            named.add(table + m.group(1))
    keys = set(_struct_fields(EngineConfig, "", {}))
    assert not keys - named, f"not in examples/engine.toml: {sorted(keys - named)}"
    assert len(keys) > 80  # every table: broker, validation, risk, live, gpu, options ...


def test_example_toml_loads_to_the_defaults() -> None:
    from engine.settings.config import EngineConfig, load_config

    assert load_config(ROOT / "examples" / "engine.toml") == EngineConfig()


def test_readme_lists_every_gpu_key_with_its_environment_override() -> None:
    from engine.settings.gpu import ENV

    text = (ROOT / "README.md").read_text()
    for key, name in ENV.items():
        assert re_row(key, name).search(text), f"README's [gpu] table lacks {key} / {name}"


def re_row(key: str, name: str) -> re.Pattern[str]:
    return re.compile(rf"^\| `{key}` \| [^|]+ \| `{name}` \|$", re.M)
