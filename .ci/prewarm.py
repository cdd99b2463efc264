"""CI: compile the kernels the commands compile (gpu/compile_manifest.json, every profile)
into numba's on-disk cache, one after another in this one process.

A fresh checkout's cache is empty, and the tests' first calls compile: the suite took 302 s
with `-n 2` from an empty cache against 209 s warm (2026-11-28, dev VM), the GP kernels of
`evolve` compiled twice at once by the two workers. .ci/run starts this in the background
while mypy and lint-imports take the other core. An entry that no longer matches the code
only loses its head start (gpu/compile_cache.py).
"""

from __future__ import annotations

import json
import sys
import time

from gpu import compile_cache


def main() -> int:
    seen: set[tuple[str, str, str]] = set()
    entries = []
    for profile in sorted(json.loads(compile_cache.MANIFEST.read_text())):
        for e in compile_cache.load_manifest(profile):
            if (e.module, e.qualname, e.signature) not in seen:
                seen.add((e.module, e.qualname, e.signature))
                entries.append(e)
    t0 = time.monotonic()
    failed = compile_cache.compile_entries(entries)
    print(f"prewarm: {len(entries) - failed} of {len(entries)} manifest kernels compiled in "
          f"{time.monotonic() - t0:.0f} s", file=sys.stderr)
    return 0  # a failed entry is only a lost head start: the tests compile it themselves


if __name__ == "__main__":
    raise SystemExit(main())
