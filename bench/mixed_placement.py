#!/usr/bin/env python3
"""A database's WAL next to bulk writers (issue 22): does the synchronous
writer keep PM while large asynchronous streams run?

Each run is one fio invocation with two groups running at once on the same
file system:

- wal: 4 KiB sequential writes, fsync after each, WAL_SIZE in all;
- bulk: BULK_JOBS jobs of 1 MiB asynchronous sequential writes, BULK_SIZE
  each (the job ends with one fsync).

Systems, alternated per round in the same run: ext4 (a folder on the disk,
/var/tmp), Terrace OLD and NEW on a pool PM 128M + SSD 8G (the SSD tier a
file on the same disk), and NEW on a pool whose PM holds everything
(PM 2G + SSD 8G: what the placement achieves at best, as both CPUs are shared
by the two groups either way). For Terrace the result also has the write
classes of `terrace status` (where synchronous writes landed) and where the
WAL's data is after the run (`user.terrace.tiers`).

    bench/mixed_placement.py OLD_TERRACE NEW_TERRACE [ROUNDS] [BULK_JOBS,...] > out.json
    bench/mixed_placement.py --summarize RUNS.jsonl... > out.json   (the JSON lines
        a run prints on stderr, from one or more runs: the summary again)

With MIXED_WORKLOAD=rocksdb the synchronous writer is RocksDB instead:
db_bench fillrandom with --sync=1 (every insert fsyncs its WAL; ROCKS_OPS
inserts of 1000-byte values, bench/kv.py), while the bulk jobs run; its
`wal_iops` is then db_bench's operations per second.

Ratios (WAL IOPS against the PM 2G pool, bulk MB/s against ext4) are in the
`summary` of the output; docs/benchmarks.md has the table.
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

WAL_SIZE = "64M"
BULK_SIZE = os.environ.get("BULK_SIZE", "1G")
WORKLOAD = os.environ.get("MIXED_WORKLOAD", "fio")
ROCKS_OPS = int(os.environ.get("ROCKS_OPS", "40000"))


def bulk_job(d, bulk_jobs):
    return f"""
[bulk]
directory={d}
ioengine=psync
group_reporting=1
rw=write
bs=1M
size={BULK_SIZE}
numjobs={bulk_jobs}
end_fsync=1
"""


def rocks(d, bulk_jobs):
    """db_bench fillrandom --sync=1 while `bulk_jobs` bulk writers run."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import kv  # noqa: E402
    with tempfile.NamedTemporaryFile("w", suffix=".fio", delete=False) as f:
        f.write(bulk_job(d, bulk_jobs))
        path = f.name
    try:
        bulk = subprocess.Popen(["fio", "--output-format=json", path],
                                stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)
        out, _ = kv.run_db_bench([f"--db={d}/db-fillrandom", "--benchmarks=fillrandom",
                                  f"--num={ROCKS_OPS}", "--value_size=1000", "--sync=1"],
                                 timeout=1800)
        bulk_out, _ = bulk.communicate()
    finally:
        os.unlink(path)
    m = next((kv.LINE.match(line) for line in out.splitlines() if kv.LINE.match(line)), None)
    ops = float(m["ops"]) if m else None
    jobs = json.loads(bulk_out)["jobs"]
    return {"wal_iops": ops, "wal_p99_us": 0.0, "wal_sync_p99_us": 0.0,
            "bulk_mb_s": jobs[0]["write"]["bw_bytes"] / 1e6,
            "db_bench": m.group(0) if m else None}


def fio(d, bulk_jobs):
    if WORKLOAD == "rocksdb":
        return rocks(d, bulk_jobs)
    job = f"""
[global]
directory={d}
ioengine=psync
group_reporting=1
[wal]
rw=write
bs=4k
size={WAL_SIZE}
fsync=1
filename=wal
[bulk]
new_group
rw=write
bs=1M
size={BULK_SIZE}
numjobs={bulk_jobs}
end_fsync=1
"""
    with tempfile.NamedTemporaryFile("w", suffix=".fio", delete=False) as f:
        f.write(job)
        path = f.name
    try:
        p = subprocess.run(["fio", "--output-format=json", path], capture_output=True, text=True)
    finally:
        os.unlink(path)
    if p.returncode != 0:
        raise SystemExit(f"fio failed ({p.returncode}) on {d}: {p.stderr.strip()[-500:]}")
    out = p.stdout
    jobs = json.loads(out)["jobs"]
    wal = next(j for j in jobs if j["jobname"] == "wal")
    bulk = next(j for j in jobs if j["jobname"] == "bulk")
    pct = wal["write"]["clat_ns"].get("percentile", {})
    return {
        "wal_iops": wal["write"]["iops"],
        "wal_p99_us": pct.get("99.000000", 0) / 1000,
        "wal_sync_p99_us": wal.get("sync", {}).get("lat_ns", {}).get("percentile", {})
        .get("99.000000", 0) / 1000,
        "bulk_mb_s": bulk["write"]["bw_bytes"] / 1e6,
    }


def terrace_run(binary, bulk_jobs, pm_size, ssd_size="8G"):
    with same_run.tiered_mount(binary, pm_size, ssd_size, tag="terrace-mixed") as mnt:
        res = fio(mnt, bulk_jobs)
        st = json.loads(subprocess.run([binary, "status", mnt, "--json"], check=True,
                                       capture_output=True, text=True).stdout)
        sync = st["placement_by_class"]["sync"]
        res["sync_writes_pm"] = sync["pm_writes"]
        res["sync_writes_block"] = sync["block_writes"]
        res["sync_writes_overflowed"] = sync["overflow_writes"]
        large = st["placement_by_class"]["async_large"]
        res["large_writes_pm"] = large["pm_writes"]
        res["large_writes_block"] = large["block_writes"]
        res["large_writes_overflowed"] = large["overflow_writes"]
        wal_path = os.path.join(mnt, "wal")
        tiers = os.getxattr(wal_path, "user.terrace.tiers").decode() if os.path.exists(wal_path) else ""
        on = {}
        for part in tiers.split():
            if ":" not in part or "+" not in part:
                continue
            rng, where = part.rsplit(":", 1)
            length = int(rng.split("+")[1])
            tier = where.split("@")[0]
            on[tier] = on.get(tier, 0) + length
        res["wal_bytes_by_tier"] = on
        return res


def ext4_run(bulk_jobs):
    d = tempfile.mkdtemp(prefix="terrace-mixed-ext4-", dir="/var/tmp")
    try:
        return fio(d, bulk_jobs)
    finally:
        subprocess.run(["rm", "-rf", d])


SYSTEMS = ("ext4", "old-pm128m", "new-pm128m", "new-pm2g")


def summarize(runs):
    summary = []
    for n in sorted({x["bulk_jobs"] for x in runs}):
        med = {}
        for name in SYSTEMS:
            sel = [x for x in runs if x["fs"] == name and x["bulk_jobs"] == n]
            if not sel:
                continue
            med[name] = {k: statistics.median(x[k] for x in sel)
                         for k in ("wal_iops", "wal_p99_us", "wal_sync_p99_us", "bulk_mb_s")}
            med[name]["rounds"] = len(sel)
            if name != "ext4":
                med[name]["sync_writes_overflowed_max"] = max(x["sync_writes_overflowed"] for x in sel)
        row = {"bulk_jobs": n, "median": med}
        for name in ("old-pm128m", "new-pm128m"):
            if name in med and "new-pm2g" in med:
                row[f"{name}_wal_iops_vs_pm2g"] = med[name]["wal_iops"] / med["new-pm2g"]["wal_iops"]
            if name in med and "ext4" in med:
                row[f"{name}_bulk_vs_ext4"] = med[name]["bulk_mb_s"] / med["ext4"]["bulk_mb_s"]
        summary.append(row)
    return summary


def report(runs):
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 30
    print(json.dumps({"machine": f"{platform.release()}, {os.cpu_count()} CPUs, {mem} GiB RAM",
                      "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                      "workload": WORKLOAD, "wal_size": WAL_SIZE if WORKLOAD == "fio" else None,
                      "rocksdb_ops": ROCKS_OPS if WORKLOAD == "rocksdb" else None,
                      "bulk_size_per_job": BULK_SIZE,
                      "summary": summarize(runs), "runs": runs}, indent=2))


def main():
    if sys.argv[1] == "--summarize":
        runs = []
        for path in sys.argv[2:]:
            with open(path) as f:
                runs += [json.loads(line) for line in f if line.startswith("{")]
        report(runs)
        return
    old, new = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    bulk_counts = [int(x) for x in sys.argv[4].split(",")] if len(sys.argv) > 4 else [1]
    run = {
        "ext4": ext4_run,
        "old-pm128m": lambda n: terrace_run(old, n, "128M"),
        "new-pm128m": lambda n: terrace_run(new, n, "128M"),
        "new-pm2g": lambda n: terrace_run(new, n, "2G"),
    }
    runs = []
    for n in bulk_counts:
        for r in range(rounds):
            for name in SYSTEMS:
                subprocess.run(["sync"])
                res = run[name](n)
                res.update({"fs": name, "bulk_jobs": n, "round": r + 1})
                runs.append(res)
                print(json.dumps(res), file=sys.stderr)
    report(runs)


if __name__ == "__main__":
    main()
