#!/usr/bin/env python3
"""The read-path table of issue 16: ext4 (the disk, /var/tmp), Terrace built
OLD and NEW (PM-only pool of 2 GiB on /dev/shm), alternated per round in the
same run (bench/same_run.py), medians of the rounds. Each round on each
system:

- cached 4 KiB random preads and 128 KiB sequential reads of a 256 MiB file
  read once, opened read-only; `tar -c` of 2,000 × 16 KiB files, warm,
  through a pipe (read_cache.py);
- 4 KiB random preads of that cached file by one and by two fio jobs
  (psync, buffered): IOPS and the scaling;
- open + close of a cached file (µs; what a zero-message open would save);
- `find` and `ls -lR` of 50,000 files (500 directories × 100), after the
  kernel forgot its names (cold: where READDIRPLUS counts) and again (warm)
  (metadata_cache.py);
- `git status` in a repository of 7,000 committed files (350 directories ×
  20), cold and warm, with one file changed;
- SQLite bulk insert, 200,000 rows of 100 bytes in 200 transactions,
  synchronous=NORMAL, WAL and DELETE journals, then two scans (rw_opens.py);
- the control: 4 KiB random write + fsync, one fio job
  (bench/fio/randwrite-fsync.fio), IOPS — the sync-write lead.

    bench/read_path.py OLD_TERRACE NEW_TERRACE [ROUNDS] > result.json
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import metadata_cache  # noqa: E402
import parallel_reads  # noqa: E402
import read_cache  # noqa: E402
import rw_opens  # noqa: E402
import same_run  # noqa: E402

BENCH = os.path.dirname(os.path.abspath(__file__))
RUNTIME = int(os.environ.get("RUNTIME", "4"))


def open_close_us(path, n=20_000):
    t = time.perf_counter()
    for _ in range(n):
        os.close(os.open(path, os.O_RDONLY))
    return (time.perf_counter() - t) / n * 1e6


def git(repo, *args):
    subprocess.run(["git", "-C", repo, *args], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def git_status(d):
    """A repository of 7,000 small files, committed; one file changed; `git
    status` after the kernel forgot its names, then again."""
    repo = os.path.join(d, "repo")
    for i in range(350):
        sub = os.path.join(repo, f"src{i}")
        os.makedirs(sub)
        for j in range(20):
            with open(os.path.join(sub, f"m{j}.c"), "w") as f:
                f.write(f"int f{i}_{j}(void) {{ return {i * j}; }}\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "init")
    with open(os.path.join(repo, "src7", "m3.c"), "a") as f:
        f.write("/* changed */\n")
    out = {}
    metadata_cache.drop_dentries()
    out["git_status_7k_cold_s"] = round(metadata_cache.timed(f"git -C {repo} status"), 4)
    out["git_status_7k_warm_s"] = round(metadata_cache.timed(f"git -C {repo} status"), 4)
    return out


def sync_write_iops(d):
    env = dict(os.environ, BENCH_DIR=d, BENCH_SIZE="64M", BENCH_RUNTIME=str(RUNTIME),
               BENCH_RAMP="1", BENCH_NUMJOBS="1")
    out = subprocess.run(["fio", "--output-format=json", os.path.join(BENCH, "fio",
                                                                      "randwrite-fsync.fio")],
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["jobs"][0]["write"]["iops"]


def measure(d):
    res = read_cache.measure(d)
    hot = os.path.join(d, "hot")
    one = parallel_reads.iops(hot, 1, direct=False, size=read_cache.SIZE, runtime=RUNTIME)
    two = parallel_reads.iops(hot, 2, direct=False, size=read_cache.SIZE, runtime=RUNTIME)
    res.update({"cached_randread_iops_1": round(one), "cached_randread_iops_2": round(two),
                "cached_randread_scaling": round(two / one, 3),
                "open_close_us": round(open_close_us(hot), 2)})
    os.unlink(hot)
    tree = metadata_cache.make_tree(d, 500, 100)
    res.update(metadata_cache.walks(tree, 50_000))
    subprocess.run(["rm", "-rf", tree], check=True)
    res.update(git_status(d))
    for journal in ("WAL", "DELETE"):
        s = rw_opens.sqlite_bulk(os.path.join(d, f"bulk-{journal}.db"), journal, 200, 1000)
        res[f"sqlite_{journal.lower()}_200k_s"] = round(s, 3)
    res["sync_write_4k_iops"] = round(sync_write_iops(d))
    return res


if __name__ == "__main__":
    same_run.main(measure, "2G", ("--inodes", "120000"))
