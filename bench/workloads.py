#!/usr/bin/env python3
"""File-server, web-proxy and mail-server workloads (Filebench's fileserver,
webproxy and varmail personalities, with the characteristics of Ziggurat's
Table 4), implemented here because filebench is not packaged for Debian.

  workloads.py init DIR --workload W --files N [--mean-size 2M] [--seed S]
      creates the file set DIR/fileset/dNNN/fNNNNNN: 80% of the N files exist
      (Filebench's prealloc=80), sizes drawn from a gamma distribution (shape 1.5,
      Filebench's default) with the given mean (2 MiB, Table 4), written in 1 MiB
      writes; then syncs the file system.
  workloads.py run DIR --workload W --seconds T [--workers P] [--output F.json] [--seed S]
      runs the workload's loop for T seconds and reports operations per second.

Table 4 (Ziggurat, FAST '19): every workload has 2 MB average files and 16K files
(scaled here: the file count is BENCH_DATASET / 2 MiB); I/O sizes and the
read:write ratio (counted in read and write operations, as Filebench counts flowops):

  fileserver  R/W I/O 16 KiB / 16 KiB, R:W 1:2. One iteration:
      create a file, write it whole (its size from the gamma distribution, 16 KiB
      writes), close; open a random file, append a random size in 1..32 KiB (mean
      16 KiB), close; open a random file, read it whole in 16 KiB reads, close;
      delete a random file; stat a random file.
  webproxy    R/W I/O 1 MiB / 16 KiB, R:W 5:1. One iteration:
      delete a random file; create a file, append 1..32 KiB, close; five times:
      open a random file, read it whole in 1 MiB reads, close.
  varmail     R/W I/O 1 MiB / 16 KiB, R:W 1:1, fsync after every two appends. One
      iteration: delete a random file; create a file, append 1..32 KiB twice,
      fsync, close; open a random file, read it whole in 1 MiB reads, close; open a
      random file, read it whole, close.

Operations counted (one each, like Filebench flowops): create, open, close, write
of a whole file, append, read of a whole file, fsync, delete, stat. Reads go
through the page cache (no O_DIRECT), as in Filebench. With --workers P, P
processes run the loop, each on its own share of the files (Filebench's threads).
Output JSON: {"workload", "ops_per_s", "iterations_per_s", "read_mb_per_s",
"write_mb_per_s", "ops": {op: count}, "seconds", "workers", "files", ...}.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import sys
import time

KIB = 1024
MIB = 1024 * KIB

WORKLOADS = {
    # name: (read I/O size, append/write I/O size, description)
    "fileserver": (16 * KIB, 16 * KIB),
    "webproxy": (1 * MIB, 16 * KIB),
    "varmail": (1 * MIB, 16 * KIB),
}
PREALLOC = 0.8
FILES_PER_DIR = 1000


def parse_size(s: str) -> int:
    s = s.strip()
    mult = {"k": KIB, "m": MIB, "g": 1024 * MIB}.get(s[-1].lower())
    return int(float(s[:-1]) * mult) if mult else int(s)


def path_of(root: str, i: int) -> str:
    return os.path.join(root, "fileset", f"d{i // FILES_PER_DIR:03d}", f"f{i:07d}")


def file_size(rng: random.Random, mean: int) -> int:
    # Filebench's default file size distribution: gamma with shape 1.5 and the given mean.
    size = int(rng.gammavariate(1.5, mean / 1.5))
    return max(4 * KIB, min(size, 8 * mean))


def write_file(path: str, size: int, chunk: int, buf: bytes) -> int:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        left = size
        while left > 0:
            n = min(left, chunk)
            os.write(fd, buf[:n])
            left -= n
    finally:
        os.close(fd)
    return size


def cmd_init(args) -> int:
    rng = random.Random(args.seed)
    mean = parse_size(args.mean_size)
    buf = os.urandom(MIB)
    total = 0
    t0 = time.perf_counter()
    for d in range((args.files + FILES_PER_DIR - 1) // FILES_PER_DIR):
        os.makedirs(os.path.join(args.dir, "fileset", f"d{d:03d}"), exist_ok=True)
    for i in range(args.files):
        if rng.random() < PREALLOC:
            total += write_file(path_of(args.dir, i), file_size(rng, mean), MIB, buf)
    os.sync()
    meta = {"workload": args.workload, "files": args.files, "mean_size": mean, "bytes": total,
            "seconds": time.perf_counter() - t0}
    with open(os.path.join(args.dir, "fileset", "manifest.json"), "w") as f:
        json.dump(meta, f)
    print(json.dumps(meta))
    return 0


class Runner:
    def __init__(self, root: str, workload: str, indices: list[int], mean: int, seed: int):
        self.root, self.workload, self.mean = root, workload, mean
        self.read_io, self.write_io = WORKLOADS[workload]
        self.rng = random.Random(seed)
        self.exists = [i for i in indices if os.path.exists(path_of(root, i))]
        self.free = [i for i in indices if i not in set(self.exists)]
        self.buf = os.urandom(max(self.read_io, self.write_io, 64 * KIB))
        self.ops: dict[str, int] = {}
        self.read_bytes = 0
        self.write_bytes = 0

    def count(self, op: str, n: int = 1) -> None:
        self.ops[op] = self.ops.get(op, 0) + n

    def pick(self) -> int | None:
        return self.exists[self.rng.randrange(len(self.exists))] if self.exists else None

    def append_size(self) -> int:
        return self.rng.randint(1, 2 * self.write_io)  # mean ~ write_io

    def create(self) -> int | None:
        """Create a new file (from the free names); returns its fd or None."""
        if not self.free:
            return None
        i = self.free.pop(self.rng.randrange(len(self.free)))
        fd = os.open(path_of(self.root, i), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        self.exists.append(i)
        self.count("create")
        return fd

    def delete(self) -> None:
        if not self.exists:
            return
        i = self.exists.pop(self.rng.randrange(len(self.exists)))
        os.unlink(path_of(self.root, i))
        self.free.append(i)
        self.count("delete")

    def append(self, fd: int) -> None:
        n = self.append_size()
        os.write(fd, self.buf[:n])
        self.write_bytes += n
        self.count("append")

    def close(self, fd: int) -> None:
        os.close(fd)
        self.count("close")

    def open_random(self, flags: int) -> int | None:
        i = self.pick()
        if i is None:
            return None
        fd = os.open(path_of(self.root, i), flags)
        self.count("open")
        return fd

    def read_whole(self, fd: int) -> None:
        while True:
            data = os.read(fd, self.read_io)
            if not data:
                break
            self.read_bytes += len(data)
        self.count("read_whole")

    def write_whole(self, fd: int) -> None:
        left = file_size(self.rng, self.mean)
        while left > 0:
            n = min(left, self.write_io)
            os.write(fd, self.buf[:n])
            left -= n
            self.write_bytes += n
        self.count("write_whole")

    # -- one iteration of each personality --------------------------------

    def fileserver(self) -> None:
        fd = self.create()
        if fd is not None:
            self.write_whole(fd)
            self.close(fd)
        fd = self.open_random(os.O_WRONLY | os.O_APPEND)
        if fd is not None:
            self.append(fd)
            self.close(fd)
        fd = self.open_random(os.O_RDONLY)
        if fd is not None:
            self.read_whole(fd)
            self.close(fd)
        self.delete()
        i = self.pick()
        if i is not None:
            os.stat(path_of(self.root, i))
            self.count("stat")

    def webproxy(self) -> None:
        self.delete()
        fd = self.create()
        if fd is not None:
            self.append(fd)
            self.close(fd)
        for _ in range(5):
            fd = self.open_random(os.O_RDONLY)
            if fd is not None:
                self.read_whole(fd)
                self.close(fd)

    def varmail(self) -> None:
        self.delete()
        fd = self.create()
        if fd is not None:
            self.append(fd)
            self.append(fd)
            os.fsync(fd)  # one fsync after every two appends
            self.count("fsync")
            self.close(fd)
        for _ in range(2):
            fd = self.open_random(os.O_RDONLY)
            if fd is not None:
                self.read_whole(fd)
                self.close(fd)

    def run(self, seconds: float) -> dict:
        step = getattr(self, self.workload)
        iterations = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            step()
            iterations += 1
        elapsed = time.perf_counter() - t0
        return {"iterations": iterations, "seconds": elapsed, "ops": self.ops,
                "read_bytes": self.read_bytes, "write_bytes": self.write_bytes}


def _worker(a: tuple) -> dict:
    root, workload, indices, mean, seed, seconds = a
    return Runner(root, workload, indices, mean, seed).run(seconds)


def cmd_run(args) -> int:
    with open(os.path.join(args.dir, "fileset", "manifest.json")) as f:
        meta = json.load(f)
    n = meta["files"]
    parts = [(args.dir, args.workload, list(range(w, n, args.workers)), meta["mean_size"], args.seed + w,
              args.seconds) for w in range(args.workers)]
    if args.workers == 1:
        results = [_worker(parts[0])]
    else:
        with multiprocessing.Pool(args.workers) as pool:
            results = pool.map(_worker, parts)
    ops: dict[str, int] = {}
    for r in results:
        for k, v in r["ops"].items():
            ops[k] = ops.get(k, 0) + v
    seconds = max(r["seconds"] for r in results)
    total_ops = sum(ops.values())
    out = {
        "workload": args.workload,
        "files": n,
        "mean_file_size": meta["mean_size"],
        "workers": args.workers,
        "seconds": seconds,
        "ops": ops,
        "total_ops": total_ops,
        "ops_per_s": total_ops / seconds,
        "iterations_per_s": sum(r["iterations"] for r in results) / seconds,
        "read_mb_per_s": sum(r["read_bytes"] for r in results) / seconds / 1e6,
        "write_mb_per_s": sum(r["write_bytes"] for r in results) / seconds / 1e6,
        "read_io_bytes": WORKLOADS[args.workload][0],
        "write_io_bytes": WORKLOADS[args.workload][1],
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("init", help="create the file set")
    i.add_argument("dir")
    i.add_argument("--files", type=int, required=True)
    i.add_argument("--mean-size", default="2M")
    r = sub.add_parser("run", help="run the workload for --seconds")
    r.add_argument("dir")
    r.add_argument("--seconds", type=float, required=True)
    r.add_argument("--workers", type=int, default=1)
    r.add_argument("--output")
    for p in (i, r):
        p.add_argument("--workload", choices=sorted(WORKLOADS), required=True)
        p.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    return cmd_init(args) if args.cmd == "init" else cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
