#!/usr/bin/env python3
"""Metadata from the kernel's caches (issue 16, step 2 start): on ext4 (the
disk), Terrace built OLD and NEW (PM-only pool on /dev/shm), same run:
stat of 20,000 missing names (second pass: negative entries), `find` and
`ls -lR` of a 10,000-file tree (after the kernel forgot its names, then
again warm; the first results, 2026-11-25, had the warm pass only).

    bench/metadata_cache.py OLD_TERRACE NEW_TERRACE [ROUNDS] > result.json
"""
import os, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import same_run  # noqa: E402



def timed(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def make_tree(d, dirs=100, per_dir=100):
    """`dirs` directories of `per_dir` files of 100 bytes under d/tree."""
    tree = os.path.join(d, "tree")
    for i in range(dirs):
        sub = os.path.join(tree, f"d{i}")
        os.makedirs(sub)
        for j in range(per_dir):
            with open(os.path.join(sub, f"f{j}.c"), "wb") as f:
                f.write(b"x" * 100)
    return tree


def drop_dentries():
    """Makes the kernel forget unused names and inodes (every file system's;
    ext4 keeps its blocks in the page cache, so nothing is read from the
    disk again): a directory walk after it is one of a tree the kernel has
    not seen."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2")


def walks(tree, n):
    """`find` and `ls -lR` of the tree of n files: first after the kernel
    forgot its names (cold), then again (warm)."""
    k = f"{n // 1000}k"
    out = {}
    for cmd, name in ((f"find {tree}", "find"), (f"ls -lR {tree}", "ls_lR")):
        drop_dentries()
        out[f"{name}_{k}_cold_s"] = round(timed(f"{cmd} > /dev/null"), 4)
        out[f"{name}_{k}_warm_s"] = round(timed(f"{cmd} > /dev/null"), 4)
    return out


def measure(d):
    tree = make_tree(d)
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
    return {"stat_missing_20k_s": round(neg, 4), **walks(tree, 10_000)}


if __name__ == "__main__":
    same_run.main(measure, "512M", ("--inodes", "40000"))
