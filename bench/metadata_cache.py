#!/usr/bin/env python3
"""Metadata from the kernel's caches (issue 16, step 2 start): on ext4 (the
disk), Terrace built OLD and NEW (PM-only pool on /dev/shm), same run:
stat of 20,000 missing names (second pass: negative entries), `find` and
`ls -lR` of a 10,000-file tree (second pass, warm).

    bench/metadata_cache.py OLD_TERRACE NEW_TERRACE [ROUNDS] > result.json
"""
import os, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import same_run  # noqa: E402



def timed(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def measure(d):
    tree = os.path.join(d, "tree")
    for i in range(100):
        sub = os.path.join(tree, f"d{i}")
        os.makedirs(sub)
        for j in range(100):
            with open(os.path.join(sub, f"f{j}.c"), "wb") as f:
                f.write(b"x" * 100)
    missing = [os.path.join(tree, f"d{i % 100}", f"missing{i}.h") for i in range(20000)]

    def stat_missing():
        t = time.perf_counter()
        for p in missing:
            try:
                os.stat(p)
            except FileNotFoundError:
                pass
        return time.perf_counter() - t

    stat_missing()
    neg = stat_missing()
    timed(f"find {tree} > /dev/null")
    find = timed(f"find {tree} > /dev/null")
    timed(f"ls -lR {tree} > /dev/null")
    lslr = timed(f"ls -lR {tree} > /dev/null")
    return {"stat_missing_20k_s": round(neg, 4), "find_10k_warm_s": round(find, 4),
            "ls_lR_10k_warm_s": round(lslr, 4)}


if __name__ == "__main__":
    same_run.main(measure, "512M", ("--inodes", "40000"))
