#!/usr/bin/env python3
"""The webproxy and fileserver rows of issue 16's read-path table: the
Filebench personalities as bench/workloads.py implements them (filebench is
not packaged for Debian), on ext4 (the disk, /var/tmp) and two Terrace builds
(PM-only pool of 2 GiB on /dev/shm), alternated per round in the same run
(same_run.py). Each run: a file set of FILES files (2 MiB mean, 80% made
before the run), then the workload for SECONDS seconds with 2 workers;
operations per second.

    bench/proxy_server.py OLD_TERRACE NEW_TERRACE [ROUNDS] > result.json
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import same_run  # noqa: E402

BENCH = os.path.dirname(os.path.abspath(__file__))
FILES = int(os.environ.get("PROXY_FILES", "200"))
SECONDS = int(os.environ.get("PROXY_SECONDS", "15"))


def run(d, workload):
    w = os.path.join(d, workload)
    os.makedirs(w)
    py = [sys.executable, os.path.join(BENCH, "workloads.py")]
    subprocess.run([*py, "init", w, "--workload", workload, "--files", str(FILES)], check=True,
                   capture_output=True)
    out = subprocess.run([*py, "run", w, "--workload", workload, "--seconds", str(SECONDS),
                          "--workers", "2"], check=True, capture_output=True, text=True).stdout
    subprocess.run(["rm", "-rf", w], check=True)
    return json.loads(out)["ops_per_s"]


def measure(d):
    return {f"{w}_ops_s": round(run(d, w), 1) for w in ("webproxy", "fileserver")}


if __name__ == "__main__":
    same_run.main(measure, "2G", ("--inodes", "20000"))
