#!/usr/bin/env python3
"""PostgreSQL's own benchmark, pgbench, with the data directory on ext4 (a
folder on the disk, /var/tmp) and on Terrace (a pool PM 256M + SSD 4G, a
sparse image on the same disk) mounted three ways: the defaults,
`-o noatime`, and `-o writeback_cache,noatime`. In the same run, per
system: `pgbench -i -s SCALE` (load: 100,000 rows per scale unit, then
vacuum and primary keys; seconds) and `pgbench -c 4 -j 2 -T SECONDS`
(TPC-B-like transactions, each committed with an fsync of the WAL; TPS).

    bench/postgres.py TERRACE_BINARY [ROUNDS] > out.json

Environment: PG_SCALE (default 20, about 300 MB), PG_SECONDS (default 30).
The server runs as `postgres` on a Unix socket in a private directory.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import same_run  # noqa: E402

SCALE = int(os.environ.get("PG_SCALE", "20"))
SECONDS = int(os.environ.get("PG_SECONDS", "30"))
BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))[-1].rsplit("/", 1)[0]


def as_postgres(*cmd, timeout=1800):
    return subprocess.run(["runuser", "-u", "postgres", "--", *map(str, cmd)], check=True,
                          capture_output=True, text=True, timeout=timeout)


def measure(parent):
    os.chmod(parent, 0o755)  # the server runs as postgres
    data = os.path.join(parent, "pg")
    os.mkdir(data, 0o700)
    shutil.chown(data, "postgres", "postgres")
    sock = tempfile.mkdtemp(prefix="terrace-bench-pg-")
    shutil.chown(sock, "postgres", "postgres")
    pg = lambda prog, *a: as_postgres(f"{BIN}/{prog}", *a)  # noqa: E731
    try:
        pg("initdb", "-D", data, "-A", "trust")
        pg("pg_ctl", "-D", data, "-w", "-o", f"-k {sock} -c listen_addresses='' -p 5432",
           "-l", f"{sock}/log", "start")
        try:
            load = pg("pgbench", "-h", sock, "-i", "-s", SCALE, "postgres").stderr
            load_s = float(re.search(r"done in ([0-9.]+) s", load).group(1))
            run = pg("pgbench", "-h", sock, "-c", "4", "-j", "2", "-T", SECONDS, "postgres").stdout
            tps = float(re.search(r"tps = ([0-9.]+)", run).group(1))
        finally:
            pg("pg_ctl", "-D", data, "-m", "fast", "-w", "stop")
    finally:
        shutil.rmtree(sock, ignore_errors=True)
    return {"load_s": load_s, "tps": tps}


def terrace_run(binary, options):
    with same_run.tiered_mount(binary, "256M", "4G", options, tag="terrace-pg") as mnt:
        return measure(mnt)


def main():
    binary = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    systems = [
        ("ext4", lambda: same_run.ext4_run(measure)),
        ("terrace", lambda: terrace_run(binary, "allow_other")),
        ("terrace-noatime", lambda: terrace_run(binary, "allow_other,noatime")),
        ("terrace-writeback-noatime",
         lambda: terrace_run(binary, "allow_other,writeback_cache,noatime")),
    ]
    runs = same_run.run_rounds(systems, rounds)
    version = subprocess.run([f"{BIN}/postgres", "--version"], capture_output=True,
                             text=True).stdout.strip()
    print(json.dumps(same_run.report(runs, terrace=binary, scale=SCALE, seconds=SECONDS,
                                     postgres=version), indent=2))


if __name__ == "__main__":
    main()
