"""Several option worker processes, one per GPU (OPTION_WORKER_GPUS), behind the one
client interface: `open_workers` starts one `WorkerClient` or a `MultiWorkerClient`."""

from __future__ import annotations

import os
from typing import Any

from engine.errors import UserError
from engine.options.worker_client import WorkerClient
from engine.options.worker_layout import group_sizes
from engine.options.worker_settings import GPUS_ENV, worker_gpus
from feeds.messages import OptionGroupValues, OptionValue


def split_groups(configs: list[Any], n_workers: int) -> list[list[int]]:
    """Group indices per worker: every group of one underlying on the same worker (a tick
    goes to one client), underlyings dealt largest first (by options) to the worker with
    the fewest options so far. Workers left without a group are dropped."""
    by_underlying: dict[str, list[int]] = {}
    for g, c in enumerate(configs):
        by_underlying.setdefault(c.underlying, []).append(g)
    sizes = group_sizes(configs)
    load = [0] * n_workers
    shares: list[list[int]] = [[] for _ in range(n_workers)]
    for groups in sorted(by_underlying.values(),
                         key=lambda gs: (-sum(sizes[g] for g in gs), gs[0])):
        w = min(range(n_workers), key=lambda i: (load[i], i))
        shares[w].extend(groups)
        load[w] += sum(sizes[g] for g in groups)
    return [sorted(share) for share in shares if share]


def open_workers(configs: list[Any], device: str, timezone: str
                 ) -> WorkerClient | MultiWorkerClient:
    """The option groups' worker processes: one (`WorkerClient`), or with
    OPTION_WORKER_GPUS=N > 1 up to N, each owning one GPU (the i-th of the engine's
    CUDA_VISIBLE_DEVICES, or device i when it is unset) and a share of the groups
    (`split_groups`), behind one `MultiWorkerClient`."""
    n = worker_gpus()
    if n == 1:
        return WorkerClient(configs, device, timezone)
    shares = split_groups(configs, n)
    visible: list[str | None] = [None] * len(shares)
    if device == "cuda":
        listed = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = ([d.strip() for d in listed.split(",") if d.strip()] if listed is not None
               else [str(i) for i in range(n)])
        if len(ids) < n:
            raise UserError(f"{GPUS_ENV}={n} but CUDA_VISIBLE_DEVICES lists {len(ids)} "
                            f"device(s): {listed!r}")
        visible = list(ids[:len(shares)])
    return MultiWorkerClient(configs, shares, device, timezone, visible)


class MultiWorkerClient:
    """Several worker processes (one per GPU) behind the one client interface the option
    book uses: a tick goes to the worker that holds its underlying's groups (one dict
    lookup more than a single worker), results come from all of them numbered in one
    sequence, counts are summed."""

    def __init__(self, configs: list[Any], shares: list[list[int]], device: str,
                 timezone: str, visible: list[str | None]) -> None:
        self.configs = configs
        self.shares = shares
        self.clients: list[WorkerClient] = []
        seq = [0]  # one sequence across the workers' messages, however they are collected
        try:
            for share, dev in zip(shares, visible, strict=True):
                self.clients.append(WorkerClient([configs[g] for g in share], device,
                                                 timezone, dev, wait=False, seq=seq))
            for c in self.clients:  # started side by side, waited for in turn
                c.wait_ready()
        except BaseException:
            self.close()
            raise
        self.tap_every = self.clients[0].tap_every
        self._route = {sym: c.on_spot for c in self.clients for sym in c.underlyings}
        self.underlyings = set(self._route)

    def on_spot(self, symbol: str, spot: float, ts: int) -> None:
        ask = self._route.get(symbol)
        if ask is not None:
            ask(symbol, spot, ts)

    def begin_batch(self) -> None:
        for c in self.clients:
            c.begin_batch()

    @property
    def ticks(self) -> int:
        return sum(c.ticks for c in self.clients)

    def in_flight(self) -> int:
        return sum(c.in_flight() for c in self.clients)

    def poll(self) -> list[OptionValue | OptionGroupValues]:
        out: list[OptionValue | OptionGroupValues] = []
        for c in self.clients:
            got = c.poll()
            if got:
                out.extend(got)
        return out

    def last_values(self) -> list[tuple[tuple[str, ...], tuple[float, Any, Any, Any]]]:
        return [v for c in self.clients for v in c.last_values()]

    def stats(self) -> dict[str, Any]:
        parts = [c.stats() for c in self.clients]
        out: dict[str, Any] = {k: sum(p[k] for p in parts) for k in (
            "groups", "options", "repricings", "worker_repricings", "coalesced")}
        out["latencies_ns"] = [x for p in parts for x in p["latencies_ns"]]
        out["workers"] = len(parts)
        return out

    def close(self) -> None:
        for c in self.clients:
            c.close()
