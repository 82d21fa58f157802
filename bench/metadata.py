#!/usr/bin/env python3
"""Metadata benchmark: create, stat and delete N small files in one directory.

Usage: metadata.py DIR N [--size BYTES] [--output FILE.json]

Phases (timed separately, in this order):
  create  open(O_CREAT|O_EXCL|O_WRONLY) + write BYTES (default 512) + close
  stat    stat() of every file by name (whatever the kernel caches, it may use)
  delete  unlink() of every file
Prints and writes JSON: {"files": N, "create_ops": .., "stat_ops": .., "delete_ops": ..,
"total_ops": .. (3N / total seconds), "seconds": {...}}. Operations per second.
The same Python loop runs on every system, so its constant overhead (~2-4 µs per
call) affects all of them equally.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def run(directory: str, n: int, size: int) -> dict:
    """Run the three phases in a fresh subdirectory of `directory`."""
    work = os.path.join(directory, f"meta-{os.getpid()}")
    os.mkdir(work)
    dfd = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
    names = [f"f{i:07d}" for i in range(n)]
    payload = b"m" * size
    seconds = {}
    try:
        t0 = time.perf_counter()
        for name in names:
            fd = os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644, dir_fd=dfd)
            if size:
                os.write(fd, payload)
            os.close(fd)
        t1 = time.perf_counter()
        for name in names:
            os.stat(name, dir_fd=dfd)
        t2 = time.perf_counter()
        for name in names:
            os.unlink(name, dir_fd=dfd)
        t3 = time.perf_counter()
    finally:
        os.close(dfd)
    os.rmdir(work)
    seconds = {"create": t1 - t0, "stat": t2 - t1, "delete": t3 - t2}
    return {
        "files": n,
        "file_size": size,
        "create_ops": n / seconds["create"],
        "stat_ops": n / seconds["stat"],
        "delete_ops": n / seconds["delete"],
        "total_ops": 3 * n / sum(seconds.values()),
        "seconds": seconds,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("directory")
    ap.add_argument("files", type=int)
    ap.add_argument("--size", type=int, default=512, help="bytes written to each file (default 512)")
    ap.add_argument("--output", help="also write the JSON result here")
    args = ap.parse_args()
    result = run(args.directory, args.files, args.size)
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
