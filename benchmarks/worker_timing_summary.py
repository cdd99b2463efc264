"""One line per OPTION_WORKER_TIMING file (oldest first): the worker loop's steps.

    python benchmarks/worker_timing_summary.py PREFIX   # the files PREFIX.<pid>
"""

from __future__ import annotations

import argparse
import glob
import json
import os


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("prefix", help="the OPTION_WORKER_TIMING path: files PREFIX.<pid> are read")
    files = sorted(glob.glob(ap.parse_args().prefix + ".*"), key=os.path.getmtime)
    for f in files:
        with open(f) as fh:
            d = json.load(fh)
        each = {k: round(v, 1) for k, v in d["us_each"].items()}
        print(f"{os.path.basename(f)}: counts {d['counts']} us each {each} "
              f"cpu {d['cpu_s']:.2f} s wall {d['wall_ns'] / 1e9:.2f} s "
              f"involuntary switches {d['involuntary_switches']} "
              f"launch latency us {d.get('launch_latency_us')} "
              f"WANT wait us {d.get('want_wait_us')}")


if __name__ == "__main__":
    main()
