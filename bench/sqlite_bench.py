#!/usr/bin/env python3
"""SQLite transactions in DELETE, PERSIST and WAL journal modes (Ziggurat §6.5,
Figure 8, which used Mobibench), with python3's sqlite3 module.

  sqlite_bench.py init DIR --mode M --bytes N [--row-bytes 4000]
      creates DIR/bench.db: table t(id INTEGER PRIMARY KEY, v BLOB), preloaded with
      N bytes of random rows of --row-bytes each (one transaction, by SQLite itself),
      so that the database is the data set whose fraction PM holds.
  sqlite_bench.py run DIR --mode M --seconds T [--value-bytes 100] [--output F.json]
      opens the database with PRAGMA journal_mode=M, synchronous=FULL, and runs
      three phases of T/3 seconds each, one statement per transaction (autocommit),
      as Mobibench does:
        insert  INSERT a new row of --value-bytes random bytes
        update  UPDATE the value of a random existing row
        delete  DELETE a random existing row
      Output JSON: {"mode", "tx_per_s" (all phases), "insert_tx_per_s",
      "update_tx_per_s", "delete_tx_per_s", "rows_before", "db_bytes", ...}.

Journal modes: DELETE writes a rollback journal and deletes it at each commit;
PERSIST overwrites the journal header with zeros instead of deleting it; WAL
appends to a write-ahead log (with an mmap'ed -shm index) and checkpoints into the
database every 1000 pages (SQLite's default). synchronous=FULL: every commit is
durable (fsync of the journal and, in rollback modes, of the database).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import sys
import time

MODES = ("delete", "persist", "wal")


def connect(path: str, mode: str) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None)  # autocommit: one statement = one transaction
    got = con.execute(f"PRAGMA journal_mode={mode}").fetchone()[0]
    if got.lower() != mode:
        raise SystemExit(f"journal_mode {mode} refused (got {got})")
    con.execute("PRAGMA synchronous=FULL")
    return con


def cmd_init(args) -> int:
    path = os.path.join(args.dir, "bench.db")
    t0 = time.perf_counter()
    con = connect(path, args.mode)
    con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
    rows = max(1, args.bytes // args.row_bytes)
    con.execute("BEGIN")
    con.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?) "
                "INSERT INTO t(v) SELECT randomblob(?) FROM c", (rows, args.row_bytes))
    con.execute("COMMIT")
    if args.mode == "wal":
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    os.sync()
    meta = {"mode": args.mode, "rows": rows, "row_bytes": args.row_bytes, "db_bytes": os.path.getsize(path),
            "seconds": time.perf_counter() - t0}
    print(json.dumps(meta))
    return 0


def cmd_run(args) -> int:
    path = os.path.join(args.dir, "bench.db")
    con = connect(path, args.mode)
    rng = random.Random(args.seed)
    max_id = con.execute("SELECT max(id) FROM t").fetchone()[0] or 0
    rows_before = con.execute("SELECT count(*) FROM t").fetchone()[0]
    phase_s = args.seconds / 3
    results = {}
    for phase in ("insert", "update", "delete"):
        n = 0
        t0 = time.perf_counter()
        deadline = t0 + phase_s
        while time.perf_counter() < deadline:
            if phase == "insert":
                con.execute("INSERT INTO t(v) VALUES (?)", (rng.randbytes(args.value_bytes),))
            elif phase == "update":
                con.execute("UPDATE t SET v = ? WHERE id = ?", (rng.randbytes(args.value_bytes),
                                                               rng.randint(1, max_id)))
            else:
                con.execute("DELETE FROM t WHERE id = ?", (rng.randint(1, max_id),))
            n += 1
        results[phase] = (n, time.perf_counter() - t0)
    con.close()
    total_n = sum(n for n, _ in results.values())
    total_s = sum(s for _, s in results.values())
    out = {
        "mode": args.mode,
        "synchronous": "FULL",
        "value_bytes": args.value_bytes,
        "rows_before": rows_before,
        "db_bytes": os.path.getsize(path),
        "seconds": total_s,
        "transactions": total_n,
        "tx_per_s": total_n / total_s,
        **{f"{p}_tx_per_s": n / s for p, (n, s) in results.items()},
        **{f"{p}_transactions": n for p, (n, _) in results.items()},
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("init")
    i.add_argument("dir")
    i.add_argument("--bytes", type=int, required=True)
    i.add_argument("--row-bytes", type=int, default=4000)
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--seconds", type=float, required=True)
    r.add_argument("--value-bytes", type=int, default=100)
    r.add_argument("--output")
    r.add_argument("--seed", type=int, default=42)
    for p in (i, r):
        p.add_argument("--mode", choices=MODES, required=True)
    args = ap.parse_args()
    return cmd_init(args) if args.cmd == "init" else cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
