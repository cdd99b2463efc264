"""Settings of the live daemon (the `[live]` table of the engine's TOML)."""

from __future__ import annotations

from typing import Literal

import msgspec

from engine.settings.bounds import MAX_COUNT, require_int_range, require_non_negative

#: the longest a live step's journal transaction may stay open (`commit_within_ms`)
MAX_COMMIT_WITHIN_MS = 60_000.0


class LiveOptions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: a snapshot of the engine's state goes into the journal every this many bar events
    #: (and at shutdown); after `kill -9` at most this many bars of indicator history are lost
    snapshot_every_bars: int = 10
    #: no message (ticks or heartbeats) for this long marks the feed stale: logged, shown
    #: in the status, and new entries are refused until data flows again
    heartbeat_timeout_seconds: float = 5.0
    #: seconds between status lines on stderr (0 = none)
    status_every_seconds: float = 10.0
    #: a larger incoming message is counted (`oversize`) and skipped after receive, costing
    #: only itself; ZeroMQ's MAXMSGSIZE, which drops the whole connection, is set far above
    #: it (`feeds.transport.transport_cap`: 64 times this, at least 4 MiB)
    max_message_bytes: int = 65_536
    #: messages queued in ZeroMQ before the tick socket drops (memory bound under overload)
    receive_hwm: int = 100_000
    #: received batches this long (or full ones: the subscriber drains at most 8192
    #: messages a batch) four times in a row mean the daemon is behind: their trades and
    #: quotes are conflated to the newest per symbol (counted as `conflated`); 0 = never
    #: (a feed that waits for its readers, such as `feed` without --lossy, then slows down
    #: instead, and a replayed stream gives exactly the same orders at any speed)
    conflate_above: int = 8_192
    #: messages queued per reader of the orders socket before that reader loses some (the
    #: journal never does)
    orders_hwm: int = 1_000_000
    #: each batch's raw frames go into the journal with the batch (emptied by every
    #: snapshot), so a restart after `kill -9` re-applies them and trades exactly like a
    #: daemon stopped with SIGTERM; false: such a restart has the last snapshot and the
    #: journaled fills, with the indicator history since the snapshot lost
    log_input: bool = True
    #: how durable a commit is before the batch's orders and fills are published (SQLite
    #: WAL's `synchronous`): "normal" writes the commit to the WAL without fsync, so it
    #: survives the daemon's crash or `kill -9` (the data is in the operating system) but
    #: not a power cut or a kernel crash, which may lose the last commits, and with them
    #: orders a reader saw; "full" fsyncs the WAL at every commit (survives those too, at
    #: the cost of one fsync on every order's path)
    journal_sync: Literal["normal", "full"] = "normal"
    #: a step of market data that publishes nothing (no order, fill or rejection) leaves
    #: its journal transaction open for the steps after it: committed with the next step
    #: that publishes, as soon as no message is waiting (between the feed's bursts), and
    #: at the latest this many milliseconds after its first step (0 = every step
    #: commits). What is published
    #: is always committed first; `kill -9` may cost up to this long of input that
    #: published nothing, as if it had still been in the transport (a resumed stream,
    #: `feed --skip`, re-sends it: the journal's stream positions are those of its input)
    commit_within_ms: float = 2.0

    def __post_init__(self) -> None:
        # every integer bounded (issue 24: receive_hwm = 2**31 hung the start-up): the
        # socket options are C ints; larger snapshot intervals or batches mean nothing
        require_int_range(self, "live", ("snapshot_every_bars",), 1, 10**9)
        require_int_range(self, "live", ("max_message_bytes", "receive_hwm", "orders_hwm"),
                          1, MAX_COUNT)
        require_int_range(self, "live", ("conflate_above",), 0, MAX_COUNT, " (0 = never)")
        require_non_negative(self, "live", ("heartbeat_timeout_seconds", "status_every_seconds",
                                            "commit_within_ms"))
        # the input a kill -9 may cost: bounded, so a typo cannot leave it unbounded
        if self.commit_within_ms > MAX_COMMIT_WITHIN_MS:
            raise ValueError(f"live.commit_within_ms must be at most {MAX_COMMIT_WITHIN_MS:g} "
                             f"(milliseconds; 0 = a commit per step), got {self.commit_within_ms}")
