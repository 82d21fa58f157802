#!/usr/bin/env python3
"""Sequential reads of a file scattered by random overwrites, before and
after `terrace migrate --defragment`, in the same run as ext4:

- a 512 MiB file written sequentially (fsync), then 30,000 random 4 KiB
  overwrites (an fsync every 2,000), then read sequentially in 1 MiB reads
  with the kernel's caches dropped first;
- ext4: a folder on the disk (/var/tmp), read once;
- Terrace (the build given): a pool PM 64M + SSD 2G (a sparse image on the
  same disk) with a 16 MiB DRAM cache; the file is moved to the SSD with
  `terrace migrate` after each phase of writes, read ("scattered"), then
  `terrace migrate --defragment`, read again ("defragmented").

Block tiers never overwrite in place, so on Terrace the overwritten blocks
land wherever write-back appends and the file lies in tens of thousands of
runs; ext4 overwrites in place and its file stays in order.

    bench/defragment.py TERRACE [ROUNDS] > out.json
"""
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import same_run  # noqa: E402

MiB = 1 << 20
SIZE = 512 * MiB
OVERWRITES = 30_000


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def write_scattered(path):
    """The file, written sequentially, then overwritten at random."""
    chunk = random.Random(1).randbytes(MiB)
    with open(path, "wb") as f:
        for _ in range(SIZE // MiB):
            f.write(chunk)
        os.fsync(f.fileno())
    rng = random.Random(2)
    fd = os.open(path, os.O_WRONLY)
    try:
        for k in range(OVERWRITES):
            os.pwrite(fd, rng.randbytes(4096), rng.randrange(SIZE // 4096) * 4096)
            if k % 2000 == 0:
                os.fsync(fd)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_mb_s(path):
    drop_caches()
    t = time.perf_counter()
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(MiB)
            if not b:
                break
            n += len(b)
    assert n == SIZE, n
    return round(SIZE / MiB / (time.perf_counter() - t), 1)


def ext4_measure(d):
    f = os.path.join(d, "scattered")
    write_scattered(f)
    return {"seq_read_mb_s": read_mb_s(f)}


def terrace_run(binary):
    with same_run.tiered_mount(binary, "64M", "2G", options="dram_cache_bytes=16M",
                               tag="terrace-defrag") as mnt:
        f = os.path.join(mnt, "scattered")
        write_scattered(f)
        subprocess.run([binary, "migrate", "-q", mnt, f], check=True)
        scattered = read_mb_s(f)
        t = time.perf_counter()
        out = subprocess.run([binary, "migrate", "--defragment", mnt, f], check=True,
                             capture_output=True, text=True).stdout
        took = time.perf_counter() - t
        line = next(ln for ln in out.splitlines() if "defragmented" in ln)
        words = line.split()
        before = int(words[words.index("runs") - 1])
        after = int(words[words.index("after") - 1])
        return {"scattered_seq_read_mb_s": scattered,
                "defragmented_seq_read_mb_s": read_mb_s(f),
                "defragment_s": round(took, 2), "runs_before": before, "runs_after": after}


def main():
    binary = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    runs = same_run.run_rounds([("ext4", lambda: same_run.ext4_run(ext4_measure)),
                                ("terrace", lambda: terrace_run(binary))], rounds)
    rep = same_run.report(runs, terrace=binary, size_mib=SIZE // MiB, overwrites=OVERWRITES)
    s = rep["summary"]
    ext4 = s["ext4"]["seq_read_mb_s"]
    t = s["terrace"]
    rep["ratios"] = {
        "scattered_vs_ext4": round(t["scattered_seq_read_mb_s"] / ext4, 2),
        "defragmented_vs_ext4": round(t["defragmented_seq_read_mb_s"] / ext4, 2),
        "defragmented_vs_scattered": round(
            t["defragmented_seq_read_mb_s"] / t["scattered_seq_read_mb_s"], 2),
    }
    import json
    print(json.dumps(rep, indent=2))


if __name__ == "__main__":
    main()
