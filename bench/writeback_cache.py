#!/usr/bin/env python3
"""The kernel's writeback cache (`-o writeback_cache`, issue 16): ext4 (the
disk, /var/tmp), Terrace with the default mount and Terrace mounted with
`-o writeback_cache` (one build, a PM-only pool of 1 GiB on /dev/shm each),
alternated per round in the same run, medians of the rounds. Each round on
each system:

- SQLite bulk insert, 200,000 rows of 100 bytes in 200 transactions,
  synchronous=NORMAL, WAL and DELETE journals, then two scans
  (rw_opens.sqlite_bulk; seconds);
- 4 KiB random write + fsync, one fio job (bench/fio/randwrite-fsync.fio;
  IOPS): the sync-write lead the option must not lose.

    bench/writeback_cache.py TERRACE [ROUNDS] > result.json
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import read_path  # noqa: E402
import rw_opens  # noqa: E402
import same_run  # noqa: E402


def measure(d):
    res = {}
    for journal in ("WAL", "DELETE"):
        s = rw_opens.sqlite_bulk(os.path.join(d, f"bulk-{journal}.db"), journal, 200, 1000)
        res[f"sqlite_{journal.lower()}_200k_s"] = round(s, 3)
    res["sync_write_4k_iops"] = round(read_path.sync_write_iops(d))
    return res


def main():
    binary = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    systems = (("ext4", lambda: same_run.ext4_run(measure)),
               ("terrace", lambda: same_run.terrace_run(binary, measure, "1G")),
               ("terrace_wbcache", lambda: same_run.terrace_run(binary, measure, "1G",
                                                                options="writeback_cache")))
    runs = []
    for r in range(rounds):
        for name, fn in systems:
            load = os.getloadavg()[0]
            res = fn()
            res.update({"fs": name, "round": r + 1, "load_1m_before": round(load, 2),
                        "load_1m_after": round(os.getloadavg()[0], 2)})
            runs.append(res)
            print(json.dumps(res), file=sys.stderr)
    out = same_run.report(runs, terrace=binary)
    ext4 = out["summary"]["ext4"]
    for name in ("terrace", "terrace_wbcache"):
        mine = out["summary"][name]
        out["summary"][name + "_vs_ext4"] = {
            k: round(ext4[k] / mine[k], 3) if k.endswith("_s") else round(mine[k] / ext4[k], 3)
            for k in ("sqlite_wal_200k_s", "sqlite_delete_200k_s", "sync_write_4k_iops")}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
