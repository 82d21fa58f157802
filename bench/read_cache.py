#!/usr/bin/env python3
"""Reads of hot data (issue 16, step 1): cached 4 KiB random preads and
128 KiB sequential reads of a file that was just read, opened read-only, on
ext4 (the disk), on Terrace built OLD and NEW (PM-only pool on /dev/shm,
mounted in turn), in the same run. Also `tar -c` of a tree, second pass.

    bench/read_cache.py OLD_TERRACE NEW_TERRACE [ROUNDS] > result.json
"""
import os, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import same_run  # noqa: E402

SIZE = 256 << 20


def measure(d):
    path = os.path.join(d, "hot")
    with open(path, "wb") as f:
        blk = os.urandom(1 << 20)
        for _ in range(SIZE >> 20):
            f.write(blk)
    # A tree for tar: 2,000 files of 16 KiB.
    tree = os.path.join(d, "tree")
    os.makedirs(tree, exist_ok=True)
    small = os.urandom(16 << 10)
    for i in range(2000):
        with open(os.path.join(tree, f"f{i}"), "wb") as f:
            f.write(small)
    fd = os.open(path, os.O_RDONLY)
    try:
        us_4k = same_run.cached_pread_4k_us(fd, SIZE)
        t = time.perf_counter()
        off = 0
        while True:
            b = os.pread(fd, 128 << 10, off)
            if not b:
                break
            off += len(b)
        gbps_128k = SIZE / (time.perf_counter() - t) / 1e9
    finally:
        os.close(fd)
    subprocess.run(["tar", "-cf", "/dev/null", "-C", d, "tree"], check=True)
    t = time.perf_counter()
    subprocess.run(["tar", "-cf", "/dev/null", "-C", d, "tree"], check=True)
    tar_s = time.perf_counter() - t
    # tar to /dev/null may skip reading; read through a pipe instead.
    t = time.perf_counter()
    subprocess.run(f"tar -cf - -C {d} tree | cat > /dev/null", shell=True, check=True)
    tar_pipe_s = time.perf_counter() - t
    return {"pread_4k_us": round(us_4k, 3), "read_128k_GBps": round(gbps_128k, 3),
            "tar_warm_s": round(tar_pipe_s, 3)}


if __name__ == "__main__":
    same_run.main(measure, "1G", ())
