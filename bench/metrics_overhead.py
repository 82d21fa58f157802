#!/usr/bin/env python3
"""What timing every FUSE request costs (issue 18 point 3, `-o metrics=`):
µs per request of three request loops that each reach the daemon once per
call, on a PM-only pool on /dev/shm mounted by OLD (a build without the
metrics), NEW without `metrics=`, and NEW with `metrics=` (requests timed),
alternated per round in the same run:

- getxattr_miss_us: getxattr of an attribute the file does not have (the
  smallest round trip: ENODATA from the core);
- pread_direct_4k_us: 4 KiB O_DIRECT preads at random offsets of a 16 MiB file;
- pwrite_wronly_4k_us: 4 KiB pwrites at random offsets through an O_WRONLY
  descriptor (direct I/O: one FUSE write each).

    bench/metrics_overhead.py OLD_TERRACE NEW_TERRACE [ROUNDS] > result.json

Medians and minimums per configuration go to stdout as JSON, each run to
stderr (on a shared, busy machine the minimums are the steadier figure).
In-process, starting and recording one request's timer costs about 65 ns
here (two clock reads of ~24 ns each, a bucket search, two atomic adds).
"""
import json
import mmap
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time

SIZE = 16 << 20
N = 50_000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def per_call_us(fn, n=N):
    t = time.perf_counter()
    for i in range(n):
        fn(i)
    return (time.perf_counter() - t) / n * 1e6


def measure(d):
    path = os.path.join(d, "data")
    with open(path, "wb") as f:
        f.write(os.urandom(SIZE))
        os.fsync(f.fileno())
    rnd = random.Random(1)
    offs = [rnd.randrange(0, SIZE // 4096) * 4096 for _ in range(N)]

    def getxattr(_):
        try:
            os.getxattr(path, "user.none")
        except OSError:
            pass

    out = {"getxattr_miss_us": per_call_us(getxattr)}
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT wants
    try:
        out["pread_direct_4k_us"] = per_call_us(lambda i: os.preadv(fd, [buf], offs[i]))
    finally:
        os.close(fd)
    fd = os.open(path, os.O_WRONLY)
    block = os.urandom(4096)
    try:
        out["pwrite_wronly_4k_us"] = per_call_us(lambda i: os.pwrite(fd, block, offs[i]))
    finally:
        os.close(fd)
    return {k: round(v, 3) for k, v in out.items()}


def terrace_run(binary, options):
    pm = f"/dev/shm/terrace-bench-{os.getpid()}.pm"
    mnt = tempfile.mkdtemp(prefix="terrace-bench-")
    subprocess.run([binary, "mkfs", "--force", "--tier", f"pm:{pm}:256M"], check=True,
                   capture_output=True)
    args = [binary, "mount", pm, mnt, "--daemon"] + (["-o", options] if options else [])
    subprocess.run(args, check=True, capture_output=True)
    try:
        return measure(mnt)
    finally:
        subprocess.run([binary, "umount", mnt], capture_output=True)
        os.rmdir(mnt)
        os.unlink(pm)


def main():
    old, new = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    configs = (("old", old, None), ("new", new, None),
               ("new+metrics", new, lambda: f"metrics=127.0.0.1:{free_port()}"))
    runs = []
    for r in range(rounds):
        for name, binary, opts in configs:
            res = terrace_run(binary, opts() if opts else None)
            res.update({"config": name, "round": r + 1})
            runs.append(res)
            print(json.dumps(res), file=sys.stderr)
    keys = [k for k in runs[0] if k.endswith("_us")]
    medians = {name: {k: statistics.median(x[k] for x in runs if x["config"] == name) for k in keys}
               for name, _, _ in configs}
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 30
    minimums = {name: {k: min(x[k] for x in runs if x["config"] == name) for k in keys}
                for name, _, _ in configs}
    print(json.dumps({"machine": f"{platform.release()}, {os.cpu_count()} CPUs, {mem} GiB RAM",
                      "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                      "medians": medians, "minimums": minimums, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
