#!/usr/bin/env python3
"""Metadata from the kernel's caches (issue 16, step 2 start): on ext4 (the
disk), Terrace built OLD and NEW (PM-only pool on /dev/shm), same run:
stat of 20,000 missing names (second pass: negative entries), `find` and
`ls -lR` of a 10,000-file tree (second pass, warm).

    bench/metadata_cache.py OLD_TERRACE NEW_TERRACE [ROUNDS] > result.json
"""
import json, os, platform, subprocess, sys, tempfile, time

OLD, NEW = sys.argv[1], sys.argv[2]
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3


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


def terrace_run(binary):
    pm = f"/dev/shm/terrace-metacache-{os.getpid()}.pm"
    mnt = tempfile.mkdtemp(prefix="terrace-metacache-")
    subprocess.run([binary, "mkfs", "--force", "--tier", f"pm:{pm}:512M", "--inodes", "40000"],
                   check=True, capture_output=True)
    subprocess.run([binary, "mount", pm, mnt, "--daemon"], check=True, capture_output=True)
    try:
        return measure(mnt)
    finally:
        subprocess.run([binary, "umount", mnt], capture_output=True)
        os.rmdir(mnt)
        os.unlink(pm)


def ext4_run():
    d = tempfile.mkdtemp(prefix="terrace-metacache-ext4-", dir="/var/tmp")
    try:
        return measure(d)
    finally:
        subprocess.run(["rm", "-rf", d])


runs = []
for r in range(ROUNDS):
    for name, fn in (("ext4", ext4_run), ("old", lambda: terrace_run(OLD)),
                     ("new", lambda: terrace_run(NEW))):
        res = fn()
        res.update({"fs": name, "round": r + 1})
        runs.append(res)
        print(json.dumps(res), file=sys.stderr)
mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 30
print(json.dumps({"machine": f"{platform.release()}, {os.cpu_count()} CPUs, {mem} GiB RAM",
                  "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "runs": runs}, indent=2))
