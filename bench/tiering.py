#!/usr/bin/env python3
"""Workloads behind the tiering targets of issues 3 and 4 (see bench/targets.py).

Each subcommand works in a directory of the file system under test and writes
one JSON result; `init` commands prepare a data set and are not measured.

  tiering.py init-syncappend DIR --files N
      N empty files (the mail spool of a varmail-like append workload).
  tiering.py syncappend DIR --seconds S --output OUT.json
      4 KiB appends, each followed by fsync, to the N files in turn (one writer):
      {"ops_per_s", "total_ops", "seconds"}.
  tiering.py seqwrite DIR --bytes B --output OUT.json
      one file written with 1 MiB write() calls up to B bytes, then fsync; the
      time includes the fsync: {"mb_per_s", "bytes", "seconds"}.
  tiering.py init-overwrite DIR --bytes B
      one file of B bytes written sequentially in 1 MiB writes, then fsync.
  tiering.py overwrite DIR --seconds S [--region-bytes R] --output OUT.json
      asynchronous random 4 KiB overwrites (pwrite at 4 KiB-aligned offsets,
      uniform, fixed seed) of that file for S seconds, then one fsync
      (included in the time): {"ops_per_s", "total_ops", "seconds"}. With R,
      only the first R bytes of the file are overwritten (a hot region).
  tiering.py init-migrate DIR --bytes B --write-size W
      files of 8 MiB up to B bytes, each written in W-byte writes, then fsync:
      many small adjacent write entries, the case group migration coalesces.
  tiering.py migrate DIR --mount MNT --output OUT.json
      `terrace migrate MNT --to ssd DIR` (everything in DIR down to the SSD
      tier), timed; bytes moved from `terrace status --json` before and after:
      {"mb_per_s", "bytes", "seconds", "bandwidth_reported"}.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time

TERRACE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "terrace")
MIB = 1 << 20
BLOCK = 4096


def payload(n: int, seed: int = 7) -> bytes:
    """Incompressible bytes, so no layer can shortcut the data."""
    return random.Random(seed).randbytes(n)


def write_json(path: str, result: dict) -> None:
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


def spool(d: str) -> list[str]:
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.startswith("mail-"))


def cmd_init_syncappend(a) -> dict:
    os.makedirs(a.dir, exist_ok=True)
    for i in range(a.files):
        open(os.path.join(a.dir, f"mail-{i:05d}"), "wb").close()
    fd = os.open(a.dir, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    return {"files": a.files}


def cmd_syncappend(a) -> dict:
    paths = spool(a.dir)
    if not paths:
        raise SystemExit("syncappend: no mail-* files (run init-syncappend first)")
    fds = [os.open(p, os.O_WRONLY | os.O_APPEND) for p in paths]
    buf = payload(BLOCK)
    ops = 0
    start = time.perf_counter()
    end = start + a.seconds
    try:
        while True:
            fd = fds[ops % len(fds)]
            os.write(fd, buf)
            os.fsync(fd)
            ops += 1
            if ops % 64 == 0 and time.perf_counter() >= end:
                break
    finally:
        for fd in fds:
            os.close(fd)
    secs = time.perf_counter() - start
    return {"ops_per_s": ops / secs, "total_ops": ops, "seconds": secs, "files": len(paths)}


def write_sequential(path: str, total: int) -> float:
    buf = payload(MIB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.perf_counter()
    try:
        done = 0
        while done < total:
            n = min(MIB, total - done)
            done += os.write(fd, buf[:n])
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - start


def cmd_seqwrite(a) -> dict:
    secs = write_sequential(os.path.join(a.dir, "seqwrite.dat"), a.bytes)
    return {"mb_per_s": a.bytes / MIB / secs, "bytes": a.bytes, "seconds": secs, "total_ops": a.bytes // MIB}


def cmd_init_overwrite(a) -> dict:
    secs = write_sequential(os.path.join(a.dir, "overwrite.dat"), a.bytes)
    return {"bytes": a.bytes, "seconds": secs}


def cmd_overwrite(a) -> dict:
    path = os.path.join(a.dir, "overwrite.dat")
    size = os.stat(path).st_size
    blocks = size // BLOCK
    if blocks == 0:
        raise SystemExit("overwrite: overwrite.dat is empty (run init-overwrite first)")
    # --region-bytes: overwrite only the file's first bytes (the NVMFS paper's
    # "modified IOZONE", Fig. 8: random writes to the first 3 GB of a large
    # file with 4 GB of NVRAM, i.e. a hot region of 3/4 of the fast tier).
    if a.region_bytes:
        blocks = max(1, min(blocks, a.region_bytes // BLOCK))
    rng = random.Random(42)
    buf = payload(BLOCK, 9)
    fd = os.open(path, os.O_WRONLY)
    ops = 0
    start = time.perf_counter()
    end = start + a.seconds
    try:
        while True:
            os.pwrite(fd, buf, rng.randrange(blocks) * BLOCK)
            ops += 1
            if ops % 256 == 0 and time.perf_counter() >= end:
                break
        os.fsync(fd)
    finally:
        os.close(fd)
    secs = time.perf_counter() - start
    return {"ops_per_s": ops / secs, "total_ops": ops, "seconds": secs, "file_bytes": size,
            "region_bytes": blocks * BLOCK}


def cmd_init_migrate(a) -> dict:
    per_file = 8 * MIB
    buf = payload(a.write_size)
    files = 0
    done = 0
    while done < a.bytes:
        fd = os.open(os.path.join(a.dir, f"cold-{files:04d}.dat"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            off = 0
            while off < per_file and done < a.bytes:
                os.write(fd, buf)
                off += len(buf)
                done += len(buf)
            os.fsync(fd)
        finally:
            os.close(fd)
        files += 1
    return {"bytes": done, "files": files, "write_size": a.write_size}


def status(mnt: str) -> dict:
    out = subprocess.run([TERRACE, "status", mnt, "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def cmd_migrate(a) -> dict:
    before = status(a.mount)["migration"]
    start = time.perf_counter()
    subprocess.run([TERRACE, "migrate", a.mount, "--to", "ssd", a.dir], check=True,
                   stdout=subprocess.DEVNULL)
    secs = time.perf_counter() - start
    after = status(a.mount)["migration"]
    moved = after["bytes_down"] - before["bytes_down"]
    if moved <= 0:
        raise SystemExit("migrate: nothing moved (was the data on PM?)")
    return {"mb_per_s": moved / MIB / secs, "bytes": moved, "seconds": secs,
            "groups": after["groups"] - before["groups"],
            "bandwidth_reported": after.get("bandwidth_bytes_per_sec"), "total_ops": moved // BLOCK}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    cmds = {}

    def add(name, fn, *opts):
        s = sub.add_parser(name)
        s.add_argument("dir")
        for o in opts:
            o(s)
        s.add_argument("--output")
        cmds[name] = fn

    files = lambda s: s.add_argument("--files", type=int, default=1000)  # noqa: E731
    secs = lambda s: s.add_argument("--seconds", type=float, default=10)  # noqa: E731
    nbytes = lambda s: s.add_argument("--bytes", type=int, required=True)  # noqa: E731
    wsize = lambda s: s.add_argument("--write-size", type=int, default=64 << 10)  # noqa: E731
    mount = lambda s: s.add_argument("--mount", required=True)  # noqa: E731
    add("init-syncappend", cmd_init_syncappend, files)
    add("syncappend", cmd_syncappend, secs)
    add("seqwrite", cmd_seqwrite, nbytes)
    add("init-overwrite", cmd_init_overwrite, nbytes)
    region = lambda s: s.add_argument("--region-bytes", type=int, default=0)  # noqa: E731
    add("overwrite", cmd_overwrite, secs, region)
    add("init-migrate", cmd_init_migrate, nbytes, wsize)
    add("migrate", cmd_migrate, mount)
    a = p.parse_args()
    result = cmds[a.cmd](a)
    if a.output:
        write_json(a.output, result)
    else:
        json.dump(result, sys.stdout)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
