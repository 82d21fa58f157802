#!/usr/bin/env python3
"""What online discard (`-o discard`) costs and gives back, against ext4 with
and without `-o discard`, in the same run.

Each system gets the same churn: 3 times, 64 files of 4 MiB are written
(each fsync'd) and then all deleted, as a spool or a build tree does. Then
nothing happens for 12 s (more than `-o discard`'s 10 s interval), and the
bytes the host file system still holds for the device image (st_blocks)
are read: what the deletes gave back to the disk under it.

- ext4, ext4-discard: ext4 on a loop device over a 2 GiB sparse image on the
  disk (/var/tmp), mounted without and with `-o discard` (the loop driver
  punches its image for a discard);
- terrace, terrace-discard: the build given, a pool of PM 64 MiB (/dev/shm)
  + an SSD tier that is a 2 GiB sparse image on the disk, the files under a
  `terrace rule DIR ssd` folder so they go to the SSD image, without and
  with `-o discard`.

    bench/online_discard.py TERRACE [ROUNDS] > out.json
"""
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import same_run  # noqa: E402

MiB = 1 << 20
FILES, FILE_BYTES, CHURNS, IDLE_S = 64, 4 * MiB, 3, 12
IMAGE_BYTES = 2 << 30


def churn(d):
    """Seconds for the writes and the deletes of CHURNS rounds."""
    data = os.urandom(FILE_BYTES)
    write_s = delete_s = 0.0
    for _ in range(CHURNS):
        t = time.perf_counter()
        for i in range(FILES):
            fd = os.open(os.path.join(d, f"f{i}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        write_s += time.perf_counter() - t
        t = time.perf_counter()
        for i in range(FILES):
            os.unlink(os.path.join(d, f"f{i}"))
        os.sync()
        delete_s += time.perf_counter() - t
    return write_s, delete_s


def measure(d, image):
    write_s, delete_s = churn(d)
    time.sleep(IDLE_S)
    total = CHURNS * FILES * FILE_BYTES
    return {"write_MBps": round(total / write_s / 1e6, 1),
            "delete_s": round(delete_s, 3),
            "image_held_MiB_after_idle": round(os.stat(image).st_blocks * 512 / MiB, 1)}


@contextlib.contextmanager
def ext4_on_loop(options):
    img = f"/var/tmp/terrace-bench-discard-{os.getpid()}.img"
    mnt = tempfile.mkdtemp(prefix="terrace-bench-ext4-")
    dev = None
    try:
        with open(img, "wb") as f:
            f.truncate(IMAGE_BYTES)
        dev = subprocess.run(["losetup", "--find", "--show", img], check=True,
                             capture_output=True, text=True).stdout.strip()
        subprocess.run(["mkfs.ext4", "-q", "-F", "-E", "nodiscard", dev], check=True)
        subprocess.run(["mount", *(["-o", options] if options else []), dev, mnt], check=True)
        yield mnt, img
    finally:
        subprocess.run(["umount", mnt], capture_output=True)
        if dev:
            subprocess.run(["losetup", "--detach", dev], capture_output=True)
        os.rmdir(mnt)
        if os.path.exists(img):
            os.unlink(img)


def ext4_run(options):
    with ext4_on_loop(options) as (mnt, img):
        return measure(mnt, img)


def terrace_run(binary, options):
    with same_run.tiered_mount(binary, "64M", "2G", options, tag="terrace-bench-discard") as mnt:
        d = os.path.join(mnt, "spool")
        os.mkdir(d)
        subprocess.run([binary, "rule", d, "ssd"], check=True, capture_output=True)
        image = f"/var/tmp/terrace-bench-discard-{os.getpid()}.ssd"
        out = measure(d, image)
        st = json.loads(subprocess.run([binary, "status", mnt, "--json"], check=True,
                                       capture_output=True, text=True).stdout)
        out["online_discard_passes"] = st["discard"]["passes"]
        out["online_discard_MiB"] = round(st["discard"]["bytes"] / MiB, 1)
        return out


def main():
    binary = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    runs = same_run.run_rounds([
        ("ext4", lambda: ext4_run(None)),
        ("ext4-discard", lambda: ext4_run("discard")),
        ("terrace", lambda: terrace_run(binary, None)),
        ("terrace-discard", lambda: terrace_run(binary, "discard")),
    ], rounds)
    rep = same_run.report(runs, terrace=binary, files=FILES, file_bytes=FILE_BYTES,
                          churns=CHURNS, idle_s=IDLE_S)
    s = rep["summary"]
    rep["ratios"] = {
        "terrace_discard_write_vs_terrace": round(
            s["terrace-discard"]["write_MBps"] / s["terrace"]["write_MBps"], 2),
        "ext4_discard_write_vs_ext4": round(
            s["ext4-discard"]["write_MBps"] / s["ext4"]["write_MBps"], 2),
        "terrace_discard_write_vs_ext4_discard": round(
            s["terrace-discard"]["write_MBps"] / s["ext4-discard"]["write_MBps"], 2),
    }
    print(json.dumps(rep, indent=2))


if __name__ == "__main__":
    main()
