"""Every integer setting of the engine's TOML is bounded: any value is a one-line error or
a configuration the daemon starts with, never a hang or a traceback. The keys are found
by walking the config's types, so a new integer setting is covered without a test edit."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest
import zmq
import zmq.asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import UserError
from engine.settings.config import EngineConfig, load_config
from tests.live_procs import ROOT, endpoints

EXTREMES = [-(2**64), -(2**63), -(2**31) - 1, -1, 0, 1, 2, 2**31 - 1, 2**31, 2**32,
            2**63 - 1, 2**63, 2**64, 10**30]
OPTION_GROUP = ('underlying = "SPY"\nstrikes = [150.0, 160.0]\nexpiries = [30]\n'
                'vol = 0.15\nrate = 0.001\n')


def integer_keys(t: type = EngineConfig, prefix: str = "") -> list[str]:
    """Dotted names of every int field of the config (`options[]` for the group tables)."""
    keys = []
    info = msgspec.inspect.type_info(t)
    assert isinstance(info, msgspec.inspect.StructType)
    for f in info.fields:
        ti, name = f.type, prefix + f.name
        if isinstance(ti, msgspec.inspect.StructType):
            keys += integer_keys(ti.cls, name + ".")
        elif (isinstance(ti, msgspec.inspect.ListType)
              and isinstance(ti.item_type, msgspec.inspect.StructType)):
            keys += integer_keys(ti.item_type.cls, name + "[].")
        elif isinstance(ti, msgspec.inspect.IntType):
            keys.append(name)
    return keys


KEYS = integer_keys()


def _toml(key: str, value: int) -> str:
    *tables, name = key.split(".")
    if not tables:
        return f"{name} = {value}\n"
    if tables == ["options[]"]:
        return f"[[options]]\n{OPTION_GROUP}{name} = {value}\n"
    return f"[{'.'.join(tables)}]\n{name} = {value}\n"


def _start(cfg: EngineConfig) -> None:
    """What the daemon builds from its settings before it trades: its sockets (ZeroMQ
    options, the validator) and its option book."""
    from engine.live.daemon import open_sockets

    ctx = zmq.asyncio.Context()
    ticks, orders = endpoints()
    sub, out = open_sockets(ctx, ticks, orders, cfg, [b""], None)
    sub.close()
    out.close()
    ctx.destroy(linger=0)
    if cfg.options:
        from engine.options.book import open_option_book

        open_option_book(list(cfg.options), device="cpu", timezone=cfg.timezone)


def test_the_walk_finds_the_daemons_integer_settings() -> None:
    assert {"live.receive_hwm", "live.orders_hwm", "live.max_message_bytes",
            "live.snapshot_every_bars", "live.conflate_above", "receive_batch"} <= set(KEYS)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(KEYS),
       value=st.one_of(st.sampled_from(EXTREMES), st.integers(), st.integers(-3, 3)))
def test_any_integer_setting_is_a_one_line_error_or_a_working_start(
        tmp_path: Path, key: str, value: int) -> None:
    path = tmp_path / "engine.toml"
    path.write_text(_toml(key, value))
    t0 = time.monotonic()
    try:
        cfg = load_config(path)
    except UserError as exc:
        assert "\n" not in str(exc)
        if not key.startswith("options"):  # (a group's message names the group)
            assert key.split(".")[-1] in str(exc)
        return
    _start(cfg)
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("setting", ["receive_hwm = 2147483648", "orders_hwm = -1",
                                     "max_message_bytes = 99999999999999999999"])
def test_live_refuses_an_out_of_range_setting_at_once(tmp_path: Path, setting: str) -> None:
    cfg = tmp_path / "engine.toml"
    cfg.write_text(f"[live]\n{setting}\n")
    ticks, orders = endpoints()
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, str(ROOT / "run_engine.py"), "live", "--market-data", ticks, "--orders",
         orders, "--journal", str(tmp_path / "j.db"), "--config", str(cfg), "--device", "cpu",
         "--max-seconds", "5"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and setting.split()[0] in lines[0], r.stderr
    assert time.monotonic() - t0 < 30
