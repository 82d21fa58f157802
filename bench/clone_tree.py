#!/usr/bin/env python3
"""A tree and its `cp -r` moved to the SSD tier: how much room the copy
takes after migration, on Terrace built OLD and NEW (pool PM 512M + SSD 2G,
the SSD a sparse image on the disk), against ext4 on the disk (which has no
shared blocks: its copy takes the room of the tree again), in the same run.

coreutils 9 `cp` uses copy_file_range, which Terrace answers by sharing
the source's blocks (design.md §5k); the question is whether the sharing
survives `terrace migrate --to ssd` (since 2026-11-29 it does).

    bench/clone_tree.py OLD_TERRACE NEW_TERRACE [ROUNDS] > result.json
"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import same_run  # noqa: E402

FILES = 5000
FILE_BYTES = 16 << 10
MiB = 1 << 20


def make_tree(d):
    os.makedirs(os.path.join(d, "a"))
    for i in range(FILES):
        with open(os.path.join(d, "a", f"f{i}"), "wb") as f:
            f.write(os.urandom(FILE_BYTES))
    t = time.perf_counter()
    subprocess.run(["cp", "-r", os.path.join(d, "a"), os.path.join(d, "b")], check=True)
    return time.perf_counter() - t


def stored_bytes(d):
    """Bytes the files under `d` take on their file system (st_blocks)."""
    total = 0
    for root, _, names in os.walk(d):
        for n in names:
            total += os.lstat(os.path.join(root, n)).st_blocks * 512
    return total


def ext4_run():
    d = tempfile.mkdtemp(prefix="terrace-bench-ext4-", dir="/var/tmp")
    try:
        cp_s = make_tree(d)
        os.sync()
        return {"cp_s": round(cp_s, 3), "stored_MiB": round(stored_bytes(d) / MiB, 1)}
    finally:
        subprocess.run(["rm", "-rf", d])


def terrace_run(binary):
    with same_run.tiered_mount(binary, "512M", "2G", "migration_threshold=95") as mnt:
        cp_s = make_tree(mnt)
        t = time.perf_counter()
        subprocess.run([binary, "migrate", "--quiet", "--to", "ssd", mnt], check=True,
                       capture_output=True)
        migrate_s = time.perf_counter() - t
        st = json.loads(subprocess.run([binary, "status", "--json", mnt], check=True,
                                       capture_output=True, text=True).stdout)
        return {"cp_s": round(cp_s, 3), "migrate_s": round(migrate_s, 3),
                "ssd_used_MiB": round(st["tiers"][1]["used"] / MiB, 1),
                "reshared_MiB": round(st["migration"].get("reshared_bytes", 0) / MiB, 1)}


def main():
    old, new = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    runs = []
    for r in range(rounds):
        for name, fn in (("ext4", ext4_run), ("old", lambda: terrace_run(old)),
                         ("new", lambda: terrace_run(new))):
            load = os.getloadavg()[0]
            res = fn()
            res.update({"fs": name, "round": r + 1, "load_1m_before": round(load, 2)})
            runs.append(res)
            print(json.dumps(res), file=sys.stderr)
    print(json.dumps(same_run.report(runs, old=old, new=new,
                                     tree=f"{FILES} files of {FILE_BYTES >> 10} KiB and their cp -r"),
                     indent=2))


if __name__ == "__main__":
    main()
