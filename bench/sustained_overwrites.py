#!/usr/bin/env python3
"""Sustained random overwrites of a file four times the size of PM: 4 KiB
asynchronous random writes (fio, psync, one job) into a 1 GiB file for
RUNTIME seconds (default 90), in the same run on:

- ext4: a folder on the disk (/var/tmp);
- OLD and NEW Terrace builds, each on a pool PM 256M + SSD 4G (a sparse
  image on the same disk).

On Terrace the file soon has one extent per 4 KiB block (262,144) and most
of its data on the SSD, moved there by migration while the writes go on:
what this measures is whether the cost of a write stays flat as the file's
extent map and log grow. The figures of merit are the IOPS of the whole
run and of its slowest 10-second window (a cost that grows with the file
shows as a window far below the rest).

    bench/sustained_overwrites.py OLD_TERRACE NEW_TERRACE [ROUNDS] > out.json
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import same_run  # noqa: E402

RUNTIME = int(os.environ.get("RUNTIME", "90"))
WINDOW_MS = 10_000


def measure(d):
    f = os.path.join(d, "overwritten")
    logs = tempfile.mkdtemp(prefix="terrace-bench-bw-")
    try:
        out = subprocess.run(
            ["fio", "--name=r", f"--filename={f}", "--size=1G", "--rw=randwrite",
             "--bs=4k", "--ioengine=psync", "--time_based", f"--runtime={RUNTIME}",
             f"--write_bw_log={logs}/w", f"--log_avg_msec={WINDOW_MS}",
             "--output-format=json"],
            check=True, capture_output=True, text=True).stdout
        total = json.loads(out)["jobs"][0]["write"]["iops"]
        windows = []
        with open(f"{logs}/w_bw.1.log") as log:
            for line in log:
                kib_per_s = int(line.split(",")[1])
                windows.append(kib_per_s / 4)
    finally:
        subprocess.run(["rm", "-rf", logs])
    # A run shorter than one window logs none: the whole run is the window.
    return {"iops": total, "slowest_window_iops": min(windows, default=total),
            "windows_iops": [round(w) for w in windows]}


def terrace_run(binary):
    with same_run.tiered_mount(binary, "256M", "4G", tag="terrace-overwrite") as mnt:
        return measure(mnt)


def main():
    old, new = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    runs = same_run.run_rounds([("ext4", lambda: same_run.ext4_run(measure)),
                                ("old", lambda: terrace_run(old)),
                                ("new", lambda: terrace_run(new))], rounds)
    print(json.dumps(same_run.report(runs, old=old, new=new, runtime_s=RUNTIME), indent=2))


if __name__ == "__main__":
    main()
