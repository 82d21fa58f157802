#!/usr/bin/env python3
"""Device-level I/O of one measurement: block-layer counters before and after.

  devstat.py snap OUT.json [--dev ROLE=/dev/loopN ...] [--terrace MOUNTPOINT]
      writes a snapshot: /sys/block/loopN/stat of each device and, for Terrace,
      the per-tier I/O counters of `terrace status --json`.
  devstat.py diff BEFORE.json OUT.json [--dev ...] [--terrace ...]
      takes a second snapshot now and writes the difference:
      {"devices": {ROLE: {"device", "write_bytes", "write_requests", "avg_write_request_bytes",
                          "read_bytes", "read_requests", "flushes", "discard_bytes"}},
       "terrace": {"tiers": {KIND: {write_bytes, write_requests, read_bytes, read_requests, syncs}},
                   "placed_pm", "placed_block", "placement_overflows", "bytes_written", "fsyncs"},
       "seconds": wall time between the snapshots}

/sys/block/<dev>/stat fields (Documentation/block/stat.rst): read I/Os, read merges,
read sectors, read ticks, write I/Os, write merges, write sectors, write ticks,
in_flight, io_ticks, time_in_queue, discard I/Os, discard merges, discard sectors,
discard ticks, flush I/Os, flush ticks. Sectors are 512 bytes. "Requests" are the
requests the file system sent to the (loop) device after merging, so the average
request size is write sectors x 512 / write I/Os.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

TERRACE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "terrace")
TERRACE_COUNTERS = ("placed_pm", "placed_block", "placement_overflows", "bytes_written", "bytes_read",
                    "fsyncs", "writes", "reads")
TIER_IO = ("write_bytes", "write_requests", "read_bytes", "read_requests", "syncs")


def read_stat(dev: str) -> list[int]:
    name = os.path.basename(os.path.realpath(dev))
    with open(f"/sys/block/{name}/stat") as f:
        vals = [int(x) for x in f.read().split()]
    return vals + [0] * (17 - len(vals))


def terrace_status(mnt: str) -> dict | None:
    try:
        out = subprocess.run([TERRACE, "status", mnt, "--json"], capture_output=True, text=True, timeout=30)
        return json.loads(out.stdout) if out.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def snapshot(devs: list[str], terrace: str | None) -> dict:
    snap = {"time": time.time(), "devices": {}}
    for spec in devs:
        role, dev = spec.split("=", 1)
        try:
            snap["devices"][role] = {"device": dev, "stat": read_stat(dev)}
        except OSError as e:
            snap["devices"][role] = {"device": dev, "error": str(e)}
    if terrace:
        snap["terrace"] = terrace_status(terrace)
    return snap


def diff(before: dict, after: dict) -> dict:
    out = {"seconds": after["time"] - before["time"], "devices": {}}
    for role, a in after["devices"].items():
        b = before["devices"].get(role)
        if not b or "stat" not in a or "stat" not in b:
            continue
        d = [x - y for x, y in zip(a["stat"], b["stat"])]
        w_ios, w_sec, r_ios, r_sec = d[4], d[6], d[0], d[2]
        out["devices"][role] = {
            "device": a["device"],
            "write_bytes": w_sec * 512,
            "write_requests": w_ios,
            "avg_write_request_bytes": (w_sec * 512 / w_ios) if w_ios else None,
            "read_bytes": r_sec * 512,
            "read_requests": r_ios,
            "avg_read_request_bytes": (r_sec * 512 / r_ios) if r_ios else None,
            "flushes": d[15],
            "discard_bytes": d[13] * 512,
        }
    tb, ta = before.get("terrace"), after.get("terrace")
    if tb and ta:
        t = {k: ta.get(k, 0) - tb.get(k, 0) for k in TERRACE_COUNTERS
             if isinstance(ta.get(k), (int, float)) and isinstance(tb.get(k), (int, float))}
        tiers = {}
        before_tiers = {x.get("id"): x for x in tb.get("tiers", [])}
        for tier in ta.get("tiers", []):
            io_a = tier.get("io") or {}
            io_b = (before_tiers.get(tier.get("id")) or {}).get("io") or {}
            entry = {k: io_a[k] - io_b.get(k, 0) for k in TIER_IO if isinstance(io_a.get(k), (int, float))}
            entry["used_after"] = tier.get("used")
            entry["capacity"] = tier.get("capacity")
            tiers[f"{tier.get('kind')}{tier.get('id')}"] = entry
        t["tiers"] = tiers
        out["terrace"] = t
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("snap")
    s.add_argument("out")
    d = sub.add_parser("diff")
    d.add_argument("before")
    d.add_argument("out")
    for p in (s, d):
        p.add_argument("--dev", action="append", default=[], help="ROLE=/dev/loopN")
        p.add_argument("--terrace", help="Terrace mount point (per-tier counters from status --json)")
    args = ap.parse_args()
    now = snapshot(args.dev, args.terrace)
    if args.cmd == "snap":
        result = now
    else:
        with open(args.before) as f:
            result = diff(json.load(f), now)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
