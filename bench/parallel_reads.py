#!/usr/bin/env python3
"""Readers of one file in parallel (issue 16 point 3): 4 KiB random reads
with O_DIRECT (so that every read reaches the file system, past the kernel's
page cache) of one 512 MiB file, by one and by two fio jobs, in the same run
on:

- ext4: a folder on the disk (/var/tmp);
- OLD and NEW Terrace builds, each on a pool PM 256M + SSD 2G whose file is
  pinned to the SSD tier (`user.terrace.rule=ssd`) with a DRAM cache of
  16 MiB, so that most reads are device reads of the SSD tier (a file on
  the same disk; its host page cache makes them fast, so this measures the
  file system's own serialisation more than the device).

    bench/parallel_reads.py OLD_TERRACE NEW_TERRACE [ROUNDS] > out.json

The figure of merit is `scaling`: IOPS with two readers over IOPS with one
(goal ≥ 1.7 on 2 CPUs).
"""
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import same_run  # noqa: E402

SIZE = "512M"
RUNTIME = int(os.environ.get("RUNTIME", "8"))


def iops(path, jobs, direct=True, size=SIZE, runtime=None):
    """IOPS of `jobs` fio jobs of 4 KiB random preads of one file; buffered
    reads (`direct=False`) keep the file's cached pages (no invalidation)."""
    out = subprocess.run(
        ["fio", "--name=r", f"--filename={path}", "--rw=randread", "--bs=4k",
         f"--direct={int(direct)}", "--ioengine=psync", f"--numjobs={jobs}",
         "--group_reporting", "--time_based", f"--runtime={runtime or RUNTIME}",
         f"--size={size}", f"--invalidate={int(direct)}", "--output-format=json"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)["jobs"][0]["read"]["iops"]


def fill(path):
    subprocess.run(["dd", "if=/dev/urandom", f"of={path}", "bs=1M", "count=512",
                    "conv=fsync", "status=none"], check=True)


def measure(path):
    one = iops(path, 1)
    two = iops(path, 2)
    return {"iops_1": one, "iops_2": two, "scaling": two / one}


def terrace_run(binary):
    with same_run.tiered_mount(binary, "256M", "2G", "dram_cache_bytes=16M",
                               tag="terrace-par") as mnt:
        f = os.path.join(mnt, "f")
        open(f, "w").close()
        os.setxattr(f, "user.terrace.rule", b"ssd")
        fill(f)
        return measure(f)


def ext4_run():
    d = tempfile.mkdtemp(prefix="terrace-par-ext4-", dir="/var/tmp")
    try:
        f = os.path.join(d, "f")
        fill(f)
        return measure(f)
    finally:
        subprocess.run(["rm", "-rf", d])


def main():
    old, new = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    systems = [("ext4", ext4_run), ("old", lambda: terrace_run(old)),
               ("new", lambda: terrace_run(new))]
    runs = []
    for r in range(rounds):
        for name, fn in systems:
            load = os.getloadavg()[0]
            res = fn()
            res.update({"fs": name, "round": r + 1, "load_1m_before": round(load, 2),
                        "load_1m_after": round(os.getloadavg()[0], 2)})
            runs.append(res)
            print(json.dumps(res), file=sys.stderr)
    summary = {name: {k: statistics.median(x[k] for x in runs if x["fs"] == name)
                      for k in ("iops_1", "iops_2", "scaling")} for name, _ in systems}
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 30
    print(json.dumps({"machine": f"{platform.release()}, {os.cpu_count()} CPUs, {mem} GiB RAM",
                      "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                      "runtime_s": RUNTIME, "summary": summary, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
