"""Finer spans of the order step (scratch)."""
import asyncio, sys, tempfile, time, statistics
from pathlib import Path
root = sys.argv[1]; sys.path.insert(0, root)
import zmq.asyncio
sys.path.insert(0, root + "/benchmarks")
from benchmarks.live_step_spans import timed
from benchmarks.tick_path import frames_of
from engine.live.daemon import Daemon, open_sockets
from engine.live.journal import Journal
from engine.settings.config import BrokerConfig, EngineConfig
from strategies.sma_cross import SmaCross
from tests.live_procs import endpoints
import engine.trading.core as core
_, pairs = frames_of(int(sys.argv[2]) if len(sys.argv) > 2 else 200000, 10)
frames = [list(p) for p in pairs]
cfg = EngineConfig(broker=BrokerConfig(sizing="fixed", quantity=10.0))
tmp = tempfile.mkdtemp()
ctx = zmq.asyncio.Context()
journal = Journal(Path(tmp) / "j.db")
t, o = endpoints()
sub, out = open_sockets(ctx, t, o, cfg, [b""], None)
d = Daemon(cfg=cfg, strategy=SmaCross(5, 10), journal=journal, state=journal.load(), sub=sub, out=out, device="cpu", status_file=None, max_seconds=0.0, ticks=t)
cur = {}
SP = [("validator","validate_many"),("engine","process"),("engine","_close_bars"),("engine","_close_compiled"),
("engine.decisions","decide"),("engine","_place"),("engine.orders","place"),("journal","record_order"),
("journal","begin"),("journal","commit"),("journal","seal"),("journal","record_seqs"),("journal","log_input"),("","_journal_step"),("","_publish"),("out","send"),("risk","check"),("risk","after_batch"),("engine","_new_day_check"),("engine","_reopen"),("engine.broker","new_order")]
for owner, name in SP:
    obj = d
    for part in filter(None, owner.split(".")):
        obj = getattr(obj, part)
    setattr(obj, name, timed(getattr(obj, name), name, cur))
core.sma_cross_close = timed(core.sma_cross_close, "njit", cur)
rows = []
async def go():
    for i in range(0, len(frames), 2):
        cur.clear(); n0 = d.orders_out
        t0 = time.perf_counter()
        await d._batch(frames[i:i+2], t0)
        if d.orders_out > n0:
            cur["total"] = time.perf_counter() - t0; cur["lat"] = d.latency.recent[-1]/1e6
            cur["n_orders"] = (d.orders_out - n0)/1e6
            rows.append(dict(cur))
        if d._held_since is not None and time.perf_counter() - d._held_since >= d._hold_s:
            d.commit_held()
asyncio.run(go())
print("order steps", len(rows), "lat", d.latency.summary()["p50_us"], d.latency.summary()["p99_us"])
keys = sorted({k for r in rows for k in r}, key=lambda k: -statistics.median(r.get(k,0) for r in rows))
for k in keys:
    print(f"{k:16s} {statistics.median(r.get(k,0) for r in rows)*1e6:8.1f}")
rows.sort(key=lambda r: r["lat"])
print("--- slowest 3%")
for r in rows[-int(len(rows)*0.04):]:
    print({k: round(v*1e6) for k, v in sorted(r.items(), key=lambda kv: -kv[1])[:9]})
import engine.live.journal as J, statistics as S
if J.__dict__.get("SEAL_T"):
    print("encode", S.median(a for a,b,c in J.SEAL_T)*1e6, "crc+pack", S.median(b for a,b,c in J.SEAL_T)*1e6, "size", S.median(c for a,b,c in J.SEAL_T))
if J.__dict__.get("SEAL_T") is not None and J.SEAL_T and len(J.SEAL_T[0]) == 4:
    for k, name in enumerate(("encode", "copy", "crc+head", "statements")):
        print(name, round(S.median(x[k] for x in J.SEAL_T) * (1e6 if k < 3 else 1), 2))
