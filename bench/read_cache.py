#!/usr/bin/env python3
"""Reads of hot data (issue 16, step 1): cached 4 KiB random preads and
128 KiB sequential reads of a file that was just read, opened read-only, on
ext4 (the disk), on Terrace built OLD and NEW (PM-only pool on /dev/shm,
mounted in turn), in the same run. Also `tar -c` of a tree, second pass.

    bench/read_cache.py OLD_TERRACE NEW_TERRACE [ROUNDS] > result.json
"""
import json, os, random, subprocess, sys, tempfile, time, platform

OLD, NEW = sys.argv[1], sys.argv[2]
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
SIZE = 256 << 20


def measure(d):
    path = os.path.join(d, "hot")
    with open(path, "wb") as f:
        blk = os.urandom(1 << 20)
        for _ in range(SIZE >> 20):
            f.write(blk)
    # A tree for tar: 2,000 files of 16 KiB.
    tree = os.path.join(d, "tree")
    os.makedirs(tree, exist_ok=True)
    small = os.urandom(16 << 10)
    for i in range(2000):
        with open(os.path.join(tree, f"f{i}"), "wb") as f:
            f.write(small)
    fd = os.open(path, os.O_RDONLY)
    try:
        off = 0
        while os.pread(fd, 1 << 20, off):
            off += 1 << 20
        rnd = random.Random(1)
        offs = [rnd.randrange(0, SIZE // 4096) * 4096 for _ in range(100_000)]
        t = time.perf_counter()
        for o in offs:
            os.pread(fd, 4096, o)
        us_4k = (time.perf_counter() - t) / len(offs) * 1e6
        t = time.perf_counter()
        off = 0
        while True:
            b = os.pread(fd, 128 << 10, off)
            if not b:
                break
            off += len(b)
        gbps_128k = SIZE / (time.perf_counter() - t) / 1e9
    finally:
        os.close(fd)
    subprocess.run(["tar", "-cf", "/dev/null", "-C", d, "tree"], check=True)
    t = time.perf_counter()
    subprocess.run(["tar", "-cf", "/dev/null", "-C", d, "tree"], check=True)
    tar_s = time.perf_counter() - t
    # tar to /dev/null may skip reading; read through a pipe instead.
    t = time.perf_counter()
    subprocess.run(f"tar -cf - -C {d} tree | cat > /dev/null", shell=True, check=True)
    tar_pipe_s = time.perf_counter() - t
    return {"pread_4k_us": round(us_4k, 3), "read_128k_GBps": round(gbps_128k, 3),
            "tar_warm_s": round(tar_pipe_s, 3)}


def terrace_run(binary):
    pm = f"/dev/shm/terrace-readcache-{os.getpid()}.pm"
    mnt = tempfile.mkdtemp(prefix="terrace-readcache-")
    subprocess.run([binary, "mkfs", "--force", "--tier", f"pm:{pm}:1G"], check=True,
                   capture_output=True)
    subprocess.run([binary, "mount", pm, mnt, "--daemon"], check=True, capture_output=True)
    try:
        return measure(mnt)
    finally:
        subprocess.run([binary, "umount", mnt], capture_output=True)
        os.rmdir(mnt)
        os.unlink(pm)


def ext4_run():
    d = tempfile.mkdtemp(prefix="terrace-readcache-ext4-", dir="/var/tmp")
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
