"""Same-run comparison of ext4 (a folder on the disk, /var/tmp) with two
Terrace builds (a PM-only pool on /dev/shm each), alternated per round; the
result is JSON on stdout with the machine, and one line per run on stderr.

Used by read_cache.py, metadata_cache.py, rw_opens.py and read_path.py: each gives a `measure(dir)`
that returns a dict of numbers.
"""
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time


def cached_pread_4k_us(fd, size, n=100_000):
    """Reads the whole file of `size` bytes behind `fd` once (so it is
    cached), then times `n` random 4 KiB preads of it; µs per read."""
    import random
    off = 0
    while os.pread(fd, 1 << 20, off):
        off += 1 << 20
    rnd = random.Random(1)
    offs = [rnd.randrange(0, size // 4096) * 4096 for _ in range(n)]
    t = time.perf_counter()
    for o in offs:
        os.pread(fd, 4096, o)
    return (time.perf_counter() - t) / len(offs) * 1e6


def terrace_run(binary, measure, pm_size, mkfs_extra=(), options=None):
    pm = f"/dev/shm/terrace-bench-{os.getpid()}.pm"
    mnt = tempfile.mkdtemp(prefix="terrace-bench-")
    subprocess.run([binary, "mkfs", "--force", "--tier", f"pm:{pm}:{pm_size}", *mkfs_extra],
                   check=True, capture_output=True)
    opts = ["-o", options] if options else []
    subprocess.run([binary, "mount", pm, mnt, "--daemon", *opts], check=True, capture_output=True)
    try:
        return measure(mnt)
    finally:
        subprocess.run([binary, "umount", mnt], capture_output=True)
        os.rmdir(mnt)
        os.unlink(pm)


@contextlib.contextmanager
def tiered_mount(binary, pm_size, ssd_size, options=None, tag="terrace-bench"):
    """A fresh pool PM `pm_size` (on /dev/shm) + SSD `ssd_size` (a sparse
    image on the disk, /var/tmp) built by `binary`, mounted; yields the
    mount point, then unmounts and removes the pool."""
    name = f"{tag}-{os.getpid()}"
    pm, ssd = f"/dev/shm/{name}.pm", f"/var/tmp/{name}.ssd"
    mnt = tempfile.mkdtemp(prefix=f"{tag}-")
    try:
        subprocess.run([binary, "mkfs", "--force", "--tier", f"pm:{pm}:{pm_size}",
                        "--tier", f"ssd:{ssd}:{ssd_size}"], check=True, capture_output=True)
        opts = ["-o", options] if options else []
        subprocess.run([binary, "mount", pm, mnt, "--daemon", *opts], check=True,
                       capture_output=True)
        yield mnt
    finally:
        subprocess.run([binary, "umount", mnt], capture_output=True)
        os.rmdir(mnt)
        for p in (pm, ssd):
            if os.path.exists(p):
                os.unlink(p)


def ext4_run(measure):
    d = tempfile.mkdtemp(prefix="terrace-bench-ext4-", dir="/var/tmp")
    try:
        return measure(d)
    finally:
        subprocess.run(["rm", "-rf", d])


def main(measure, pm_size, mkfs_extra=()):
    """`SCRIPT OLD_TERRACE NEW_TERRACE [ROUNDS]`: runs `measure` on ext4, OLD
    and NEW in turn, ROUNDS times (default 3), and prints the JSON."""
    old, new = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    runs = run_rounds([("ext4", lambda: ext4_run(measure)),
                       ("old", lambda: terrace_run(old, measure, pm_size, mkfs_extra)),
                       ("new", lambda: terrace_run(new, measure, pm_size, mkfs_extra))], rounds)
    print(json.dumps(report(runs, old=old, new=new), indent=2))


def run_rounds(systems, rounds):
    """Runs each `(name, fn)` of `systems` in turn, `rounds` times; each
    run's dict gets its system, round and the load average around it, and
    is printed on stderr as it ends. Returns the runs."""
    runs = []
    for r in range(rounds):
        for name, fn in systems:
            load = os.getloadavg()[0]
            res = fn()
            res.update({"fs": name, "round": r + 1, "load_1m_before": round(load, 2),
                        "load_1m_after": round(os.getloadavg()[0], 2)})
            runs.append(res)
            print(json.dumps(res), file=sys.stderr)
    return runs


def machine():
    """The kernel, CPUs and memory of this machine."""
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 30
    return f"{platform.release()}, {os.cpu_count()} CPUs, {mem} GiB RAM"


def report(runs, **extra):
    """The JSON of a same-run comparison: the machine, the date, the
    medians per system of every number the runs have, and the runs."""
    import statistics
    summary = {}
    for r in runs:
        summary.setdefault(r["fs"], {})
    for fs, med in summary.items():
        mine = [r for r in runs if r["fs"] == fs]
        for k, v in mine[0].items():
            if isinstance(v, (int, float)) and k != "round":
                med[k] = statistics.median(r[k] for r in mine if k in r)
    return {"machine": machine(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **extra, "summary": summary, "runs": runs}
