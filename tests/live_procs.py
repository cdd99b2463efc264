"""Real processes for the live daemon's tests: the daemon, the feed, journal reads."""

from __future__ import annotations

import atexit
import io
import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import zmq

ROOT = Path(__file__).resolve().parent.parent


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux: 32768 by default)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


#: The ports the tests bind come from below the kernel's ephemeral range, a block per
#: pytest-xdist worker (gw0, gw1, ...; 0 without xdist), from a random place in it and then
#: in turn. A port the kernel handed out (bind to port 0) was free only at that moment: under
#: `-n 2` the other worker's pick, or any outgoing connection (each ZeroMQ connect takes an
#: ephemeral port), could get the same number before the test bound it, and a daemon then
#: exited at once on a taken --orders while its feed waited 30 s for it (seen once in CI).
#: No outgoing connection is given a port below the range, and the workers' blocks differ.
_PORT_BLOCK = 400
_worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
_port_lo = max(1024, _ephemeral_low() - _PORT_BLOCK * (1 + _worker % 24))
_port_next = random.randrange(_PORT_BLOCK)


def free_port() -> int:
    """A port of this worker's block that is free now (a bind checks it)."""
    global _port_next
    for _ in range(_PORT_BLOCK):
        port = _port_lo + _port_next % _PORT_BLOCK
        _port_next += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise OSError(f"no free port in {_port_lo}..{_port_lo + _PORT_BLOCK - 1}")


def endpoints() -> tuple[str, str]:
    return f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def start_daemon(journal: Path, ticks: str, orders: str, status: Path, *extra: str,
                 strategy: str = "sma-cross:5,10") -> subprocess.Popen[str]:
    """The daemon on the SMA strategy. Without --config: conflation off, so a fast feed
    (which waits for its readers) gives the same orders at any speed of the machine.

    A real process of its own (its pid takes signals, kill -9 included), forked from a
    server that has imported the engine once (ForkedDaemon): `python run_engine.py live`
    spent 1.5-2 s of CPU on imports per start, most of a short daemon test. The command
    line's own process start stays tested (test_live.py, test_live_input.py's `_live`)."""
    if "--config" not in extra:
        cfg = journal.with_name(journal.name + ".toml")
        cfg.write_text("[live]\nconflate_above = 0\n")
        extra = (*extra, "--config", str(cfg))
    return ForkedDaemon(
        ["live", "--market-data", ticks, "--orders", orders, "--journal", str(journal),
         "--strategy", strategy, "--device", "cpu", "--json", str(status),
         "--max-seconds", "120", *extra], journal.with_name(journal.name + ".out"))


#: what a daemon imports, loaded once by the fork server (multiprocessing's forkserver)
PRELOAD = ["run_engine", "engine.commands.live", "engine.live.daemon", "engine.settings.resolve",
           "strategies.sma_cross", "tests.live_procs"]


def _forked_main(argv: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    """The child: `run_engine.py live ...` as its process would run it, stdout and stderr
    to files (read back by ForkedDaemon.communicate), the test's environment of now."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f, fd)
        os.close(f)
    import run_engine

    rc = run_engine.main(argv)
    # what an interpreter's exit would run besides (multiprocessing's child ends in
    # os._exit): the atexit handlers, and the finalisers of whatever cycles are left (a
    # finaliser that hangs hangs here as it would at a real exit)
    import gc

    atexit._run_exitfuncs()
    gc.collect()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


class ForkedDaemon(subprocess.Popen[str]):
    """The Popen calls the tests make (pid, poll, wait, send_signal, kill, communicate,
    returncode, stderr) on a process forked from the preloaded server. Exit codes read as
    Popen's: the command's own, or -N after signal N."""

    def __init__(self, argv: list[str], base: Path) -> None:  # Popen.__init__ never runs
        import multiprocessing as mp

        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        self._out = base.with_suffix(".stdout")
        self._err = base.with_suffix(".stderr")
        self.args = argv
        self._proc = ctx.Process(target=_forked_main, daemon=False, args=(
            argv, str(ROOT), _env(), str(self._out), str(self._err)))
        self._proc.start()
        self.pid = int(self._proc.pid or 0)
        if not _started:  # after multiprocessing's exit handler, so it runs before it
            atexit.register(_kill_leftover_daemons)
        _started.append(self)

    @property
    def returncode(self) -> int | None:
        return self._proc.exitcode

    @returncode.setter
    def returncode(self, value: int | None) -> None:
        pass  # Popen's own bookkeeping; the forked process's exit code is the truth

    @property
    def stderr(self) -> io.StringIO:
        return io.StringIO(self._err.read_text() if self._err.exists() else "")

    @stderr.setter
    def stderr(self, value: object) -> None:
        pass

    def poll(self) -> int | None:
        return self._proc.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._proc.join(timeout)
        if self._proc.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self._proc.exitcode

    def send_signal(self, sig: int) -> None:
        if self._proc.exitcode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def communicate(self, input: str | None = None,  # noqa: A002 (Popen's name)
                    timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self._out.read_text(), self._err.read_text()

    def __del__(self) -> None:
        pass


#: forked daemons of this test run: multiprocessing joins its children when the test
#: process exits, so one a failed test left running would hold the run up to its
#: --max-seconds; they are killed first (a Popen child was left behind instead)
_started: list[ForkedDaemon] = []


def _kill_leftover_daemons() -> None:
    for d in _started:
        d.kill()


def run_feed(ticks: str, *extra: str, timeout: float = 60) -> dict[str, Any]:
    """Publish the synthetic market (3 symbols) and wait for the feed to finish.

    The `feed` command runs in this process (run_engine.main, in a thread so that
    `timeout` still bounds it): a feed process cost a start-up per call (the imports: 1.5-2 s
    of CPU, 3 s of wall time on a loaded two-core machine), and the daemon under test, the
    process that matters, is real either way. start_feed starts a real feed process (for
    feeds a test kills or runs alongside)."""
    import contextlib
    import io

    import run_engine

    out, err = io.StringIO(), io.StringIO()
    result: list[int] = []

    def feed() -> None:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            result.append(run_engine.main(
                ["feed", "--publish", ticks, "--n-symbols", "3", "--seed", "5", "--wait", "30",
                 *extra]))

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"feed still running after {timeout} s: {err.getvalue()}"
    assert result == [0], err.getvalue() + _last_daemon()
    return {"stdout": out.getvalue(), "stderr": err.getvalue()}


def _last_daemon() -> str:
    """The newest forked daemon's state, for a feed that found no subscriber: whether it
    is still running (slow to start) or exited, and how (its stderr's end)."""
    if not _started:
        return ""
    d = _started[-1]
    tail = d.stderr.getvalue()[-1500:]
    return f"\nnewest daemon (pid {d.pid}): exit code {d.poll()}, stderr: {tail!r}"


def start_feed(ticks: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "run_engine.py"), "feed", "--publish", ticks,
         "--n-symbols", "3", "--seed", "5", "--wait", "30", *extra],
        cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def processed(journal: Path) -> int:
    """Market-data messages the daemon has committed (sum of its streams' positions)."""
    try:
        with sqlite3.connect(journal) as db:
            rows = db.execute("SELECT topic, seq FROM stream_seq").fetchall()
    except sqlite3.OperationalError:
        return 0
    return sum(int(s) for t, s in rows if not bytes(t).startswith(b"H."))


def wait_processed(journal: Path, n: int, proc: subprocess.Popen[str],
                   timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"daemon exited {proc.returncode}: "
                                 f"{proc.stderr.read() if proc.stderr else ''}")
        if processed(journal) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"daemon did not reach {n} messages (at {processed(journal)})")


def flock_holder(path: Path) -> str | None:
    """The pid holding a flock on `path`'s inode, from /proc/locks (Linux), else None."""
    try:
        st = path.stat()
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    dev_ino = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        f = line.split()
        if len(f) > 5 and f[1] == "FLOCK" and f[5] == dev_ino:
            return f[4]
    return None


def wait_journal_held(journal: Path, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    """Wait until the daemon `proc` holds its journal: the flock on the database file
    (engine/live/journal.py), taken once the daemon has started, just before it opens its
    sockets."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"daemon exited {proc.returncode}: "
                                 f"{proc.stderr.read() if proc.stderr else ''}")
        if flock_holder(journal) == str(proc.pid):
            return
        time.sleep(0.05)
    raise AssertionError(f"daemon {proc.pid} never held {journal}")


def stop_daemon(proc: subprocess.Popen[str], status: Path) -> dict[str, Any]:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "live stopped" in out, out + err
    return dict(json.loads(status.read_text()))


def fills(journal: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(journal) as db:
        return db.execute("SELECT fill_id, order_id, ts, symbol, side, quantity, price, "
                          "commission FROM fills ORDER BY fill_id").fetchall()


def orders(journal: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(journal) as db:
        return db.execute("SELECT order_id, ts, symbol, side, quantity, reason FROM orders "
                          "ORDER BY order_id").fetchall()


def wait_subscribed(orders_endpoint: str, timeout: float = 5) -> None:
    """Give a freshly bound XPUB a moment to see subscriptions (slow joiner)."""
    time.sleep(min(timeout, 0.3))


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def collect(endpoint: str, prefix: bytes, kind: type, got: list[Any],
            stop: threading.Event) -> None:
    """Read the daemon's messages of one kind (topic `prefix`) into `got` until `stop`."""
    from feeds.messages import make_decoder

    ctx = zmq.Context()
    s = ctx.socket(zmq.SUB)
    s.setsockopt(zmq.SUBSCRIBE, prefix)
    s.connect(endpoint)
    dec = make_decoder()
    while not stop.is_set():
        if s.poll(50):
            m = dec.decode(s.recv_multipart()[1])
            assert isinstance(m, kind)
            got.append(m)
    s.close(0)
    ctx.term()


def read_orders(endpoint: str, counts: dict[str, int], stop: threading.Event) -> None:
    ctx = zmq.Context()
    s = ctx.socket(zmq.SUB)
    s.setsockopt(zmq.SUBSCRIBE, b"O.")
    s.setsockopt(zmq.SUBSCRIBE, b"F.")
    s.connect(endpoint)
    while not stop.is_set():
        if s.poll(50):
            topic = s.recv_multipart()[0]
            counts[topic[:1].decode()] += 1
    s.close(0)
    ctx.term()


def flood(tmp: Path, seconds: float, n_ticks: int) -> dict[str, Any]:
    ticks, out = endpoints()
    counts = {"O": 0, "F": 0}
    stop = threading.Event()
    reader = threading.Thread(target=read_orders, args=(out, counts, stop), daemon=True)
    reader.start()
    j = tmp / "j.db"
    cfg = tmp / "engine.toml"
    cfg.write_text("[live]\nreceive_hwm = 20000\nheartbeat_timeout_seconds = 0\n")
    d = start_daemon(j, ticks, out, tmp / "s.json", "--config", str(cfg))
    time.sleep(1.0)
    base = rss_mb(d.pid)
    feed = start_feed(ticks, "--ticks", str(n_ticks), "--n-symbols", "10", "--lossy",
                      "--heartbeat", "0")
    samples = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds and feed.poll() is None:
        samples.append(rss_mb(d.pid))
        time.sleep(0.2)
    feed.kill()
    feed.wait(10)
    time.sleep(1.0)
    st = stop_daemon(d, tmp / "s.json")
    time.sleep(0.3)
    stop.set()
    reader.join(5)
    return {"status": st, "rss_base_mb": base, "rss_peak_mb": max(samples, default=base),
            "rss_samples": samples, "seen": counts, "journal_fills": len(fills(j)),
            "journal_orders": len(orders(j))}
