#!/usr/bin/env python3
"""`ls -l` and the SELinux label (issue 16, the `ls -lR` rows): coreutils
`ls -l` asks every file for `security.selinux`; a file system that answers
ENODATA is asked again for the next file (a FUSE round trip each), one that
answers EOPNOTSUPP once is not asked again on that device. Same run, same
binary: ext4 (a folder on the disk, /var/tmp), Terrace with its default
(the label not supported) and Terrace with `-o selinux_labels` (stored as
ext4 does: the behaviour before 2026-11-30), each a PM-only pool on
/dev/shm, alternated per round. Per system: `ls -lR` of 50,000 files (500
directories × 100) after the kernel forgot its names (cold) and again
(warm), and `ls -l` of one directory of 10,000 files, warm; with the
daemon's getxattr requests counted (metrics endpoint) for Terrace.

    bench/ls_labels.py TERRACE [ROUNDS] > result.json
"""
import os
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import metadata_cache  # noqa: E402
import same_run  # noqa: E402

METRICS = "127.0.0.1:9473"


def getxattr_requests():
    """The daemon's getxattr count so far (0 when nothing serves metrics)."""
    try:
        text = urllib.request.urlopen(f"http://{METRICS}/metrics", timeout=5).read().decode()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith('terrace_fuse_request_duration_seconds_count{op="getxattr"}'):
            return int(float(line.split()[-1]))
    return 0


def measure(d):
    tree = metadata_cache.make_tree(d, dirs=500, per_dir=100)
    flat = os.path.join(d, "flat")
    os.makedirs(flat)
    for j in range(10_000):
        with open(os.path.join(flat, f"f{j}"), "wb") as f:
            f.write(b"x" * 100)
    before = getxattr_requests()
    out = {}
    metadata_cache.drop_dentries()
    out["ls_lR_50k_cold_s"] = round(metadata_cache.timed(f"ls -lR {tree} > /dev/null"), 4)
    out["ls_lR_50k_warm_s"] = round(metadata_cache.timed(f"ls -lR {tree} > /dev/null"), 4)
    metadata_cache.timed(f"ls -l {flat} > /dev/null")
    out["ls_l_10k_warm_s"] = round(metadata_cache.timed(f"ls -l {flat} > /dev/null"), 4)
    out["getxattr_requests"] = getxattr_requests() - before
    return out


def main():
    binary = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    metrics = f"metrics={METRICS}"
    systems = [
        ("ext4", lambda: same_run.ext4_run(measure)),
        ("terrace", lambda: same_run.terrace_run(binary, measure, "1G", ("--inodes", "80000"),
                                                 options=metrics)),
        ("terrace-selinux_labels",
         lambda: same_run.terrace_run(binary, measure, "1G", ("--inodes", "80000"),
                                      options=f"{metrics},selinux_labels")),
    ]
    runs = same_run.run_rounds(systems, rounds)
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    import json
    print(json.dumps(same_run.report(runs, terrace=binary, build=rev), indent=2))


if __name__ == "__main__":
    main()
