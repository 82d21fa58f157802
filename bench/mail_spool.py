#!/usr/bin/env python3
"""Mail spool capacity: how many Maildir messages a pool of a small PM tier and
a 1 GiB SSD tier takes before it is full, against ext4 on a 1 GiB loop device
over the same disk, in the same run (and, with --base, a second Terrace build).

Workload (one process, the same everywhere): Maildir delivery as an MTA does
it. Message i (1,500..3,300 bytes) is created in tmp/ with O_EXCL, written,
fsync'd every tenth message, closed and renamed into new/; 100 messages later
the reader renames it into cur/ (`:2,S`). Delivery stops at the first error
(ENOSPC on a full pool) or at --limit messages.

Reported per system: messages delivered and why delivery stopped, ms per
message, bytes of the device per message, and for Terrace the `status` lines
of the tiers and of the logs moved to the SSD (cold logs). Ratios: messages
against ext4's. ext4 is made with one inode per 4 KiB (`mkfs.ext4 -i 4096`,
what a spool needs: the default of one per 16 KiB gives a 1 GiB file system
65,536 inodes, fewer messages than either pool takes).

  bench/mail_spool.py [--pm 64M] [--ssd 1G] [--base PATH/TO/OLD/terrace] [--limit N]

Results: a Markdown table on stdout and bench/results/mail-spool-<date>.json.
Needs root (mounts, loop devices) and target/release/terrace.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

from small_files import ROOT, TERRACE, ext4_mount, sh, terrace_mount


def deliver(root: Path, limit: int) -> dict:
    """Maildir delivery until the first error or `limit` messages."""
    for d in ("tmp", "new", "cur"):
        (root / d).mkdir()
    rnd = random.Random(1)
    body = random.Random(2).randbytes(4000)
    done, stopped = 0, f"limit of {limit} messages"
    start = time.monotonic()
    try:
        for i in range(limit):
            name = f"{i}.M{i}P1.bench"
            fd = os.open(root / "tmp" / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            try:
                os.write(fd, body[: rnd.randint(1500, 3300)])
                if i % 10 == 0:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(root / "tmp" / name, root / "new" / name)
            if i >= 100:
                old = f"{i - 100}.M{i - 100}P1.bench"
                os.rename(root / "new" / old, root / "cur" / f"{old}:2,S")
            done = i + 1
    except OSError as e:
        stopped = os.strerror(e.errno or 0)
    seconds = time.monotonic() - start
    st = os.statvfs(root)
    return {
        "messages": done,
        "stopped": stopped,
        "seconds": round(seconds, 1),
        "ms_per_message": round(seconds / max(done, 1) * 1e3, 3),
        "free_bytes": st.f_bavail * st.f_frsize,
        "free_inodes": st.f_favail,
    }


def ext4(size: str, limit: int) -> dict:
    with ext4_mount(size, ("-i", "4096")) as mnt:
        r = deliver(mnt, limit)
        os.sync()
        r["fs_bytes_used"] = int(sh("df", "-B1", "--output=used", mnt).stdout.split()[1])
        return r


def terrace(binary: Path, pm: str, ssd: str, limit: int) -> dict:
    # The inode table may take most of PM: the spool's limit is then the SSD.
    with terrace_mount(pm, ssd, None, binary, ("inode_max_percent=90",)) as (_pool, mnt):
        r = deliver(mnt, limit)
        st = json.loads(sh(binary, "status", "--json", mnt).stdout)
        r["fs_bytes_used"] = st["tiers"][1]["used"]
        lm = st.get("log_migration", {})
        r["cold_logs"] = lm.get("logs_on_tiers")
        r["cold_log_bytes"] = lm.get("tier_log_bytes", lm.get("tier_log_blocks", 0) * 4096)
        return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pm", default="64M", help="PM tier of the pools (default 64M)")
    ap.add_argument("--ssd", default="1G", help="SSD tier of the pools and size of the ext4 device (default 1G)")
    ap.add_argument("--base", type=Path, help="a second terrace binary to run the same way (e.g. an older build)")
    ap.add_argument("--limit", type=int, default=1_000_000, help="stop after this many messages")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (mounts, loop devices)")
    runs = {"ext4": ext4(a.ssd, a.limit)}
    runs["terrace"] = terrace(TERRACE, a.pm, a.ssd, a.limit)
    if a.base:
        runs["terrace-base"] = terrace(a.base, a.pm, a.ssd, a.limit)
    base = runs["ext4"]["messages"] or 1
    print(f"| system | messages | vs ext4 | stopped by | ms/msg | device bytes used per message | cold logs on the SSD |")
    print("|---|---:|---:|---|---:|---:|---|")
    for name, r in runs.items():
        per = r["fs_bytes_used"] / max(r["messages"], 1)
        logs = f"{r['cold_logs']} ({r['cold_log_bytes'] / 2**20:.1f} MiB)" if "cold_logs" in r else "-"
        print(f"| {name} | {r['messages']:,} | {r['messages'] / base:.2f}× | {r['stopped']} | "
              f"{r['ms_per_message']} | {per:,.0f} | {logs} |")
    out = ROOT / "bench" / "results" / f"mail-spool-{datetime.date.today()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "pm": a.pm, "ssd": a.ssd, "base": str(a.base) if a.base else None,
        "machine": {"kernel": platform.release(), "cpus": os.cpu_count(), "host": platform.node()},
        "terrace": sh(TERRACE, "--version").stdout.strip(),
        "runs": runs,
    }, indent=2) + "\n")
    print(f"\nraw: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
