#!/usr/bin/env python3
"""RocksDB with synchronous write-ahead logging (Ziggurat §6.4, Figure 7), through
db_bench from Debian's rocksdb-tools package.

  kv.py preload DIR --bytes N [--value-bytes 1000]
      builds DIR/db with fillseq of N bytes of key/values, asynchronous (not
      measured: it only makes a database of the data set's size for readseq).
  kv.py run DIR --bench fillseq|fillrandom|readseq --ops N [--output F.json]
      fillseq     N sequential inserts into a new database DIR/db-fillseq, --sync=1
                  (every write fsyncs the WAL)
      fillrandom  N random-key inserts into a new database DIR/db-fillrandom, --sync=1
                  (the paper's FillUniqueRandom)
      readseq     sequential scan of the whole preloaded DIR/db
      (db_bench's --duration is ignored by fillseq, so runs are bounded by a count:
      the harness sizes N, BENCH_KV_OPS, from the mode.)
      Output JSON: {"bench", "ops_per_s", "micros_per_op", "mb_per_s", "num",
      "value_bytes", "sync", "db_bench": the db_bench result line, "command"}.

Common db_bench flags: 16-byte keys, --value_size (default 1000), no compression
(the bytes written are the data), one thread, WAL in the database directory.
If db_bench is missing the command exits with status 3 and says so (the harness
records the job as skipped): install rocksdb-tools (bench/setup.sh does).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

COMMON = ["--compression_type=none", "--threads=1", "--histogram=0", "--key_size=16", "--seed=42"]
LINE = re.compile(r"^(?P<bench>\w+)\s*:\s*(?P<us>[\d.]+) micros/op (?P<ops>\d+) ops/sec(?:[^;]*;\s*(?P<mb>[\d.]+) MB/s)?",
                  re.M)


def db_bench() -> str:
    for name in ("db_bench", "rocksdb_db_bench", "rocksdb-db_bench"):
        path = shutil.which(name)
        if path:
            return path
    print("db_bench not found (install rocksdb-tools: bench/setup.sh); skipping the key-value workload",
          file=sys.stderr)
    raise SystemExit(3)


def run_db_bench(args: list[str], timeout: float) -> tuple[str, list[str]]:
    cmd = [db_bench()] + COMMON + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-2000:] + p.stderr[-2000:])
        raise SystemExit(f"db_bench failed with status {p.returncode}")
    return p.stdout, cmd


def cmd_preload(a) -> int:
    num = max(1, a.bytes // (a.value_bytes + 16))
    out, cmd = run_db_bench([f"--db={a.dir}/db", "--benchmarks=fillseq", f"--num={num}",
                             f"--value_size={a.value_bytes}", "--sync=0"], timeout=3600)
    with open(os.path.join(a.dir, "preload.json"), "w") as f:
        json.dump({"num": num, "value_bytes": a.value_bytes}, f)
    m = LINE.search(out)
    print(json.dumps({"num": num, "db_bench": m.group(0) if m else None}))
    return 0


def cmd_run(a) -> int:
    pre_path = os.path.join(a.dir, "preload.json")
    pre = json.load(open(pre_path)) if os.path.exists(pre_path) else {"num": 0, "value_bytes": a.value_bytes}
    if a.bench == "readseq":
        if not pre["num"]:
            raise SystemExit("readseq needs `kv.py preload` first")
        args = [f"--db={a.dir}/db", "--use_existing_db=1", "--benchmarks=readseq", f"--num={pre['num']}",
                f"--value_size={pre['value_bytes']}"]
        sync, num = 0, pre["num"]
    else:
        num = a.ops
        args = [f"--db={a.dir}/db-{a.bench}", f"--benchmarks={a.bench}", f"--num={num}",
                f"--value_size={a.value_bytes}", "--sync=1"]
        sync = 1
    out, cmd = run_db_bench(args, timeout=a.timeout)
    m = LINE.search(out)
    if not m:
        sys.stderr.write(out[-2000:])
        raise SystemExit("no result line in db_bench's output")
    result = {
        "bench": a.bench,
        "ops_per_s": float(m["ops"]),
        "micros_per_op": float(m["us"]),
        "mb_per_s": float(m["mb"]) if m["mb"] else None,
        "num": num,
        "value_bytes": pre["value_bytes"] if a.bench == "readseq" else a.value_bytes,
        "sync": sync,
        "db_bench": m.group(0),
        "command": " ".join(cmd),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if a.output:
        with open(a.output, "w") as f:
            f.write(text + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("preload")
    p.add_argument("dir")
    p.add_argument("--bytes", type=int, required=True)
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--bench", choices=("fillseq", "fillrandom", "readseq"), required=True)
    r.add_argument("--ops", type=int, default=10000, help="operations of fillseq/fillrandom")
    r.add_argument("--timeout", type=float, default=900, help="seconds before db_bench is killed")
    r.add_argument("--output")
    for x in (p, r):
        x.add_argument("--value-bytes", type=int, default=1000)
    a = ap.parse_args()
    return cmd_preload(a) if a.cmd == "preload" else cmd_run(a)


if __name__ == "__main__":
    sys.exit(main())
