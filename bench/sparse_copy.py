#!/usr/bin/env python3
"""`cp` of sparse files out of Terrace and out of ext4, in the same run:

- "image": a 16 GiB file holding 64 pieces of 64 KiB (4 MiB of data),
  spread evenly, as a thin VM image or a database file with preallocated
  holes;
- "striped": a 256 MiB file of 1 MiB of data, 1 MiB of hole, in turn.

Each file is written, the kernel's caches are dropped, and `cp SRC DST`
(coreutils' default `--sparse=auto`, which finds the data with
lseek(SEEK_DATA/SEEK_HOLE)) copies it to a folder on the disk (/var/tmp).
ext4: the source in a folder on the disk. Terrace (the build given): a
PM-only pool of 256 MiB on /dev/shm; the bytes the daemon served to `cp` are
counted too (`terrace status --json`, bytes_read).

    bench/sparse_copy.py TERRACE [ROUNDS] > out.json
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import same_run  # noqa: E402

MiB = 1 << 20
SHAPES = {
    # name: (size, [(offset, length)])
    "image": (16 << 30, [(k * (16 << 30) // 64, 64 << 10) for k in range(64)]),
    "striped": (256 * MiB, [(k * 2 * MiB, MiB) for k in range(128)]),
}


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def write_shape(path, size, pieces):
    data = os.urandom(MiB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, size)
        for off, n in pieces:
            os.pwrite(fd, data[:n], off)
        os.fsync(fd)
    finally:
        os.close(fd)


def copy_s(src):
    """Seconds `cp` takes to copy `src` to the disk (caches dropped first)."""
    dst_dir = tempfile.mkdtemp(prefix="terrace-bench-cp-", dir="/var/tmp")
    try:
        drop_caches()
        t = time.perf_counter()
        subprocess.run(["cp", src, os.path.join(dst_dir, "copy")], check=True)
        return round(time.perf_counter() - t, 4)
    finally:
        shutil.rmtree(dst_dir, ignore_errors=True)


def measure(d, bytes_read=None):
    out = {}
    for name, (size, pieces) in SHAPES.items():
        src = os.path.join(d, name)
        write_shape(src, size, pieces)
        before = bytes_read() if bytes_read else 0
        out[f"{name}_cp_s"] = copy_s(src)
        if bytes_read:
            out[f"{name}_daemon_bytes_read"] = bytes_read() - before
        os.unlink(src)
    return out


def terrace_run(binary):
    def run(mnt):
        def bytes_read():
            st = subprocess.run([binary, "status", mnt, "--json"], check=True,
                                capture_output=True, text=True).stdout
            return json.loads(st)["bytes_read"]
        return measure(mnt, bytes_read)
    return same_run.terrace_run(binary, run, "256M")


def main():
    binary = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    runs = same_run.run_rounds([("ext4", lambda: same_run.ext4_run(measure)),
                                ("terrace", lambda: terrace_run(binary))], rounds)
    rep = same_run.report(runs, terrace=binary,
                          shapes={k: {"size": s, "data": sum(n for _, n in p)}
                                  for k, (s, p) in SHAPES.items()})
    s = rep["summary"]
    rep["ratios"] = {f"{name}_terrace_time_vs_ext4":
                     round(s["terrace"][f"{name}_cp_s"] / s["ext4"][f"{name}_cp_s"], 2)
                     for name in SHAPES}
    print(json.dumps(rep, indent=2))


if __name__ == "__main__":
    main()
