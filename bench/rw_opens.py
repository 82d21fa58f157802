#!/usr/bin/env python3
"""Read-write opens (issue 16, step 2): what changes when files opened
read-write go through the kernel's page cache instead of direct I/O, on ext4
(the disk), on Terrace built OLD and NEW (PM-only pool on /dev/shm, mounted
in turn), in the same run:

- sync_write_rdwr_us: 4 KiB pwrite + fdatasync at random offsets of a
  64 MiB file opened O_RDWR (the sync-write lead must not shrink);
- sync_write_wronly_us: the same through an O_WRONLY descriptor (control:
  that path did not change);
- pread_rdwr_4k_us: cached 4 KiB random preads through the O_RDWR
  descriptor that wrote the file and read it once;
- sqlite_wal_s: SQLite in WAL mode, synchronous=NORMAL: 50,000 rows of 100
  bytes in 50 transactions, then two full scans (the database and its WAL
  are opened read-write).

    bench/rw_opens.py OLD_TERRACE NEW_TERRACE [ROUNDS] > result.json
"""
import os, random, sqlite3, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import same_run  # noqa: E402

SIZE = 64 << 20


def sync_writes(path, flags, n=2000):
    fd = os.open(path, flags)
    try:
        rnd = random.Random(2)
        buf = os.urandom(4096)
        offs = [rnd.randrange(0, SIZE // 4096) * 4096 for _ in range(n)]
        t = time.perf_counter()
        for o in offs:
            os.pwrite(fd, buf, o)
            os.fdatasync(fd)
        return (time.perf_counter() - t) / n * 1e6
    finally:
        os.close(fd)


def fill(path):
    with open(path, "wb") as f:
        blk = os.urandom(1 << 20)
        for _ in range(SIZE >> 20):
            f.write(blk)
        os.fsync(f.fileno())


def sqlite_bulk(db, journal, txs, rows_per_tx, synchronous="NORMAL"):
    """SQLite bulk insert: `txs` transactions of `rows_per_tx` rows of 100
    bytes into a new database in `journal` mode, then two full scans;
    seconds."""
    t = time.perf_counter()
    con = sqlite3.connect(db, isolation_level=None)
    con.execute(f"PRAGMA journal_mode={journal}")
    con.execute(f"PRAGMA synchronous={synchronous}")
    con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
    val = os.urandom(100)
    for _ in range(txs):
        con.execute("BEGIN")
        con.executemany("INSERT INTO t(v) VALUES (?)", ((val,) for _ in range(rows_per_tx)))
        con.execute("COMMIT")
    for _ in range(2):
        con.execute("SELECT sum(length(v)) FROM t").fetchone()
    con.close()
    return time.perf_counter() - t


def measure(d):
    # A file of its own for each job, so that pages one job leaves in the
    # kernel's cache do not cost the next one (a direct write drops them).
    for name in ("w", "rw", "data"):
        fill(os.path.join(d, name))
    wronly = sync_writes(os.path.join(d, "w"), os.O_WRONLY)
    rdwr = sync_writes(os.path.join(d, "rw"), os.O_RDWR)
    path = os.path.join(d, "data")
    fd = os.open(path, os.O_RDWR)
    try:
        pread_us = same_run.cached_pread_4k_us(fd, SIZE)
    finally:
        os.close(fd)
    sqlite_s = sqlite_bulk(os.path.join(d, "bench.db"), "WAL", 50, 1000)
    return {"sync_write_rdwr_us": round(rdwr, 2), "sync_write_wronly_us": round(wronly, 2),
            "pread_rdwr_4k_us": round(pread_us, 3), "sqlite_wal_s": round(sqlite_s, 3)}


if __name__ == "__main__":
    same_run.main(measure, "1G", ())
